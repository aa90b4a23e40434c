"""Reference softmax, forward and backward, in float64."""

from __future__ import annotations

import numpy as np

from miopy.problem.passes import Pass
from miopy.problem.softmax import SoftmaxAlgorithm, SoftmaxMode, SoftmaxProblem
from miopy.reference.common import view
from miopy.tensor import TensorDesc, from_storage


def _axes(problem: SoftmaxProblem) -> tuple[int, ...]:
    rank = len(problem.lens)
    return (1,) if problem.mode is SoftmaxMode.CHANNEL else tuple(range(1, rank))


def softmax_reference(problem: SoftmaxProblem, t: dict[str, np.ndarray]) -> np.ndarray:
    """y (forward) or dx (backward) from logical-shape inputs."""
    p = problem
    axes = _axes(p)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if p.direction is Pass.FORWARD:
            x = np.asarray(t["x"], np.float64)
            shifted = x - x.max(axis=axes, keepdims=True)
            total = np.exp(shifted).sum(axis=axes, keepdims=True)
            f = shifted - np.log(total) if p.algorithm is SoftmaxAlgorithm.LOG else np.exp(shifted) / total
            old = t.get("y")
        else:
            y = np.asarray(t["y"], np.float64)
            dy = np.asarray(t["dy"], np.float64)
            if p.algorithm is SoftmaxAlgorithm.LOG:
                f = dy - np.exp(y) * dy.sum(axis=axes, keepdims=True)
            else:
                f = y * (dy - (y * dy).sum(axis=axes, keepdims=True))
            old = t.get("dx")
    out = p.alpha * f
    if p.beta != 0:
        out = out + p.beta * np.asarray(old, np.float64)
    return out


def reference(problem: SoftmaxProblem, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    descs = problem.tensors()
    logical = {r: from_storage(view(buffers[r], descs[r]), descs[r].dtype) for r in problem.inputs}
    return {problem.outputs[0]: softmax_reference(problem, logical)}


def samples() -> list[SoftmaxProblem]:
    """Problems that, together, every softmax solver takes, in both directions."""
    out = []
    for dtype, lens, layout, algo, mode, beta in (
        ("fp32", (2, 3, 4, 5), "NCHW", "accurate", "channel", 0.0),  # columns
        ("fp16", (2, 37, 3, 2), "NHWC", "log", "channel", 0.5),  # rows, C innermost
        ("bf16", (3, 4, 5, 7), "NCHW", "fast", "instance", 0.0),  # rows
        ("fp32", (2, 700, 1, 1), "NCHW", "accurate", "channel", 0.0),  # long rows
    ):
        for direction in "FB":
            desc = TensorDesc(dtype, lens, layout=layout)
            out.append(SoftmaxProblem.create(desc, direction, algo, mode, 1.25, beta))
    strided = TensorDesc("fp32", (2, 3, 4, 5), strides=(100, 25, 5, 1))
    out.append(SoftmaxProblem.create(strided, "F", "log", "instance", 1.0, -0.5))
    out.append(SoftmaxProblem.create(strided, "B", "accurate", "channel"))
    return out


__all__ = ["reference", "samples", "softmax_reference"]
