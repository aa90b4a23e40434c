"""Batch normalisation with PyTorch's names: ``batch_norm`` (``torch.nn.functional.batch_norm``:
training with the running statistics updated in place, or inference from them), and the pair
``batch_norm_forward`` / ``batch_norm_grad`` that ``miopy.torch`` builds its autograd from.

Inputs are (N, C), (N, C, L), (N, C, H, W) or (N, C, D, H, W) in any memory order. ``spatial``
(the default, PyTorch's batch norm) keeps one mean and variance per channel, over N and the
spatial dims; ``spatial=False`` is MIOpen's per-activation mode, one per (C, [D,] H, W) element,
over N (weights and statistics then have shape (C, [D,] H, W)).

The running statistics follow PyTorch: ``r = (1 - momentum) * r + momentum * stat``, the variance
unbiased by n / (n - 1); PyTorch's ``momentum`` is MIOpen's exponential-average factor. It is
passed to the kernels at run time, so a new momentum (a cumulative average's 1 / steps) runs the
same plan.
"""

from __future__ import annotations

import math
from typing import Any

from miopy.errors import bad
from miopy.functional import arrays, core
from miopy.handle import Handle
from miopy.problem.bnorm import BatchNormMode, BatchNormProblem, BnPass
from miopy.tensor import DataType, TensorDesc


def _image(input: Any, field: str) -> tuple[arrays.Operand, tuple[int, ...]]:
    """The input as an image operand ((N, C) and (N, C, L) get trailing 1s) and its own shape."""
    shape = tuple(int(n) for n in getattr(input, "shape", ()))
    if not 2 <= len(shape) <= 5:
        raise bad(field, f"array of shape {shape}", "expected 2 to 5 dimensions (N, C, ...)")
    lens = shape + (1,) * (4 - len(shape)) if len(shape) < 4 else shape
    return arrays.image_operand(input, field, lens), shape


def _packed_layout(op: arrays.Operand) -> str:
    return op.layout if op.desc.packed else ("NCDHW" if len(op.desc.lens) == 5 else "NCHW")


def _row_major(op: arrays.Operand, mode: BatchNormMode, field: str) -> arrays.Operand:
    """Per-activation statistics are laid out like x: a channels-last x is read row-major (a
    copy), so that weights of shape (C, H, W) index them."""
    if mode is BatchNormMode.PER_ACTIVATION and op.desc.packed and op.layout[1] != "C":
        return arrays.in_layout(op, "NCDHW" if len(op.desc.lens) == 5 else "NCHW", field)
    return op


def _param_shape(shape: tuple[int, ...], mode: BatchNormMode) -> tuple[int, ...]:
    """(C,) spatial, else the input's shape less N."""
    return (shape[1],) if mode is BatchNormMode.SPATIAL else tuple(shape[1:])


def _params(x, shape, mode, count, weight, bias, pdt, field_w="weight", field_b="bias"):
    shape = _param_shape(shape, mode)
    w = arrays.vector(weight, field_w, count) if weight is not None else None
    b = arrays.vector(bias, field_b, count) if bias is not None else None
    if pdt is None:
        pdt = w.desc.dtype if w is not None else b.desc.dtype if b is not None else DataType.FP32
    if w is None:
        w = arrays.vector(arrays.full(x, shape, 1.0, pdt), field_w, count)
    if b is None:
        b = arrays.vector(arrays.full(x, shape, 0.0, pdt), field_b, count)
    return w, b, pdt


def _back(op: arrays.Operand, out: Any, shape: tuple[int, ...], layout: str) -> Any:
    """The output in the input's memory order and shape, in the caller's kind."""
    made = arrays.operand(out, "y")
    if made.layout != layout:
        out = arrays.in_layout(made, layout, "y").array
    if tuple(out.shape) != shape:
        out = out.reshape(shape)
    return arrays.finish(op, out)


def batch_norm_forward(
    input: Any,
    running_mean: Any = None,
    running_var: Any = None,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    spatial: bool = True,
    save: bool = False,
    *,
    handle: Handle | None = None,
) -> tuple[Any, Any, Any]:
    """(y, saved_mean, saved_inv_var): the training pass (``training``, statistics of the batch;
    the running ones, when given, updated in place with ``momentum``) or the inference pass
    (normalised by ``running_mean`` / ``running_var``). With ``save`` (training) the batch mean
    and 1 / sqrt(var + eps) are returned for ``batch_norm_grad``, else None."""
    mode = BatchNormMode.SPATIAL if spatial else BatchNormMode.PER_ACTIVATION
    x0, shape = _image(input, "input")
    x = _row_major(x0, mode, "input")
    pshape = _param_shape(shape, mode)
    count = math.prod(pshape)
    if (running_mean is None) != (running_var is None):
        raise bad("running_var" if running_var is None else "running_mean", None, "give both or neither")
    if not training and running_mean is None:
        raise bad("running_mean", None, "inference (training=False) normalises by the running statistics")
    stats = {}
    if running_mean is not None:
        writable = bool(training)
        stats = {
            "mean": arrays.vector(running_mean, "running_mean", count, writable),
            "var": arrays.vector(running_var, "running_var", count, writable),
        }
    pdt = stats["mean"].desc.dtype if stats else None
    w, b, pdt = _params(x, shape, mode, count, weight, bias, pdt)
    direction = BnPass.TRAINING if training else BnPass.INFERENCE
    running = bool(training and stats)
    save = bool(save and training)
    factor = float(momentum)
    if not 0.0 <= factor <= 1.0:
        raise bad("momentum", momentum, "expected a number in [0, 1]")
    layout = _packed_layout(x)
    h = core.handle_for([x, w, b, *stats.values()], handle)
    key = ("bnorm", direction.value, mode, save, running, float(eps), pdt, x.signature())

    def build() -> BatchNormProblem:
        y = TensorDesc(x.desc.dtype, x.desc.lens, layout=layout)
        return BatchNormProblem(mode, direction, x.desc, y, pdt, save, running, eps, 1.0)

    made = core.plan(h, key, build)
    y = arrays.empty(x, x.desc.lens, layout)
    ops = {"x": x, "scale": w, "bias": b, "y": arrays.operand(y, "y")}
    if direction is BnPass.INFERENCE:
        ops.update(estimated_mean=stats["mean"], estimated_var=stats["var"])
    if running:
        ops.update(running_mean=stats["mean"], running_var=stats["var"])
    saved = (None, None)
    if save:
        saved = (arrays.empty_nd(x, pshape, None, pdt), arrays.empty_nd(x, pshape, None, pdt))
        ops.update(
            saved_mean=arrays.vector(saved[0], "saved_mean", count),
            saved_inv_var=arrays.vector(saved[1], "saved_inv_var", count),
        )
    core.run(h, made, ops, {"exp_avg_factor": factor} if running else None)
    out = _back(x0, y, shape, _packed_layout(x0))
    return out, *(arrays.finish(x0, s) if s is not None else None for s in saved)


def batch_norm(
    input: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    *,
    spatial: bool = True,
    handle: Handle | None = None,
) -> Any:
    """``torch.nn.functional.batch_norm``: y = (x - mean) / sqrt(var + eps) * weight + bias, with
    the batch's statistics when ``training`` (``running_mean`` / ``running_var``, when not None,
    updated in place: they must be packed arrays of the input's kind, not JAX arrays) and the
    running ones otherwise. ``spatial=False``: MIOpen's per-activation mode (see the module)."""
    y, _, _ = batch_norm_forward(
        input, running_mean, running_var, weight, bias, training, momentum, eps, spatial, handle=handle
    )
    return y


def batch_norm_grad(
    grad_output: Any,
    input: Any,
    weight: Any = None,
    saved_mean: Any = None,
    saved_inv_var: Any = None,
    eps: float = 1e-5,
    spatial: bool = True,
    *,
    handle: Handle | None = None,
) -> tuple[Any, Any, Any]:
    """(grad_input, grad_weight, grad_bias) of a training pass, by MIOpen's batch norm backward:
    from the statistics the forward pass saved (``batch_norm_forward(..., save=True)``), or
    recomputed from ``input`` when they are None. grad_weight / grad_bias have the weights'
    shape and data type (fp32 when ``weight`` is None)."""
    mode = BatchNormMode.SPATIAL if spatial else BatchNormMode.PER_ACTIVATION
    x0, shape = _image(input, "input")
    dy0, dshape = _image(grad_output, "grad_output")
    if dshape != shape:
        raise bad("grad_output", f"array of shape {dshape}", f"expected the input's shape {shape}")
    x = _row_major(x0, mode, "input")
    dy = _row_major(dy0, mode, "grad_output")
    pshape = _param_shape(shape, mode)
    count = math.prod(pshape)
    save = saved_mean is not None
    if save != (saved_inv_var is not None):
        raise bad("saved_inv_var" if save else "saved_mean", None, "give both or neither")
    stats = {}
    if save:
        stats = {
            "saved_mean": arrays.vector(saved_mean, "saved_mean", count),
            "saved_inv_var": arrays.vector(saved_inv_var, "saved_inv_var", count),
        }
    pdt = stats["saved_mean"].desc.dtype if stats else None
    w, _, pdt = _params(x, shape, mode, count, weight, None, pdt)
    layout = _packed_layout(dy)
    h = core.handle_for([x, dy, w, *stats.values()], handle)
    key = ("bnorm", "B", mode, save, float(eps), pdt, x.signature(), dy.signature())

    def build() -> BatchNormProblem:
        out = TensorDesc(dy.desc.dtype, dy.desc.lens, layout=layout)
        return BatchNormProblem(mode, BnPass.BACKWARD, x.desc, out, pdt, save, False, eps)

    made = core.plan(h, key, build)
    if made.problem.data != dy.desc:  # a strided dy: copied packed (dy and dx share one descriptor)
        dy = arrays.in_layout(dy, layout, "grad_output")
    dx = arrays.empty(dy, dy.desc.lens, layout)
    dw, db = arrays.empty_nd(x, pshape, None, pdt), arrays.empty_nd(x, pshape, None, pdt)
    ops = {"x": x, "dy": dy, "scale": w, **stats, "dx": arrays.operand(dx, "dx")}
    ops.update(dscale=arrays.vector(dw, "dscale", count), dbias=arrays.vector(db, "dbias", count))
    core.run(h, made, ops)
    grad = _back(dy0, dx, shape, _packed_layout(dy0))
    return grad, arrays.finish(x0, dw), arrays.finish(x0, db)


__all__ = ["batch_norm", "batch_norm_forward", "batch_norm_grad"]
