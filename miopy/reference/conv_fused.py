"""NumPy oracle of the fused conv epilogue (miopy.functional.conv_bias_activation_forward and
the conv kernels' MIOPY_EPI): y = act(alpha * conv(x, w) + bias[k]) + beta * y_old, float64."""

from __future__ import annotations

import numpy as np

from miopy.problem.activation import ActivationDesc
from miopy.problem.conv import ConvProblem
from miopy.reference.activ import activ_forward
from miopy.reference.conv import conv_reference


def conv_bias_activation_reference(
    problem: ConvProblem,
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    activation: ActivationDesc,
    alpha: float = 1.0,
    beta: float = 0.0,
    y_old: np.ndarray | None = None,
) -> np.ndarray:
    """The forward ``problem``'s output from logical-shape x and w (float64, logical shape); a
    ``bias`` of K values (None: none); ``y_old`` is read only where beta != 0."""
    v = alpha * conv_reference(problem, {"x": x, "w": w})
    if bias is not None:
        v = v + np.asarray(bias, np.float64).reshape((1, -1) + (1,) * (v.ndim - 2))
    v = activ_forward(activation, v)
    if beta != 0.0:
        v = v + beta * np.asarray(y_old, np.float64)
    return v


__all__ = ["conv_bias_activation_reference"]
