"""Train the test suite's small CNN with miopy's layers and with PyTorch's (same seed, same
batches) and print both loss curves and the step times side by side.

Usage: python3 benchmarks/train_compare.py [--device cpu|cuda] [--steps 200] [--batch 64]
       [--channels 32] [--channels-last] [--batch-norm]
On CUDA, PyTorch's layers run cuDNN; on the CPU, PyTorch's own kernels against miopy on OpenCL.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "frameworks")
)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cnn import make_net, synthetic_cifar, train  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--batch-norm", action="store_true", help="a BatchNorm2d after every convolution")
    p.add_argument("--tolerance", type=float, default=1e-3)
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (momentum 0.9)")
    a = p.parse_args()
    # True fp32 on both sides: cuDNN's default TF32 convolutions differ from fp32 by ~1e-3, and
    # training amplifies any difference once the loss curve turns chaotic (too high a rate).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    data = synthetic_cifar(batches=8, batch=a.batch)
    curves, times = {}, {}
    for layers in ("miopy", "torch"):
        net = make_net(layers, channels=a.channels, batch_norm=a.batch_norm)
        curves[layers], times[layers] = train(net, data, a.steps, a.device, a.channels_last, a.lr)
    print(
        f"device {a.device}, batch {a.batch}, channels {a.channels}, "
        f"channels_last {a.channels_last}, batch_norm {a.batch_norm}, lr {a.lr}"
    )
    print(f"median step time: miopy {times['miopy'] * 1e3:.2f} ms, torch {times['torch'] * 1e3:.2f} ms")
    print("step  loss(miopy)  loss(torch)  |diff|")
    worst = 0.0
    for i, (m, t) in enumerate(zip(curves["miopy"], curves["torch"])):
        worst = max(worst, abs(m - t))
        if i % max(1, a.steps // 20) == 0 or i == a.steps - 1:
            print(f"{i:4d}  {m:11.6f}  {t:11.6f}  {abs(m - t):.2e}")
    print(f"largest |diff| {worst:.2e} (tolerance {a.tolerance})")
    return 0 if worst <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
