"""PyTorch layers computed by miopy: autograd Functions and drop-in ``nn.Module``s.

``Conv2d``, ``Conv3d``, ``ConvTranspose2d`` and ``ConvTranspose3d`` subclass their ``torch.nn``
namesakes (same arguments, same parameters, same initialisation: with one seed both give the same
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

from miopy.functional import conv as fconv


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


__all__ = ["Conv2d", "Conv3d", "ConvFunction", "ConvTranspose2d", "ConvTranspose3d", "conv_function"]
