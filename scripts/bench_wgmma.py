"""ConvWgmmaFwdNhwc's search space against cuDNN and the mma.sync solver on the ResNet-50 3x3
layers (batch 32, NHWC), on an sm_90 GPU.

Timed as scripts/bench_igemm.py times (device events around back-to-back launches queued behind
a sleep kernel, rotating input sets, median of repeats); every config is checked against cuDNN's
output first. Before the sweep, a few small GEMM-like problems show where wrong outputs lie (by
row and column block), should any config be wrong. Needs torch, cupy and cuda-bindings.

    python scripts/bench_wgmma.py [--dtypes fp16] [--layers 0,1,2,3] [--directions F,B]
        [--configs all|wide|focus|variants|default|sk] [--flush] [--json out.json]

``--directions B`` sweeps ConvWgmmaBwdNhwc (backward data) against cuDNN's dx; ``--configs focus``
keeps the 4-stage configs that are warp-specialized or of 256 rows, split at most 4 ways (the
default first); ``--configs variants`` the default's tile and a few near-tied ones, with both
warp-specialized pipelines (``ws`` 1 and 2) and 3 to 6 stages; ``--configs sk`` the default and
stream-K over every resident block for a few block tiles (SK_TILES) and both pipelines;
``--flush`` times with the L2 flushed before each launch, as benchmarks/conv.py does.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import types

import torch
import torch.nn.functional as F
from bench_igemm import check_and_time, cudnn_grad, device_us, handle_next_to_cudnn, kernel_facts, time_today
from timing import Timer

from miopy.engine.bench import compile_all
from miopy.engine.candidates import make_solution
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.solution import InvokeArgs
from miopy.solvers.conv.igemm_common import compute_units
from miopy.solvers.conv.implicit_gemm_wgmma import (
    ConvWgmmaBwdNhwc,
    ConvWgmmaFwdNhwc,
    blocks_per_sm,
    wg_config,
)
from miopy.tensor import TensorDesc

SOLVER = ConvWgmmaFwdNhwc()
BATCH = 32
# (C, H=W, K), 3x3, pad 1: ResNet-50's stride-1 3x3 layers (0-3), then the large VGG-16 /
# ResNet-18 ones of benchmarks/networks.txt (4: L14, 5: L15, 6: L16, 7: L18)
LAYERS = [
    (64, 56, 64),
    (128, 28, 128),
    (256, 14, 256),
    (512, 7, 512),
    (64, 224, 64),
    (64, 112, 128),
    (128, 112, 128),
    (256, 56, 256),
]
SETS = 3
flushed_us = Timer(iters=40, reps=5, sleep_cycles=20_000_000, flush_l2=True)


def problem_of(
    dtype: str, n: int, c: int, hw: int, k: int, f: int, pad: int, direction: str = "F"
) -> ConvProblem:
    return ConvProblem.create(
        TensorDesc(dtype, (n, c, hw, hw), layout="NHWC"),
        TensorDesc(dtype, (k, c, f, f), layout="NHWC"),
        ConvDesc((pad, pad)),
        direction,
    )


# Near-tied block tiles (bm, bn, split_k) timed beside the default's by --configs variants
VARIANT_TILES = {0: [(192, 64, 1), (256, 64, 1)], 2: [(192, 128, 2)], 3: [(192, 128, 3)]}


def variants(solver, handle, problem, layer: int, default: dict) -> list[dict]:
    """The default's tile and VARIANT_TILES[layer], each warp-specialized both ways (ws 1, 2)
    with 3 to 6 stages, where valid."""
    tiles = [(default["bm"], default["bn"], default["split_k"]), *VARIANT_TILES.get(layer, [])]
    out = []
    for bm, bn, split in tiles:
        for ws in (1, 2):
            for stages in (3, 4, 5, 6):
                config = wg_config(bm, bn, stages, split, ws)
                if solver.is_valid_config(handle, problem, config) and config not in out:
                    out.append(config)
    return out


# Block tiles (bm, bn, stages) timed as stream-K over every resident block by --configs sk
SK_TILES = [
    (128, 128, 4),
    (128, 128, 6),
    (128, 256, 3),
    (256, 128, 4),
    (192, 128, 4),
    (192, 64, 4),
    (128, 64, 4),
]


def stream_k(solver, handle, problem) -> list[dict]:
    """SK_TILES, each warp-specialized both ways (ws 1, 2), as stream-K over compute units x
    blocks per SM blocks, where valid."""
    out = []
    for bm, bn, stages in SK_TILES:
        for ws in (1, 2):
            config = wg_config(bm, bn, stages, ws=ws)
            config["sk"] = compute_units(handle) * blocks_per_sm(handle, config)
            if solver.is_valid_config(handle, problem, config):
                out.append(config)
    return out


def focus(space: list[dict]) -> list[dict]:
    """The configs with 4 stages, warp-specialized or of 256 rows, split at most 4 ways, and the
    earlier default of the 7x7 layer (128 x 128, 6 stages, split 2)."""
    keep = [c for c in space if c["stages"] == 4 and (c["ws"] or c["bm"] == 256) and c["split_k"] <= 4]
    return keep + [c for c in space if c == wg_config(128, 128, 6, 2)]


def diagnose(handle) -> None:
    """Small problems, each config of every tile shape: the error and where it lies."""
    cases = [(1, 64, 8, 64, 1, 0), (2, 64, 8, 128, 1, 0), (2, 128, 9, 256, 3, 1)]
    for n, c, hw, k, f, pad in cases:
        problem = problem_of("fp16", n, c, hw, k, f, pad)
        x = torch.randn(n, c, hw, hw, device="cuda", dtype=torch.float16)
        x = x.to(memory_format=torch.channels_last)
        w = (torch.randn(k, c, f, f, device="cuda") / (c * f * f) ** 0.5).half()
        w = w.to(memory_format=torch.channels_last)
        ref = F.conv2d(x, w, padding=pad).float()
        for bm, ws in [(b, w) for b in (64, 128, 256) for w in (0, 1)]:
            for bn in (64, 128, 256):
                config = wg_config(bm, bn, 3, ws=ws)
                if not SOLVER.is_valid_config(handle, problem, config):
                    continue
                y = torch.full_like(ref, float("nan")).half().to(memory_format=torch.channels_last)
                sol = compile_all(handle, [make_solution(handle, problem, SOLVER, config)])[0]
                be = handle.backend
                tensors = {"x": be.wrap(x), "w": be.wrap(w), "y": be.wrap(y)}
                handle.prepare_invoker(sol)(InvokeArgs(tensors, None))
                torch.cuda.synchronize()
                got = y.float().permute(0, 2, 3, 1).reshape(-1, k)  # rows m, columns k
                want = ref.permute(0, 2, 3, 1).reshape(-1, k)
                bad = ~((got - want).abs() <= 0.02 + 0.02 * want.abs())
                err = float((got - want).nan_to_num(1e3).norm() / want.norm())
                line = f"diag n{n} c{c} {hw}x{hw} k{k} {f}x{f} {config}: rel err {err:.2e}"
                line += f", bad {int(bad.sum())}"
                if bad.any():
                    rows = bad.any(1).nonzero().flatten()[:12].tolist()
                    cols = bad.any(0).nonzero().flatten()[:24].tolist()
                    m0 = int(bad.any(1).nonzero()[0])
                    line += f"\n   bad rows {rows}\n   bad cols {cols}"
                    line += f"\n   row {m0}: got {got[m0, :8].tolist()}\n   want {want[m0, :8].tolist()}"
                print(line, flush=True)


def diagnose_bwd(handle) -> None:
    """Backward data on small problems, every tile width."""
    for n, c, hw, k, f, pad in [(1, 64, 8, 64, 1, 0), (2, 128, 8, 64, 1, 0), (2, 256, 9, 128, 3, 1)]:
        problem = ConvProblem.create(
            TensorDesc("fp16", (n, c, hw, hw), layout="NHWC"),
            TensorDesc("fp16", (k, c, f, f), layout="NHWC"),
            ConvDesc((pad, pad)),
            "B",
        )
        dy = torch.randn(n, k, hw, hw, device="cuda", dtype=torch.float16)
        dy = dy.to(memory_format=torch.channels_last)
        w = (torch.randn(k, c, f, f, device="cuda") / (k * f * f) ** 0.5).half()
        w = w.to(memory_format=torch.channels_last)
        x0 = torch.zeros(n, c, hw, hw, device="cuda", dtype=torch.float16).to(
            memory_format=torch.channels_last
        )
        ref = torch.ops.aten.convolution_backward(
            dy, x0, w, None, [1, 1], [pad, pad], [1, 1], False, [0, 0], 1, [True, False, False]
        )[0].float()
        for solver in (ConvWgmmaBwdNhwc(),):
            for bm, bn, ws in [(64, 64, 0), (128, 128, 0), (128, 256, 1), (256, 128, 1), (64, 128, 1)]:
                config = wg_config(bm, bn, 3, ws=ws)
                if not solver.is_valid_config(handle, problem, config):
                    continue
                dx = torch.full_like(x0, float("nan"))
                sol = compile_all(handle, [make_solution(handle, problem, solver, config)])[0]
                be = handle.backend
                tensors = {"x": be.wrap(dx), "w": be.wrap(w), "y": be.wrap(dy)}
                handle.prepare_invoker(sol)(InvokeArgs(tensors, None))
                torch.cuda.synchronize()
                err = float((dx.float() - ref).nan_to_num(1e3).norm() / ref.norm())
                print(f"diag bwd {solver.name} n{n} c{c} {hw}x{hw} k{k} {f}x{f} {config}: rel err {err:.2e}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp16")
    ap.add_argument("--configs", default="all", choices=["all", "wide", "focus", "variants", "default", "sk"])
    ap.add_argument("--directions", default="F")
    ap.add_argument("--flush", action="store_true")
    ap.add_argument("--layers", default="0,1,2,3")
    ap.add_argument("--json", default="")
    ap.add_argument("--extra", default="[]", help="a JSON list of configs timed after the chosen ones")
    ap.add_argument("--no-diag", action="store_true")
    args = ap.parse_args()
    handle = handle_next_to_cudnn()
    if not args.no_diag:
        for diag in (diagnose, diagnose_bwd):
            try:
                diag(handle)
            except Exception as exc:  # reported; the sweep still runs
                print(f"{diag.__name__} failed: {type(exc).__name__}: {exc}", flush=True)
    results = []
    timer = flushed_us if args.flush else device_us
    for dtype, direction in [(t, d) for t in args.dtypes.split(",") for d in args.directions.split(",")]:
        tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        solver = SOLVER if direction == "F" else ConvWgmmaBwdNhwc()
        for index in [int(i) for i in args.layers.split(",")]:
            c, hw, k = LAYERS[index]
            xs = [
                torch.randn(BATCH, c, hw, hw, device="cuda", dtype=tdt).to(memory_format=torch.channels_last)
                for _ in range(SETS)
            ]
            w = (torch.randn(k, c, 3, 3, device="cuda") / (c * 9) ** 0.5).to(tdt)
            w = w.to(memory_format=torch.channels_last)
            if direction == "F":
                ins = xs
                refs = [F.conv2d(x, w, padding=1) for x in xs]
                cudnn = device_us([functools.partial(F.conv2d, x, w, padding=1) for x in xs])
            else:  # the inputs are dy (K channels), the outputs dx
                ins = [torch.randn_like(F.conv2d(x, w, padding=1)) for x in xs]
                refs = [cudnn_grad("B", x, dy, w, 1, 1) for x, dy in zip(xs, ins)]
                cudnn = device_us(
                    [functools.partial(cudnn_grad, "B", x, dy, w, 1, 1) for x, dy in zip(xs, ins)]
                )
            outs = [torch.empty_like(r) for r in refs]
            problem = problem_of(dtype, BATCH, c, hw, k, 3, 1, direction)
            flops = 2.0 * BATCH * hw * hw * k * c * 9
            configs = [solver.default_config(handle, problem)]
            if args.configs == "sk":
                configs += [cfg for cfg in stream_k(solver, handle, problem) if cfg not in configs]
            elif args.configs == "variants":
                configs += [
                    cfg for cfg in variants(solver, handle, problem, index, configs[0]) if cfg not in configs
                ]
            elif args.configs != "default":
                space = list(solver.search_space(handle, problem))
                if args.configs == "wide":  # 128- and 256-row blocks of the default's width
                    space = [c for c in space if c["bm"] >= 128 and c["bn"] == configs[0]["bn"]]
                elif args.configs == "focus":
                    space = focus(space)
                configs += [cfg for cfg in space if cfg not in configs]
            extra = [{"split_k": 1, "ws": 0, "sk": 0, **c} for c in json.loads(args.extra)]
            extra = [{**c, "bn": min(c["bn"], max(64, k))} for c in extra]  # no wider than K
            configs += [c for c in extra if c not in configs and solver.is_valid_config(handle, problem, c)]
            sols = compile_all(handle, [make_solution(handle, problem, solver, cfg) for cfg in configs])
            be = handle.backend
            wb, ib, ob = be.wrap(w), [be.wrap(t) for t in ins], [be.wrap(t) for t in outs]

            def facts(sol, problem=problem, solver=solver):
                smem = solver.launch_smem(handle, sol.config)
                blocks = solver.grid_blocks(problem, sol.config)
                gemm = types.SimpleNamespace(kernels=[k for k in sol.kernels if k.name == "wgmma_fwd"])
                return {"blocks": blocks, "smem": smem, **kernel_facts(handle, gemm, smem)}

            if direction == "F":
                tensor_sets = [{"x": ib[i], "w": wb, "y": ob[i]} for i in range(SETS)]
            else:
                tensor_sets = [{"x": ob[i], "w": wb, "y": ib[i]} for i in range(SETS)]
            rows = check_and_time(handle, sols, tensor_sets, outs, refs, flops, facts, timer)
            today = (
                time_today(handle, problem, ib, wb, ob, solver) if direction == "F" else ("-", float("nan"))
            )
            ok = [r for r in rows if r["err"] < 2e-2]
            best = min(ok, key=lambda r: r["us"]) if ok else None
            layer = f"{direction} C{c} {hw}x{hw} K{k}"
            results.append({"dtype": dtype, "layer": layer, "cudnn_us": cudnn, "today": today, "rows": rows})
            for r in sorted(rows, key=lambda r: r["us"]):
                print(
                    f"  {dtype} {layer} {json.dumps(r['config'])}: {r['us']:7.1f} us {r['tflops']:4.0f} TF "
                    f"err {r['err']:.1e} regs {r.get('regs')} local {r.get('local_bytes')} "
                    f"occ {r.get('blocks_per_sm')} blocks {r['blocks']}"
                )
            d, b = rows[0], best or rows[0]
            print(
                f"{dtype} {layer}: cuDNN {cudnn:6.1f} us | "
                f"{today[0]} {today[1]:6.1f} us x{today[1] / cudnn:.2f} | "
                f"wgmma default {d['us']:6.1f} us x{d['us'] / cudnn:.2f} err {d['err']:.1e} | "
                f"best {b['us']:6.1f} us x{b['us'] / cudnn:.2f} {json.dumps(b['config'])}",
                flush=True,
            )
            del xs, ins, outs, refs
    for key in ("default", "best"):
        ratios = []
        for e in results:
            ok = [r for r in e["rows"] if r["err"] < 2e-2] or e["rows"]
            us = e["rows"][0]["us"] if key == "default" else min(r["us"] for r in ok)
            ratios.append(us / e["cudnn_us"])
        if ratios:
            geo = statistics.geometric_mean(ratios)
            print(f"{key}: geomean ratio to cuDNN {geo:.2f}, worst {max(ratios):.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    wrong = [(e["layer"], r["config"]) for e in results for r in e["rows"] if not r["err"] < 2e-2]
    if wrong:
        print("WRONG RESULTS:", wrong)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
