"""Reference LRN, forward and backward, in float64 with MIOpen's windows (see
miopy/problem/lrn.py)."""

from __future__ import annotations

import numpy as np

from miopy.problem.lrn import LRNMode, LRNProblem
from miopy.problem.passes import Pass
from miopy.reference.common import store_logical, view
from miopy.tensor import TensorDesc, from_storage


def _channel_sums(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """out[:, c] = sum of v[:, c - lo .. c + hi] inside the tensor."""
    c = v.shape[1]
    cum = np.concatenate([np.zeros_like(v[:, :1]), np.cumsum(v, axis=1)], axis=1)
    idx = np.arange(c)
    start = np.clip(idx - lo, 0, c)
    end = np.clip(idx + hi + 1, 0, c)
    return cum[:, end] - cum[:, start]


def _windows(h: int, size: int, pad: int):
    """Per position: (start, end) clipped to the image, and the length before clipping."""
    out = []
    for i in range(h):
        s = i - pad
        e = min(s + size, h + pad)
        out.append((max(s, 0), min(e, h), e - s))
    return out


def _window_sums(v: np.ndarray, size: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """(sum over each pixel's within-channel window, its area before clipping)."""
    n, c, h, w = v.shape
    hs, ws = _windows(h, size, pad), _windows(w, size, pad)
    cum = np.zeros((n, c, h + 1, w + 1))
    cum[:, :, 1:, 1:] = v.cumsum(2).cumsum(3)
    h0 = np.array([a for a, _, _ in hs])
    h1 = np.array([b for _, b, _ in hs])
    w0 = np.array([a for a, _, _ in ws])
    w1 = np.array([b for _, b, _ in ws])
    sums = (
        cum[:, :, h1][:, :, :, w1]
        - cum[:, :, h0][:, :, :, w1]
        - cum[:, :, h1][:, :, :, w0]
        + cum[:, :, h0][:, :, :, w0]
    )
    area = np.outer([a for _, _, a in hs], [a for _, _, a in ws]).astype(np.float64)
    return sums, area


def lrn_forward(problem: LRNProblem, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y, scale) from x, float64."""
    p = problem
    x = np.asarray(x, np.float64)
    if p.mode is LRNMode.CROSS_CHANNEL:
        scale = p.k + p.alpha / p.n * _channel_sums(x * x, p.pad, p.n - 1 - p.pad)
    else:
        sums, area = _window_sums(x * x, p.n, p.pad)
        scale = p.k + p.alpha / area * sums
    with np.errstate(invalid="ignore", divide="ignore"):
        return x * scale**-p.beta, scale


def lrn_backward(problem: LRNProblem, t: dict[str, np.ndarray]) -> np.ndarray:
    """dx from x, y, dy and scale, float64."""
    p = problem
    x, y, dy, scale = (np.asarray(t[r], np.float64) for r in ("x", "y", "dy", "scale"))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = dy * y / scale
        if p.mode is LRNMode.CROSS_CHANNEL:
            acc = _channel_sums(ratio, p.n - 1 - p.pad, p.pad)
            factor = 2.0 * p.alpha * p.beta / p.n
        else:
            acc, area = _window_sums(ratio, p.n, p.pad)
            factor = 2.0 * p.alpha * p.beta / area
        return dy * scale**-p.beta - factor * x * acc


def reference(problem: LRNProblem, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    descs = problem.tensors()
    logical = {r: from_storage(view(buffers[r], descs[r]), descs[r].dtype) for r in problem.inputs}
    if problem.direction is Pass.FORWARD:
        y, scale = lrn_forward(problem, logical["x"])
        return {"y": y, "scale": scale} if problem.save_scale else {"y": y}
    return {"dx": lrn_backward(problem, logical)}


def random_buffers(problem: LRNProblem, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """x uniform in (-1, 1); backward's y and scale are what the forward pass leaves (scale must be
    positive), dy uniform; outputs NaN."""
    descs = problem.tensors()
    x = rng.uniform(-1, 1, problem.x.lens)
    fwd = LRNProblem.create(problem.x, problem.mode, problem.n, problem.alpha, problem.beta, problem.k)
    y, scale = lrn_forward(fwd, x)
    values = {"x": x, "y": y, "scale": scale, "dy": rng.uniform(-1, 1, problem.x.lens)}
    out = {}
    for role, desc in descs.items():
        v = np.full(desc.lens, np.nan) if role in problem.outputs else values[role]
        out[role] = store_logical(v, desc)
    return out


def samples() -> list[LRNProblem]:
    """Problems that, together, every LRN solver takes, in both directions and modes."""
    out = []
    for dtype, lens, layout, mode, n, save in (
        ("fp32", (2, 7, 5, 6), "NCHW", "cross", 5, True),
        ("fp16", (2, 6, 4, 5), "NHWC", "cross", 4, False),
        ("bf16", (1, 3, 6, 7), "NCHW", "within", 3, True),
        ("fp32", (2, 2, 5, 4), "NHWC", "within", 4, False),
    ):
        x = TensorDesc(dtype, lens, layout=layout)
        out.append(LRNProblem.create(x, mode, n, 0.5, 0.75, 1.5, "F", save))
        out.append(LRNProblem.create(x, mode, n, 0.5, 0.75, 1.5, "B"))
    return out


__all__ = ["lrn_backward", "lrn_forward", "random_buffers", "reference", "samples"]
