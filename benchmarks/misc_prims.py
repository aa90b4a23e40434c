"""Softmax, tensor ops, reductions and LRN on a GPU at ResNet-50 / BERT-base shapes (batch 32),
miopy next to PyTorch in one process, as a share of the device-to-device copy rate measured in the
same run (batch, layer and group norm: benchmarks/norms.py). fp16 runs channels-last (NHWC) where
the layout matters, fp32 NCHW.

Timing: benchmarks/timing.py's Timer (device events around back-to-back launches queued behind a
sleep kernel, rotating over enough input sets to miss L2, median of several loops). Every
applicable miopy solver is checked against PyTorch's result and timed; the fastest is reported
(what find would pick). Bytes are what the call must move (problem.bytes(): reads plus writes);
"% copy" divides by the rate of a 1 GiB device-to-device copy, "% same" by that of a copy moving
the same bytes; "ours/torch" is miopy's time over PyTorch's. Needs torch, cupy and cuda-bindings.

    python benchmarks/misc_prims.py [--dtypes fp16,fp32] [--only softmax,tensorop,reduce,lrn] [--quick]
                                    [--json out.json]

--quick: fewer timed launches and one case per primitive and direction (a smoke run).

Goal (issue 10): every case >= 80 % of copy and none slower than PyTorch; misses are reported,
wrong results make the exit status 1.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys

import torch
from timing import Timer, n_sets

from miopy.engine.candidates import make_solution
from miopy.handle import Handle
from miopy.problem.lrn import LRNProblem
from miopy.problem.reduce import ReduceProblem
from miopy.problem.softmax import SoftmaxProblem
from miopy.problem.tensorop import TensorOpProblem
from miopy.solution import InvokeArgs
from miopy.solvers import solvers_for
from miopy.tensor import TensorDesc

BATCH = 32
TORCH_DTYPE = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}
TOL = {"fp16": 4e-3, "fp32": 2e-5, "bf16": 3e-2}
GOAL = 80.0
SETS_MOST = 16
TIMER = Timer(iters=40, reps=5, sleep_cycles=20_000_000)
QUICK_TIMER = Timer(iters=20, reps=3, sleep_cycles=10_000_000)
timer = TIMER  # main() switches to QUICK_TIMER with --quick
quick = False


def tensor(lens, dtype: str, layout: str = "NCHW", low: float = -2.0, high: float = 2.0) -> torch.Tensor:
    t = torch.empty(lens, dtype=TORCH_DTYPE[dtype], device="cuda")
    if layout == "NHWC":
        t = t.to(memory_format=torch.channels_last)
    return t.uniform_(low, high)


def close(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double().reshape(-1), want.double().reshape(-1)
    err = ((got - want).abs() / want.abs().clamp_min(1.0)).max().item()
    return err if math.isfinite(err) else float("inf")


def invoker(handle, solution):
    """``fn(tensors by role)`` running ``solution`` through the handle's invoker cache, with a
    workspace of its own when the solution needs one (a chunked reduction does)."""
    inv = handle.prepare_invoker(solution)
    workspace = handle.backend.alloc(solution.workspace) if solution.workspace else None

    def call(tensors):
        inv(InvokeArgs(tensors, workspace))

    return call


def measure(handle, name: str, dtype: str, problem, make_set, torch_call, out_role: str) -> dict:
    """``make_set()`` -> {role: torch tensor} (miopy's roles, outputs included); ``torch_call(set)``
    returns PyTorch's result for that set."""
    be = handle.backend
    data = [make_set() for _ in range(n_sets(problem.bytes(), SETS_MOST))]
    torch_us = timer([functools.partial(torch_call, d) for d in data])
    want = torch_call(data[0]).clone()
    roles = problem.tensors()
    rows = []
    for solver in solvers_for(problem):
        if solver.is_applicable(handle, problem) is not None:
            continue
        inv = invoker(handle, make_solution(handle, problem, solver))
        wrapped = [{r: be.wrap(t) for r, t in d.items() if r in roles} for d in data]
        data[0][out_role].fill_(float("nan"))
        inv(wrapped[0])
        torch.cuda.synchronize()
        err = close(data[0][out_role], want) / TOL[dtype]
        us = timer([functools.partial(inv, w) for w in wrapped])
        rows.append({"solver": solver.name, "us": us, "err": err})
    ok = [r for r in rows if r["err"] <= 1.0]
    return {
        "case": name,
        "dtype": dtype,
        "bytes": problem.bytes(),
        "torch_us": torch_us,
        "best": min(ok, key=lambda r: r["us"]) if ok else None,
        "all": rows,
    }


def softmax_cases(handle, dtype: str) -> list[dict]:
    out = []
    rows, length = 192 * 512, 512  # BERT-base attention scores, last dim (anchors.md)
    desc = TensorDesc(dtype, (rows, length, 1, 1))
    fwd = SoftmaxProblem.create(desc, "F", "accurate", "channel")
    bwd = SoftmaxProblem.create(desc, "B", "accurate", "channel")

    def fwd_set():
        return {"x": tensor((rows, length, 1, 1), dtype), "y": tensor((rows, length, 1, 1), dtype)}

    out.append(
        measure(
            handle,
            "softmax fwd 192x512x512",
            dtype,
            fwd,
            fwd_set,
            lambda d: torch.softmax(d["x"].view(192, 512, 512), -1),
            "y",
        )
    )

    def bwd_set():
        y = torch.softmax(tensor((rows, length, 1, 1), dtype), 1)
        return {
            "y": y,
            "dy": tensor((rows, length, 1, 1), dtype, low=-0.5, high=0.5),
            "dx": torch.empty_like(y),
        }

    out.append(
        measure(
            handle,
            "softmax bwd 192x512x512",
            dtype,
            bwd,
            bwd_set,
            lambda d: torch._softmax_backward_data(d["dy"], d["y"], 1, d["y"].dtype),
            "dx",
        )
    )
    return out


def tensorop_cases(handle, dtype: str) -> list[dict]:
    layout = "NHWC" if dtype != "fp32" else "NCHW"
    lens = (BATCH, 256, 56, 56)
    out = []
    specs = (
        ("add (residual) 32x256x56x56", lens),
        ("add bias 1x256x1x1 to 32x256x56x56", (1, 256, 1, 1)),
    )
    for name, blens in specs[:1] if quick else specs:
        c = TensorDesc(dtype, lens, layout=layout)
        b = TensorDesc(dtype, blens, layout=layout)
        problem = TensorOpProblem("add", c, b, c)

        def make(blens=blens):
            a = tensor(lens, dtype, layout)
            return {"a": a, "b": tensor(blens, dtype, layout), "c": torch.empty_like(a)}

        out.append(
            measure(handle, name, dtype, problem, make, lambda d: torch.add(d["a"], d["b"], out=d["c"]), "c")
        )
    return out


def reduce_cases(handle, dtype: str) -> list[dict]:
    out = []
    lens = (BATCH, 256, 56, 56)
    specs = [
        (
            "sum over HxW 32x256x56x56 NCHW",
            "add",
            lens,
            "NCHW",
            (2, 3),
            lambda x: torch.sum(x, dim=(2, 3), keepdim=True),
        ),
        (
            "sum over C 32x256x56x56 NHWC",
            "add",
            lens,
            "NHWC",
            (1,),
            lambda x: torch.sum(x, dim=1, keepdim=True),
        ),
        (
            "norm2 over the last dim 8192x1024",
            "norm2",
            (8192, 1024, 1, 1),
            "NCHW",
            (1,),
            lambda x: torch.linalg.vector_norm(x, dim=1, keepdim=True),
        ),
        (
            "max over N,H,W 32x256x56x56 NHWC",
            "max",
            lens,
            "NHWC",
            (0, 2, 3),
            lambda x: torch.amax(x, dim=(0, 2, 3), keepdim=True),
        ),
    ]
    for name, op, shape, layout, dims, fn in (specs[0], specs[3]) if quick else specs:
        problem = ReduceProblem(op, TensorDesc(dtype, shape, layout=layout), dims)
        ylens = problem.y.lens

        def make(shape=shape, layout=layout, ylens=ylens):
            return {
                "x": tensor(shape, dtype, layout, 0.0, 1.0),
                "y": torch.empty(ylens, dtype=TORCH_DTYPE[dtype], device="cuda"),
            }

        out.append(measure(handle, name, dtype, problem, make, lambda d, fn=fn: fn(d["x"]), "y"))
    return out


def lrn_cases(handle, dtype: str) -> list[dict]:
    """LRN across 5 channels on AlexNet's first normalisation (anchors.md), forward (with the scale
    MIOpen keeps for backward) and backward (x, y, dy and that scale in, dx out)."""
    layout = "NHWC" if dtype != "fp32" else "NCHW"
    lens = (64, 96, 55, 55)
    size, alpha, beta, k = 5, 1e-4, 0.75, 1.0
    x_desc = TensorDesc(dtype, lens, layout=layout)
    fwd = LRNProblem.create(x_desc, "cross", size, alpha, beta, k, "F", True)
    bwd = LRNProblem.create(x_desc, "cross", size, alpha, beta, k, "B")

    def torch_lrn(d):
        return torch.nn.functional.local_response_norm(d["x"], size, alpha, beta, k)

    def scale_of(x):  # k + alpha/n * sum of x^2 over the window, as torch and MIOpen compute it
        sq = x.float().mul(x.float()).unsqueeze(1)
        sq = torch.nn.functional.pad(sq, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        return torch.nn.functional.avg_pool3d(sq, (size, 1, 1), stride=1).squeeze(1) * alpha + k

    def fwd_set():
        x = tensor(lens, dtype, layout, -1.0, 1.0)
        return {"x": x, "y": torch.empty_like(x), "scale": torch.empty_like(x)}

    def bwd_set():
        x = tensor(lens, dtype, layout, -1.0, 1.0).requires_grad_()
        y = torch_lrn({"x": x})
        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        return {
            "x": x,
            "y_graph": y,  # torch's backward starts from its own graph
            "y": y.detach().contiguous(memory_format=fmt),
            "dy": tensor(lens, dtype, layout, -0.5, 0.5),
            "scale": scale_of(x.detach()).to(x.dtype).contiguous(memory_format=fmt),
            "dx": torch.empty_like(x, requires_grad=False),
        }

    def torch_bwd(d):
        return torch.autograd.grad(d["y_graph"], d["x"], d["dy"], retain_graph=True)[0]

    name = f"LRN across 5, {'x'.join(map(str, lens))}"
    return [
        measure(handle, f"{name} fwd", dtype, fwd, fwd_set, torch_lrn, "y"),
        measure(handle, f"{name} bwd", dtype, bwd, bwd_set, torch_bwd, "dx"),
    ]


def main() -> int:
    global timer, quick
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp16,fp32")
    ap.add_argument("--quick", action="store_true", help="fewer launches and cases: a smoke run")
    ap.add_argument("--json", default="")
    ap.add_argument("--only", default="softmax,tensorop,reduce,lrn", help="which primitives")
    args = ap.parse_args()
    if args.quick:
        timer, quick = QUICK_TIMER, True
    kinds = {"softmax": softmax_cases, "tensorop": tensorop_cases, "reduce": reduce_cases, "lrn": lrn_cases}
    chosen = [kinds[k] for k in args.only.split(",")]
    handle = Handle("cuda")
    print(
        f"device: {handle.info.name}, {handle.info.compute_units} SMs; torch {torch.__version__}", flush=True
    )
    big = timer.copy_rate(1 << 30)
    print(f"device-to-device copy of 1 GiB: {big / 1e3:.0f} GB/s (read + write)", flush=True)
    results, wrong, misses = [], [], []
    for dtype in args.dtypes.split(","):
        for row in [r for cases in chosen for r in cases(handle, dtype)]:
            best = row["best"]
            row["torch_pct"] = 100 * row["bytes"] / row["torch_us"] / big
            results.append(row)
            if best is None:
                wrong.append(f"{dtype} {row['case']}: {row['all']}")
                print(f"{dtype} {row['case']:>40}: WRONG {row['all']}", flush=True)
                continue
            same = timer.copy_rate(max(row["bytes"] // 2, 1 << 20))
            row["ours_pct"] = 100 * row["bytes"] / best["us"] / big
            row["ours_pct_same"] = 100 * row["bytes"] / best["us"] / same
            print(
                f"{dtype} {row['case']:>40}: ours {best['us']:8.2f} us {row['ours_pct']:5.1f}% copy "
                f"({row['ours_pct_same']:5.1f}% same) [{best['solver']}] | torch {row['torch_us']:8.2f} us "
                f"{row['torch_pct']:5.1f}% | ours/torch {best['us'] / row['torch_us']:4.2f}",
                flush=True,
            )
            if row["ours_pct"] < GOAL:
                misses.append(f"{dtype} {row['case']}: {row['ours_pct']:.0f}% of copy < {GOAL:.0f}%")
            if best["us"] > row["torch_us"]:
                misses.append(
                    f"{dtype} {row['case']}: slower than torch ({best['us']:.2f} > {row['torch_us']:.2f} us)"
                )
    print(
        "\n| dtype | case | bytes | miopy us | % copy | % same-size copy | solver | torch us | % copy "
        "| ours/torch |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        b = r["best"]
        if b is not None:
            print(
                f"| {r['dtype']} | {r['case']} | {r['bytes'] / 1e6:.1f} MB | {b['us']:.2f} | "
                f"{r['ours_pct']:.0f} | {r['ours_pct_same']:.0f} | {b['solver']} | {r['torch_us']:.2f} | "
                f"{r['torch_pct']:.0f} | {b['us'] / r['torch_us']:.2f} |"
            )
    print("goals missed:" if misses else "all goals met", *misses, sep="\n  ")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    if wrong:
        print("WRONG RESULTS:", *wrong, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
