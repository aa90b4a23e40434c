"""fp32 implicit-GEMM convolution on the CUDA cores (plain FFMA, true fp32, no tensor cores), CUDA
only: ConvIgemmFfmaFwd, ConvIgemmFfmaBwd and ConvIgemmFfmaWrw, one kernel file for the three
(kernels/cuda/igemm_ffma.cu).

GEMM views, the im2col gather done while the tiles are loaded (no im2col workspace):

* forward: M = N*Ho*Wo output pixels, N = K output channels, reduction over C*R*S taps;
* backward data: M = N*H*W input pixels, N = C, reduction over K*R*S, where dy is read at
  ((h + pad - r*dil) / stride) only where that division is exact and in range (strides > 1 skip
  the other taps; no zero-inserted dy is ever made);
* backward weights: M = K, N = C*R*S taps, reduction over N*Ho*Wo, split over ``split_k``
  blocks whose fp32 partial filters a second kernel sums in a fixed order (deterministic).

Every tensor is read and written through its own strides (NCHW, NHWC, mixed, padded), so there
is no layout change and no workspace except a split's partials; groups are the grid's z.

The config: the block tile (``bm`` x ``bn`` outputs, ``bk`` reduction elements per shared slice,
two slices double-buffered), the register block of a thread (``tm`` x ``tn`` outer products, 4
or 8 each: 64 to 256 threads) and the split of the reduction (``split_k``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, ClassVar

from miopy.errors import bad
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.solvers.conv.igemm_common import INT32_MAX, compute_units, cuda_2d_reason, smem_limit
from miopy.tensor import DataType

DOMAIN: dict[str, tuple[int, ...]] = {
    "bm": (32, 64, 128, 256),  # GEMM rows per block
    "bn": (32, 64, 128, 256),  # GEMM columns per block
    "bk": (8, 16),  # reduction elements per shared-memory slice
    "tm": (4, 8),  # rows of a thread's register block
    "tn": (4, 8),  # columns of a thread's register block
    "split_k": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128),  # blocks sharing the reduction
}
FIELDS = tuple(DOMAIN)
MIN_THREADS, MAX_THREADS = 64, 256
MAX_GROUPS = 65535  # the grid's z
SUM_THREADS = 256  # the work-group of the split's sum
MIN_SLICE_TILES = 8  # shared slices of each part of a split reduction, at least
# The search space splits the reduction where the unsplit grid has fewer threads than this per
# multiprocessor (two blocks of 256 threads at about 128 registers each: what one H200 SM holds).
FILL_THREADS_PER_CU = 512
# estimate_us's constants, from the H200 (scripts/bench_ffma.py, ResNet-50 layers at batch 32,
# 2026-11-23): a multiprocessor sustains about 0.25 TFLOP/s of these kernels (33 of the device's
# 60 FFMA TFLOP/s) once it holds FULL_WARPS warps, proportionally less below; a split's partial
# sums move at about 2.5 TB/s, three times slower where neighbouring threads own neighbouring
# rows (the kernel's partial tiles are row-major: those stores are scattered).
SM_FLOPS = 0.25e12
FULL_WARPS = 12
PARTIAL_BYTES_PER_S = 2.5e12
SCATTERED_PARTIALS = 3.0
RESIDENT_REGISTERS = 64 * 1024 // 128  # threads one SM holds at ~128 registers each
NARROW_GEMM = 8  # GEMM rows or columns per group below which the solver defers (immediate mode)


def ffma_config(bm: int, bn: int, bk: int, tm: int, tn: int, split_k: int = 1) -> dict[str, int]:
    return {"bm": bm, "bn": bn, "bk": bk, "tm": tm, "tn": tn, "split_k": split_k}


FALLBACK = ffma_config(32, 32, 8, 4, 4)  # 64 threads, 2.3 KB of shared memory
# the tiles default_config weighs (with every split); 8 x 8 register blocks but on 32-wide sides
DEFAULT_TILES = (
    ffma_config(128, 128, 8, 8, 8),
    ffma_config(128, 64, 8, 8, 8),
    ffma_config(64, 128, 8, 8, 8),
    ffma_config(256, 64, 8, 8, 8),
    ffma_config(64, 256, 8, 8, 8),
    ffma_config(64, 64, 8, 8, 8),
    ffma_config(128, 32, 8, 8, 4),
    ffma_config(32, 128, 8, 4, 8),
    ffma_config(32, 32, 8, 4, 4),
)


def threads(config: dict[str, int]) -> int:
    return (config["bm"] // config["tm"]) * (config["bn"] // config["tn"])


def smem_bytes(config: dict[str, int]) -> int:
    """Two slices of A (bk x bm) and B (bk x bn), rows padded by 4 floats."""
    return 2 * config["bk"] * (config["bm"] + 4 + config["bn"] + 4) * 4


def gemm_dims(problem: ConvProblem) -> tuple[int, int, int]:
    """(rows, columns, reduction) of one group's GEMM in the problem's direction."""
    n, c_all, h, w = problem.x.lens
    k_all, _, r, s = problem.w.lens
    _, _, p, q = problem.y.lens
    g = problem.conv.groups
    c, k = c_all // g, k_all // g
    if problem.direction is Direction.FORWARD:
        return n * p * q, k, c * r * s
    if problem.direction is Direction.BACKWARD_DATA:
        return n * h * w, c, k * r * s
    return k, c * r * s, n * p * q


def k_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    return -(-gemm_dims(problem)[2] // config["bk"])


def grid_blocks(problem: ConvProblem, config: dict[str, int]) -> int:
    """Blocks of one slice of the reduction, all groups."""
    rows, cols, _ = gemm_dims(problem)
    return -(-rows // config["bm"]) * -(-cols // config["bn"]) * problem.conv.groups


def tile_efficiency(config: dict[str, int]) -> float:
    """The share of SM_FLOPS a block shape reaches (H200, ResNet-50 3x3 layers, 2026-11-23): 8 x 8
    register blocks on tiles of 8192 outputs or more 1, on 64 x 64 tiles (two warps) 0.8, 8 x 4
    blocks 0.85, 4 x 4 blocks 0.7 (fewer products per value read from shared memory)."""
    block = config["tm"] * config["tn"]
    if block == 64:
        return 1.0 if config["bm"] * config["bn"] >= 8192 else 0.8
    return 0.85 if block == 32 else 0.7


def estimate_us(ctx, problem: ConvProblem, config: dict[str, int]) -> float:
    """A model of the kernel's time on ``problem``, for ranking configs: the busiest
    multiprocessor's share of the blocks (whole blocks: wave quantisation), each a bm x bn tile
    over its part of the reduction at SM_FLOPS times tile_efficiency (less with fewer than
    FULL_WARPS resident warps),
    plus a split's partial sums written, read and summed (PARTIAL_BYTES_PER_S, SCATTERED_PARTIALS
    where the output tile's rows are the threads' fast axis)."""
    rows, cols, reduction = gemm_dims(problem)
    split = config["split_k"]
    cus = compute_units(ctx)
    t = threads(config)
    blocks = grid_blocks(problem, config) * split
    per_cu = -(-blocks // cus)
    resident_warps = min(per_cu, max(1, RESIDENT_REGISTERS // t)) * t // 32
    speed = SM_FLOPS * min(1.0, resident_warps / FULL_WARPS) * tile_efficiency(config)
    block_flops = 2.0 * config["bm"] * config["bn"] * -(-reduction // split)
    us = per_cu * block_flops / speed * 1e6
    if split > 1:
        moved = (2 * split + 1) * rows * cols * problem.conv.groups * 4
        slow = SCATTERED_PARTIALS if defines(problem, config)["FF_OUT_MFAST"] else 1.0
        us += moved / PARTIAL_BYTES_PER_S * slow * 1e6
    return us


def _pow2_cap(extent: int) -> int:
    return max(32, 1 << (extent - 1).bit_length())


def _channels_last(desc) -> bool:
    return desc.strides[1] == 1


def defines(problem: ConvProblem, config: dict[str, int]) -> dict[str, int]:
    """The kernel's compile-time defines: the shape (C and K of one group), the tensors' strides,
    the direction, the load orders and the config."""
    n, c_all, h, w = problem.x.lens
    k_all, _, r, s = problem.w.lens
    _, _, p, q = problem.y.lens
    g = problem.conv.groups
    direction = problem.direction
    x, wt, y = problem.x, problem.w, problem.y
    if direction is Direction.FORWARD:
        cfast = _channels_last(x)  # taps (r, s, c) as x lies
        a_mfast = not _channels_last(x)  # neighbouring output pixels are neighbours in x
        b_nfast = False  # w rows are taps
        out_mfast = not _channels_last(y)
    elif direction is Direction.BACKWARD_DATA:
        cfast = _channels_last(y)
        a_mfast = not _channels_last(y)
        b_nfast = _channels_last(wt)  # columns c lie together in a channels-last filter
        out_mfast = not _channels_last(x)
    else:
        cfast = _channels_last(wt)  # columns (r, s, c) as dw lies
        a_mfast = _channels_last(y)  # rows k lie together in channels-last dy
        b_nfast = _channels_last(x)
        out_mfast = False
    values = {
        "N": n, "C": c_all // g, "H": h, "W": w, "K": k_all // g, "R": r, "S": s, "P": p, "Q": q,
        "PH": problem.pads[0], "PW": problem.pads[1],
        "SH": problem.conv.strides[0], "SW": problem.conv.strides[1],
        "DH": problem.conv.dilations[0], "DW": problem.conv.dilations[1], "G": g,
        "XSN": x.strides[0], "XSC": x.strides[1], "XSH": x.strides[2], "XSW": x.strides[3],
        "WSK": wt.strides[0], "WSC": wt.strides[1], "WSR": wt.strides[2], "WSS": wt.strides[3],
        "YSN": y.strides[0], "YSC": y.strides[1], "YSH": y.strides[2], "YSW": y.strides[3],
        "DIR": {Direction.FORWARD: 0, Direction.BACKWARD_DATA: 1, Direction.BACKWARD_WEIGHTS: 2}[direction],
        "CFAST": cfast, "A_MFAST": a_mfast, "B_NFAST": b_nfast, "OUT_MFAST": out_mfast,
        "BM": config["bm"], "BN": config["bn"], "BK": config["bk"], "TM": config["tm"],
        "TN": config["tn"], "SPLIT": config["split_k"],
    }  # fmt: skip
    out = {"MIOPY_DTYPE": DataType.FP32.code}
    out.update({f"FF_{name}": int(v) for name, v in values.items()})
    return out


class _FfmaSolver(TunableSolver):
    """What the three directions share: applicability, configs, the program."""

    algorithm = "implicit_gemm"
    max_elements = INT32_MAX
    direction: ClassVar[Direction]
    reads: ClassVar[tuple[str, str]]  # (A, B) of the GEMM
    writes: ClassVar[str]

    # ---- applicability ---------------------------------------------------------------------------
    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        why = cuda_2d_reason(ctx, problem, self.direction)
        if why:
            return why
        if problem.dtype is not DataType.FP32:
            return f"dtype is {problem.dtype.value}, not FP32"
        if problem.conv.groups > MAX_GROUPS:
            return f"groups={problem.conv.groups} > {MAX_GROUPS}"
        for role in ("x", "w", "y"):
            if min(getattr(problem, role).strides) < 1:
                return f"{role} has a stride below 1"
        return None

    def defers(self, ctx, problem: ConvProblem) -> bool:
        """A GEMM narrower than NARROW_GEMM on a side (depthwise and near-depthwise groups): the
        tiles, 32 wide at least, would be mostly empty; immediate mode lists it after the others."""
        return min(gemm_dims(problem)[:2]) < NARROW_GEMM

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        """Exactly DOMAIN's fields with values from it, MIN_THREADS to MAX_THREADS threads (no
        more than the device allows), A and B slices every thread loads evenly, no more parts of
        the reduction than it has slices, shared memory within the device's limit."""
        if not isinstance(config, dict) or set(config) != set(DOMAIN):
            return False
        for key, value in config.items():
            if type(value) is not int or value not in DOMAIN[key]:
                return False
        t = threads(config)
        info = getattr(ctx, "info", None)
        most = MAX_THREADS if info is None else min(MAX_THREADS, info.max_work_group_size)
        if not MIN_THREADS <= t <= most:
            return False
        if (config["bm"] * config["bk"]) % t or (config["bn"] * config["bk"]) % t:
            return False
        if config["split_k"] > k_tiles(problem, config):
            return False
        return smem_bytes(config) <= smem_limit(ctx)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """The valid config of DEFAULT_TILES x DOMAIN's splits (each part keeping MIN_SLICE_TILES
        slices) that estimate_us puts first; FALLBACK where none is valid."""
        best, best_us = None, float("inf")
        for tile in DEFAULT_TILES:
            for split in DOMAIN["split_k"]:
                config = {**tile, "split_k": split}
                if split > 1 and k_tiles(problem, config) < split * MIN_SLICE_TILES:
                    break
                if not self.is_valid_config(ctx, problem, config):
                    continue
                us = estimate_us(ctx, problem, config)
                if us < best_us:
                    best, best_us = config, us
        return dict(best or FALLBACK)

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Valid configs with tiles no larger than the next power of two of the GEMM's sides (at
        least 32), each unsplit and, where the unsplit grid has fewer than FILL_THREADS_PER_CU
        threads per multiprocessor, split up to 4x that, each part keeping MIN_SLICE_TILES
        slices."""
        rows, cols, _ = gemm_dims(problem)
        want = FILL_THREADS_PER_CU * compute_units(ctx)
        out = []
        for bm, bn, bk, tm, tn in itertools.product(*(DOMAIN[f] for f in FIELDS[:-1])):
            if bm > _pow2_cap(rows) or bn > _pow2_cap(cols):
                continue
            config = ffma_config(bm, bn, bk, tm, tn)
            if not self.is_valid_config(ctx, problem, config):
                continue
            out.append(config)
            blocks = grid_blocks(problem, config) * threads(config)
            if blocks >= want:
                continue
            for split in DOMAIN["split_k"][1:]:
                if blocks * split > 4 * want or k_tiles(problem, config) < split * MIN_SLICE_TILES:
                    break
                out.append({**config, "split_k": split})
        return out or [self.default_config(ctx, problem)]

    # ---- program ---------------------------------------------------------------------------------
    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        config = config or self.default_config(ctx, problem)
        if config["split_k"] == 1:
            return 0
        rows, cols, _ = gemm_dims(problem)
        return config["split_k"] * rows * cols * problem.conv.groups * 4

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        defs = defines(problem, config)
        t = threads(config)
        groups = problem.conv.groups
        grid = (grid_blocks(problem, config) // groups * t, config["split_k"], groups)
        gemm = KernelSpec("igemm_ffma", "igemm_ffma", defs, grid, (t, 1, 1))
        split = config["split_k"] > 1
        a, b = self.reads
        part = Workspace() if split else None
        args = (Tensor(a), Tensor(b), Tensor(self.writes), part)
        steps = [Launch(gemm, args, shared_mem=smem_bytes(config))]
        if split:
            rows, cols, _ = gemm_dims(problem)
            total = rows * cols * problem.conv.groups
            size = -(-total // SUM_THREADS) * SUM_THREADS
            spec = KernelSpec("igemm_ffma", "igemm_ffma_sum", defs, (size,), (SUM_THREADS,))
            steps.append(Launch(spec, (Workspace(), Tensor(self.writes))))
        return Program(tuple(steps), self.workspace_size(ctx, problem, config), {"precision": "fp32"})


class ConvIgemmFfmaFwd(_FfmaSolver):
    name = "ConvIgemmFfmaFwd"
    id = 270  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.FORWARD
    reads, writes = ("x", "w"), "y"


class ConvIgemmFfmaBwd(_FfmaSolver):
    name = "ConvIgemmFfmaBwd"
    id = 271
    direction = Direction.BACKWARD_DATA
    reads, writes = ("y", "w"), "x"  # dy is role y (read), dx role x (written)


class ConvIgemmFfmaWrw(_FfmaSolver):
    name = "ConvIgemmFfmaWrw"
    id = 272
    direction = Direction.BACKWARD_WEIGHTS
    reads, writes = ("y", "x"), "w"  # A = dy (K x pixels), B = x gathered (pixels x taps)
