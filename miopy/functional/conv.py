"""Convolutions with PyTorch's names and semantics: ``conv2d``, ``conv3d``, ``conv_transpose2d``,
``conv_transpose3d``, and the two gradients (``conv_input_grad``, ``conv_weight_grad``) that
``miopy.torch`` builds its backward pass from.

Arrays are logical N, C, [D,] H, W whatever their memory order; weights are (K, C/groups, ...)
for a convolution and (C, K/groups, ...) for a transposed one, as in PyTorch. The output is a new
array of the input's kind, on its device, in its memory order (a channels_last input gives a
channels_last output).

Every one of them also takes MIOpen's convolution scaling as keywords: ``alpha`` and ``beta``
(defaults 1 and 0) and ``out``, an existing output array of the right shape, kind and data type
that is written in place and returned: out = alpha * result + beta * out (the bias, when given,
is added after). beta != 0 needs ``out``; a non-finite alpha or beta is a BadParm naming it.
JAX arrays are immutable and cannot be ``out``.
"""

from __future__ import annotations

from typing import Any

from miopy.errors import bad
from miopy.functional import arrays, core
from miopy.handle import Handle
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.problem.keys import finite
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


def _scaling(alpha: Any, beta: Any, out: Any) -> dict[str, float] | None:
    """The run-time scalars of alpha / beta (None for the plain 1, 0); beta reads ``out``."""
    a, b = finite("alpha", alpha), finite("beta", beta)
    if b != 0.0 and out is None:
        raise bad("out", None, f"beta={b} blends into the output: give it as out")
    return None if (a, b) == (1.0, 0.0) else {"alpha": a, "beta": b}


def _out_operand(out: Any, like: arrays.Operand) -> arrays.Operand:
    """The caller's output array, written in place: ``like``'s kind and data type."""
    op = arrays.operand(out, "out")
    if op.kind == "jax":
        raise bad("out", "a JAX array", "JAX arrays are immutable: out cannot be written in place")
    if op.kind != like.kind or op.desc.dtype != like.desc.dtype:
        want = f"expected a {like.kind} {like.desc.dtype.value} array"
        raise bad("out", f"{op.kind} {op.desc.dtype.value}", want)
    steps = out.stride() if op.kind == "torch" else tuple(v // out.itemsize for v in out.strides)
    if any(v <= 0 for n, v in zip(out.shape, steps) if n > 1):
        raise bad("out", f"strides {tuple(steps)}", "expected positive strides (it is written in place)")
    return op


def _run_conv(
    direction: Direction,
    ops: dict[str, arrays.Operand],
    out_role: str,
    out_lens: tuple[int, ...] | None,
    params: tuple,
    handle: Handle | None,
    like: arrays.Operand,
    alpha: Any = 1.0,
    beta: Any = 0.0,
    out: Any = None,
) -> Any:
    """Plan (cached) and run one direction; ``ops`` holds the two inputs; the output is made here
    in ``like``'s kind and layout, or is ``out`` (then out = alpha * result + beta * out)."""
    scalars = _scaling(alpha, beta, out)
    h, made, tensors, result = plan_conv(direction, ops, out_role, out_lens, params, handle, like, out)
    core.run(h, made, tensors, scalars)
    return result


def plan_conv(
    direction: Direction,
    ops: dict[str, arrays.Operand],
    out_role: str,
    out_lens: tuple[int, ...] | None,
    params: tuple,
    handle: Handle | None,
    like: arrays.Operand,
    out: Any = None,
) -> tuple[Handle, core.Plan, dict[str, arrays.Operand], Any]:
    """The handle, the cached plan of one direction, the operands by role (the output made here
    in ``like``'s kind and layout, or ``out``) and the output array, nothing run yet."""
    given = None if out is None else _out_operand(out, like)
    if given is not None and out_lens is not None and given.desc.lens != out_lens:
        raise bad("out", f"array of shape {given.desc.lens}", f"expected shape {out_lens}")
    h = core.handle_for([*ops.values(), *([given] if given is not None else [])], handle)
    conv = None

    def build() -> ConvProblem:
        nonlocal conv
        conv = _conv_desc(params)
        d = {r: op.desc for r, op in ops.items()}
        if out_role == "y":
            if given is not None:
                lens = ConvProblem.create(d["x"], d["w"], conv, direction).y.lens
                if lens != given.desc.lens:
                    raise bad("out", f"array of shape {given.desc.lens}", f"expected shape {lens}")
                return ConvProblem.create(d["x"], d["w"], conv, direction, y_strides=given.desc.strides)
            return ConvProblem.create(d["x"], d["w"], conv, direction, y_layout=_out_layout(like))
        if given is not None:
            d[out_role] = given.desc
        else:
            d[out_role] = TensorDesc(like.desc.dtype, out_lens, layout=_out_layout(like))
        return ConvProblem(d["x"], d["w"], d["y"], conv, direction)

    signature = tuple((r, op.signature()) for r, op in sorted(ops.items()))
    out_key = None if given is None else given.signature()
    key = ("conv", direction.value, params, out_lens, signature, out_key)
    made = core.plan(h, key, build)
    desc = made.problem.tensors()[out_role]
    if given is not None:
        result, target = out, given
    else:
        result = arrays.empty(like, desc.lens, desc.layout if desc.packed else _out_layout(like))
        target = arrays.operand(result, out_role)
    tensors = dict(ops)
    tensors[out_role] = target
    return h, made, tensors, result


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


def _forward(dims, input, weight, bias, params, handle, alpha=1.0, beta=0.0, out=None) -> Any:
    x = arrays.operand(input, "input")
    w = arrays.operand(weight, "weight")
    _check_dims("input", x, dims)
    _check_dims("weight", w, dims)
    y = _run_conv(Direction.FORWARD, {"x": x, "w": w}, "y", None, params, handle, x, alpha, beta, out)
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
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """``torch.nn.functional.conv2d`` on NumPy, PyTorch, CuPy or JAX arrays (N, C, H, W)."""
    params = _params(2, stride, padding, dilation, groups)
    return _forward(2, input, weight, bias, params, handle, alpha, beta, out)


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
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """``torch.nn.functional.conv3d`` on NumPy, PyTorch, CuPy or JAX arrays (N, C, D, H, W)."""
    params = _params(3, stride, padding, dilation, groups)
    return _forward(3, input, weight, bias, params, handle, alpha, beta, out)


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
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """``torch.nn.functional.conv_transpose2d``; weight is (C_in, C_out/groups, kH, kW)."""
    params = _params(2, stride, padding, dilation, groups, output_padding, transposed=True)
    return _forward(2, input, weight, bias, params, handle, alpha, beta, out)


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
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """``torch.nn.functional.conv_transpose3d``; weight is (C_in, C_out/groups, kD, kH, kW)."""
    params = _params(3, stride, padding, dilation, groups, output_padding, transposed=True)
    return _forward(3, input, weight, bias, params, handle, alpha, beta, out)


def _grad(
    direction: Direction, ops: dict, out_role: str, size, conv: tuple, handle, like: str, scaling: tuple
) -> Any:
    """One of the two gradients: ``out_role``'s array of shape ``size`` from the two operands,
    in ``ops[like]``'s kind and memory order; ``conv`` is PyTorch's (stride, padding, dilation,
    groups, output_padding, transposed)."""
    params = _params(ops[like].desc.spatial_dims, *conv)
    lens = tuple(int(n) for n in size)
    result = _run_conv(direction, ops, out_role, lens, params, handle, ops[like], *scaling)
    return arrays.finish(ops[like], result)


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
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """The gradient of a (transposed) convolution with respect to its input, shape
    ``input_size`` (``torch.nn.grad.conv2d_input``), by miopy's backward-data solvers. The result
    takes grad_output's kind and memory order."""
    ops = {"w": arrays.operand(weight, "weight"), "y": arrays.operand(grad_output, "grad_output")}
    conv = (stride, padding, dilation, groups, output_padding, transposed)
    return _grad(Direction.BACKWARD_DATA, ops, "x", input_size, conv, handle, "y", (alpha, beta, out))


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
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """The gradient of a (transposed) convolution with respect to its weight, shape
    ``weight_size`` (``torch.nn.grad.conv2d_weight``), by miopy's backward-weights solvers."""
    ops = {"x": arrays.operand(input, "input"), "y": arrays.operand(grad_output, "grad_output")}
    conv = (stride, padding, dilation, groups, output_padding, transposed)
    return _grad(Direction.BACKWARD_WEIGHTS, ops, "w", weight_size, conv, handle, "x", (alpha, beta, out))


__all__ = [
    "conv2d",
    "conv3d",
    "conv_input_grad",
    "conv_transpose2d",
    "conv_transpose3d",
    "conv_weight_grad",
]
