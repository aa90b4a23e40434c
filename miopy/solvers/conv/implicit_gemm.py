"""ConvIgemmFwdNhwc: implicit-GEMM forward convolution on tensor cores (MIOpen's ImplicitGemm
family), CUDA only: kernels/cuda/igemm_fwd.cu on kernels/common/igemm_core.h.

GEMM view: M = N*Ho*Wo output pixels, N = K output channels, reduction over R*S*C filter taps,
the im2col gather done while loading tiles (no workspace). fp16 or bf16 in, fp32 accumulation,
packed NHWC x and y, filter packed in NHWC order (K, R, S, C), C and K of a group multiples of 8
(16-byte loads of 8 channels); with groups, each group is its own run of blocks. Any stride,
padding and dilation. Shape and config are compiled in.

The config is the block tile (``bm`` x ``bn`` outputs, ``bk`` taps per pipeline stage), the warp
grid (``warps_m`` x ``warps_n``) and the cp.async pipeline depth (``stages``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec
from miopy.solvers.conv.igemm_common import (
    IgemmSolver,
    gemm_specs,
    group_channels,
    shape_defines,
    split_workspace_bytes,
    tile_smem_bytes,
)
from miopy.solvers.conv.igemm_common import tile_config as _cfg

# default_config's choices: the fastest on the ResNet-50 layers at batch 32 on an H200 among 47
# configs (fp16, 2026-11-22; scripts/bench_igemm.py). 128 x 64 tiles of 64 x 32 per warp won on
# most layers (within 8% of each layer's best on average).
DEFAULT_WIDE = _cfg(128, 64, 64, 2, 2, 3)  # K > 64
DEFAULT_NARROW = _cfg(128, 64, 64, 2, 2, 2)  # K <= 64
DEFAULT_SHORT = _cfg(128, 128, 32, 2, 2, 3)  # K > 64 and R*S*C <= 128: one or two steps
DEFAULT_SMALL_GRID = _cfg(64, 64, 64, 2, 2, 3, frag_bufs=2)  # fewer than 2 blocks per SM
# still fewer than 2 per SM at 64 x 64 and K >= 128 (7x7 images): with a cluster split of 2 it
# took the 512-channel 7x7 layer from 39 to 34 us forward and 38 to 33 us backward (H200, tuning
# log of 2026-11-22), where 64 x 64 split in two ran 37 and 38 us
DEFAULT_TINY_GRID = _cfg(64, 128, 64, 2, 2, 3, frag_bufs=2)
FALLBACKS = (_cfg(32, 64, 64, 1, 2, 4), _cfg(32, 32, 32, 1, 2, 4))  # little shared memory
PREFERRED = (DEFAULT_WIDE, DEFAULT_NARROW, DEFAULT_SHORT, DEFAULT_SMALL_GRID, DEFAULT_TINY_GRID, *FALLBACKS)


def k_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Pipeline steps of the whole reduction (R*S*C taps of a group, ``bk`` at a time)."""
    _, c, r, s = problem.w.lens
    return -(-(r * s * c) // config["bk"])


def workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """The fp32 partial outputs of a split reduction (none without a split)."""
    n, k, ho, wo = problem.y.lens
    return split_workspace_bytes(config, n * ho * wo * k)


def smem_bytes(config: dict[str, int]) -> int:
    """Dynamic shared memory of the kernel: the pipeline's stages, or the epilogue's output tile."""
    return tile_smem_bytes(config, row_offsets=False)


def grid_blocks(problem: ConvProblem, config: dict[str, int]) -> int:
    """Output tiles of every group (one block each, before a split)."""
    n, _, ho, wo = problem.y.lens
    _, k = group_channels(problem)
    return -(-(n * ho * wo) // config["bm"]) * -(-k // config["bn"]) * problem.conv.groups


def kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """The kernels of ``config`` for a conv-view forward problem, shape and config as defines:
    igemm_fwd, one block of ``threads(config)`` per output tile and reduction slice, and with
    a split reduction igemm_splitk_reduce, one work item per 8 outputs."""
    n, _, ho, wo = problem.y.lens
    k = problem.w.lens[0]
    defines = shape_defines(problem, config)
    tile_grid = (grid_blocks(problem, config),)
    return gemm_specs("igemm_fwd", "igemm_splitk_reduce", defines, config, tile_grid, n * ho * wo * k)


class ConvIgemmFwdNhwc(IgemmSolver):
    name = "ConvIgemmFwdNhwc"
    id = 201  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.FORWARD
    reads, writes = ("x", "w"), "y"
    reduction_tiles = staticmethod(k_tiles)
    smem_bytes = staticmethod(smem_bytes)
    workspace_bytes = staticmethod(workspace_bytes)
    kernel_specs = staticmethod(kernel_specs)
    epilogue_files = frozenset({"igemm_fwd"})
    epilogue_bias = True

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """DEFAULT_NARROW for K <= 64, DEFAULT_SHORT for a reduction of at most 128 taps, else
        DEFAULT_WIDE; DEFAULT_SMALL_GRID where that grid has fewer than SMALL_GRID_PER_CU blocks
        per multiprocessor, DEFAULT_TINY_GRID where that grid is still small and
        K >= 128, split in a cluster where the grid is small (cluster_default_split); FALLBACKS
        where shared memory is short."""
        _, c, r, s = problem.w.lens
        k = group_channels(problem)[1]
        if k <= 64:
            first = DEFAULT_NARROW
        elif r * s * c <= 128:
            first = DEFAULT_SHORT
        else:
            first = DEFAULT_WIDE
        chain = [first, DEFAULT_SMALL_GRID, *FALLBACKS]
        return self.small_grid_default(ctx, problem, chain, DEFAULT_TINY_GRID, k, grid_blocks)

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """IgemmSolver.small_grid_search_space with the GEMM's columns K: the curated block
        shapes no wider than the next power of two of K (at least 32), each also split where the
        unsplit grid has fewer than 2 blocks per multiprocessor, into at most 4 blocks per
        multiprocessor, each slice keeping MIN_SLICE_TILES pipeline steps."""
        return self.small_grid_search_space(ctx, problem, group_channels(problem)[1], grid_blocks)
