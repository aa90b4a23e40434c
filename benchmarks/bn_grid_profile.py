"""Where the time of the persistent-grid batch norm (kernels/common/bn_grid.h) goes, on a GPU.

Each variant (defines added to the kernel's, see VARIANTS) is built once more with BNG_PROF=1:
the kernel then stamps the global timer, per work-group, at its start, after phase 1 (x read),
after its partial sums are written, after the first barrier, after the per-channel sums, after
the second barrier and at its end (each once all its work items got there). The table gives, per
mark, the median and the latest work-group's time since the earliest start (us), and the
event-timed call (from norms.py's timing: rotating input sets, back to back behind a sleep) of
the variant without the stamps; "gap" is the event time minus the kernel's own span (launches,
the zeroing kernel, the grid's ramp).

    python benchmarks/bn_grid_profile.py [--cases 0,1] [--ncu]

--ncu: no timing loops or stamps; each variant and the other applicable solvers run twice, and
torch's batch norm twice, for `ncu --clock-control none -k regex:bn_|batch_norm ...` to profile.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import norms
import numpy as np
import torch  # before cupy (see the GPU notes)
import torch.nn.functional as F

from miopy.engine.candidates import make_solution
from miopy.handle import Handle
from miopy.problem.bnorm import BatchNormProblem
from miopy.solution import InvokeArgs
from miopy.solvers import solvers_for
from miopy.solvers.norm.bn_grid import BnBwdGrid, BnFwdTrainingGrid, grid_plan, grid_workspace
from miopy.tensor import TensorDesc

# (C, H=W, direction) of fp16 channels-last batch norms at batch 32
CASES = [(64, 112, "T"), (64, 56, "T"), (512, 28, "T"), (512, 7, "T"), (128, 28, "B"), (64, 112, "B")]
# name: defines (and "shape": the forward's SHAPE, see solvers/norm/bn_grid.py); "new" is the
# solver as shipped, the others turn one of its choices back
VARIANTS = {
    "new": {},
    "sync": {"BNG_ASYNC": 0},
    "reset": {"BNG_DRV": 0},
    "sleep": {"BNG_SLEEP": 32},
    "hold2": {"shape": (512, 2, 2, 4, 64)},
    "m1h4": {"shape": (512, 1, 4, 4, 64)},
}
MARKS = ["start", "read", "partials", "barrier1", "sums", "barrier2", "end"]


def variant(direction: str, name: str, defines: dict):
    base = BnBwdGrid if direction == "B" else BnFwdTrainingGrid
    defines = dict(defines)
    shape = defines.pop("shape", None) if direction == "T" else None
    defines.pop("shape", None)
    attrs = {"name": f"X{base.name}_{name}", "defines": defines, "shape": shape}
    return type(attrs["name"], (base,), attrs)()


def problem_of(c: int, hw: int, direction: str) -> BatchNormProblem:
    x = TensorDesc("fp16", (norms.BATCH, c, hw, hw), layout="NHWC")
    return BatchNormProblem(
        "SPATIAL", direction, x, param_dtype="fp32", save=True, running=direction == "T", epsilon=norms.EPS
    )


def tensors(handle, c: int, hw: int, direction: str) -> dict:
    be = handle.backend
    lens = (norms.BATCH, c, hw, hw)

    def data():
        return torch.empty(lens, dtype=torch.float16, device="cuda").uniform_(-1, 1)

    def param(lo=-1.0, hi=1.0):
        return torch.empty(c, dtype=torch.float32, device="cuda").uniform_(lo, hi)

    x = data().contiguous(memory_format=torch.channels_last)
    keep = {"x": x, "out": torch.empty_like(x), "w": param(), "b": param()}
    p4 = (1, c, 1, 1)

    def pv(t):
        return be.wrap(t.view(p4))

    if direction == "T":
        for k in ("rm", "sm", "si", "rv"):
            keep[k] = param(0.5, 1.5)
        args = {"x": be.wrap(x), "y": be.wrap(keep["out"]), "scale": pv(keep["w"]), "bias": pv(keep["b"])}
        args |= {"running_mean": pv(keep["rm"]), "running_var": pv(keep["rv"])}
        args |= {"saved_mean": pv(keep["sm"]), "saved_inv_var": pv(keep["si"])}
    else:
        keep["dy"] = data().contiguous(memory_format=torch.channels_last)
        keep["sm"] = x.float().mean(dim=(0, 2, 3))
        keep["si"] = 1.0 / torch.sqrt(x.float().var(dim=(0, 2, 3), unbiased=False) + norms.EPS)
        keep["dw"], keep["db"] = param(), param()
        args = {"x": be.wrap(x), "dy": be.wrap(keep["dy"]), "scale": pv(keep["w"])}
        args |= {"saved_mean": pv(keep["sm"]), "saved_inv_var": pv(keep["si"]), "dx": be.wrap(keep["out"])}
        args |= {"dscale": pv(keep["dw"]), "dbias": pv(keep["db"])}
    return {"args": args, "keep": keep}


def stamps(handle, problem, solver, args: dict) -> np.ndarray | None:
    """(work-groups, 7) microseconds since the earliest start, from a BNG_PROF build."""
    extra = {**(solver.defines or {}), "BNG_PROF": 1, "shape": solver.shape}
    prof = variant(problem.direction.value, solver.name + "_prof", extra)
    if prof.is_applicable(handle, problem) is not None:
        return None
    sol = make_solution(handle, problem, prof)
    inv = handle.prepare_invoker(sol)
    ws = handle.backend.alloc(sol.workspace)
    for _ in range(3):
        inv(InvokeArgs(args, ws))
    torch.cuda.synchronize()
    raw = np.empty(sol.workspace // 4, dtype=np.uint32)
    handle.backend.download(ws, raw)
    plan = grid_plan(handle, problem, prof.kind, prof.shape)
    at = grid_workspace(problem, plan)[1] + 2
    at += at % 2  # 8-byte aligned
    t = raw[at : at + 16 * plan.blocks].view(np.uint64).reshape(plan.blocks, 8)[:, : len(MARKS)]
    t = t.astype(np.float64)
    return (t - t[:, 0].min()) / 1000.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(str(i) for i in range(len(CASES))))
    ap.add_argument("--ncu", action="store_true")
    opts = ap.parse_args()
    handle = Handle("cuda")
    for i in (int(v) for v in opts.cases.split(",")):
        c, hw, direction = CASES[i]
        problem = problem_of(c, hw, direction)
        data = tensors(handle, c, hw, direction)
        args = data["args"]
        solvers = [variant(direction, n, d) for n, d in VARIANTS.items()]
        others = [s for s in solvers_for(problem) if "Strided" not in s.name and "Grid" not in s.name]
        print(f"== {c}x{hw}x{hw} {direction} ({problem.bytes() / 1e6:.1f} MB)", flush=True)
        if opts.ncu:
            for s in solvers + others:
                if s.is_applicable(handle, problem) is not None:
                    continue
                sol = make_solution(handle, problem, s)
                inv = handle.prepare_invoker(sol)
                ws = handle.backend.alloc(sol.workspace) if sol.workspace else None
                for _ in range(2):
                    inv(InvokeArgs(args, ws))
                torch.cuda.synchronize()
                print(f"ran {s.name}", flush=True)
            k = data["keep"]
            for _ in range(2):
                if direction == "T":
                    F.batch_norm(k["x"], k["rm"], k["rv"], k["w"], k["b"], True, 1.0, norms.EPS)
                else:
                    torch.ops.aten.native_batch_norm_backward(
                        k["dy"],
                        k["x"],
                        k["w"],
                        None,
                        None,
                        k["sm"],
                        k["si"],
                        True,
                        norms.EPS,
                        [True, True, True],
                    )
            torch.cuda.synchronize()
            continue
        for s in solvers:
            if s.is_applicable(handle, problem) is not None:
                print(f"{s.name}: {s.is_applicable(handle, problem)}")
                continue
            t = stamps(handle, problem, s, args)
            med = [statistics.median(t[:, m]) for m in range(len(MARKS))]
            top = [float(t[:, m].max()) for m in range(len(MARKS))]
            line = " ".join(f"{n}={a:.1f}/{b:.1f}" for n, a, b in zip(MARKS, med, top))
            print(f"{s.name:34s} {line}", flush=True)
    if opts.ncu:
        return 0
    # event timing and checks of the variants next to the other solvers and torch (norms.py's)
    variants = {d: [variant(d, n, v) for n, v in VARIANTS.items()] for d in "TB"}
    plain = norms.solvers_for

    def with_variants(problem):
        found = [s for s in plain(problem) if "Strided" not in s.name]
        return found + variants[problem.direction.value]

    norms.solvers_for = with_variants
    for i in (int(v) for v in opts.cases.split(",")):
        c, hw, direction = CASES[i]
        r = norms.bn_case(handle, "fp16", c, hw, direction)
        rows = " ".join(f"{a['solver']}={a['us']:.1f}{'' if a['err'] <= 1 else '(WRONG)'}" for a in r["all"])
        print(f"{r['case']}: torch {r['torch_us']:.1f} | {rows}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
