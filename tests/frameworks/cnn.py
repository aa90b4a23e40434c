"""A small CNN built from miopy's layers or PyTorch's, trained on CIFAR-shaped synthetic data:
shared by the training test and benchmarks/train_compare.py."""

from __future__ import annotations

import time

import torch
from torch import nn

import miopy.torch as mt


def make_net(layers: str, seed: int = 0, channels: int = 16, batch_norm: bool = False) -> nn.Module:
    """conv-[batch norm]-relu-maxpool x2, conv-[batch norm]-relu, global average, linear;
    ``layers`` is "miopy" (every conv, batch norm, relu and max pool computed by miopy) or
    "torch"; one seed gives both the same weights."""
    lib = {"miopy": mt, "torch": nn}[layers]
    torch.manual_seed(seed)
    c = channels

    def norm(n: int) -> list[nn.Module]:
        return [lib.BatchNorm2d(n)] if batch_norm else []

    return nn.Sequential(
        lib.Conv2d(3, c, 3, padding=1),
        *norm(c),
        lib.ReLU(),
        lib.MaxPool2d(2),
        lib.Conv2d(c, 2 * c, 3, padding=1),
        *norm(2 * c),
        lib.ReLU(),
        lib.MaxPool2d(2),
        lib.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1),
        *norm(2 * c),
        lib.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * c, 10),
    )


def synthetic_cifar(batches: int, batch: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Learnable CIFAR-shaped data: each class adds its own fixed pattern to noise."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(10, 3, 32, 32, generator=g)
    data = []
    for _ in range(batches):
        labels = torch.randint(0, 10, (batch,), generator=g)
        images = 0.5 * torch.randn(batch, 3, 32, 32, generator=g) + patterns[labels]
        data.append((images, labels))
    return data


def train(
    net: nn.Module, data, steps: int, device: str = "cpu", channels_last: bool = False, lr: float = 0.05
) -> tuple[list[float], float]:
    """(loss of each step, median seconds per step after the first) with SGD + momentum."""
    net = net.to(device)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    losses, times = [], []
    for step in range(steps):
        x, y = data[step % len(data)]
        x, y = x.to(device), y.to(device)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        start = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))  # synchronises
        times.append(time.perf_counter() - start)
    rest = sorted(times[1:]) or times
    return losses, rest[len(rest) // 2]
