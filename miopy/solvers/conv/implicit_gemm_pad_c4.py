"""ConvIgemmPadC4FwdNhwc: implicit-GEMM forward convolution on tensor cores for inputs of 1 to 4
channels (the first layer of an image network), CUDA only: kernels/cuda/igemm_fwd_c4.cu.

Where ConvIgemmPadFwdNhwc pads C to 8 (a 7x7 filter over 3 channels then reduces over
7*7*8 = 392 values per output), this one pads C to 4 and the filter's width S to an even S2,
and one 16-byte chunk of the reduction holds two neighbouring taps of 4 channels: 7*8*4 = 224
values (the padding tap is zero and its x values are never read). x is copied to 4 channels and
the filter to K x R x S2 x 4 in the workspace (kernels/cuda/channel_pad.cu); where K is not a
multiple of 8 it is padded too and y cut back (igemm_padded.py). fp16 or bf16, packed NHWC,
groups = 1, any stride, padding and dilation.

The config is ConvIgemmFwdNhwc's fields without a split of the reduction."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.conv.igemm_common import (
    DOMAIN as FWD_DOMAIN,
)
from miopy.solvers.conv.igemm_common import (
    pow2_cap,
    shape_defines,
    smem_limit,
    threads,
    tile_candidates,
    tile_config,
    tile_config_ok,
    tile_smem_bytes,
)
from miopy.solvers.conv.igemm_padded import PaddedIgemmSolver, padding_reason, round_up
from miopy.solvers.conv.implicit_gemm import FALLBACKS, ConvIgemmFwdNhwc, grid_blocks
from miopy.tensor import TensorDesc

DOMAIN: dict[str, tuple[int, ...]] = {**FWD_DOMAIN, "split_k": (1,)}
MAX_C = 4  # channels one half of a 16-byte chunk holds
# default_config's choices, from a sweep of 10 configs on the ResNet-50 stem (batch 32, fp16, H200,
# scripts/bench_igemm_padded.py, whole program; cuDNN 87.9 us): 256 x 64 x 32 with 4 x 1 warps
# 74.5 us, 128 x 64 x 32 76.7 us, ConvIgemmFwdNhwc's 128 x 64 x 64 default 89.1 us (a reduction of
# 224 is 7 steps of 32 but 4 of 64 with one half empty).
DEFAULT = tile_config(256, 64, 32, 4, 1, 4)
DEFAULT_SMALL_GRID = tile_config(128, 64, 32, 4, 1, 4)  # fewer than 2 blocks per SM with 256 rows


def even_width(problem: ConvProblem) -> int:
    """S2: the filter width rounded up to even (two taps per 16-byte chunk)."""
    return round_up(problem.w.lens[3], 2)


def c4_problem(problem: ConvProblem) -> ConvProblem:
    """The convolution on 4 input channels and K rounded up to a multiple of 8 (packed NHWC);
    the filter's width stays S (the kernel's defines carry S2)."""
    n, _, h, w = problem.x.lens
    k, _, r, s = problem.w.lens
    dt = problem.dtype
    x = TensorDesc(dt, (n, MAX_C, h, w), layout="NHWC")
    wd = TensorDesc(dt, (round_up(k), MAX_C, r, s), layout="NHWC")
    conv = ConvDesc(problem.pads, problem.conv.strides, problem.conv.dilations)
    return ConvProblem.create(x, wd, conv, problem.direction, y_layout="NHWC")


def smem_bytes(config: dict[str, int]) -> int:
    return tile_smem_bytes(config, row_offsets=False)


class ConvIgemmPadC4FwdNhwc(PaddedIgemmSolver):
    name = "ConvIgemmPadC4FwdNhwc"
    id = 207  # no MIOpen counterpart; outside the range of its solver ids
    inner = ConvIgemmFwdNhwc()  # its roles, direction and default tiles

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        reason = padding_reason(ctx, problem, self.inner.direction)
        if reason is None and problem.x.lens[1] > MAX_C:
            return f"C={problem.x.lens[1]} > {MAX_C}: ConvIgemmPadFwdNhwc pads it to 8"
        return reason

    # ---- the padded problem and its tensors ----------------------------------------------------
    def padded(self, problem: ConvProblem) -> ConvProblem:
        return c4_problem(problem)

    def geometries(self, problem: ConvProblem, padded: ConvProblem, role: str) -> tuple[tuple, tuple]:
        """The filter as K*R rows of S taps of C channels -> Kp*R rows of S2 taps of 4."""
        if role != "w":
            return super().geometries(problem, padded, role)
        k, c, r, s = problem.w.lens
        return (k * r, s, c), (padded.w.lens[0] * r, even_width(problem), MAX_C)

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        return tile_config_ok(ctx, config, DOMAIN) and smem_bytes(config) <= smem_limit(ctx)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """DEFAULT, or DEFAULT_SMALL_GRID where DEFAULT's grid has fewer than 2 blocks per
        multiprocessor, ConvIgemmFwdNhwc's FALLBACKS where shared memory is short (never a
        split)."""
        chain = [DEFAULT, DEFAULT_SMALL_GRID, *FALLBACKS]
        return self.inner.default_with_small_grid(ctx, c4_problem(problem), chain, grid_blocks)

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """The curated block shapes and pipelines (igemm_common.TUNE_TILES x TUNE_PIPES) no
        wider than the next power of two of padded K (at least 32) that are valid here."""
        cap = pow2_cap(round_up(problem.w.lens[0]))
        out = [c for c in tile_candidates(DOMAIN, cap_n=cap) if self.is_valid_config(ctx, problem, c)]
        return out or [self.default_config(ctx, problem)]

    # ---- the GEMM --------------------------------------------------------------------------------
    def gemm_program(self, ctx, padded: ConvProblem, config: dict[str, int]) -> Program:
        """igemm_fwd_c4: one block of ``threads(config)`` per output tile, no workspace."""
        defines = shape_defines(padded, config, S2=even_width(padded))
        local = threads(config)
        spec = KernelSpec(
            "igemm_fwd_c4", "igemm_fwd_c4", defines, (grid_blocks(padded, config) * local,), (local,)
        )
        args = (Tensor("x"), Tensor("w"), Tensor("y"), None)
        return Program((Launch(spec, args, shared_mem=smem_bytes(config)),))
