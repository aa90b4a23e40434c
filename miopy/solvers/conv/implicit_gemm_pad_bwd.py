"""ConvIgemmPadBwdNhwc: the tensor-core implicit-GEMM backward-data convolution
(ConvIgemmBwdNhwc) for C or K not a multiple of 8: dy (where K is padded) and the filter are
copied with zero channels to multiples of 8, the GEMM computes the padded dx into the workspace
and its real channels are copied out (igemm_padded.py). CUDA, fp16 or bf16, packed NHWC,
groups = 1, any stride, padding and dilation. The config is ConvIgemmBwdNhwc's, on the padded
problem; padded dx has few channels (8 for C = 3), so the default block is 32 channels wide."""

from __future__ import annotations

from typing import Any

from miopy.problem.conv import ConvProblem
from miopy.solvers.conv.igemm_common import tile_config
from miopy.solvers.conv.igemm_padded import PaddedIgemmSolver, padded_problem
from miopy.solvers.conv.implicit_gemm import FALLBACKS
from miopy.solvers.conv.implicit_gemm_bwd import ConvIgemmBwdNhwc, grid_blocks

NARROW_C = 32  # padded C up to this: the narrow blocks
# On the H200 (ResNet-50 stem, batch 32, fp16; scripts/bench_igemm_padded.py): 256 x 32 tiles
# 374 us, 128 x 32 387 us, the inner default's 128 x 64 554 us (cuDNN 423 us).
DEFAULT_NARROW_C = tile_config(256, 32, 64, 4, 1, 3)
DEFAULT_NARROW_C_SMALL = tile_config(128, 32, 64, 4, 1, 3)  # fewer than 2 blocks per SM with 256 rows


class ConvIgemmPadBwdNhwc(PaddedIgemmSolver):
    name = "ConvIgemmPadBwdNhwc"
    id = 205  # no MIOpen counterpart; outside the range of its solver ids
    inner = ConvIgemmBwdNhwc()

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """Where padded C is at most NARROW_C (a 64-wide block would compute mostly zeros):
        DEFAULT_NARROW_C, or DEFAULT_NARROW_C_SMALL where that grid has fewer than 2 blocks per
        multiprocessor (ConvIgemmBwdNhwc's small-grid rule, its fallbacks after them). Else
        ConvIgemmBwdNhwc's default."""
        padded = padded_problem(problem)
        if padded.x.lens[1] > NARROW_C:
            return self.inner.default_config(ctx, padded)
        chain = [DEFAULT_NARROW_C, DEFAULT_NARROW_C_SMALL, *FALLBACKS]
        return self.inner.default_with_small_grid(ctx, padded, chain, grid_blocks)
