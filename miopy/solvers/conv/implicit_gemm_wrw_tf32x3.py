"""ConvIgemmWrwTf32x3: fp32 implicit-GEMM backward-weights convolution on tensor cores with fp32
accuracy (3xTF32), CUDA only: kernels/cuda/igemm_wrw_tf32x3.cu (layout changes in
kernels/cuda/layout_f32.cu). The arithmetic is implicit_gemm_tf32x3.py's: never plain TF32.

GEMM view: M = K output channels, N = R*S*C filter taps, reduction over the N*Ho*Wo output
pixels with x's im2col gathered on the fly; the reduction is long and the output small, so it is
split over ``split_k`` blocks (fp32 partial filters in the workspace, then a sum kernel). NHWC
x and dy are read as they lie, NCHW ones are transposed into the workspace first; the kernel (or
the split's sum) writes dw as it lies, K x R x S x C or (unsplit) K x C x R x S. fp32, groups = 1, C and K
multiples of 4, any stride, padding and dilation.

The config: block tile (``bm`` output channels x ``bn`` taps, ``bk`` pixels per pipeline stage),
warp grid, pipeline stages, and the split of the reduction."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Step, Tensor, Workspace
from miopy.solvers.conv.igemm_common import compute_units, is_nhwc, smem_limit, threads
from miopy.solvers.conv.implicit_gemm_tf32x3 import (
    Tf32x3Solver,
    gemm_shape,
    grid_1d,
    region_operand,
    split_gemm_spec,
    tf32x3_candidates,
    tile_config,
    transpose_launch,
    workspace_regions,
)

DOMAIN: dict[str, tuple[int, ...]] = {
    "bm": (32, 64, 128, 256),  # output channels per block
    "bn": (32, 64, 128, 256),  # filter taps per block
    "bk": (16, 32),  # output pixels (the reduction) per pipeline stage
    "warps_m": (1, 2, 4),
    "warps_n": (1, 2, 4),
    "stages": (2, 3, 4, 5),
    "split_k": (1, 2, 4, 8, 16, 32, 64),  # blocks sharing the reduction
}
MIN_SLICE_TILES = 16  # pipeline steps of a slice of the reduction, at least (default, search space)
BLOCKS_PER_CU = 4  # the default splits the reduction until the grid has this many blocks per SM


# default_config's tiles: the fastest of 8 per layer on the ResNet-50 3x3 layers at batch 32 on an
# H200 (NHWC, 2026-11-22, scripts/bench_tf32x3.py), each best with the reduction split over
# about 4 blocks per SM. A later sweep of 8 tiles x 2 splits (scripts/bench_tf32x3_pad.py,
# 128x28², 256x14², 512x7², NHWC and NCHW) put 16-float stages with 4 of them first on all three
# (NHWC 189-192 us against 207-214 us for 32-float stages; 175 registers, 2 blocks per SM).
DEFAULT_WIDE = tile_config(128, 64, 16, 2, 2, 4)  # K > 64 (split chosen per problem)
DEFAULT_NARROW = tile_config(64, 64, 32, 2, 2, 4)  # K <= 64
FALLBACKS = (tile_config(32, 64, 16, 1, 2, 2),)  # little shared memory


def smem_bytes(config: dict[str, int]) -> int:
    """The pipeline's stages of k-major A and B tiles, rows padded by 8 floats."""
    return config["stages"] * config["bk"] * (config["bm"] + 8 + config["bn"] + 8) * 4


def j_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Pipeline steps of the whole reduction (N*Ho*Wo output pixels, ``bk`` at a time)."""
    n, _, p, q = problem.y.lens
    return -(-(n * p * q) // config["bk"])


def grid_blocks(problem: ConvProblem, config: dict[str, int]) -> int:
    k, c, r, s = problem.w.lens
    return -(-k // config["bm"]) * -(-(r * s * c) // config["bn"])


class ConvIgemmWrwTf32x3(Tf32x3Solver):
    name = "ConvIgemmWrwTf32x3"
    id = 222  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.BACKWARD_WEIGHTS

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        """warp_grid_ok over DOMAIN, rows of each tile copied evenly with a fixed column per
        thread, shared memory within the device's limit, and no more slices of the reduction
        than it has pipeline steps."""
        if not self.warp_grid_ok(ctx, config, DOMAIN):
            return False
        t = threads(config)
        for cols in (config["bm"] // 4, config["bn"] // 4):
            if t % cols or (config["bk"] * cols) % t:
                return False
        if config["split_k"] > j_tiles(problem, config):
            return False
        return smem_bytes(config) <= smem_limit(ctx)

    def _split_for(self, ctx, problem: ConvProblem, config: dict[str, int]) -> int:
        """The smallest split that gives BLOCKS_PER_CU blocks per multiprocessor, keeping
        MIN_SLICE_TILES pipeline steps per slice."""
        want = BLOCKS_PER_CU * compute_units(ctx)
        split = 1
        for s in DOMAIN["split_k"]:
            if j_tiles(problem, config) < s * MIN_SLICE_TILES:
                break
            split = s
            if grid_blocks(problem, config) * s >= want:
                break
        return split

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """DEFAULT_NARROW for K <= 64, else DEFAULT_WIDE, each with the split that fills the
        device (``_split_for``); FALLBACKS where shared memory is short."""
        first = DEFAULT_NARROW if problem.w.lens[0] <= 64 else DEFAULT_WIDE
        for base in (first, *FALLBACKS):
            config = {**base, "split_k": self._split_for(ctx, problem, base)}
            if self.is_valid_config(ctx, problem, config):
                return config
        return dict(FALLBACKS[-1])

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Valid configs with 128 threads or more for tiles of 64 x 64 and up, each block tile
        with splits from none up to twice the default's rule (slices of MIN_SLICE_TILES steps
        at least)."""
        out = []
        for config in tf32x3_candidates(DOMAIN):
            split = config["split_k"]
            if split > 1 and (
                split > 2 * self._split_for(ctx, problem, config)
                or j_tiles(problem, config) < split * MIN_SLICE_TILES
            ):
                continue
            if self.is_valid_config(ctx, problem, config):
                out.append(config)
        return out or [self.default_config(ctx, problem)]

    # ---- program ---------------------------------------------------------------------------------
    def _layout(self, problem: ConvProblem, config: dict[str, int]) -> dict[str, int]:
        """Workspace regions (byte offsets; -1: not needed) and the total."""
        shape = gemm_shape(problem)
        filt = shape.k * shape.taps
        sizes = {
            "x": 0 if is_nhwc(problem.x) else shape.n * shape.h * shape.w * shape.c,
            "dy": 0 if is_nhwc(problem.y) else shape.rows * shape.k,
            # an NCHW dw behind a split: summed K x R x S x C here, then transposed (the sum
            # writing K x C x R x S itself, strided, was 8% slower on the 7x7 layer)
            "dw": filt if not is_nhwc(problem.w) and config["split_k"] > 1 else 0,
            "part": 0 if config["split_k"] == 1 else config["split_k"] * filt,
        }
        return workspace_regions(sizes)

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        config = self.checked_config(ctx, problem, config)
        shape = gemm_shape(problem)
        regions = self._layout(problem, config)
        steps: list[Step] = []
        if regions["x"] >= 0:
            steps.append(
                transpose_launch(
                    Tensor("x"), 0, Workspace(), regions["x"] // 4, shape.n, shape.c, shape.h * shape.w
                )
            )
        if regions["dy"] >= 0:
            steps.append(
                transpose_launch(
                    Tensor("y"), 0, Workspace(), regions["dy"] // 4, shape.n, shape.k, shape.p * shape.q
                )
            )
        defines = shape.defines(config)
        if not is_nhwc(problem.w) and regions["dw"] < 0:
            defines["TX_OUT_NCHW"] = 1  # dw written K x C x R x S by the kernel
        split = config["split_k"]
        gemm = split_gemm_spec("igemm_wrw_tf32x3", defines, config, grid_blocks(problem, config))
        part = region_operand(regions, "part", None)
        out = region_operand(regions, "dw", Tensor("w"))
        ins = (*region_operand(regions, "x", Tensor("x")), *region_operand(regions, "dy", Tensor("y")))
        steps.append(Launch(gemm, (*ins, *out, *part), shared_mem=smem_bytes(config)))
        if split > 1:
            global_size, local_size = grid_1d(shape.k * shape.taps // 4)
            spec = KernelSpec("igemm_wrw_tf32x3", "tf32x3_wrw_sum", defines, global_size, local_size)
            steps.append(Launch(spec, (*part, *out)))
        if regions["dw"] >= 0:  # K x (R*S) x C -> K x C x (R*S)
            rows = shape.r * shape.s
            steps.append(
                transpose_launch(Workspace(), regions["dw"] // 4, Tensor("w"), 0, shape.k, rows, shape.c)
            )
        return Program(tuple(steps), regions["total"], {"precision": "3xtf32"})
