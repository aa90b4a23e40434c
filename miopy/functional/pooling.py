"""Pooling with PyTorch's names: ``max_pool2d``, ``max_pool3d``, ``avg_pool2d``, ``avg_pool3d``,
and the gradients ``max_pool_grad`` / ``avg_pool_grad`` (``miopy.torch``'s backward). Windows
are clipped to the image, as PyTorch's padded windows are; ``ceil_mode``, dilation and
``divisor_override`` have no MIOpen equivalent and are refused."""

from __future__ import annotations

import math
from typing import Any

from miopy.errors import bad
from miopy.functional import arrays, core
from miopy.functional.conv import _ntuple
from miopy.handle import Handle
from miopy.problem.passes import Pass
from miopy.problem.pooling import PoolingDesc, PoolingProblem
from miopy.tensor import TensorDesc


def _pool_desc(mode: str, dims: int, kernel_size, stride, padding) -> PoolingDesc:
    window = _ntuple("kernel_size", kernel_size, dims)
    strides = window if stride is None or stride == [] else _ntuple("stride", stride, dims)
    pads = _ntuple("padding", padding, dims)
    for p, k in zip(pads, window):
        if 2 * p > k:
            raise bad("padding", padding, f"at most half the kernel size {window}, as in PyTorch")
    index_type = "u8" if math.prod(window) <= 255 else "u16" if math.prod(window) <= 65535 else "u32"
    return PoolingDesc(mode, window, strides, pads, "default", index_type, "mask")


def _check(ceil_mode: bool, dilation=1, return_indices: bool = False, divisor_override=None) -> None:
    if ceil_mode:
        raise bad("ceil_mode", ceil_mode, "only False (MIOpen's pooling rounds output sizes down)")
    if dilation not in (1, (1, 1), (1, 1, 1), [1, 1], [1, 1, 1]):
        raise bad("dilation", dilation, "only 1 (MIOpen's pooling has no dilation)")
    if return_indices:
        raise bad("return_indices", return_indices, "not supported (miopy.torch keeps its own index)")
    if divisor_override is not None:
        raise bad("divisor_override", divisor_override, "not supported")


def pool_forward(input: Any, desc: PoolingDesc, save_index: bool, handle: Handle | None = None):
    """(y, index or None): y in the input's kind and memory order (packed); ``index`` is the
    max-pooling workspace (an opaque array of the input's kind) that ``pool_grad`` reads, laid
    out like y."""
    x = arrays.operand(input, "input")
    if x.desc.spatial_dims != desc.spatial_dims:
        raise bad("input", f"array of shape {x.desc.lens}", f"expected {desc.spatial_dims + 2} dimensions")
    h = core.handle_for([x], handle)
    key = ("pool", "F", desc, save_index, x.signature())
    layout = x.layout if x.desc.packed else None
    made = core.plan(
        h, key, lambda: PoolingProblem.create(desc, x.desc, Pass.FORWARD, layout, None, save_index)
    )
    tensors = made.problem.tensors()
    out = arrays.empty(x, tensors["y"].lens, tensors["y"].layout)
    ops = {"x": x, "y": arrays.operand(out, "y")}
    index = None
    if "index" in tensors:
        index = arrays.empty_bytes(x, tensors["index"].nbytes)
        ops["index"] = arrays.raw_operand(x, index)
    core.run(h, made, ops)
    return arrays.finish(x, out), index


def pool_grad(
    grad_output: Any,
    input_size,
    desc: PoolingDesc,
    index: Any = None,
    layout: str | None = None,
    *,
    handle: Handle | None = None,
) -> Any:
    """dx (shape ``input_size``) from dy and, for max pooling, the index ``pool_forward`` kept
    with the forward output's memory ``layout`` (the index is laid out like it: dy is copied
    into that layout when it differs)."""
    dy = arrays.operand(grad_output, "grad_output")
    if layout is not None:
        dy = arrays.in_layout(dy, layout, "grad_output")
    h = core.handle_for([dy], handle)
    lens = tuple(int(n) for n in input_size)
    layout = dy.layout if dy.desc.packed else ("NCDHW" if len(lens) == 5 else "NCHW")
    key = ("pool", "B", desc, lens, layout, dy.signature())

    def build() -> PoolingProblem:
        return PoolingProblem(desc, TensorDesc(dy.desc.dtype, lens, layout=layout), dy.desc, Pass.BACKWARD)

    made = core.plan(h, key, build)
    out = arrays.empty(dy, lens, layout)
    ops = {"dy": dy, "dx": arrays.operand(out, "dx")}
    if "index" in made.problem.tensors():
        if index is None:
            raise bad("index", None, "max pooling's gradient needs the index its forward pass kept")
        ops["index"] = arrays.raw_operand(dy, index)
    core.run(h, made, ops)
    return arrays.finish(dy, out)


def layout_of(array: Any) -> str:
    """The memory layout of an output ``pool_forward`` made (what ``pool_grad``'s layout is)."""
    return arrays.operand(array, "output").layout


def _pool(mode: str, dims: int, input, kernel_size, stride, padding, handle) -> Any:
    y, _ = pool_forward(input, _pool_desc(mode, dims, kernel_size, stride, padding), False, handle)
    return y


def max_pool2d(
    input: Any,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.max_pool2d`` (no dilation, no ceil_mode, no return_indices)."""
    _check(ceil_mode, dilation, return_indices)
    return _pool("max", 2, input, kernel_size, stride, padding, handle)


def max_pool3d(
    input: Any,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.max_pool3d`` (no dilation, no ceil_mode, no return_indices)."""
    _check(ceil_mode, dilation, return_indices)
    return _pool("max", 3, input, kernel_size, stride, padding, handle)


def avg_pool2d(
    input: Any,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.avg_pool2d``: ``count_include_pad`` picks MIOpen's AVG_INCLUSIVE
    (divide by the window) or AVG (divide by the window's part inside the image)."""
    _check(ceil_mode, divisor_override=divisor_override)
    mode = "avg_in" if count_include_pad else "avg"
    return _pool(mode, 2, input, kernel_size, stride, padding, handle)


def avg_pool3d(
    input: Any,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
    *,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.avg_pool3d`` (see ``avg_pool2d``)."""
    _check(ceil_mode, divisor_override=divisor_override)
    mode = "avg_in" if count_include_pad else "avg"
    return _pool(mode, 3, input, kernel_size, stride, padding, handle)


__all__ = [
    "avg_pool2d",
    "avg_pool3d",
    "max_pool2d",
    "max_pool3d",
    "pool_forward",
    "layout_of",
    "pool_grad",
]
