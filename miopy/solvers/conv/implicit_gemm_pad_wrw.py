"""ConvIgemmPadWrwNhwc: the tensor-core implicit-GEMM backward-weights convolution
(ConvIgemmWrwNhwc) for C or K not a multiple of 8: x and dy are copied with zero channels to
multiples of 8 where needed, the GEMM computes the padded dw into the workspace and its real
rows and channels are copied out (igemm_padded.py). CUDA, fp16 or bf16, packed NHWC,
groups = 1, any stride, padding and dilation. The config is ConvIgemmWrwNhwc's, on the padded
problem; for K <= 64 the default is its own (wider tiles, twice the split)."""

from __future__ import annotations

from typing import Any

from miopy.problem.conv import ConvProblem
from miopy.solvers.conv.igemm_common import MIN_SLICE_TILES, compute_units, tile_config
from miopy.solvers.conv.igemm_padded import PaddedIgemmSolver, padded_problem
from miopy.solvers.conv.implicit_gemm_wrw import DOMAIN, ConvIgemmWrwNhwc, default_split, k_tiles

# On the H200 (ResNet-50 stem, batch 32, fp16, scripts/bench_igemm_padded.py; cuDNN 143 us) with
# K = 64 and dw rows of 7*7*8 = 392: 64 x 128 x 64 tiles with a split of 64 took 126 us; the same
# tiles with default_split's 32, 147 us; 64 x 64 x 64 with 4 stages and double-buffered
# fragments (ConvIgemmWrwNhwc's choice for K <= 64) 142-167 us at splits 32 to 96.
DEFAULT_NARROW_K = tile_config(64, 128, 64, 2, 2, 3)


class ConvIgemmPadWrwNhwc(PaddedIgemmSolver):
    name = "ConvIgemmPadWrwNhwc"
    id = 206  # no MIOpen counterpart; outside the range of its solver ids
    inner = ConvIgemmWrwNhwc()

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """For padded K <= 64: DEFAULT_NARROW_K with the smallest split of at least twice
        default_split's whose slices keep MIN_SLICE_TILES steps (about two blocks per
        multiprocessor where the inner rule aims at one). Else, or where that is not valid,
        ConvIgemmWrwNhwc's default on the padded problem."""
        padded = padded_problem(problem)
        if padded.w.lens[0] <= 64:
            config = dict(DEFAULT_NARROW_K)
            split = default_split(padded, config, compute_units(ctx))
            steps = k_tiles(padded, config)
            more = [s for s in DOMAIN["split_k"] if s >= 2 * split and steps >= s * MIN_SLICE_TILES]
            config["split_k"] = min(more) if more else split
            if self.inner.is_valid_config(ctx, padded, config):
                return config
        return self.inner.default_config(ctx, padded)
