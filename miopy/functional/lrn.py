"""Local response normalisation: ``local_response_norm`` with PyTorch's arguments (size, alpha,
beta, k), the pair ``lrn_forward`` / ``lrn_grad`` that ``miopy.torch`` builds its autograd from.

MIOpen's cross-channel LRN is y = x * (k + alpha / size * sum of x^2 over a window of ``size``
channels)^-beta, as PyTorch's. The window starts (size - 1) // 2 channels before c in MIOpen,
size // 2 in PyTorch: the same for an odd ``size`` (what every network uses); for an even size
MIOpen's window is one channel later than PyTorch's, and miopy computes MIOpen's.
``mode="within"`` is MIOpen's within-channel LRN (a size x size window in each channel's image,
divided by the window's area; PyTorch has none) and takes 4-D arrays only.

Inputs are (N, C, L), (N, C, H, W) or (N, C, D, H, W) (cross-channel: D and H read as one dim,
a copy only when the strides do not allow it) in any memory order; outputs take the input's
strides. MIOpen's backward reads x, y and the scale the forward pass saved.
"""

from __future__ import annotations

from typing import Any

from miopy.errors import bad
from miopy.functional import arrays, core
from miopy.handle import Handle
from miopy.problem.lrn import LRNMode, LRNProblem


def _mode(mode: str) -> LRNMode:
    if str(mode).lower() not in ("cross", "within"):
        raise bad("mode", mode, "expected 'cross' (PyTorch's LRN) or 'within' (MIOpen's within-channel)")
    return LRNMode.CROSS_CHANNEL if str(mode).lower() == "cross" else LRNMode.WITHIN_CHANNEL


def _input(input: Any, mode: LRNMode, field: str = "input") -> arrays.Operand:
    """The input as a dense NdDesc operand whose strides ``_image`` can read as 4-D."""
    x = arrays.nd_operand(input, field)
    lens, strides = x.desc.lens, x.desc.strides
    rank = (4,) if mode is LRNMode.WITHIN_CHANNEL else (3, 4, 5)
    if len(lens) not in rank:
        raise bad(
            field, f"array of shape {lens}", f"expected {' or '.join(map(str, rank))} dims for {mode.name}"
        )
    if len(lens) == 5 and lens[3] > 1 and strides[2] != lens[3] * strides[3]:
        x = arrays.row_major_op(x, field)  # D and H cannot be read as one dim in place
    return x


def _image(op: arrays.Operand, like: arrays.Operand, field: str) -> arrays.Operand:
    """``op`` (of ``like``'s shape and strides) read as the 4-D image LRN takes."""
    lens, strides = like.desc.lens, like.desc.strides
    if len(lens) == 3:
        lens, strides = (*lens, 1), (*strides, 1)
    elif len(lens) == 5:
        lens = (lens[0], lens[1], lens[2] * lens[3], lens[4])
        strides = (strides[0], strides[1], strides[3], strides[4])
    return arrays.as_image(op, lens, strides, field)


def _output(like: arrays.Operand, field: str) -> tuple[Any, arrays.Operand]:
    out = arrays.empty_nd(like, like.desc.lens, like.desc.strides)
    return out, _image(arrays.nd_operand(out, field, dense=False), like, field)


def _desc(size: int, alpha: float, beta: float, k: float) -> tuple:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise bad("size", size, "expected a positive integer (the window's channels)")
    return (size, float(alpha), float(beta), float(k))


def lrn_forward(
    input: Any,
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
    mode: str = "cross",
    save_scale: bool = False,
    *,
    handle: Handle | None = None,
) -> tuple[Any, Any]:
    """(y, scale): with ``save_scale`` the scale (k + alpha / size * sum x^2, MIOpen's
    workspace) that ``lrn_grad`` reads, else None."""
    lmode = _mode(mode)
    desc = _desc(size, alpha, beta, k)
    x = _input(input, lmode)
    xi = _image(x, x, "input")
    h = core.handle_for([x], handle)
    key = ("lrn", "F", lmode, desc, bool(save_scale), xi.signature())
    made = core.plan(h, key, lambda: LRNProblem.create(xi.desc, lmode, *desc, "F", bool(save_scale)))
    y, yi = _output(x, "y")
    ops = {"x": xi, "y": yi}
    scale = None
    if save_scale:
        scale, ops["scale"] = _output(x, "scale")
    core.run(h, made, ops)
    return arrays.finish(x, y), (arrays.finish(x, scale) if scale is not None else None)


def local_response_norm(
    input: Any,
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
    *,
    mode: str = "cross",
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.local_response_norm`` (the same for an odd ``size``; see the
    module for an even one and for ``mode="within"``)."""
    return lrn_forward(input, size, alpha, beta, k, mode, handle=handle)[0]


def lrn_grad(
    grad_output: Any,
    input: Any,
    output: Any,
    scale: Any,
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
    mode: str = "cross",
    *,
    handle: Handle | None = None,
) -> Any:
    """dx from dy, x, y and the forward pass's scale (``lrn_forward(..., save_scale=True)``),
    by MIOpen's LRN backward. The result takes the input's memory order."""
    lmode = _mode(mode)
    desc = _desc(size, alpha, beta, k)
    x = _input(input, lmode)
    ops = {"x": _image(x, x, "input")}
    for role, value, field in (
        ("y", output, "output"),
        ("dy", grad_output, "grad_output"),
        ("scale", scale, "scale"),
    ):
        op = arrays.nd_operand(value, field)
        if op.desc.lens != x.desc.lens:
            raise bad(field, f"array of shape {op.desc.lens}", f"expected the input's {x.desc.lens}")
        ops[role] = _image(arrays.with_strides(op, x.desc.strides, field), x, field)
    h = core.handle_for(ops.values(), handle)
    xi = ops["x"]
    key = ("lrn", "B", lmode, desc, xi.signature())
    made = core.plan(h, key, lambda: LRNProblem.create(xi.desc, lmode, *desc, "B"))
    dx, ops["dx"] = _output(x, "dx")
    core.run(h, made, ops)
    return arrays.finish(x, dx)


__all__ = ["local_response_norm", "lrn_forward", "lrn_grad"]
