"""Host time per call: ``Solution.run`` on torch tensors against ``torch.nn.functional.conv2d``
on the same tensors, for a one-kernel solution and for GEMM solutions (cuBLAS and cuBLASLt).

The host time of a call is what the calling thread spends in it; both only enqueue work (miopy
runs asynchronously on device arrays), and the device is drained every 50 calls so a full launch
queue never blocks the host. Also printed: calls per second in a loop of back-to-back calls of a
tiny problem (where the host, not the device, sets the pace).

    python3 benchmarks/host_overhead.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:  # torch first (see benchmarks/conv.py)
    import torch
except ImportError:  # pragma: no cover
    torch = None

CASES = [  # (label, solver, C, HW, K, R, pad, dtype, layout)
    ("one kernel: naive fwd 8x8x8->8 3x3", "ConvDirectNaiveFwd", 8, 8, 8, 3, 1, "fp32", "NCHW"),
    ("one kernel: tiled fwd 64x28x28->64 3x3", "ConvDirectTiledFwd", 64, 28, 64, 3, 1, "fp32", "NCHW"),
    ("cuBLAS GEMM: 1x1 64x56x56->256 fp16 NHWC", "GemmFwd1x1_0_1", 64, 56, 256, 1, 0, "fp16", "NHWC"),
    ("cuBLASLt GEMM: 1x1 64x56x56->256 fp16 NHWC", "GemmLtFwd1x1", 64, 56, 256, 1, 0, "fp16", "NHWC"),
]


def host_us(fn, calls: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for i in range(calls):
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
        if i % 50 == 49:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument(
        "--direct-single",
        action="store_true",
        help="also time each case in the other launch mode (lone kernel: direct; lone library call: graph)",
    )
    args = ap.parse_args(argv)
    if torch is None or not torch.cuda.is_available():
        print("benchmarks/host_overhead.py needs PyTorch with a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    import miopy
    from miopy.engine.find import solution_for

    handle = miopy.Handle("cuda")
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    import cupy

    print("| case | miopy run on torch, us/call | miopy run on cupy, us/call | torch conv2d, us/call |")
    print("|---|---|---|---|")
    for label, solver, c, hw, k, r, pad, dtype, layout in CASES:
        n = args.batch if r == 1 or hw > 8 else 1
        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        x = torch.randn(n, c, hw, hw, device="cuda", dtype=dtypes[dtype]).contiguous(memory_format=fmt)
        w = torch.randn(k, c, r, r, device="cuda", dtype=dtypes[dtype]).contiguous(memory_format=fmt)
        y = torch.nn.functional.conv2d(x, w, padding=pad)
        xd = miopy.TensorDesc(dtype, tuple(x.shape), layout=layout)
        wd = miopy.TensorDesc(dtype, tuple(w.shape), layout=layout)
        problem = miopy.ConvProblem.create(xd, wd, miopy.ConvDesc((pad, pad)), "F", y_layout=layout)
        try:
            solution = solution_for(handle, problem, solver)
        except Exception as exc:
            print(f"| {label} | not applicable: {exc} | |")
            continue
        out = torch.empty_like(y)
        tensors = {"x": x, "w": w, "y": out}
        miopy_us = host_us(lambda s=solution, t=tensors: s.run(handle, t), args.calls)
        torch_us = host_us(lambda x=x, w=w, p=pad: torch.nn.functional.conv2d(x, w, padding=p), args.calls)
        arrays = {role: cupy.asarray(t) for role, t in tensors.items()}  # zero-copy views
        cupy_us = host_us(lambda s=solution, t=arrays: s.run(handle, t), args.calls)
        keys_us = host_us(lambda t=tensors: handle.backend.fast_keys(t.values()), args.calls)
        torch.cuda.synchronize()
        err = float((out.float() - y.float()).norm() / y.float().norm())
        if args.direct_single:  # the same case in the other launch mode (graph <-> direct)
            be = handle.backend
            saved = be.graph_single_launch, be.graph_single_library
            be.graph_single_launch, be.graph_single_library = not saved[0], not saved[1]
            handle._prepared.clear()
            other_us = host_us(lambda s=solution, t=tensors: s.run(handle, t), args.calls)
            be.graph_single_launch, be.graph_single_library = saved
            handle._prepared.clear()
            host_us(lambda s=solution, t=tensors: s.run(handle, t), 10)
            mode = "as a graph" if "GEMM" in label else "direct launch"
            label += f" [{mode}: {other_us:.1f} us]"
        replay = [e[1] for e in handle._prepared.entries.values() if e[0]() is solution]
        replay_us = host_us(lambda c=replay[0]: handle.backend.run_prepared(c), args.calls) if replay else 0
        print(
            f"| {label} (err {err:.1e}; replay alone {replay_us:.1f} us, torch keys {keys_us:.1f} us) "
            f"| {miopy_us:.1f} | {cupy_us:.1f} | {torch_us:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
