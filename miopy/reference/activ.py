"""Reference activation, forward and backward, in float64 with MIOpen's formulas
(see ``ActivationMode``)."""

from __future__ import annotations

import numpy as np

from miopy.problem.activation import ActivationDesc, ActivationMode, ActivationProblem
from miopy.problem.passes import Pass
from miopy.reference.common import view
from miopy.tensor import from_storage

SOFTRELU_THRESHOLD = 50.0


def activ_forward(desc: ActivationDesc, x: np.ndarray) -> np.ndarray:
    """y = f(x), float64, same shape as x."""
    x = np.asarray(x, dtype=np.float64)
    a, b, g = desc.alpha, desc.beta, desc.gamma
    m = desc.mode
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if m is ActivationMode.PASTHRU:
            return x.copy()
        if m is ActivationMode.LOGISTIC:
            return 1.0 / (1.0 + np.exp(-x))
        if m is ActivationMode.TANH:
            return b * np.tanh(a * x)
        if m is ActivationMode.RELU:
            return np.where(x > 0, x, 0.0)
        if m is ActivationMode.SOFTRELU:
            return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(np.minimum(x, 0))))
        if m is ActivationMode.ABS:
            return np.abs(x)
        if m is ActivationMode.POWER:
            v = a + b * x
            return np.where(v <= 0, 0.0, np.power(np.where(v <= 0, 1.0, v), g))
        if m is ActivationMode.CLIPPED_RELU:
            return np.minimum(a, np.maximum(0.0, x))
        if m is ActivationMode.LEAKY_RELU:
            return np.where(x > 0, x, a * x)
        if m is ActivationMode.ELU:
            return np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))
    raise AssertionError(m)


def activ_backward(desc: ActivationDesc, x: np.ndarray, y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx from x, y and dy (whichever the mode reads), float64."""
    x, y, dy = (np.asarray(t, dtype=np.float64) for t in (x, y, dy))
    a, b, g = desc.alpha, desc.beta, desc.gamma
    m = desc.mode
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if m is ActivationMode.PASTHRU:
            return dy.copy()
        if m is ActivationMode.LOGISTIC:
            return dy * y * (1.0 - y)
        if m is ActivationMode.TANH:
            return np.zeros_like(dy) if b == 0 else dy * a * (b - y * y / b)
        if m is ActivationMode.RELU:
            return np.where(x > 0, dy, 0.0)
        if m is ActivationMode.SOFTRELU:
            e = np.exp(np.minimum(x, SOFTRELU_THRESHOLD))
            return dy * e / (e + 1.0)
        if m is ActivationMode.ABS:
            return dy * np.where(x > 0, 1.0, -1.0)
        if m is ActivationMode.POWER:
            v = a + b * x
            return np.where(v <= 0, 0.0, g * b * y / np.where(v <= 0, 1.0, v))
        if m is ActivationMode.CLIPPED_RELU:
            return np.where((x > 0) & (x < a), dy, 0.0)
        if m is ActivationMode.LEAKY_RELU:
            return dy * np.where(x > 0, 1.0, a)
        if m is ActivationMode.ELU:
            return dy * np.where(x > 0, 1.0, y + a)
    raise AssertionError(m)


def activ_reference(problem: ActivationProblem, tensors: dict[str, np.ndarray]) -> np.ndarray:
    """The output of ``problem`` (y forward, dx backward) from logical-shape input arrays."""
    if problem.direction is Pass.FORWARD:
        return activ_forward(problem.desc, tensors["x"])
    shape = problem.lens
    zeros = np.zeros(shape)
    get = {r: tensors.get(r, zeros) for r in ("x", "y", "dy")}
    return activ_backward(problem.desc, get["x"], get["y"], get["dy"])


__all__ = ["activ_backward", "activ_forward", "activ_reference"]


# ---- the pipeline's reference contract (tests/backend/test_registry.py) ----------------------------
def reference(problem: ActivationProblem, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Expected outputs by role (float64, logical shape) from flat stored buffers."""
    descs = problem.tensors()
    given = {r: from_storage(view(buffers[r], descs[r]), descs[r].dtype) for r in problem.inputs}
    return {problem.outputs[0]: activ_reference(problem, given)}


def samples() -> list[ActivationProblem]:
    """Small problems on which every activation solver runs: packed with a vector tail, channels-
    last half types, and strided tensors (only the strided solvers take those)."""
    from miopy.problem.activation import ActivationDesc
    from miopy.tensor import TensorDesc

    out = []
    for direction in "FB":
        out.append(
            ActivationProblem.create(ActivationDesc("ELU", 0.5), TensorDesc("fp32", (2, 3, 5, 7)), direction)
        )
        out.append(
            ActivationProblem.create(
                ActivationDesc("LOGISTIC"), TensorDesc("fp16", (2, 8, 3, 5), layout="NHWC"), direction
            )
        )
        strided = TensorDesc("bf16", (2, 3, 4, 5), strides=(100, 30, 6, 1))
        out.append(ActivationProblem.create(ActivationDesc("TANH", 0.5, 1.5), strided, direction))
    return out
