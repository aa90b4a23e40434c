"""ConvIgemmNchwFwd, ConvIgemmNchwBwd, ConvIgemmNchwWrw: the fp16 / bf16 tensor-core
implicit-GEMM convolutions for NCHW tensors, CUDA only (igemm_nchw.py): the NCHW read tensors
transposed to NHWC in the workspace (kernels/cuda/layout_tile.cu), the best NHWC tensor-core
solver of the direction run on the copies, and its result transposed back to NCHW
(kernels/cuda/layout_tile_out.cu, which also applies alpha / beta, bias and activation).

Inner solvers, in registry order: forward ConvWgmmaFwdNhwc (sm_90), ConvIgemmFwdNhwc and, for C
or K not a multiple of 8 (C = 3 of an image network's first layer), ConvIgemmPadC4FwdNhwc and
ConvIgemmPadFwdNhwc; backward data ConvWgmmaBwdNhwc (sm_90, stride 1), ConvIgemmBwdNhwc,
ConvIgemmPadBwdNhwc; backward weights ConvWgmmaWrwNhwc (sm_90), ConvIgemmWrwNhwc,
ConvIgemmPadWrwNhwc. groups = 1; any stride, padding and dilation an inner solver takes."""

from __future__ import annotations

from miopy.problem.conv import Direction
from miopy.solvers.conv.igemm_nchw import NchwIgemmSolver
from miopy.solvers.conv.implicit_gemm import ConvIgemmFwdNhwc
from miopy.solvers.conv.implicit_gemm_bwd import ConvIgemmBwdNhwc
from miopy.solvers.conv.implicit_gemm_pad import ConvIgemmPadFwdNhwc
from miopy.solvers.conv.implicit_gemm_pad_bwd import ConvIgemmPadBwdNhwc
from miopy.solvers.conv.implicit_gemm_pad_c4 import ConvIgemmPadC4FwdNhwc
from miopy.solvers.conv.implicit_gemm_pad_wrw import ConvIgemmPadWrwNhwc
from miopy.solvers.conv.implicit_gemm_wgmma import ConvWgmmaBwdNhwc, ConvWgmmaFwdNhwc
from miopy.solvers.conv.implicit_gemm_wgmma_wrw import ConvWgmmaWrwNhwc
from miopy.solvers.conv.implicit_gemm_wrw import ConvIgemmWrwNhwc


class ConvIgemmNchwFwd(NchwIgemmSolver):
    name = "ConvIgemmNchwFwd"
    id = 280  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.FORWARD
    reads, writes = ("x", "w"), "y"
    inners = (ConvWgmmaFwdNhwc(), ConvIgemmFwdNhwc(), ConvIgemmPadC4FwdNhwc(), ConvIgemmPadFwdNhwc())
    epilogue_bias = True


class ConvIgemmNchwBwd(NchwIgemmSolver):
    name = "ConvIgemmNchwBwd"
    id = 281
    direction = Direction.BACKWARD_DATA
    reads, writes = ("y", "w"), "x"  # dy is role y (read), dx is role x (written)
    inners = (ConvWgmmaBwdNhwc(), ConvIgemmBwdNhwc(), ConvIgemmPadBwdNhwc())


class ConvIgemmNchwWrw(NchwIgemmSolver):
    name = "ConvIgemmNchwWrw"
    id = 282
    direction = Direction.BACKWARD_WEIGHTS
    reads, writes = ("x", "y"), "w"  # x and dy (role y) are read, dw (role w) written
    inners = (ConvWgmmaWrwNhwc(), ConvIgemmWrwNhwc(), ConvIgemmPadWrwNhwc())
