"""Softmax with PyTorch's names: ``softmax`` and ``log_softmax`` over one ``dim``, and
``softmax_grad`` (their backward, MIOpen's softmax backward).

MIOpen normalises either over C at each (n, [d,] h, w) (CHANNEL mode) or over C, [D,] H, W of each
image (INSTANCE mode). PyTorch's ``dim`` maps onto CHANNEL mode: dim 1 of a 4-D or 5-D array
directly, in any memory order (a channels-last tensor is read in place); any other dim of any
rank by reading the array row-major as (outer, dim, inner, 1), which is a copy only when the array
is not already row-major. ``mode="instance"`` (with no ``dim``) is MIOpen's INSTANCE mode, over
everything but N of a 4-D or 5-D array (``torch.softmax(x.flatten(1), 1)``).
"""

from __future__ import annotations

import math
from typing import Any

from miopy.errors import bad
from miopy.functional import arrays, core
from miopy.handle import Handle
from miopy.problem.passes import Pass
from miopy.problem.softmax import SoftmaxAlgorithm, SoftmaxMode, SoftmaxProblem


def _mode(mode: str | None, dim: int | None, rank: int) -> tuple[SoftmaxMode, int | None]:
    """(MIOpen's mode, the normalised dim or None)."""
    name = "channel" if mode is None else str(mode).lower()
    if name == "instance":
        if dim is not None:
            raise bad("dim", dim, "mode='instance' normalises over every dim but N: give no dim")
        if rank not in (4, 5):
            raise bad("input", f"{rank}-d array", "mode='instance' takes a 4-D or 5-D array")
        return SoftmaxMode.INSTANCE, None
    if name != "channel":
        raise bad("mode", mode, "expected 'channel' (PyTorch's dim) or 'instance'")
    if dim is None or isinstance(dim, bool) or not isinstance(dim, int):
        raise bad("dim", dim, "expected the dim to normalise over (an int), as PyTorch needs")
    if not -rank <= dim < rank:
        raise bad("dim", dim, f"out of range for a {rank}-d array")
    return SoftmaxMode.CHANNEL, dim % rank


def _image(op: arrays.Operand, mode: SoftmaxMode, dim: int | None, field: str):
    """(the operand MIOpen's softmax reads, the strides its outputs take): the array itself when
    its dim is C (or in instance mode), else the row-major array as (outer, dim, inner, 1)."""
    lens = op.desc.lens
    if mode is SoftmaxMode.INSTANCE or (len(lens) in (4, 5) and dim == 1):
        return arrays.as_image(op, lens, op.desc.strides, field), op.desc.strides
    op = arrays.row_major_op(op, field)
    view = (math.prod(lens[:dim]), lens[dim], math.prod(lens[dim + 1 :]), 1)
    return arrays.as_image(op, view, (view[1] * view[2], view[2], 1, 1), field), op.desc.strides


def _like(array: Any, image: arrays.Operand, field: str) -> arrays.Operand:
    """An output made with the strides ``_image`` gave, read as ``image`` is."""
    return arrays.as_image(
        arrays.nd_operand(array, field, dense=False), image.desc.lens, image.desc.strides, field
    )


def _plan(h, direction, algorithm, mode, image: arrays.Operand):
    key = ("softmax", direction.value, algorithm, mode, image.signature())
    return core.plan(h, key, lambda: SoftmaxProblem.create(image.desc, direction, algorithm, mode))


def _forward(input: Any, dim, algorithm: SoftmaxAlgorithm, mode, dtype, handle) -> Any:
    if dtype is not None:
        raise bad("dtype", dtype, "not supported: cast the input first (miopy computes in its type)")
    x = arrays.nd_operand(input, "input")
    mode, dim = _mode(mode, dim, len(x.desc.lens))
    xi, strides = _image(x, mode, dim, "input")
    h = core.handle_for([x], handle)
    made = _plan(h, Pass.FORWARD, algorithm, mode, xi)
    y = arrays.empty_nd(x, x.desc.lens, strides)
    core.run(h, made, {"x": xi, "y": _like(y, xi, "y")})
    return arrays.finish(x, y)


def softmax(
    input: Any, dim: int | None = None, *, dtype=None, mode: str | None = None, handle: Handle | None = None
) -> Any:
    """``torch.nn.functional.softmax``: exp(x) / sum(exp(x)) over ``dim`` (MIOpen's ACCURATE
    algorithm: the maximum is subtracted first). ``mode="instance"``: over all dims but N."""
    return _forward(input, dim, SoftmaxAlgorithm.ACCURATE, mode, dtype, handle)


def log_softmax(
    input: Any, dim: int | None = None, *, dtype=None, mode: str | None = None, handle: Handle | None = None
) -> Any:
    """``torch.nn.functional.log_softmax``: x - max - log(sum(exp(x - max))) over ``dim``
    (MIOpen's LOG algorithm)."""
    return _forward(input, dim, SoftmaxAlgorithm.LOG, mode, dtype, handle)


def softmax_grad(
    grad_output: Any,
    output: Any,
    dim: int | None = None,
    log: bool = False,
    *,
    mode: str | None = None,
    handle: Handle | None = None,
) -> Any:
    """The input gradient of ``softmax`` (``log=False``: y * (dy - sum(y * dy))) or of
    ``log_softmax`` (``log=True``: dy - exp(y) * sum(dy)) from its ``output`` y. The result
    takes y's memory order."""
    y = arrays.nd_operand(output, "output")
    dy = arrays.nd_operand(grad_output, "grad_output")
    if dy.desc.lens != y.desc.lens:
        raise bad("grad_output", f"array of shape {dy.desc.lens}", f"expected the output's {y.desc.lens}")
    mode, dim = _mode(mode, dim, len(y.desc.lens))
    yi, strides = _image(y, mode, dim, "output")
    dy = arrays.with_strides(dy, strides, "grad_output")
    dyi = arrays.as_image(dy, yi.desc.lens, yi.desc.strides, "grad_output")
    algorithm = SoftmaxAlgorithm.LOG if log else SoftmaxAlgorithm.ACCURATE
    h = core.handle_for([y, dy], handle)
    made = _plan(h, Pass.BACKWARD, algorithm, mode, yi)
    dx = arrays.empty_nd(y, y.desc.lens, strides)
    core.run(h, made, {"y": yi, "dy": dyi, "dx": _like(dx, yi, "dx")})
    return arrays.finish(y, dx)


__all__ = ["log_softmax", "softmax", "softmax_grad"]
