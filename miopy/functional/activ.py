"""Activations with PyTorch's names (``relu``, ``leaky_relu``, ``elu``, ``sigmoid``, ``tanh``,
``softplus``, ``hardtanh`` with min 0, ``relu6``), the general ``activation`` (any of MIOpen's
modes with its alpha, beta, gamma) and ``activation_grad``. Outputs take the input's kind, device
and memory order."""

from __future__ import annotations

from typing import Any

from miopy.errors import bad
from miopy.functional import arrays, core
from miopy.handle import Handle
from miopy.problem.activation import ActivationDesc, ActivationMode, ActivationProblem
from miopy.problem.passes import Pass
from miopy.tensor import TensorDesc


def _desc(mode, alpha: float, beta: float, gamma: float) -> ActivationDesc:
    return ActivationDesc(mode, alpha, beta, gamma)


def activation(
    input: Any, mode: str | int, alpha: float = 1.0, beta: float = 1.0, gamma: float = 1.0, *, handle=None
) -> Any:
    """y = f(x) for MIOpen's activation ``mode`` (miopy.ActivationMode: name or code)."""
    desc = _desc(mode, alpha, beta, gamma)
    x = arrays.operand(input, "input")
    h = core.handle_for([x], handle)
    key = ("activ", "F", desc, x.signature())
    made = core.plan(h, key, lambda: ActivationProblem.create(desc, x.desc, Pass.FORWARD))
    out = arrays.empty(x, x.desc.lens, made.problem.tensors()["y"].layout)
    core.run(h, made, {"x": x, "y": arrays.operand(out, "y")})
    return arrays.finish(x, out)


def activation_grad(
    grad_output: Any,
    input: Any,
    output: Any,
    mode: str | int,
    alpha: float = 1.0,
    beta: float = 1.0,
    gamma: float = 1.0,
    *,
    handle: Handle | None = None,
) -> Any:
    """dx for y = f(x) and dy = ``grad_output``, MIOpen's gradient of ``mode`` (it reads x, y
    or both, as the mode needs; give both)."""
    desc = _desc(mode, alpha, beta, gamma)
    ops = {
        "dy": arrays.operand(grad_output, "grad_output"),
        "x": arrays.operand(input, "input"),
        "y": arrays.operand(output, "output"),
    }
    h = core.handle_for(ops.values(), handle)
    dy = ops["dy"]
    key = ("activ", "B", desc, tuple((r, op.signature()) for r, op in sorted(ops.items())))

    def build() -> ActivationProblem:
        dx = dy.desc if dy.desc.packed else TensorDesc(dy.desc.dtype, dy.desc.lens)
        return ActivationProblem(desc, Pass.BACKWARD, x=ops["x"].desc, y=ops["y"].desc, dy=dy.desc, dx=dx)

    made = core.plan(h, key, build)
    out = arrays.empty(dy, dy.desc.lens, made.problem.tensors()["dx"].layout)
    core.run(h, made, {**ops, "dx": arrays.operand(out, "dx")})
    return arrays.finish(dy, out)


def relu(input: Any, inplace: bool = False, *, handle: Handle | None = None) -> Any:
    """max(0, x). ``inplace`` is refused (miopy writes a new array)."""
    _not_inplace(inplace)
    return activation(input, ActivationMode.RELU, handle=handle)


def leaky_relu(input: Any, negative_slope: float = 0.01, inplace: bool = False, *, handle=None) -> Any:
    _not_inplace(inplace)
    return activation(input, ActivationMode.LEAKY_RELU, alpha=negative_slope, handle=handle)


def elu(input: Any, alpha: float = 1.0, inplace: bool = False, *, handle: Handle | None = None) -> Any:
    _not_inplace(inplace)
    return activation(input, ActivationMode.ELU, alpha=alpha, handle=handle)


def sigmoid(input: Any, *, handle: Handle | None = None) -> Any:
    return activation(input, ActivationMode.LOGISTIC, handle=handle)


def tanh(input: Any, *, handle: Handle | None = None) -> Any:
    return activation(input, ActivationMode.TANH, alpha=1.0, beta=1.0, handle=handle)


def softplus(input: Any, beta: float = 1.0, threshold: float = 20.0, *, handle=None) -> Any:
    """log(1 + e^x): MIOpen's SOFTRELU, which has no beta (only beta=1) and is exact in fp32
    above PyTorch's threshold (only threshold >= 20)."""
    if beta != 1.0:
        raise bad("beta", beta, "only 1 (MIOpen's SOFTRELU has no beta)")
    if threshold < 20.0:
        raise bad("threshold", threshold, "only >= 20 (MIOpen's SOFTRELU switches to x at 50)")
    return activation(input, ActivationMode.SOFTRELU, handle=handle)


def hardtanh(
    input: Any, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False, *, handle=None
) -> Any:
    """min(max_val, max(min_val, x)) for min_val = 0 (MIOpen's CLIPPED_RELU)."""
    _not_inplace(inplace)
    if min_val != 0.0:
        raise bad("min_val", min_val, "only 0 (MIOpen's CLIPPED_RELU clips at 0 and alpha)")
    return activation(input, ActivationMode.CLIPPED_RELU, alpha=max_val, handle=handle)


def relu6(input: Any, inplace: bool = False, *, handle: Handle | None = None) -> Any:
    return hardtanh(input, 0.0, 6.0, inplace, handle=handle)


def _not_inplace(inplace: bool) -> None:
    if inplace:
        raise bad("inplace", inplace, "miopy writes its result into a new array")


__all__ = [
    "activation",
    "activation_grad",
    "elu",
    "hardtanh",
    "leaky_relu",
    "relu",
    "relu6",
    "sigmoid",
    "softplus",
    "tanh",
]
