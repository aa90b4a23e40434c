"""Find on ResNet-50 layers: every applicable solver timed by miopy's find, beside cuDNN (torch).

Usage: python3 scripts/find_report.py [--backend cuda] [--dtype fp32] [--batch 32] [--tune]"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:  # torch first: imported after CuPy / cuda-bindings, torch 2.11 fails to register its own ops
    import torch  # noqa: F401
except ImportError:
    pass

import miopy  # noqa: E402
from miopy.engine.find import FindOptions, find_solutions  # noqa: E402

LAYERS = {  # (C, HW, K, R, stride, pad)
    "3x3 64x56x56->64": (64, 56, 64, 3, 1, 1),
    "1x1 64x56x56->256": (64, 56, 256, 1, 1, 0),
    "3x3 256x14x14->256": (256, 14, 256, 3, 1, 1),
    "1x1 1024x14x14->512": (1024, 14, 512, 1, 1, 0),
}


def cudnn_ms(c, hw, k, r, s, p, n, dtype, direction):
    try:
        import torch
        import triton.testing
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    x = torch.randn(n, c, hw, hw, device="cuda", dtype=dt)
    w = torch.randn(k, c, r, r, device="cuda", dtype=dt)
    y = torch.nn.functional.conv2d(x, w, stride=s, padding=p)
    dy = torch.randn_like(y)
    if direction == "F":
        fn = lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p)  # noqa: E731
    else:
        mask = (direction == "B", direction == "W", False)
        fn = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
            dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask
        )
    return triton.testing.do_bench(fn, warmup=25, rep=100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default=None)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--directions", default="FBW")
    ap.add_argument("--tune", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("MIOPY_FIND_MODE", "NORMAL")
    h = miopy.Handle(args.backend)
    print(f"# {h}  dtype {args.dtype}  batch {args.batch}")
    for name, (c, hw, k, r, s, p) in LAYERS.items():
        for d in args.directions:
            x = miopy.TensorDesc(args.dtype, (args.batch, c, hw, hw))
            w = miopy.TensorDesc(args.dtype, (k, c, r, r))
            problem = miopy.ConvProblem.create(x, w, miopy.ConvDesc((p, p), (s, s)), d)
            found = find_solutions(h, problem, FindOptions(tuning=args.tune))
            ref = cudnn_ms(c, hw, k, r, s, p, args.batch, args.dtype, d)
            gflop = problem.flops() / 1e9
            print(
                f"{name} {d}: "
                + "; ".join(
                    f"{sol.solver} {sol.time_ms:.4f} ms ({gflop / sol.time_ms:.1f} TFLOP/s)" for sol in found
                )
                + (f" | cuDNN {ref:.4f} ms" if ref is not None else ""),
                flush=True,
            )


if __name__ == "__main__":
    main()
