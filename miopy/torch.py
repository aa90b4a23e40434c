"""PyTorch layers computed by miopy: autograd Functions and drop-in ``nn.Module``s.

``Conv2d``, ``Conv3d``, ``ConvTranspose2d``, ``ConvTranspose3d``, the activations (``ReLU``,
``LeakyReLU``, ``ELU``, ``Sigmoid``, ``Tanh``, ``ReLU6``), pooling (``MaxPool2d/3d``,
``AvgPool2d/3d``) and the normalisations (``BatchNorm1d/2d/3d``, ``Softmax``, ``LogSoftmax``,
``LayerNorm``, ``GroupNorm``, ``LocalResponseNorm``: see ``miopy.torch_norm``) subclass their
``torch.nn`` namesakes (same arguments, same parameters, same initialisation: with one seed both give the same
weights) and replace only the computation: forward through miopy's forward solvers, backward
through its backward-data and backward-weights solvers, on CUDA tensors (the CUDA backend, on
PyTorch's current stream) and on CPU tensors (the default host backend: OpenCL, i.e. PoCL on a
CPU). The bias is added, and its gradient summed, by PyTorch.

    import torch
    import miopy.torch as mt

    layer = mt.Conv2d(3, 8, 3, padding=1)
    y = layer(torch.randn(2, 3, 16, 16, requires_grad=True))
    y.sum().backward()

miopy computes fp32, fp16 and bf16; ``gradcheck`` in float64 is therefore not available, and the
tests check gradients in fp32 against finite differences and against PyTorch's own kernels.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from miopy.functional import activ as factiv
from miopy.functional import conv as fconv
from miopy.functional import pooling as fpool
from miopy.problem.activation import ActivationMode
from miopy.problem.pooling import PoolingDesc, PoolingMode
from miopy.torch_norm import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    BatchNormFunction,
    GroupNorm,
    LayerNorm,
    LocalResponseNorm,
    LogSoftmax,
    LRNFunction,
    Softmax,
    SoftmaxFunction,
    batch_norm_function,
    group_norm_function,
    layer_norm_function,
    lrn_function,
    softmax_function,
)


class ConvFunction(torch.autograd.Function):
    """y = conv(x, w) + b with PyTorch's conv arguments packed in ``params`` (see
    ``conv_function``); the gradients come from miopy's backward solvers."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, params: dict) -> Any:
        ctx.save_for_backward(x, w)
        ctx.params = params
        ctx.has_bias = b is not None
        dims = x.dim() - 2
        fn = {
            (2, False): fconv.conv2d,
            (3, False): fconv.conv3d,
            (2, True): fconv.conv_transpose2d,
            (3, True): fconv.conv_transpose3d,
        }[(dims, params["transposed"])]
        kwargs = dict(stride=params["stride"], padding=params["padding"], dilation=params["dilation"])
        if params["transposed"]:
            kwargs["output_padding"] = params["output_padding"]
        return fn(x, w, b, groups=params["groups"], **kwargs)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        x, w = ctx.saved_tensors
        p = ctx.params
        common = dict(
            stride=p["stride"],
            padding=p["padding"],
            dilation=p["dilation"],
            groups=p["groups"],
            output_padding=p["output_padding"],
            transposed=p["transposed"],
        )
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = fconv.conv_input_grad(x.shape, w, dy, **common)
        if ctx.needs_input_grad[1]:
            dw = fconv.conv_weight_grad(x, w.shape, dy, **common)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy.sum(dim=[0, *range(2, dy.dim())])
        return dx, dw, db, None


def conv_function(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride=1,
    padding: Any = 0,
    dilation=1,
    groups: int = 1,
    output_padding=0,
    transposed: bool = False,
) -> torch.Tensor:
    """A differentiable (transposed) convolution computed by miopy, PyTorch's arguments."""
    params = dict(
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        output_padding=output_padding,
        transposed=transposed,
    )
    return ConvFunction.apply(x, weight, bias, params)


class _MiopyConv:
    """What the four conv modules share: PyTorch's padding modes other than zeros pad first, as
    torch.nn.Conv*d does, then convolve with no padding."""

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        padding = self.padding
        if self.padding_mode != "zeros":
            input = nn.functional.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = 0
        return conv_function(input, weight, bias, self.stride, padding, self.dilation, self.groups)


class Conv2d(_MiopyConv, nn.Conv2d):
    """``torch.nn.Conv2d`` computed by miopy."""


class Conv3d(_MiopyConv, nn.Conv3d):
    """``torch.nn.Conv3d`` computed by miopy."""


class _MiopyConvTranspose:
    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only 'zeros' padding mode is supported for transposed convolutions")
        dims = input.dim() - 2
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size, dims, self.dilation
        )
        return conv_function(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            tuple(output_padding),
            transposed=True,
        )


class ConvTranspose2d(_MiopyConvTranspose, nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` computed by miopy."""


class ConvTranspose3d(_MiopyConvTranspose, nn.ConvTranspose3d):
    """``torch.nn.ConvTranspose3d`` computed by miopy."""


# ---- activations -------------------------------------------------------------------------------
class ActivationFunction(torch.autograd.Function):
    """y = f(x) for one of MIOpen's activation modes; backward by miopy's activation gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, mode: ActivationMode, alpha: float, beta: float, gamma: float):
        y = factiv.activation(x, mode, alpha, beta, gamma)
        ctx.save_for_backward(x, y)
        ctx.desc = (mode, alpha, beta, gamma)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        x, y = ctx.saved_tensors
        return factiv.activation_grad(dy, x, y, *ctx.desc), None, None, None, None


def activation_function(
    x: torch.Tensor, mode: str | int, alpha: float = 1.0, beta: float = 1.0, gamma: float = 1.0
) -> torch.Tensor:
    """A differentiable activation computed by miopy (any ``miopy.ActivationMode``)."""
    return ActivationFunction.apply(x, ActivationMode.parse(mode), float(alpha), float(beta), float(gamma))


class _Activation(nn.Module):
    mode: ActivationMode

    def _abg(self) -> tuple[float, float, float]:
        return (1.0, 1.0, 1.0)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return activation_function(input, self.mode, *self._abg())


class ReLU(_Activation, nn.ReLU):
    """``torch.nn.ReLU`` computed by miopy (``inplace`` is ignored: a new tensor is returned)."""

    mode = ActivationMode.RELU


class LeakyReLU(_Activation, nn.LeakyReLU):
    mode = ActivationMode.LEAKY_RELU

    def _abg(self) -> tuple[float, float, float]:
        return (self.negative_slope, 1.0, 1.0)


class ELU(_Activation, nn.ELU):
    mode = ActivationMode.ELU

    def _abg(self) -> tuple[float, float, float]:
        return (self.alpha, 1.0, 1.0)


class Sigmoid(_Activation, nn.Sigmoid):
    mode = ActivationMode.LOGISTIC


class Tanh(_Activation, nn.Tanh):
    mode = ActivationMode.TANH


class ReLU6(_Activation, nn.ReLU6):
    mode = ActivationMode.CLIPPED_RELU

    def _abg(self) -> tuple[float, float, float]:
        return (6.0, 1.0, 1.0)


# ---- pooling -------------------------------------------------------------------------------------
class PoolFunction(torch.autograd.Function):
    """Max or average pooling by miopy; max pooling keeps MIOpen's index for its backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, desc: PoolingDesc) -> Any:
        needs = desc.mode is PoolingMode.MAX and x.requires_grad
        y, index = fpool.pool_forward(x, desc, save_index=needs)
        ctx.desc, ctx.index, ctx.shape = desc, index, tuple(x.shape)
        ctx.layout = fpool.layout_of(y) if index is not None else None
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        return fpool.pool_grad(dy, ctx.shape, ctx.desc, ctx.index, ctx.layout), None


def pool_function(
    x: torch.Tensor, mode: str, kernel_size, stride=None, padding=0, count_include_pad: bool = True
) -> torch.Tensor:
    """A differentiable pooling computed by miopy: ``mode`` "max" or "avg" (PyTorch's
    ``count_include_pad`` then picks MIOpen's AVG_INCLUSIVE or AVG)."""
    if mode == "avg":
        mode = "avg_in" if count_include_pad else "avg"
    return PoolFunction.apply(x, fpool._pool_desc(mode, x.dim() - 2, kernel_size, stride, padding))


class _MaxPool:
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        fpool._check(self.ceil_mode, self.dilation, self.return_indices)
        return pool_function(input, "max", self.kernel_size, self.stride, self.padding)


class _AvgPool:
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        fpool._check(self.ceil_mode, divisor_override=self.divisor_override)
        return pool_function(
            input, "avg", self.kernel_size, self.stride, self.padding, self.count_include_pad
        )


class MaxPool2d(_MaxPool, nn.MaxPool2d):
    """``torch.nn.MaxPool2d`` computed by miopy (no dilation, ceil_mode or return_indices)."""


class MaxPool3d(_MaxPool, nn.MaxPool3d):
    """``torch.nn.MaxPool3d`` computed by miopy (no dilation, ceil_mode or return_indices)."""


class AvgPool2d(_AvgPool, nn.AvgPool2d):
    """``torch.nn.AvgPool2d`` computed by miopy (no ceil_mode or divisor_override)."""


class AvgPool3d(_AvgPool, nn.AvgPool3d):
    """``torch.nn.AvgPool3d`` computed by miopy (no ceil_mode or divisor_override)."""


__all__ = [
    "ActivationFunction",
    "AvgPool2d",
    "AvgPool3d",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "BatchNormFunction",
    "Conv2d",
    "Conv3d",
    "ConvFunction",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "ELU",
    "GroupNorm",
    "LRNFunction",
    "LayerNorm",
    "LeakyReLU",
    "LocalResponseNorm",
    "LogSoftmax",
    "MaxPool2d",
    "MaxPool3d",
    "PoolFunction",
    "ReLU",
    "ReLU6",
    "Sigmoid",
    "Softmax",
    "SoftmaxFunction",
    "Tanh",
    "activation_function",
    "batch_norm_function",
    "conv_function",
    "group_norm_function",
    "layer_norm_function",
    "lrn_function",
    "pool_function",
    "softmax_function",
]
