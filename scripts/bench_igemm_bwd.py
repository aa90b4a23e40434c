"""ConvIgemmBwdNhwc (backward data) and ConvIgemmWrwNhwc (backward weights) against cuDNN on the
ResNet-50 layers (batch 32, NHWC), on a GPU.

Timed as scripts/bench_igemm.py times the forward: device events around ITERS back-to-back
launches queued behind a sleep kernel, rotating SETS input sets, median of REPS loops. cuDNN runs
through torch (``aten.convolution_backward`` for the one gradient) with ``cudnn.benchmark = True`` on
channels_last tensors. Each of our configs is checked against cuDNN's result before it is timed.
(``torch.nn.grad.conv2d_input`` is not used: it hands cuDNN a contiguous dummy input, and
cuDNN then takes a mixed-layout path several times slower.)

    python scripts/bench_igemm_bwd.py [--dirs B,W] [--dtypes fp16,bf16] [--configs default|all]
                                      [--layers 0,1,...] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import torch  # noqa: E402
from bench_igemm import SETS, check_and_time, cudnn_grad, handle_next_to_cudnn, kernel_facts  # noqa: E402
from timing import Timer  # noqa: E402

from miopy.engine.bench import compile_all  # noqa: E402
from miopy.engine.candidates import make_solution  # noqa: E402
from miopy.problem.conv import ConvDesc, ConvProblem  # noqa: E402
from miopy.solvers.conv import implicit_gemm_bwd as bwd  # noqa: E402
from miopy.solvers.conv import implicit_gemm_wrw as wrw  # noqa: E402
from miopy.solvers.conv.igemm_common import tile_config  # noqa: E402
from miopy.solvers.conv.implicit_gemm import PREFERRED  # noqa: E402
from miopy.tensor import TensorDesc  # noqa: E402

BATCH = 32
# (C, H=W, K, filter, stride): the ResNet-50 layers with C a multiple of 8 (all but the stem)
LAYERS = [
    (64, 56, 64, 3, 1),
    (128, 28, 128, 3, 1),
    (256, 14, 256, 3, 1),
    (512, 7, 512, 3, 1),
    (64, 56, 64, 1, 1),
    (64, 56, 256, 1, 1),
    (256, 56, 64, 1, 1),
    (256, 56, 128, 1, 1),
    (128, 28, 512, 1, 1),
    (512, 28, 128, 1, 1),
    (512, 28, 256, 1, 1),
    (256, 14, 1024, 1, 1),
    (1024, 14, 256, 1, 1),
    (1024, 14, 512, 1, 1),
    (512, 7, 2048, 1, 1),
    (2048, 7, 512, 1, 1),
    (128, 56, 128, 3, 2),
    (256, 28, 256, 3, 2),
    (512, 14, 512, 3, 2),
    (256, 56, 512, 1, 2),
    (512, 28, 1024, 1, 2),
    (1024, 14, 2048, 1, 2),
]
SOLVERS = {"B": bwd.ConvIgemmBwdNhwc(), "W": wrw.ConvIgemmWrwNhwc()}


WRW_BASES = [
    tile_config(64, 128, 32, 2, 2, 4),
    tile_config(128, 128, 32, 2, 2, 4),
    tile_config(64, 128, 64, 2, 2, 3),
    tile_config(128, 128, 64, 2, 2, 3),
    tile_config(128, 64, 64, 2, 2, 3),
    tile_config(64, 64, 64, 2, 2, 4),
    tile_config(128, 256, 32, 2, 4, 3),
]
WRW_SPLIT_FACTORS = (0.25, 0.5, 1, 2, 4)  # times default_split's choice
BWD_BASES = [dict(c) for c in PREFERRED[:4]] + [
    {**PREFERRED[0], "bm": 128, "bn": 128, "bk": 32, "stages": 4},
    {**PREFERRED[0], "bm": 64, "bn": 128, "stages": 3},
    {**PREFERRED[0], "stages": 4},
]


def candidates(handle, direction: str, problem: ConvProblem, sweep: bool) -> list[dict]:
    solver = SOLVERS[direction]
    default = solver.default_config(handle, problem)
    configs = [default]
    if not sweep:
        return configs
    if direction == "B":
        cus = handle.info.compute_units
        more = []
        for base in BWD_BASES:
            more.append(base)
            if bwd.grid_blocks(problem, base) < 2 * cus:
                more += [{**base, "split_k": s} for s in (2, 3, 4)]
    else:
        more = []
        for base in WRW_BASES:
            best = wrw.default_split(problem, base, handle.info.compute_units)
            splits = {max(1, min(128, round(best * f))) for f in WRW_SPLIT_FACTORS}
            splits = {min(wrw.DOMAIN["split_k"], key=lambda d: abs(d - s)) for s in splits}
            more += [{**base, "split_k": split} for split in sorted(splits)]
    for cfg in more:
        if cfg not in configs and solver.is_valid_config(handle, problem, cfg):
            configs.append(dict(cfg))
    return configs


REPS = 3
# ~5 ms of sleep: the GPU never waits for the host
device_us = Timer(iters=100, reps=REPS, sleep_cycles=10_000_000)


def make_problem(direction: str, dtype: str, layer) -> ConvProblem:
    c, hw, k, f, stride = layer
    return ConvProblem.create(
        TensorDesc(dtype, (BATCH, c, hw, hw), layout="NHWC"),
        TensorDesc(dtype, (k, c, f, f), layout="NHWC"),
        ConvDesc((f // 2, f // 2), (stride, stride)),
        direction,
    )


def bench_layer(handle, direction, dtype, layer, sols) -> dict:
    c, hw, k, f, stride = layer
    pad = f // 2
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    cl = torch.channels_last
    ho = sols[0].problem.y.lens[2]
    xs = [torch.randn(BATCH, c, hw, hw, device="cuda", dtype=tdt).to(memory_format=cl) for _ in range(SETS)]
    dys = [torch.randn(BATCH, k, ho, ho, device="cuda", dtype=tdt).to(memory_format=cl) for _ in range(SETS)]
    w = (torch.randn(k, c, f, f, device="cuda") / (c * f * f) ** 0.5).to(tdt).to(memory_format=cl)
    calls = [functools.partial(cudnn_grad, direction, x, dy, w, stride, pad) for x, dy in zip(xs, dys)]
    outs = [torch.empty_like(xs[0] if direction == "B" else w) for _ in range(SETS)]
    refs = [fn() for fn in calls]
    assert all(r.is_contiguous(memory_format=cl) for r in refs), "cuDNN's result is not channels_last"
    cudnn = device_us(calls)
    flops = 2.0 * BATCH * ho * ho * k * c * f * f
    be = handle.backend
    if direction == "B":
        tensors = [{"x": be.wrap(outs[i]), "w": be.wrap(w), "y": be.wrap(dys[i])} for i in range(SETS)]
    else:
        tensors = [{"x": be.wrap(xs[i]), "w": be.wrap(outs[i]), "y": be.wrap(dys[i])} for i in range(SETS)]
    smem = bwd.smem_bytes if direction == "B" else wrw.smem_bytes

    def facts(sol):
        return kernel_facts(handle, sol, smem(sol.config))

    rows = check_and_time(handle, sols, tensors, outs, refs, flops, facts, timer=device_us)
    ok = [r for r in rows if r["err"] < 2e-2]
    return {
        "direction": direction,
        "dtype": dtype,
        "layer": f"C{c} {hw}² K{k} {f}x{f}" + (f" s{stride}" if stride > 1 else ""),
        "gflop": flops / 1e9,
        "cudnn_us": cudnn,
        "default": rows[0],
        "best": min(ok, key=lambda r: r["us"]) if ok else None,
        "all": rows,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dirs", default="B,W")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--configs", default="default", choices=["all", "default"])
    ap.add_argument("--layers", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    handle = handle_next_to_cudnn()
    layers = [LAYERS[int(i)] for i in args.layers.split(",")] if args.layers else LAYERS
    results = []
    jobs = []
    for direction in args.dirs.split(","):
        for dtype in args.dtypes.split(","):
            for layer in layers:
                problem = make_problem(direction, dtype, layer)
                configs = candidates(handle, direction, problem, args.configs == "all")
                sols = [make_solution(handle, problem, SOLVERS[direction], cfg) for cfg in configs]
                jobs.append((direction, dtype, layer, sols))
    built = {id(s) for s in compile_all(handle, [s for job in jobs for s in job[3]])}
    print(f"built {len(built)} solutions", flush=True)
    for direction, dtype, layer, sols in jobs:
        sols = [s for s in sols if id(s) in built]
        if sols:
            e = bench_layer(handle, direction, dtype, layer, sols)
            results.append(e)
            d, b = e["default"], e["best"] or e["default"]
            print(
                f"{direction} {dtype} {e['layer']:>22}: cuDNN {e['cudnn_us']:7.1f} us | default "
                f"{d['us']:7.1f} us {d['tflops']:5.0f} TF x{d['us'] / e['cudnn_us']:4.2f} err {d['err']:.1e} "
                f"regs {d.get('regs')} occ {d.get('blocks_per_sm')} | best {b['us']:7.1f} us "
                f"x{b['us'] / e['cudnn_us']:4.2f} {json.dumps(b['config'])}",
                flush=True,
            )
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(results, fh, indent=1)
    print("\n| dir | dtype | layer | cuDNN µs | ours µs | TFLOP/s | ratio | best µs | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for e in results:
        d, b = e["default"], e["best"] or e["default"]
        print(
            f"| {e['direction']} | {e['dtype']} | {e['layer']} | {e['cudnn_us']:.1f} | {d['us']:.1f} | "
            f"{d['tflops']:.0f} | {d['us'] / e['cudnn_us']:.2f} | {b['us']:.1f} | "
            f"{b['us'] / e['cudnn_us']:.2f} |"
        )
    for direction in args.dirs.split(","):
        for dtype in args.dtypes.split(","):
            sel = [e for e in results if e["dtype"] == dtype and e["direction"] == direction]
            for key in ("default", "best"):
                ratios = [(e[key] or e["default"])["us"] / e["cudnn_us"] for e in sel]
                if ratios:
                    geo = statistics.geometric_mean(ratios)
                    print(
                        f"{direction} {dtype} {key}: geomean ratio to cuDNN {geo:.2f}, "
                        f"worst {max(ratios):.2f}"
                    )
    bad = [(e["direction"], e["dtype"], e["layer"]) for e in results if e["default"]["err"] >= 2e-2]
    if bad:
        print("WRONG RESULTS:", bad)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
