"""Convolutions with PyTorch's names and semantics: ``conv2d``, ``conv3d``, ``conv_transpose2d``,
``conv_transpose3d``, and the two gradients (``conv_input_grad``, ``conv_weight_grad``) that
``miopy.torch`` builds its backward pass from.

Arrays are logical N, C, [D,] H, W whatever their memory order; weights are (K, C/groups, ...)
for a convolution and (C, K/groups, ...) for a transposed one, as in PyTorch. The output is a new
array of the input's kind, on its device, in its memory order (a channels_last input gives a
channels_last output).
"""

from __future__ import annotations

from typing import Any

from miopy.errors import bad
from miopy.functional import arrays, core
from miopy.handle import Handle
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.tensor import TensorDesc


def _ntuple(name: str, value: Any, dims: int) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * dims
    try:
        out = tuple(value)
    except TypeError:
        raise bad(name, value, f"expected an int or {dims} ints") from None
    if len(out) == 1:
        out = out * dims
    if len(out) != dims:
        raise bad(name, value, f"expected an int or {dims} ints")
    return out


def _params(
    dims: int, stride, padding, dilation, groups, output_padding=0, transposed: bool = False
) -> tuple:
    """PyTorch's arguments as a hashable tuple: (pads, strides, dilations, groups, mode,
    output pads, pad mode)."""
    strides = _ntuple("stride", stride, dims)
    dilations = _ntuple("dilation", dilation, dims)
    if isinstance(padding, str):
        pad_mode = padding.lower()
        if pad_mode not in ("same", "valid") or transposed:
            raise bad("padding", padding, "expected 'same', 'valid' or ints (only ints when transposed)")
        if pad_mode == "same" and any(s != 1 for s in strides):
            raise bad("padding", padding, "'same' needs stride 1, as in PyTorch")
        pads = (0,) * dims
    else:
        pad_mode, pads = "default", _ntuple("padding", padding, dims)
    opads = _ntuple("output_padding", output_padding, dims) if transposed else (0,) * dims
    return (pads, strides, dilations, groups, "trans" if transposed else "conv", opads, pad_mode)


def _conv_desc(params: tuple) -> ConvDesc:
    pads, strides, dilations, groups, mode, opads, pad_mode = params
    if mode == "conv" and pad_mode == "same":
        # PyTorch pads d*(k-1) in all, the odd one on the high side; miopy's "same" puts
        # floor(total/2) low and the rest high: the same thing at stride 1.
        return ConvDesc(pads, strides, dilations, groups, mode, None, "same")
    return ConvDesc(pads, strides, dilations, groups, mode, opads if mode == "trans" else None, pad_mode)


def _check_dims(name: str, op: arrays.Operand, dims: int) -> None:
    if op.desc.spatial_dims != dims:
        raise bad(name, f"array of shape {op.desc.lens}", f"expected {dims + 2} dimensions")


def _out_layout(op: arrays.Operand) -> str:
    return op.layout if op.desc.packed else ("NCDHW" if op.desc.spatial_dims == 3 else "NCHW")


def _run_conv(
    direction: Direction,
    ops: dict[str, arrays.Operand],
    out_role: str,
    out_lens: tuple[int, ...] | None,
    params: tuple,
    handle: Handle | None,
    like: arrays.Operand,
) -> Any:
    """Plan (cached) and run one direction; ``ops`` holds the two inputs, the output is made
    here in ``like``'s kind and layout."""
    h = core.handle_for(ops.values(), handle)
    conv = None

    def build() -> ConvProblem:
        nonlocal conv
        conv = _conv_desc(params)
        d = {r: op.desc for r, op in ops.items()}
        if out_role == "y":
            return ConvProblem.create(d["x"], d["w"], conv, direction, y_layout=_out_layout(like))
        out = TensorDesc(like.desc.dtype, out_lens, layout=_out_layout(like))
        d[out_role] = out
        return ConvProblem(d["x"], d["w"], d["y"], conv, direction)

    signature = tuple((r, op.signature()) for r, op in sorted(ops.items()))
    key = ("conv", direction.value, params, out_lens, signature)
    made = core.plan(h, key, build)
    desc = made.problem.tensors()[out_role]
    out = arrays.empty(like, desc.lens, desc.layout if desc.packed else _out_layout(like))
    tensors = dict(ops)
    tensors[out_role] = arrays.operand(out, out_role)
    core.run(h, made, tensors)
    return out


def _add_bias(y: Any, bias: Any, dims: int) -> Any:
    """y += bias over the channel axis, in y's own framework (and on its device)."""
    shape = (1, -1) + (1,) * dims
    kind = arrays.kind_of(y)
    if kind == "torch":
        y.add_(bias.detach().reshape(shape).to(y.dtype))
        return y
    if kind in ("numpy", "cupy"):
        y += bias.reshape(shape).astype(y.dtype)
        return y
    raise bad("bias", type(bias).__name__, f"bias on a {kind} array is not supported")


def _forward(dims, input, weight, bias, params, handle) -> Any:
    x = arrays.operand(input, "input")
    w = arrays.operand(weight, "weight")
    _check_dims("input", x, dims)
    _check_dims("weight", w, dims)
    y = _run_conv(Direction.FORWARD, {"x": x, "w": w}, "y", None, params, handle, x)
    if bias is not None:
        y = _add_bias(y, bias, dims)
    return arrays.finish(x, y)


def conv2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride=1,
    padding: Any = 0,
    dilation=1,
    groups: int = 1,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.conv2d`` on NumPy, PyTorch, CuPy or JAX arrays (N, C, H, W)."""
    return _forward(2, input, weight, bias, _params(2, stride, padding, dilation, groups), handle)


def conv3d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride=1,
    padding: Any = 0,
    dilation=1,
    groups: int = 1,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.conv3d`` on NumPy, PyTorch, CuPy or JAX arrays (N, C, D, H, W)."""
    return _forward(3, input, weight, bias, _params(3, stride, padding, dilation, groups), handle)


def conv_transpose2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.conv_transpose2d``; weight is (C_in, C_out/groups, kH, kW)."""
    params = _params(2, stride, padding, dilation, groups, output_padding, transposed=True)
    return _forward(2, input, weight, bias, params, handle)


def conv_transpose3d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.conv_transpose3d``; weight is (C_in, C_out/groups, kD, kH, kW)."""
    params = _params(3, stride, padding, dilation, groups, output_padding, transposed=True)
    return _forward(3, input, weight, bias, params, handle)


def _grad(direction: Direction, ops: dict, out_role: str, size, conv: tuple, handle, like: str) -> Any:
    """One of the two gradients: ``out_role``'s array of shape ``size`` from the two operands,
    in ``ops[like]``'s kind and memory order; ``conv`` is PyTorch's (stride, padding, dilation,
    groups, output_padding, transposed)."""
    params = _params(ops[like].desc.spatial_dims, *conv)
    lens = tuple(int(n) for n in size)
    out = _run_conv(direction, ops, out_role, lens, params, handle, ops[like])
    return arrays.finish(ops[like], out)


def conv_input_grad(
    input_size,
    weight: Any,
    grad_output: Any,
    stride=1,
    padding: Any = 0,
    dilation=1,
    groups: int = 1,
    output_padding=0,
    transposed: bool = False,
    *,
    handle: Handle | None = None,
) -> Any:
    """The gradient of a (transposed) convolution with respect to its input, shape
    ``input_size`` (``torch.nn.grad.conv2d_input``), by miopy's backward-data solvers. The result
    takes grad_output's kind and memory order."""
    ops = {"w": arrays.operand(weight, "weight"), "y": arrays.operand(grad_output, "grad_output")}
    conv = (stride, padding, dilation, groups, output_padding, transposed)
    return _grad(Direction.BACKWARD_DATA, ops, "x", input_size, conv, handle, like="y")


def conv_weight_grad(
    input: Any,
    weight_size,
    grad_output: Any,
    stride=1,
    padding: Any = 0,
    dilation=1,
    groups: int = 1,
    output_padding=0,
    transposed: bool = False,
    *,
    handle: Handle | None = None,
) -> Any:
    """The gradient of a (transposed) convolution with respect to its weight, shape
    ``weight_size`` (``torch.nn.grad.conv2d_weight``), by miopy's backward-weights solvers."""
    ops = {"x": arrays.operand(input, "input"), "y": arrays.operand(grad_output, "grad_output")}
    conv = (stride, padding, dilation, groups, output_padding, transposed)
    return _grad(Direction.BACKWARD_WEIGHTS, ops, "w", weight_size, conv, handle, like="x")


__all__ = [
    "conv2d",
    "conv3d",
    "conv_input_grad",
    "conv_transpose2d",
    "conv_transpose3d",
    "conv_weight_grad",
]
