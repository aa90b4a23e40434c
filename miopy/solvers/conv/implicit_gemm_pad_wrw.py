"""ConvIgemmPadWrwNhwc: the tensor-core implicit-GEMM backward-weights convolution
(ConvIgemmWrwNhwc) for C or K not a multiple of 8: x and dy are copied with zero channels to
multiples of 8 where needed, the GEMM computes the padded dw into the workspace and its real
rows and channels are copied out (igemm_padded.py). CUDA, fp16 or bf16, packed NHWC,
groups = 1, any stride, padding and dilation. The config is ConvIgemmWrwNhwc's, on the padded
problem."""

from __future__ import annotations

from miopy.solvers.conv.igemm_padded import PaddedIgemmSolver
from miopy.solvers.conv.implicit_gemm_wrw import ConvIgemmWrwNhwc


class ConvIgemmPadWrwNhwc(PaddedIgemmSolver):
    name = "ConvIgemmPadWrwNhwc"
    id = 206  # no MIOpen counterpart; outside the range of its solver ids
    inner = ConvIgemmWrwNhwc()
