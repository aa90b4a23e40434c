"""ConvIgemmBwdNhwc: implicit-GEMM backward-data convolution on tensor cores (MIOpen's
ImplicitGemm family), CUDA only: kernels/cuda/igemm_bwd.cu on kernels/common/igemm_core.h.

dx = dy convolved with the flipped, transposed filter, as one GEMM per filter phase: the dx
pixels split into SH x SW phases (by their position modulo the stride), and within a phase the
same filter taps reach every pixel, so the phase is a dense GEMM M = its pixels, N = C,
reduction (taps of the phase) x K, with dy gathered on the fly and no zero-inserted input. A
stride of 1 is one phase with every tap. fp16 or bf16 in, fp32 accumulation, packed NHWC, filter
packed K x R x S x C, groups = 1, C and K multiples of 8; any stride, padding and dilation
(transposed forward problems too, through their conv view).

The config is ConvIgemmFwdNhwc's: block tile, warp grid, pipeline stages, fragment buffers and a
split of the reduction (fp32 partials in the workspace, summed by a second kernel)."""

from __future__ import annotations

import math
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
from miopy.solvers.conv.implicit_gemm import (
    DEFAULT_SHORT,
    DEFAULT_SMALL_GRID,
    DEFAULT_TINY_GRID,
    FALLBACKS,
)

# The forward kernel's 128 x 64 tile with double-buffered fragments: on the H200 it beat the
# forward default (single buffers, 2 stages for C <= 64) by 3-5% on the 56x56 and 28x28 ResNet
# layers (tuning log of 2026-11-22)
DEFAULT_WIDE = _cfg(128, 64, 64, 2, 2, 3, frag_bufs=2)
DEFAULT_NARROW = DEFAULT_WIDE  # C <= 64


def phase_steps(problem: ConvProblem) -> tuple[int, int]:
    """How far apart the filter rows (columns) that reach one dx pixel are: SH / gcd(SH, DH)."""
    (sh, sw), (dh, dw) = problem.conv.strides, problem.conv.dilations
    return sh // math.gcd(sh, dh), sw // math.gcd(sw, dw)


def max_k_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Reduction tiles of the phase with the most taps: taps x ceil(K of a group / bk)."""
    _, _, r, s = problem.w.lens
    k = group_channels(problem)[1]
    rstep, sstep = phase_steps(problem)
    return -(-r // rstep) * -(-s // sstep) * -(-k // config["bk"])


def phase_rows(problem: ConvProblem) -> int:
    """dx pixels of the largest phase (the grid's rows cover it)."""
    n, _, h, w = problem.x.lens
    sh, sw = problem.conv.strides
    return n * -(-h // sh) * -(-w // sw)


def tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Output tiles of one phase, every group's (the grid's x)."""
    c = group_channels(problem)[0]
    return -(-phase_rows(problem) // config["bm"]) * -(-c // config["bn"]) * problem.conv.groups


def grid_blocks(problem: ConvProblem, config: dict[str, int]) -> int:
    sh, sw = problem.conv.strides
    return tiles(problem, config) * sh * sw * config["split_k"]


def smem_bytes(config: dict[str, int]) -> int:
    """The pipeline's stages, or the epilogue's tile and row offsets (igemm_core.h)."""
    return tile_smem_bytes(config, row_offsets=True)


def workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """The fp32 partial dx of a split reduction (none without a split)."""
    return split_workspace_bytes(config, problem.x.element_space)


def kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """igemm_bwd: grid (output tiles of the largest phase, SH*SW phases, split slices) of
    ``threads(config)``; with a split, igemm_bwd_splitk_reduce, one work item per 8 dx values."""
    n, c, h, w = problem.x.lens
    rstep, sstep = phase_steps(problem)
    defines = shape_defines(problem, config, RSTEP=rstep, SSTEP=sstep)
    tile_grid = (tiles(problem, config), problem.conv.strides[0] * problem.conv.strides[1])
    return gemm_specs("igemm_bwd", "igemm_bwd_splitk_reduce", defines, config, tile_grid, n * h * w * c)


class ConvIgemmBwdNhwc(IgemmSolver):
    name = "ConvIgemmBwdNhwc"
    id = 202  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.BACKWARD_DATA
    reads, writes = ("y", "w"), "x"  # backward data: dy is role y (read), dx is role x (written)
    epilogue_files = frozenset({"igemm_bwd"})
    reduction_tiles = staticmethod(max_k_tiles)
    smem_bytes = staticmethod(smem_bytes)
    workspace_bytes = staticmethod(workspace_bytes)
    kernel_specs = staticmethod(kernel_specs)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """ConvIgemmFwdNhwc's rule (with this file's DEFAULT_WIDE) for the GEMM of one phase (N =
        C, the reduction K times the phase's taps): DEFAULT_NARROW for C <= 64, DEFAULT_SHORT for
        a reduction of at most 128, else DEFAULT_WIDE; DEFAULT_SMALL_GRID where the grid has
        fewer than SMALL_GRID_PER_CU blocks per multiprocessor, DEFAULT_TINY_GRID where that grid
        is still small and C >= 128, split in a cluster where the grid is small
        (cluster_default_split); FALLBACKS where shared memory is short."""
        _, _, r, s = problem.w.lens
        c, k = group_channels(problem)
        rstep, sstep = phase_steps(problem)
        if c <= 64:
            first = DEFAULT_NARROW
        elif k * -(-r // rstep) * -(-s // sstep) <= 128:
            first = DEFAULT_SHORT
        else:
            first = DEFAULT_WIDE
        chain = [first, DEFAULT_SMALL_GRID, *FALLBACKS]
        return self.small_grid_default(ctx, problem, chain, DEFAULT_TINY_GRID, c, grid_blocks)

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """As ConvIgemmFwdNhwc's: the curated shapes no wider than the next power of two of C
        (at least 32), each also split where the unsplit grid has fewer than 2 blocks per
        multiprocessor, into at most 4 per multiprocessor, slices keeping MIN_SLICE_TILES steps."""
        return self.small_grid_search_space(ctx, problem, group_channels(problem)[0], grid_blocks)
