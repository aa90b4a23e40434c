"""ConvIgemmPadFwdNhwc: the tensor-core implicit-GEMM forward convolution (ConvIgemmFwdNhwc) for
C or K not a multiple of 8, such as the first layer of an image network (C = 3): x and the filter
are copied with their channels padded with zeros to multiples of 8, the GEMM runs on the copies,
and where K is padded the output is cut back to its real channels (igemm_padded.py). CUDA,
fp16 or bf16, packed NHWC, groups = 1, any stride, padding and dilation. The config is
ConvIgemmFwdNhwc's, on the padded problem."""

from __future__ import annotations

from miopy.solvers.conv.igemm_padded import PaddedIgemmSolver
from miopy.solvers.conv.implicit_gemm import ConvIgemmFwdNhwc


class ConvIgemmPadFwdNhwc(PaddedIgemmSolver):
    name = "ConvIgemmPadFwdNhwc"
    id = 204  # no MIOpen counterpart; outside the range of its solver ids
    inner = ConvIgemmFwdNhwc()
