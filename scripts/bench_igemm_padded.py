"""The channel-padding implicit-GEMM solvers (ConvIgemmPad{Fwd,Bwd,Wrw}Nhwc) against cuDNN on the
ResNet-50 stem (batch 32, 3 x 224 x 224 -> 64, 7x7, stride 2, pad 3, NHWC), on a GPU, with a
sweep of configs per direction.

Timed as scripts/bench_igemm.py times (device events around back-to-back launches queued
behind a sleep kernel, rotating input sets); a config's time is its whole program: the padding
copies, the GEMM and the copy back. F4 is ConvIgemmPadC4FwdNhwc (4 channels, two taps per
chunk). Each config is checked against cuDNN's result first.

    python scripts/bench_igemm_padded.py [--dirs F,B,W] [--dtypes fp16,bf16] [--configs all|default]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from bench_igemm import SETS, check_and_time, cudnn_grad, handle_next_to_cudnn  # noqa: E402
from timing import Timer  # noqa: E402

from miopy.engine.bench import compile_all  # noqa: E402
from miopy.engine.candidates import make_solution  # noqa: E402
from miopy.problem.conv import ConvDesc, ConvProblem  # noqa: E402
from miopy.solvers.conv.igemm_common import tile_config as cfg  # noqa: E402
from miopy.solvers.conv.implicit_gemm_pad import ConvIgemmPadFwdNhwc  # noqa: E402
from miopy.solvers.conv.implicit_gemm_pad_bwd import ConvIgemmPadBwdNhwc  # noqa: E402
from miopy.solvers.conv.implicit_gemm_pad_c4 import ConvIgemmPadC4FwdNhwc  # noqa: E402
from miopy.solvers.conv.implicit_gemm_pad_wrw import ConvIgemmPadWrwNhwc  # noqa: E402
from miopy.tensor import TensorDesc  # noqa: E402

SOLVERS = {
    "F4": ConvIgemmPadC4FwdNhwc(),
    "F": ConvIgemmPadFwdNhwc(),
    "B": ConvIgemmPadBwdNhwc(),
    "W": ConvIgemmPadWrwNhwc(),
}
BATCH, C, HW, K, FIL, STRIDE, PAD = 32, 3, 224, 64, 7, 2, 3
SWEEP = {
    "F4": [
        cfg(128, 64, 64, 2, 2, 3),
        cfg(128, 64, 32, 2, 2, 4),
        cfg(128, 64, 32, 4, 1, 4),
        cfg(128, 64, 64, 4, 1, 3),
        cfg(256, 64, 64, 4, 1, 3),
        cfg(256, 64, 32, 4, 1, 4),
        cfg(256, 64, 64, 4, 2, 3),
        cfg(64, 64, 64, 2, 2, 3),
        cfg(128, 64, 64, 2, 2, 3, frag_bufs=2),
    ],
    "F": [],
    "B": [
        cfg(128, 32, 64, 4, 1, 3),
        cfg(256, 32, 64, 4, 1, 4),
        cfg(256, 32, 32, 4, 1, 4),
    ],
    "W": [
        cfg(64, 128, 32, 2, 2, 4, split_k=64),
        cfg(64, 128, 64, 2, 2, 3, split_k=96),
        cfg(64, 64, 64, 2, 2, 3, split_k=48),
    ],
}
device_us = Timer(iters=50, reps=3, sleep_cycles=10_000_000)


def problem_of(direction: str, dtype: str) -> ConvProblem:
    return ConvProblem.create(
        TensorDesc(dtype, (BATCH, C, HW, HW), layout="NHWC"),
        TensorDesc(dtype, (K, C, FIL, FIL), layout="NHWC"),
        ConvDesc((PAD, PAD), (STRIDE, STRIDE)),
        direction,
    )


def bench(handle, direction: str, dtype: str, sols) -> list[dict]:
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    cl = torch.channels_last
    ho = sols[0].problem.y.lens[2]
    xs = [torch.randn(BATCH, C, HW, HW, device="cuda", dtype=tdt).to(memory_format=cl) for _ in range(SETS)]
    dys = [torch.randn(BATCH, K, ho, ho, device="cuda", dtype=tdt).to(memory_format=cl) for _ in range(SETS)]
    w = (torch.randn(K, C, FIL, FIL, device="cuda") / (C * FIL * FIL) ** 0.5).to(tdt).to(memory_format=cl)
    if direction == "F":
        calls = [functools.partial(torch.nn.functional.conv2d, x, w, None, STRIDE, PAD) for x in xs]
    else:
        calls = [functools.partial(cudnn_grad, direction, x, dy, w, STRIDE, PAD) for x, dy in zip(xs, dys)]
    refs = [fn() for fn in calls]
    cudnn = device_us(calls)
    outs = [torch.empty_like(r) for r in refs]
    be = handle.backend
    out_role = {"F": "y", "B": "x", "W": "w"}[direction]
    tensors = []
    for i in range(SETS):
        t = {"x": be.wrap(xs[i]), "w": be.wrap(w), "y": be.wrap(dys[i])}
        t[out_role] = be.wrap(outs[i])
        tensors.append(t)
    flops = 2.0 * BATCH * ho * ho * K * C * FIL * FIL
    rows = check_and_time(handle, sols, tensors, outs, refs, flops, lambda sol: {}, timer=device_us)
    for r in rows:
        r["cudnn_us"] = cudnn
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dirs", default="F4,F,B,W", help="F4: ConvIgemmPadC4FwdNhwc")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--configs", default="all", choices=["all", "default"])
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    handle = handle_next_to_cudnn()
    jobs = []
    for direction in args.dirs.split(","):
        solver = SOLVERS[direction]
        for dtype in args.dtypes.split(","):
            problem = problem_of(direction[0], dtype)
            configs = [solver.default_config(handle, problem)]
            if args.configs == "all":
                for c in SWEEP[direction]:
                    if c not in configs and solver.is_valid_config(handle, problem, c):
                        configs.append(c)
            jobs.append((direction, dtype, [make_solution(handle, problem, solver, c) for c in configs]))
    built = {id(s) for s in compile_all(handle, [s for job in jobs for s in job[2]])}
    print(f"built {len(built)} solutions", flush=True)
    results, wrong = [], []
    for direction, dtype, sols in jobs:
        rows = bench(handle, direction[0], dtype, [s for s in sols if id(s) in built])
        for i, r in enumerate(rows):
            tag = "default" if i == 0 else "       "
            print(
                f"{direction} {dtype} {tag} cuDNN {r['cudnn_us']:7.1f} us ours {r['us']:7.1f} us "
                f"x{r['us'] / r['cudnn_us']:5.2f} {r['tflops']:5.0f} TF err {r['err']:.1e} "
                f"{json.dumps(r['config'])}",
                flush=True,
            )
            if r["err"] >= 2e-2:
                wrong.append((direction, dtype, r["config"]))
            results.append({"direction": direction, "dtype": dtype, **r})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    if wrong:
        print("WRONG RESULTS:", wrong)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
