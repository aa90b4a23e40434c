"""ConvIgemmPadWrwNhwc: the tensor-core implicit-GEMM backward-weights convolution
(ConvIgemmWrwNhwc) for C or K not a multiple of 8: x and dy are copied with zero channels to
multiples of 8 where needed, the GEMM computes the padded dw into the workspace and its real
rows and channels are copied out (igemm_padded.py). CUDA, fp16 or bf16, packed NHWC,
groups = 1, any stride, padding and dilation. The config is ConvIgemmWrwNhwc's, on the padded
problem, with twice its split of the reduction by default."""

from __future__ import annotations

from typing import Any

from miopy.problem.conv import ConvProblem
from miopy.solvers.conv.igemm_common import MIN_SLICE_TILES
from miopy.solvers.conv.igemm_padded import PaddedIgemmSolver, padded_problem
from miopy.solvers.conv.implicit_gemm_wrw import DOMAIN, ConvIgemmWrwNhwc, k_tiles


class ConvIgemmPadWrwNhwc(PaddedIgemmSolver):
    name = "ConvIgemmPadWrwNhwc"
    id = 206  # no MIOpen counterpart; outside the range of its solver ids
    inner = ConvIgemmWrwNhwc()

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """ConvIgemmWrwNhwc's default on the padded problem with the smallest split of at least
        twice its split whose slices keep MIN_SLICE_TILES steps (its own where none does): about
        two blocks per multiprocessor, where the inner rule aims at one. On the H200 the ResNet-50
        stem (batch 32, fp16) ran in 126 us with a split of 64 and 147 us with the inner's 32
        (scripts/bench_igemm_padded.py)."""
        padded = padded_problem(problem)
        config = self.inner.default_config(ctx, padded)
        steps = k_tiles(padded, config)
        more = [s for s in DOMAIN["split_k"] if s >= 2 * config["split_k"] and steps >= s * MIN_SLICE_TILES]
        if more:
            config["split_k"] = min(more)
        return config
