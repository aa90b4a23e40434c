"""The normalisation layers of ``miopy.torch`` (re-exported there): ``BatchNorm1d/2d/3d``,
``Softmax``, ``LogSoftmax``, ``LayerNorm``, ``GroupNorm``, ``LocalResponseNorm``, and the autograd
Functions underneath.

Each module subclasses its ``torch.nn`` namesake (same arguments, parameters, buffers and
``state_dict``) and computes forward and backward with miopy's solvers: batch norm's training
pass and its backward, softmax's and LRN's forward and backward, layer and group norm's forward
and backward (weight and bias gradients included). Batch norm in eval mode normalises with the
running statistics by MIOpen's inference pass; its gradient (only needed when a frozen network is
fine-tuned) is the elementwise dy * weight / sqrt(running_var + eps), computed by PyTorch, since
MIOpen has no inference backward.

The running statistics follow PyTorch exactly: ``momentum`` is MIOpen's exponential-average
factor (``momentum=None``: the cumulative average, factor 1 / num_batches_tracked), the running
variance is unbiased, and ``num_batches_tracked`` counts the training steps.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from miopy.functional import bnorm as fbn
from miopy.functional import lrn as flrn
from miopy.functional import norm as fnorm
from miopy.functional import softmaxes as fsoftmax


# ---- batch norm ----------------------------------------------------------------------------------
class BatchNormFunction(torch.autograd.Function):
    """Batch norm: the training pass (batch statistics; running ones updated in place) or the
    inference pass (running statistics); backward by MIOpen's batch norm backward (training)."""

    @staticmethod
    def forward(ctx: Any, x, weight, bias, running_mean, running_var, training: bool, momentum, eps):
        ctx.training, ctx.eps = training, eps
        ctx.has_weight, ctx.has_bias = weight is not None, bias is not None
        if training:
            y, mean, inv = fbn.batch_norm_forward(
                x, running_mean, running_var, weight, bias, True, momentum, eps, save=True
            )
            ctx.save_for_backward(x, weight, mean, inv)
        else:
            y = fbn.batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
            ctx.save_for_backward(x, weight, running_mean, running_var)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        x, weight, a, b = ctx.saved_tensors
        if ctx.training:
            dx, dw, db = fbn.batch_norm_grad(dy, x, weight, a, b, ctx.eps)
        else:  # MIOpen has no inference backward: y is affine in x, weight and bias
            shape = (1, -1) + (1,) * (x.dim() - 2)
            inv = torch.rsqrt(b.float() + ctx.eps)
            scale = inv if weight is None else inv * weight.float()
            dx = (dy * scale.reshape(shape)).to(dy.dtype)
            axes = [0, *range(2, x.dim())]
            xhat = (x.float() - a.float().reshape(shape)) * inv.reshape(shape)
            dw = (dy.float() * xhat).sum(axes)
            db = dy.float().sum(axes)
        dw = dw.to(weight.dtype) if ctx.has_weight and ctx.needs_input_grad[1] else None
        db = db.to(dx.dtype if weight is None else weight.dtype) if ctx.has_bias else None
        return dx, dw, db, None, None, None, None, None


def batch_norm_function(
    x: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> torch.Tensor:
    """A differentiable ``torch.nn.functional.batch_norm`` computed by miopy."""
    return BatchNormFunction.apply(x, weight, bias, running_mean, running_var, training, momentum, eps)


class _BatchNorm:
    """torch.nn's _BatchNorm.forward (momentum, cumulative average, train / eval, tracking)
    with the computation replaced."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        training = self.training or (self.running_mean is None and self.running_var is None)
        use_running = not self.training or self.track_running_stats
        return batch_norm_function(
            input,
            self.running_mean if use_running else None,
            self.running_var if use_running else None,
            self.weight,
            self.bias,
            training,
            factor,
            self.eps,
        )


class BatchNorm1d(_BatchNorm, nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` ((N, C) or (N, C, L)) computed by miopy."""


class BatchNorm2d(_BatchNorm, nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` computed by miopy (channels-last input stays channels-last)."""


class BatchNorm3d(_BatchNorm, nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` computed by miopy."""


# ---- softmax -------------------------------------------------------------------------------------
class SoftmaxFunction(torch.autograd.Function):
    """Softmax (``log=False``) or log-softmax over ``dim``; backward by MIOpen's softmax backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
        y = (fsoftmax.log_softmax if log else fsoftmax.softmax)(x, dim)
        ctx.save_for_backward(y)
        ctx.dim, ctx.log = dim, log
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        (y,) = ctx.saved_tensors
        return fsoftmax.softmax_grad(dy, y, ctx.dim, ctx.log), None, None


def _softmax_dim(dim: int | None, ndim: int) -> int:
    """PyTorch's implicit dim of a Softmax built with dim=None."""
    return dim if dim is not None else (0 if ndim in (0, 1, 3) else 1)


def softmax_function(x: torch.Tensor, dim: int, log: bool = False) -> torch.Tensor:
    """A differentiable softmax (or log-softmax) over ``dim`` computed by miopy."""
    return SoftmaxFunction.apply(x, dim, log)


class Softmax(nn.Softmax):
    """``torch.nn.Softmax`` computed by miopy."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return softmax_function(input, _softmax_dim(self.dim, input.dim()))


class LogSoftmax(nn.LogSoftmax):
    """``torch.nn.LogSoftmax`` computed by miopy."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return softmax_function(input, _softmax_dim(self.dim, input.dim()), log=True)


# ---- layer norm and group norm -----------------------------------------------------------------
class _StatNormFunction(torch.autograd.Function):
    """Layer norm or group norm: forward keeps mean and rstd for MIOpen's backward, which gives
    the input, weight and bias gradients."""

    @staticmethod
    def forward(ctx: Any, x, weight, bias, kind: str, arg, eps: float):
        fwd = fnorm.layer_norm_forward if kind == "layer" else fnorm.group_norm_forward
        y, mean, rstd = fwd(x, arg, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.kind, ctx.arg, ctx.eps = kind, arg, eps
        ctx.has_weight, ctx.has_bias = weight is not None, bias is not None
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        x, weight, mean, rstd = ctx.saved_tensors
        grad = fnorm.layer_norm_grad if ctx.kind == "layer" else fnorm.group_norm_grad
        affine = ctx.has_weight or ctx.has_bias
        dx, dw, db = grad(dy, x, ctx.arg, weight, mean, rstd, ctx.eps, affine)
        dw = dw if ctx.has_weight else None
        db = db if ctx.has_bias else None
        return dx, dw, db, None, None, None


def layer_norm_function(x: torch.Tensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """A differentiable ``torch.nn.functional.layer_norm`` computed by miopy."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return _StatNormFunction.apply(x, weight, bias, "layer", shape, eps)


def group_norm_function(x: torch.Tensor, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """A differentiable ``torch.nn.functional.group_norm`` computed by miopy."""
    return _StatNormFunction.apply(x, weight, bias, "group", int(num_groups), eps)


class LayerNorm(nn.LayerNorm):
    """``torch.nn.LayerNorm`` computed by miopy."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return layer_norm_function(input, self.normalized_shape, self.weight, self.bias, self.eps)


class GroupNorm(nn.GroupNorm):
    """``torch.nn.GroupNorm`` computed by miopy."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return group_norm_function(input, self.num_groups, self.weight, self.bias, self.eps)


# ---- LRN -------------------------------------------------------------------------------------------
class LRNFunction(torch.autograd.Function):
    """MIOpen's cross-channel LRN (PyTorch's for an odd size); backward from x, y and the scale
    the forward pass kept."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, size: int, alpha: float, beta: float, k: float):
        y, scale = flrn.lrn_forward(x, size, alpha, beta, k, save_scale=True)
        ctx.save_for_backward(x, y, scale)
        ctx.args = (size, alpha, beta, k)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        x, y, scale = ctx.saved_tensors
        return flrn.lrn_grad(dy, x, y, scale, *ctx.args), None, None, None, None


def lrn_function(x: torch.Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
    """A differentiable ``torch.nn.functional.local_response_norm`` computed by miopy."""
    return LRNFunction.apply(x, int(size), float(alpha), float(beta), float(k))


class LocalResponseNorm(nn.LocalResponseNorm):
    """``torch.nn.LocalResponseNorm`` computed by miopy: the same for an odd ``size``; for an even
    one MIOpen's window is one channel later than PyTorch's (see ``miopy.functional.lrn``)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return lrn_function(input, self.size, self.alpha, self.beta, self.k)


__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "BatchNormFunction",
    "GroupNorm",
    "LRNFunction",
    "LayerNorm",
    "LocalResponseNorm",
    "LogSoftmax",
    "Softmax",
    "SoftmaxFunction",
    "batch_norm_function",
    "group_norm_function",
    "layer_norm_function",
    "lrn_function",
    "softmax_function",
]
