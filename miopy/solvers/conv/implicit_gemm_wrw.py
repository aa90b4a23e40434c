"""ConvIgemmWrwNhwc: implicit-GEMM backward-weights convolution on tensor cores (MIOpen's
ImplicitGemm family), CUDA only: kernels/cuda/igemm_wrw.cu on kernels/common/igemm_core.h.

dw[K, R*S*C] = dy^T[K, N*Ho*Wo] x im2col(x)[N*Ho*Wo, R*S*C]: GEMM M = K, N = R*S*C (dw as it
lies, packed K x R x S x C), reduction over the output pixels, with x's im2col gathered on the fly.
The reduction is long and the output small, so it splits over ``split_k`` slices of pixels whose
fp32 partial sums (the workspace) a second kernel adds up and rounds to the filter's data type.
fp16 or bf16 in, fp32 accumulation, packed NHWC, groups = 1, C and K multiples of 8; any stride,
padding and dilation.

The config is ConvIgemmFwdNhwc's fields (block tile, warp grid, pipeline stages, fragment
buffers) with a wider range of splits."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec
from miopy.solvers.conv.igemm_common import DOMAIN as FWD_DOMAIN
from miopy.solvers.conv.igemm_common import (
    MIN_SLICE_TILES,
    IgemmSolver,
    compute_units,
    gemm_specs,
    group_channels,
    pow2_cap,
    shape_defines,
    split_workspace_bytes,
    tile_candidates,
    tile_smem_bytes,
    with_splits,
)
from miopy.solvers.conv.igemm_common import tile_config as _cfg

DOMAIN: dict[str, tuple[int, ...]] = {
    **FWD_DOMAIN,
    "split_k": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128),  # slices of the pixel reduction
}
FULL_WAVE = 0.9  # a grid of at least this many blocks per multiprocessor counts as one wave
SHORT_GRID_WAVES = 1.5  # the blocks per multiprocessor a split aims at where one wave is short


# default_config's choices: the fastest on the ResNet-50 layers at batch 32 on an H200 among 7
# tile shapes x 5 splits (fp16, scripts/bench_igemm_bwd.py --configs all): 128 x 64 x 64 won on
# 20 of 22 layers, with about one block per multiprocessor.
# Retuned on the 3x3 layers (H200, 2026-11-22, scripts/tune_igemm_db.py --log): double-buffered
# fragments gained 3-9% on 128 x 64 (28x28: 39.5 -> 36.1 us, 14x14: 36.9 -> 34.2 us), and for
# K <= 64 a 64 x 64 tile with 4 stages 11% (56x56: 49.2 -> 43.8 us)
DEFAULT_WIDE = _cfg(128, 64, 64, 2, 2, 3, frag_bufs=2)
DEFAULT_NARROW = _cfg(64, 64, 64, 2, 2, 4, frag_bufs=2)  # K <= 64 with R*S*C > 64
FALLBACKS = (_cfg(32, 64, 32, 1, 2, 4), _cfg(32, 32, 32, 1, 2, 2))  # little shared memory
PREFERRED = (DEFAULT_WIDE, DEFAULT_NARROW, *FALLBACKS)


def k_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Pipeline steps of the whole reduction (N*Ho*Wo pixels, ``bk`` at a time)."""
    n, _, p, q = problem.y.lens
    return -(-(n * p * q) // config["bk"])


def tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Output tiles of dw, every group's (the grid's x)."""
    _, c, r, s = problem.w.lens
    k = group_channels(problem)[1]
    return -(-k // config["bm"]) * -(-(r * s * c) // config["bn"]) * problem.conv.groups


def smem_bytes(config: dict[str, int]) -> int:
    """The pipeline's stages, or the epilogue's tile and row offsets (igemm_core.h)."""
    return tile_smem_bytes(config, row_offsets=True)


def workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """The fp32 partial dw of each slice of a split reduction (none without a split)."""
    return split_workspace_bytes(config, problem.w.element_space)


def default_split(problem: ConvProblem, config: dict[str, int], cus: int) -> int:
    """The largest split in DOMAIN whose grid fits one wave (one block per multiprocessor);
    where that grid is short of FULL_WAVE, the split nearest SHORT_GRID_WAVES blocks per
    multiprocessor instead (the smaller on a tie). Only splits whose slices keep
    MIN_SLICE_TILES steps; 1 if none does. On the H200 this picked the faster of the two rules
    measured on each of the 22 ResNet-50 layers (one wave won on 1x1 layers, 1.5 waves on 3x3
    layers whose one-wave grid was 0.5 to 0.8 of the SMs)."""
    n_tiles = tiles(problem, config)
    fits = [s for s in DOMAIN["split_k"] if k_tiles(problem, config) >= s * MIN_SLICE_TILES]
    split = max((s for s in fits if s * n_tiles <= cus), default=1)
    if split * n_tiles < FULL_WAVE * cus and fits:
        want = SHORT_GRID_WAVES * cus / n_tiles
        split = min(fits, key=lambda s: (abs(s - want), s))
    return split


def kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """igemm_wrw: grid (dw tiles, split slices) of ``threads(config)``; with a split,
    igemm_wrw_splitk_reduce, one work item per 8 dw values."""
    k, c, r, s = problem.w.lens
    defines = shape_defines(problem, config)
    return gemm_specs(
        "igemm_wrw", "igemm_wrw_splitk_reduce", defines, config, (tiles(problem, config),), k * r * s * c
    )


class ConvIgemmWrwNhwc(IgemmSolver):
    name = "ConvIgemmWrwNhwc"
    id = 203  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.BACKWARD_WEIGHTS
    reads, writes = ("x", "y"), "w"  # backward weights: x and dy (role y) are read, dw (role w) written
    epilogue_files = frozenset({"igemm_wrw"})
    domain = DOMAIN
    reduction_tiles = staticmethod(k_tiles)
    smem_bytes = staticmethod(smem_bytes)
    workspace_bytes = staticmethod(workspace_bytes)
    kernel_specs = staticmethod(kernel_specs)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """DEFAULT_NARROW for K <= 64 with a dw row longer than 64, else DEFAULT_WIDE
        (FALLBACKS where shared memory is short), with default_split's split of the reduction."""
        _, c, r, s = problem.w.lens
        k = group_channels(problem)[1]
        chain = [DEFAULT_NARROW if k <= 64 < r * s * c else DEFAULT_WIDE, *FALLBACKS]
        valid = [cfg for cfg in chain if self.is_valid_config(ctx, problem, cfg)]
        config = dict(valid[0] if valid else chain[-1])
        config["split_k"] = default_split(problem, config, compute_units(ctx))
        return config

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Valid configs of the curated block shapes and pipelines (igemm_common.TUNE_TILES,
        TUNE_PIPES) no taller than the next power of two of K (at least 32), each with
        default_split's split and its neighbours in DOMAIN (1 included where reached)."""
        cus = compute_units(ctx)
        order = DOMAIN["split_k"]

        def splits(config: dict[str, int]):
            at = order.index(default_split(problem, config, cus))
            yield from order[max(0, at - 1) : at + 2]

        candidates = with_splits(tile_candidates(DOMAIN, cap_m=pow2_cap(group_channels(problem)[1])), splits)
        out = [c for c in candidates if self.is_valid_config(ctx, problem, c)]
        return out or [self.default_config(ctx, problem)]
