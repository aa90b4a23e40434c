"""fp32 implicit-GEMM convolution on tensor cores with fp32 accuracy (3xTF32), CUDA only:
ConvIgemmFwdTf32x3 (forward) and ConvIgemmBwdTf32x3 (backward data, stride 1), both on
kernels/cuda/igemm_fwd_tf32x3.cu with kernels/cuda/layout_f32.cu for layout changes.

Never plain TF32: each fp32 operand a is split on the fly into big = tf32(a) and
small = tf32(a - big), and each product is big*big + big*small + small*big (mma.sync m16n8k8,
fp32 accumulation), about 22 significant bits per operand where TF32 keeps 11. The error against
the float64 reference is that of an fp32 FFMA kernel (tests/backend/test_solvers_tf32x3.py
measures both), not TF32's (about 2^-11 of the result's scale).

GEMM view (forward): M = N*Ho*Wo output pixels, N = K output channels, reduction over R*S*C
filter taps gathered on the fly from NHWC x. Backward data with stride 1 is the forward
convolution of dy with the filter transposed (C outputs, K inputs) and flipped, padding
dilation*(R-1) - pad. The kernel reads NHWC activations and a [O][R][S][I] filter: NCHW tensors
are transposed into the workspace first and an NCHW output is written in place by the kernel's
epilogue; a filter in any other order (or flipped, backward) is repacked there. fp32,
groups = 1, C and K multiples of 4, every tensor under 2^31 elements, any stride, padding and
dilation forward.

The config is the block tile (``bm`` x ``bn`` outputs, ``bk`` reduction floats per pipeline
stage), the warp grid (``warps_m`` x ``warps_n``), the cp.async pipeline depth (``stages``) and
the split of the reduction (``split_k``: fp32 partial sums in the workspace, then a sum kernel)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from miopy.errors import bad
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Step, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.solvers.conv.igemm_common import (
    INT32_MAX,
    compute_units,
    cuda_2d_reason,
    is_nhwc,
    smem_limit,
    threads,
    warp_grid_ok,
)
from miopy.tensor import DataType, packed_strides

DOMAIN: dict[str, tuple[int, ...]] = {
    "bm": (32, 64, 128, 256),  # GEMM rows (output pixels) per block
    "bn": (16, 32, 64, 128, 256),  # GEMM columns (output channels) per block; 16 for narrow outputs
    "bk": (16, 32),  # reduction floats per pipeline stage
    "warps_m": (1, 2, 4),
    "warps_n": (1, 2, 4),
    "stages": (2, 3, 4, 5),
    "split_k": (1, 2, 3, 4, 6, 8),  # blocks sharing the reduction (fp32 partials, then a sum)
}
FIELDS = tuple(DOMAIN)
MAX_WARP_OUTPUTS = 64 * 32  # fp32 accumulators per warp (64 per thread; 64 x 64 tiles spill)
ALIGN = 256  # bytes: where each workspace region starts
SUM_THREADS = 256  # the work-group of the split-K sum
MIN_SLICE_TILES = 8  # pipeline steps of each slice of a split reduction, at least (search space)


def tile_config(bm: int, bn: int, bk: int, warps_m: int, warps_n: int, stages: int, split_k: int = 1) -> dict:
    return {
        "bm": bm,
        "bn": bn,
        "bk": bk,
        "warps_m": warps_m,
        "warps_n": warps_n,
        "stages": stages,
        "split_k": split_k,
    }


# default_config's choices: the fastest of 20 configs per layer on the ResNet-50 3x3 layers at
# batch 32 on an H200 (forward NHWC, 2026-11-22, scripts/bench_tf32x3.py): 128 x 64 blocks of
# four 64 x 32 warp tiles, 16 floats a stage and 4 stages (168 registers, 3 blocks per SM:
# 157 us on 128x28x28 where 32-float stages took 197 us) where the grid fills the device,
# 64 x 64 blocks where it does not, and for the 7x7 layer 128 x 128 blocks with the reduction
# split in 2 (215 us; 64 x 64 split in 3: 238 us).
DEFAULT_WIDE = tile_config(128, 64, 16, 2, 2, 4)  # K > 32
DEFAULT_NARROW = tile_config(128, 32, 32, 4, 1, 3)  # K <= 32
DEFAULT_NARROW_16 = tile_config(128, 16, 32, 4, 1, 4)  # K <= 16 (half of a 32-wide block is empty)
DEFAULT_SMALL_GRID = tile_config(64, 64, 16, 2, 2, 4)  # fewer than 2 blocks per SM
DEFAULT_SPLIT = tile_config(128, 128, 32, 2, 4, 3, 2)  # still fewer, K >= 128
FALLBACKS = (tile_config(64, 32, 16, 2, 1, 3), tile_config(32, 32, 16, 1, 2, 2))  # little shared memory
PREFERRED = (DEFAULT_WIDE, DEFAULT_NARROW, DEFAULT_NARROW_16, DEFAULT_SMALL_GRID, DEFAULT_SPLIT, *FALLBACKS)
SMALL_GRID_PER_CU = 2  # fewer blocks than this per SM: the small-grid default
SPLIT_GRID_PER_CU = 4  # the small-grid default splits the reduction up to this many blocks per SM


def smem_bytes(config: dict[str, int]) -> int:
    """Dynamic shared memory of the GEMM kernel: its pipeline stages of A and B tiles."""
    return config["stages"] * (config["bm"] + config["bn"]) * config["bk"] * 4


@dataclass(frozen=True)
class GemmShape:
    """The forward convolution the kernel runs: NHWC input n x h x w x c, filter k x r x s x c,
    NHWC output n x p x q x k."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    p: int
    q: int
    pads: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]

    @property
    def rows(self) -> int:
        return self.n * self.p * self.q

    @property
    def taps(self) -> int:
        return self.r * self.s * self.c

    def defines(self, config: dict[str, int]) -> dict[str, int]:
        shape = {
            "N": self.n, "C": self.c, "H": self.h, "W": self.w, "K": self.k, "R": self.r, "S": self.s,
            "P": self.p, "Q": self.q, "PH": self.pads[0], "PW": self.pads[1], "SH": self.strides[0],
            "SW": self.strides[1], "DH": self.dilations[0], "DW": self.dilations[1],
        }  # fmt: skip
        out = {"MIOPY_DTYPE": DataType.FP32.code}
        out.update({f"TX_{name}": int(v) for name, v in shape.items()})
        out.update({f"TX_{f.upper()}": config[f] for f in FIELDS})
        return out


def gemm_shape(problem: ConvProblem) -> GemmShape:
    """The forward convolution of a conv-view problem: itself forward and backward weights;
    backward data (stride 1) the convolution of dy with the transposed, flipped filter."""
    n, c, h, w = problem.x.lens
    k, _, r, s = problem.w.lens
    _, _, p, q = problem.y.lens
    dil = tuple(problem.conv.dilations)
    if problem.direction is not Direction.BACKWARD_DATA:
        return GemmShape(n, c, h, w, k, r, s, p, q, tuple(problem.pads), tuple(problem.conv.strides), dil)
    pads = (dil[0] * (r - 1) - problem.pads[0], dil[1] * (s - 1) - problem.pads[1])
    return GemmShape(n, k, p, q, c, r, s, h, w, pads, (1, 1), dil)


def k_tiles(shape: GemmShape, config: dict[str, int]) -> int:
    return -(-shape.taps // config["bk"])


def grid_blocks(shape: GemmShape, config: dict[str, int]) -> int:
    return -(-shape.rows // config["bm"]) * -(-shape.k // config["bn"])


def packed_as(desc, layout: str) -> bool:
    return tuple(desc.strides) == packed_strides(tuple(desc.lens), layout)


def fp32_ungrouped_reason(ctx, problem: ConvProblem, direction: Direction) -> str | None:
    """Why a 3xTF32 solver cannot take ``problem`` on the grounds all of them share: not a CUDA
    2-D problem of ``direction``, not fp32, or grouped (None when none of these holds)."""
    why = cuda_2d_reason(ctx, problem, direction)
    if why:
        return why
    if problem.dtype is not DataType.FP32:
        return f"dtype is {problem.dtype.value}, not FP32"
    if problem.conv.groups != 1:
        return f"groups={problem.conv.groups}"
    return None


def unpacked_reason(problem: ConvProblem) -> str | None:
    """The first of x, y, w that is neither packed NHWC nor packed NCHW, as a reason (None when
    every tensor is one of the two)."""
    for role in ("x", "y", "w"):
        desc = getattr(problem, role)
        if not (packed_as(desc, "NHWC") or packed_as(desc, "NCHW")):
            return f"{role} is neither packed NHWC nor packed NCHW"
    return None


def align(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def grid_1d(items: int, local: int = SUM_THREADS) -> tuple[tuple[int], tuple[int]]:
    return (-(-items // local) * local,), (local,)


def workspace_regions(sizes: dict[str, int]) -> dict[str, int]:
    """Byte offsets of workspace regions of ``sizes`` fp32 elements each, in order, each
    starting ALIGN-aligned (-1 for an empty region), and their ``total``."""
    regions, end = {}, 0
    for name, elements in sizes.items():
        regions[name] = end if elements else -1
        end += align(elements * 4)
    regions["total"] = end
    return regions


def region_operand(regions: dict[str, int], name: str, unplaced: Tensor | None) -> tuple[Any, np.int64]:
    """A kernel's (buffer, element offset) pair for workspace region ``name``: ``unplaced`` at
    offset 0 where the region is not used (-1), else the workspace at the region's floats."""
    if regions[name] < 0:
        return unplaced, np.int64(0)
    return Workspace(), np.int64(regions[name] // 4)


def split_gemm_spec(file: str, defines: dict[str, Any], config: dict[str, int], blocks: int) -> KernelSpec:
    """The GEMM kernel of kernels/cuda/``file``.cu (named as the file): ``blocks`` blocks of
    ``threads(config)`` per slice of the reduction, ``split_k`` slices (the grid's y)."""
    local = threads(config)
    return KernelSpec(file, file, defines, (blocks * local, config["split_k"]), (local, 1))


def tf32x3_candidates(
    domain: dict[str, tuple[int, ...]], cap_n: int | None = None
) -> Iterator[dict[str, int]]:
    """Every config of ``domain`` (in its field order) with ``bn`` <= ``cap_n`` (where given),
    less tiles of 64 x 64 and up on fewer than 128 threads (search spaces start here)."""
    fields = tuple(domain)
    for values in itertools.product(*(domain[f] for f in fields)):
        config = dict(zip(fields, values))
        if cap_n is not None and config["bn"] > cap_n:
            continue
        if threads(config) < 128 and config["bm"] * config["bn"] >= 64 * 64:
            continue
        yield config


class Tf32x3Solver(TunableSolver):
    """What the three 3xTF32 solvers share: applicability (CUDA, 2-D, fp32, groups = 1, packed
    NHWC or NCHW tensors, C and K multiples of 4; backward data also stride 1 and padding within
    the flipped filter), the config's warp-grid check, the workspace (a subclass's ``_layout``)
    and the check of a config given to get_program."""

    algorithm = "implicit_gemm"
    max_elements = INT32_MAX
    direction: ClassVar[Direction]

    # ---- applicability ---------------------------------------------------------------------------
    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        why = fp32_ungrouped_reason(ctx, problem, self.direction) or unpacked_reason(problem)
        if why:
            return why
        c, k = problem.x.lens[1], problem.w.lens[0]
        if c % 4 or k % 4:
            return f"C={c} and K={k} must be multiples of 4"
        if self.direction is Direction.BACKWARD_DATA:
            if tuple(problem.conv.strides) != (1, 1):
                return f"strides {tuple(problem.conv.strides)}: backward data needs stride 1"
            if min(gemm_shape(problem).pads) < 0:
                return "padding larger than dilation * (filter - 1)"
        return None

    def warp_grid_ok(self, ctx, config: Any, domain: dict[str, tuple[int, ...]]) -> bool:
        """igemm_common.warp_grid_ok with the 3xTF32 kernels' register budget (MAX_WARP_OUTPUTS)."""
        return warp_grid_ok(ctx, config, domain, MAX_WARP_OUTPUTS)

    def checked_config(self, ctx, problem: ConvProblem, config: dict[str, Any] | None) -> dict[str, Any]:
        """``config``, or the default where None; BadParm where it is not valid for ``problem``."""
        if config is None:
            return self.default_config(ctx, problem)
        if not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        return config

    # ---- program ---------------------------------------------------------------------------------
    def _layout(self, problem: ConvProblem, config: dict[str, int]) -> dict[str, int]:
        raise NotImplementedError

    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        return self._layout(problem, config or self.default_config(ctx, problem))["total"]


class _Tf32x3Solver(Tf32x3Solver):
    """Forward and backward data on kernels/cuda/igemm_fwd_tf32x3.cu."""

    reads: ClassVar[tuple[str, str]]  # (activation read, filter)
    writes: ClassVar[str]

    def gemm_shape(self, problem: ConvProblem) -> GemmShape:
        """The forward convolution the GEMM kernel runs for ``problem`` (a subclass may run
        another one: implicit_gemm_phase_tf32x3.py)."""
        return gemm_shape(problem)

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        """warp_grid_ok over DOMAIN, tiles every thread copies evenly, shared memory within the
        device's limit and no more slices of the reduction than it has pipeline steps."""
        if not self.warp_grid_ok(ctx, config, DOMAIN):
            return False
        t = threads(config)
        chunks = config["bk"] // 4
        if (config["bm"] * chunks) % t or (config["bn"] * chunks) % t:
            return False
        if config["split_k"] > k_tiles(self.gemm_shape(problem), config):
            return False
        return smem_bytes(config) <= smem_limit(ctx)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """DEFAULT_NARROW_16 for K <= 16 (output channels of the GEMM), DEFAULT_NARROW for K <= 32,
        else DEFAULT_WIDE, and where
        this one's grid has fewer than SMALL_GRID_PER_CU blocks per multiprocessor
        DEFAULT_SMALL_GRID; where that one is still short, DEFAULT_SPLIT for K >= 128 (each
        slice keeping MIN_SLICE_TILES steps), else DEFAULT_SMALL_GRID split over enough slices
        for SPLIT_GRID_PER_CU blocks per multiprocessor; FALLBACKS where shared memory is
        short."""
        shape = self.gemm_shape(problem)
        want = compute_units(ctx)
        first = DEFAULT_NARROW if shape.k <= 32 else DEFAULT_WIDE
        if shape.k <= 16:
            first = DEFAULT_NARROW_16
        if first is DEFAULT_WIDE and grid_blocks(shape, first) < SMALL_GRID_PER_CU * want:
            first = dict(DEFAULT_SMALL_GRID)
            if grid_blocks(shape, first) >= SMALL_GRID_PER_CU * want:
                pass
            elif shape.k >= 128 and k_tiles(shape, DEFAULT_SPLIT) >= 2 * MIN_SLICE_TILES:
                first = dict(DEFAULT_SPLIT)
            else:
                for split in DOMAIN["split_k"]:
                    if k_tiles(shape, first) < split * MIN_SLICE_TILES:
                        break
                    first["split_k"] = split
                    if grid_blocks(shape, first) * split >= SPLIT_GRID_PER_CU * want:
                        break
        for config in (first, *FALLBACKS):
            if self.is_valid_config(ctx, problem, config):
                return dict(config)
        return dict(FALLBACKS[-1])

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Valid configs with blocks no wider than the next power of two of the GEMM's columns
        (at least 32; 16-wide blocks only for 16 columns or fewer), 128 threads or more for
        tiles of 64 x 64 and up, and splits of the reduction only where the unsplit grid has
        fewer than 2 blocks per multiprocessor and each slice keeps MIN_SLICE_TILES pipeline steps."""
        shape = self.gemm_shape(problem)
        cap_n = max(16 if shape.k <= 16 else 32, 1 << (shape.k - 1).bit_length())
        cus = compute_units(ctx)
        out = []
        for config in tf32x3_candidates(DOMAIN, cap_n):
            split = config["split_k"]
            if config["bn"] < 32 < cap_n:
                continue
            if split > 1 and (
                grid_blocks(shape, config) >= 2 * cus or k_tiles(shape, config) < split * MIN_SLICE_TILES
            ):
                continue
            if self.is_valid_config(ctx, problem, config):
                out.append(config)
        return out or [self.default_config(ctx, problem)]

    # ---- program ---------------------------------------------------------------------------------
    def _layout(self, problem: ConvProblem, config: dict[str, int]) -> dict[str, int]:
        """Workspace regions (byte offsets; -1: not needed) and the total: the NHWC input, the
        packed filter and the split's partial sums (an NCHW output is written by the kernel)."""
        shape = self.gemm_shape(problem)
        act, _ = self.reads
        sizes = {
            "in": 0 if is_nhwc(getattr(problem, act)) else shape.n * shape.h * shape.w * shape.c,
            "filter": 0 if self._filter_as_is(problem) else shape.k * shape.taps,
            "part": 0 if config["split_k"] == 1 else config["split_k"] * shape.rows * shape.k,
        }
        return workspace_regions(sizes)

    def _filter_as_is(self, problem: ConvProblem) -> bool:
        return self.direction is Direction.FORWARD and is_nhwc(problem.w)

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        config = self.checked_config(ctx, problem, config)
        shape = self.gemm_shape(problem)
        regions = self._layout(problem, config)
        act, _ = self.reads
        steps: list[Step] = []
        if regions["in"] >= 0:  # NCHW -> NHWC: per image, C rows of H*W
            steps.append(
                transpose_launch(
                    Tensor(act), 0, Workspace(), regions["in"] // 4, shape.n, shape.c, shape.h * shape.w
                )
            )
        if regions["filter"] >= 0:
            steps.append(self._repack(problem, regions["filter"] // 4))
        defines = shape.defines(config)
        if not is_nhwc(getattr(problem, self.writes)):
            defines["TX_OUT_NCHW"] = 1  # the kernel (or the split's sum) writes NCHW itself
        split = config["split_k"]
        gemm = split_gemm_spec("igemm_fwd_tf32x3", defines, config, grid_blocks(shape, config))
        out = (Tensor(self.writes), np.int64(0))
        part = region_operand(regions, "part", None)
        args = (
            *region_operand(regions, "in", Tensor(act)),
            *region_operand(regions, "filter", Tensor("w")),
            *out,
            *part,
        )
        steps.append(Launch(gemm, args, shared_mem=smem_bytes(config)))
        if split > 1:
            total = shape.rows * shape.k
            global_size, local_size = grid_1d(total // 4)
            spec = KernelSpec("igemm_fwd_tf32x3", "tf32x3_splitk_sum", defines, global_size, local_size)
            steps.append(Launch(spec, (*part, *out)))
        return Program(tuple(steps), regions["total"], {"precision": "3xtf32"})

    def _repack(self, problem: ConvProblem, dst: int) -> Launch:
        """The filter into the workspace as [O][R][S][I]: forward O = K, I = C as it lies;
        backward data O = C, I = K, taps flipped."""
        k, c, r, s = problem.w.lens
        sk, sc, sr, ss = problem.w.strides
        if self.direction is Direction.FORWARD:
            o_n, i_n, o_stride, i_stride, flip = k, c, sk, sc, 0
        else:
            o_n, i_n, o_stride, i_stride, flip = c, k, sc, sk, 1
        spec_global, spec_local = grid_1d(k * c * r * s)
        spec = KernelSpec("layout_f32", "filter_repack_f32", {"MIOPY_DTYPE": 0}, spec_global, spec_local)
        args = (
            Tensor("w"), Workspace(), np.int64(dst),
            *(np.int32(v) for v in (o_n, i_n, r, s)),
            *(np.int64(v) for v in (o_stride, i_stride, sr, ss)),
            np.int32(flip),
        )  # fmt: skip
        return Launch(spec, args)


def transpose_launch(src, src_off: int, dst, dst_off: int, batches: int, rows: int, cols: int) -> Launch:
    """layout_f32's transpose_f32: ``batches`` packed rows x cols matrices to cols x rows."""
    global_size = (-(-cols // 32) * 32, -(-rows // 32) * 8, batches)
    spec = KernelSpec("layout_f32", "transpose_f32", {"MIOPY_DTYPE": 0}, global_size, (32, 8, 1))
    args = (src, np.int64(src_off), dst, np.int64(dst_off), np.int32(rows), np.int32(cols))
    return Launch(spec, args)


class ConvIgemmFwdTf32x3(_Tf32x3Solver):
    name = "ConvIgemmFwdTf32x3"
    id = 220  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.FORWARD
    reads, writes = ("x", "w"), "y"
    epilogue_files = frozenset({"igemm_fwd_tf32x3"})  # the GEMM kernel or its split's sum writes y
    epilogue_bias = True


class ConvIgemmBwdTf32x3(_Tf32x3Solver):
    name = "ConvIgemmBwdTf32x3"
    id = 221
    direction = Direction.BACKWARD_DATA
    reads, writes = ("y", "w"), "x"  # backward data: dy is role y (read), dx is role x (written)
    epilogue_files = frozenset({"igemm_fwd_tf32x3"})
