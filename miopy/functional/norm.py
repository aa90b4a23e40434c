"""Layer norm and group norm with PyTorch's names: ``layer_norm`` (``torch.nn.functional.
layer_norm``) and ``group_norm`` (``torch.nn.functional.group_norm``), with the forward / gradient
pairs (``layer_norm_forward`` / ``layer_norm_grad``, ``group_norm_forward`` / ``group_norm_grad``)
that ``miopy.torch`` builds its autograd from.

Inputs of any memory order are read in place (a channels-last tensor stays channels-last; only an
array with gaps, such as a slice, is copied packed first); outputs and gradients take the input's
strides. Weight and bias take the input's data type (MIOpen's layer and group norm have no mixed
precision); when only one of them is given the other is ones or zeros. The forward pass also gives
the mean and 1 / sqrt(var + eps) per normalised group, in the input's data type, which the
gradient reads.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from miopy.errors import bad
from miopy.functional import arrays, core
from miopy.handle import Handle
from miopy.problem.layernorm import GroupNormProblem, LayerNormProblem
from miopy.problem.nd import NdDesc
from miopy.problem.passes import Pass


def _affine(x: arrays.Operand, shape, count: int, weight: Any, bias: Any, names=("weight", "bias")):
    """(weight, bias) operands of x's data type, or (None, None) when neither is given."""
    if weight is None and bias is None:
        return None, None
    ops = []
    for value, fill, name in ((weight, 1.0, names[0]), (bias, 0.0, names[1])):
        if value is None:
            value = arrays.full(x, shape, fill, x.desc.dtype)
        op = arrays.vector(value, name, count)
        if op.desc.dtype != x.desc.dtype:
            raise bad(f"{name}.dtype", op.desc.dtype.value, f"must be the input's {x.desc.dtype.value}")
        ops.append(op)
    return tuple(ops)


def _forward(primitive, make, x: arrays.Operand, weight, bias, wshape, eps, handle, extra=()):
    """Plan and run a forward pass: (y with x's strides, mean, rstd) as raw arrays."""
    count = math.prod(wshape)
    w, b = _affine(x, wshape, count, weight, bias)
    mode = 0 if w is None else 1
    h = core.handle_for([x, *((w, b) if w is not None else ())], handle)
    key = (primitive, "F", *extra, mode, float(eps), x.signature())
    made = core.plan(h, key, lambda: make(x.desc, mode, Pass.FORWARD))
    t = made.problem.tensors()
    y = arrays.empty_nd(x, x.desc.lens, x.desc.strides)
    mean, rstd = (arrays.empty_nd(x, t["mean"].lens) for _ in range(2))
    ops = {"x": x, "y": arrays.nd_operand(y, "y", dense=False)}
    ops.update(mean=arrays.vector(mean, "mean", t["mean"].element_count))
    ops.update(rstd=arrays.vector(rstd, "rstd", t["rstd"].element_count))
    if w is not None:
        ops.update(weight=w, bias=b)
    core.run(h, made, ops)
    return y, mean, rstd


def _grad(primitive, make, x, dy, weight, mean, rstd, affine, wshape, eps, handle, extra=()):
    """Plan and run a backward pass: (dx with x's strides, dweight, dbias) as raw arrays."""
    count = math.prod(wshape)
    dy = arrays.with_strides(dy, x.desc.strides, "grad_output")
    mode = 1 if affine or weight is not None else 0
    w = _affine(x, wshape, count, weight, None)[0] if mode else None
    h = core.handle_for([x, dy], handle)
    key = (primitive, "B", *extra, mode, float(eps), x.signature())
    made = core.plan(h, key, lambda: make(x.desc, mode, Pass.BACKWARD))
    t = made.problem.tensors()
    ops = {"x": x, "dy": dy}
    ops.update(mean=arrays.vector(mean, "mean", t["mean"].element_count))
    ops.update(rstd=arrays.vector(rstd, "rstd", t["rstd"].element_count))
    dx = arrays.empty_nd(x, x.desc.lens, x.desc.strides)
    ops["dx"] = arrays.nd_operand(dx, "dx", dense=False)
    dw = db = None
    if mode:
        dw, db = arrays.empty_nd(x, wshape), arrays.empty_nd(x, wshape)
        ops.update(weight=w, dweight=arrays.vector(dw, "dweight", count))
        ops["dbias"] = arrays.vector(db, "dbias", count)
    core.run(h, made, ops)
    return dx, dw, db


# ---- layer norm ----------------------------------------------------------------------------------
def _normalized(x: arrays.Operand, normalized_shape) -> tuple[int, tuple[int, ...]]:
    """(the first normalised dim, normalized_shape as a tuple)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    lens = x.desc.lens
    if not shape or len(shape) > len(lens) or tuple(lens[len(lens) - len(shape) :]) != shape:
        raise bad("normalized_shape", normalized_shape, f"must be the last dims of the input's {lens}")
    return len(lens) - len(shape), shape


def layer_norm_forward(
    input: Any, normalized_shape, weight: Any = None, bias: Any = None, eps: float = 1e-5, *, handle=None
) -> tuple[Any, Any, Any]:
    """(y, mean, rstd): ``layer_norm`` with its statistics, of shape input.shape[:-len(
    normalized_shape)] (or (1,) when every dim is normalised)."""
    x = arrays.nd_operand(input, "input")
    dim, shape = _normalized(x, normalized_shape)

    def make(desc, mode, direction):
        return LayerNormProblem(desc, dim, eps, mode, direction)

    y, mean, rstd = _forward("layernorm", make, x, weight, bias, shape, eps, handle, (dim,))
    return tuple(arrays.finish(x, a) for a in (y, mean, rstd))


def layer_norm(
    input: Any,
    normalized_shape,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.layer_norm``: normalise over the last ``len(normalized_shape)``
    dims, y = (x - mean) / sqrt(var + eps) * weight + bias (weight and bias of shape
    ``normalized_shape``, optional)."""
    return layer_norm_forward(input, normalized_shape, weight, bias, eps, handle=handle)[0]


def layer_norm_grad(
    grad_output: Any,
    input: Any,
    normalized_shape,
    weight: Any,
    mean: Any,
    rstd: Any,
    eps: float = 1e-5,
    affine: bool | None = None,
    *,
    handle: Handle | None = None,
) -> tuple[Any, Any, Any]:
    """(grad_input, grad_weight, grad_bias) from the forward pass's mean and rstd; the weight
    gradients are None unless the layer is ``affine`` (default: ``weight`` is given)."""
    x = arrays.nd_operand(input, "input")
    dy = arrays.nd_operand(grad_output, "grad_output")
    dim, shape = _normalized(x, normalized_shape)

    def make(desc, mode, direction):
        return LayerNormProblem(desc, dim, eps, mode, direction)

    out = _grad("layernorm", make, x, dy, weight, mean, rstd, bool(affine), shape, eps, handle, (dim,))
    return tuple(arrays.finish(x, a) if a is not None else None for a in out)


# ---- group norm ----------------------------------------------------------------------------------
def _group_input(input: Any, field: str) -> tuple[arrays.Operand, tuple[int, ...]]:
    """(N, C, spatial...) with 1 to 3 spatial dims; an (N, C) array is read as (N, C, 1)."""
    x = arrays.nd_operand(input, field)
    lens = x.desc.lens
    if not 2 <= len(lens) <= 5:
        raise bad(field, f"array of shape {lens}", "expected (N, C) or (N, C, 1 to 3 spatial dims)")
    if len(lens) == 2:
        desc = NdDesc(x.desc.dtype, (*lens, 1), (*x.desc.strides, 1))
        x = dataclasses.replace(x, desc=desc)
    return x, lens


def _reshaped(like: arrays.Operand, a: Any, shape: tuple[int, ...]) -> Any:
    return arrays.finish(like, a if tuple(a.shape) == shape else a.reshape(shape))


def group_norm_forward(
    input: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5, *, handle=None
) -> tuple[Any, Any, Any]:
    """(y, mean, rstd): ``group_norm`` with its statistics, of shape (N, num_groups)."""
    x, shape = _group_input(input, "input")

    def make(desc, mode, direction):
        return GroupNormProblem(desc, num_groups, eps, mode, direction)

    y, mean, rstd = _forward("groupnorm", make, x, weight, bias, (shape[1],), eps, handle, (num_groups,))
    return _reshaped(x, y, shape), arrays.finish(x, mean), arrays.finish(x, rstd)


def group_norm(
    input: Any,
    num_groups: int,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.group_norm``: the C channels in ``num_groups`` groups, each image's
    group normalised over its channels and spatial dims; weight and bias of shape (C,)."""
    return group_norm_forward(input, num_groups, weight, bias, eps, handle=handle)[0]


def group_norm_grad(
    grad_output: Any,
    input: Any,
    num_groups: int,
    weight: Any,
    mean: Any,
    rstd: Any,
    eps: float = 1e-5,
    affine: bool | None = None,
    *,
    handle: Handle | None = None,
) -> tuple[Any, Any, Any]:
    """(grad_input, grad_weight, grad_bias) from the forward pass's mean and rstd; the weight
    gradients are None unless the layer is ``affine`` (default: ``weight`` is given)."""
    x, shape = _group_input(input, "input")
    dy, dshape = _group_input(grad_output, "grad_output")
    if dshape != shape:
        raise bad("grad_output", f"array of shape {dshape}", f"expected the input's shape {shape}")

    def make(desc, mode, direction):
        return GroupNormProblem(desc, num_groups, eps, mode, direction)

    dx, dw, db = _grad(
        "groupnorm", make, x, dy, weight, mean, rstd, bool(affine), (shape[1],), eps, handle, (num_groups,)
    )
    return _reshaped(x, dx, shape), *(arrays.finish(x, a) if a is not None else None for a in (dw, db))


__all__ = [
    "group_norm",
    "group_norm_forward",
    "group_norm_grad",
    "layer_norm",
    "layer_norm_forward",
    "layer_norm_grad",
]
