"""1x1 convolutions that stream the activations through shared memory once (CUDA, sm_80 and
later, fp16 / bf16, packed NHWC, stride 1, no padding, groups = 1): kernels/cuda/gemm1x1_stream.cu.

Where C or K is small (ResNet-50's 64 -> 64 and 64 <-> 256 layers) such a convolution is a copy
of its activations, not a GEMM: the whole filter fits in shared memory, so a block keeps it there
and pours row tiles of x through a cp.async pipeline, writing y with 16-byte streaming stores, and
no byte of x or y moves twice (Conv1x1StreamFwd, Conv1x1StreamBwd: backward data is the same
product with dy in and the filter read transposed). The weights (Conv1x1StreamWrw) are a long
reduction over the N*H*W rows into a small dw: blocks own dw tiles and sum over shares of the
rows, reading dy and x once each, and a second kernel adds the blocks' fp32 partials.

The blocks are persistent (as many as the multiprocessors hold at once, each walking every
gridDim-th row tile), so the pipeline never drains between tiles. Configs are few (the block's
rows, its pipeline depth, the column block, the dw tile); find times every one
(``search_in_find``) beside cuBLAS / cuBLASLt and keeps the fastest.

On the H200 (ResNet-50 at batch 32, L2 flushed, benchmarks/conv.py, 2026-11-23), against cuDNN:
64 -> 256 forward 20.9 us against 25.3 (fp16) and 23.0 (bf16), where cuBLASLt took 23.1; 64 ->
64 backward data 11.3 against 12.1, weights 16.9 against 18.9 (cuBLASLt: 18.9), forward 11.65
against 11.8. Backward data at 256 -> 64 took 24.5 against cuBLASLt's 23.5 (find keeps cuBLASLt).
Measured under the benchmark's L2 flush (a memset that leaves the L2 full of dirty lines), a layer
costs more than its bytes over the copy rate: 64 -> 64 forward reaches 53% of that floor on every
side."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from miopy.errors import bad
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.solvers.conv.igemm_common import (
    arch_number,
    compute_units,
    cuda_2d_reason,
    not_nhwc_reason,
    smem_limit,
)
from miopy.tensor import DataType

FILE = "gemm1x1_stream"
MMA_ARCH = 80  # cp.async and mma.sync m16n8k16 (bf16 too)
SM_SMEM = 233472  # shared memory of one multiprocessor (sm_90: 228 KB)
BLOCK_RESERVED = 1024  # shared memory the system keeps per block
SM_THREADS = 2048
SM_REGS = 65536
REGS_PER_THREAD = 128  # what the kernels are budgeted (their accumulators are at most 64 floats)
MAX_NI = 256  # the reduction of the rows kernel: a whole row tile and filter slice in shared memory
# The most filter elements (K * C) they take. Past it the product is compute-bound rather than a
# copy, and cuBLASLt's Hopper kernels win: on the H200 (fp16, L2 flushed, 2026-11-23) these took
# 1.3-2.5x cuDNN's time on ResNet-50's 256 x 128, 128 x 512, 512 x 256 and 256 x 1024 layers in
# every direction (e.g. 34.7 us against 27.6 forward at 256 -> 128, 47 us against 19.7 backward at
# 512 -> 256), while at 64 x 64 and 64 x 256 they were level or faster.
MAX_FILTER = 64 * 256
# Conv1x1StreamWrw likewise: at 64 x 256 it took 35.9 us where cuBLAS took 29.4 (H200, fp16), at
# 64 x 64 16.9 us where cuDNN takes 18.6-18.9.
MAX_FILTER_WRW = 64 * 64
PITCH = 72  # elements of a row of a warp's output staging tile
SUM_COLS, SUM_PARTS = 16, 16  # gemm1x1_wrw_sum: 4-value columns per block, partial lanes per column

ROWS_DOMAIN: dict[str, tuple[int, ...]] = {
    "bm": (64, 128),  # rows per tile
    "fm": (1, 2),  # 16-row fragments per warp (bm / (16 * fm) warps)
    "bno": (64, 128, 256),  # output columns per block (the filter slice it holds)
    "kw": (32, 64, 128, 256),  # channels of a row per pipeline step (a tile is NI / kw steps)
    "stages": (2, 3, 4, 5, 6, 7, 8),  # steps in the cp.async ring
}
WRW_DOMAIN: dict[str, tuple[int, ...]] = {
    "tk": (64, 128, 256),  # dw rows (output channels) per block
    "tc": (64, 128),  # dw columns (input channels) per block
    "wk": (1, 2, 4),  # warps along the rows
    "wc": (1, 2, 4),  # warps along the columns
    "bm": (32, 64, 128),  # rows of dy and x per pipeline stage
    "stages": (3, 4, 5),
    "occ": (1, 2, 3, 4),  # blocks per multiprocessor the grid is sized for (the split)
}


def rows_config(bm: int, fm: int, bno: int, kw: int, stages: int) -> dict[str, int]:
    return {"bm": bm, "fm": fm, "bno": bno, "kw": kw, "stages": stages}


def wrw_config(tk: int, tc: int, wk: int, wc: int, bm: int, stages: int, occ: int) -> dict[str, int]:
    return {"tk": tk, "tc": tc, "wk": wk, "wc": wc, "bm": bm, "stages": stages, "occ": occ}


def stream_reason(ctx, problem: ConvProblem, direction: Direction) -> str | None:
    """Why the streaming 1x1 kernels cannot take ``problem`` (None when they can)."""
    why = cuda_2d_reason(ctx, problem, direction)
    if why:
        return why
    if arch_number(ctx) < MMA_ARCH:
        return f"arch {getattr(getattr(ctx, 'info', None), 'arch', None)}: needs sm_80 or later"
    if problem.dtype not in (DataType.FP16, DataType.BF16):
        return f"dtype is {problem.dtype.value}, not FP16 or BF16"
    if problem.conv.groups != 1:
        return f"groups={problem.conv.groups}"
    if tuple(problem.w.lens[2:]) != (1, 1) or any(v != 1 for v in problem.conv.strides) or any(problem.pads):
        return "not a 1x1 filter with stride 1 and no padding"
    why = not_nhwc_reason(problem)
    if why:
        return why
    if rows(problem) * max(problem.x.lens[1], problem.w.lens[0]) > 2**31 - 1:
        return "more than 2^31 elements"
    k, c = problem.w.lens[0], problem.w.lens[1]
    if k * c > MAX_FILTER:
        return f"K x C = {k} x {c}: more than {MAX_FILTER} filter elements (compute-bound)"
    return None


def rows(problem: ConvProblem) -> int:
    n, _, h, w = problem.x.lens
    return n * h * w


def blocks_per_sm(smem: int, threads: int) -> int:
    """Blocks of ``smem`` bytes and ``threads`` threads one multiprocessor holds at once."""
    by_smem = SM_SMEM // (smem + BLOCK_RESERVED)
    return max(1, min(by_smem, SM_THREADS // threads, SM_REGS // (threads * REGS_PER_THREAD)))


def _valid_fields(config: Any, domain: dict[str, tuple[int, ...]]) -> bool:
    if not isinstance(config, dict) or set(config) != set(domain):
        return False
    return all(type(v) is int and v in domain[k] for k, v in config.items())


# ---- forward and backward data: gemm1x1_rows ----------------------------------------------------------
def rows_threads(config: dict[str, int]) -> int:
    return config["bm"] // (16 * config["fm"]) * 32


def rows_smem(ni: int, config: dict[str, int]) -> int:
    """The filter slice, the ring of steps and each warp's output staging tile."""
    warps = rows_threads(config) // 32
    staging = warps * 16 * config["fm"] * PITCH * 2
    return (config["bno"] * ni + config["stages"] * config["bm"] * config["kw"]) * 2 + staging


class _RowsSolver(TunableSolver):
    """out[M, NO] = in[M, NI] . filter (forward: x -> y, filter K x C; backward data: dy -> dx,
    the filter read as C x K)."""

    primitive = "conv"
    algorithm = "gemm"
    search_in_find = True
    direction: ClassVar[Direction]
    reads: ClassVar[tuple[str, str]]
    writes: ClassVar[str]
    transposed: ClassVar[int]  # G1_WT

    def dims(self, problem: ConvProblem) -> tuple[int, int]:
        """(NI, NO): the reduction and the output columns."""
        k, c = problem.w.lens[0], problem.w.lens[1]
        return (k, c) if self.transposed else (c, k)

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        why = stream_reason(ctx, problem, self.direction)
        if why:
            return why
        ni, no = self.dims(problem)
        if not (ni == 32 or (ni % 64 == 0 and ni <= MAX_NI)):
            return f"reduction of {ni} channels: 32 or a multiple of 64 up to {MAX_NI}"
        if no % 64:
            return f"{no} output channels: not a multiple of 64"
        if not any(True for _ in self.search_space(ctx, problem)):
            return "no config fits in shared memory"
        return None

    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not _valid_fields(config, ROWS_DOMAIN):
            return False
        ni, no = self.dims(problem)
        if config["bm"] < 16 * config["fm"] * 2 or no % config["bno"]:
            return False  # at least two warps
        if ni % config["kw"] or (ni > config["kw"] and config["bno"] != 64):
            return False  # a tile of several steps accumulates one 64-column chunk
        return rows_smem(ni, config) <= smem_limit(ctx)

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Up to 64 channels: whole rows per step, tiles of 128 rows (4 warps of 32 rows), 2 to 4
        deep, each block holding the whole filter (up to 256 columns), or 64 columns of it (on
        the H200 tiles of 64 rows or 8 warps of 16 rows were 2-17% slower). Wider reductions:
        steps of 64 channels, 6 or 8 deep, one 64-column chunk per block, and whole rows 2 deep.
        Those that fit; the first is the default."""
        ni, no = self.dims(problem)
        wide = min(no, 256)
        if ni <= 64:
            shapes = [
                (128, 2, wide, ni, 3),
                (128, 2, wide, ni, 2),
                (128, 2, wide, ni, 4),
                (128, 2, 64, ni, 3),
            ]
        else:
            shapes = [(128, 2, 64, 64, 6), (128, 1, 64, 64, 6), (64, 1, 64, 64, 8), (128, 2, 64, ni, 2)]
            shapes += [(128, 2, wide, ni, 2)]
        out = []
        for shape in shapes:
            config = rows_config(*shape)
            if config not in out and self.is_valid_config(ctx, problem, config):
                out.append(config)
        return out

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        space = list(self.search_space(ctx, problem))
        return dict(space[0]) if space else rows_config(64, 1, 64, 32, 2)

    def grid(self, ctx, problem: ConvProblem, config: dict[str, int]) -> tuple[int, int]:
        """(row blocks, column blocks): as many blocks as the multiprocessors hold, the row tiles
        spread evenly over the row blocks."""
        ni, no = self.dims(problem)
        col_blocks = no // config["bno"]
        tiles = -(-rows(problem) // config["bm"])
        slots = compute_units(ctx) * blocks_per_sm(rows_smem(ni, config), rows_threads(config))
        per_block = -(-tiles // max(1, slots // col_blocks))
        return -(-tiles // per_block), col_blocks

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        ni, no = self.dims(problem)
        defines = {
            "MIOPY_DTYPE": problem.dtype.code,
            "G1_M": rows(problem),
            "G1_NI": ni,
            "G1_NO": no,
            "G1_WT": self.transposed,
            "G1_BM": config["bm"],
            "G1_FM": config["fm"],
            "G1_BNO": config["bno"],
            "G1_KW": config["kw"],
            "G1_STAGES": config["stages"],
        }
        gx, gy = self.grid(ctx, problem, config)
        t = rows_threads(config)
        spec = KernelSpec(FILE, "gemm1x1_rows", defines, (gx * t, gy), (t, 1))
        args = (Tensor(self.reads[0]), Tensor(self.reads[1]), Tensor(self.writes))
        return Program((Launch(spec, args, shared_mem=rows_smem(ni, config)),))


class Conv1x1StreamFwd(_RowsSolver):
    name = "Conv1x1StreamFwd"
    id = 260  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.FORWARD
    reads, writes = ("x", "w"), "y"
    transposed = 0


class Conv1x1StreamBwd(_RowsSolver):
    name = "Conv1x1StreamBwd"
    id = 261
    direction = Direction.BACKWARD_DATA
    reads, writes = ("y", "w"), "x"  # backward data: dy is role y (read), dx is role x (written)
    transposed = 1


# ---- backward weights: gemm1x1_wrw + gemm1x1_wrw_sum ---------------------------------------------------
def wrw_threads(config: dict[str, int]) -> int:
    return config["wk"] * config["wc"] * 32


def wrw_smem(config: dict[str, int]) -> int:
    """The ring of dy and x tiles."""
    return config["stages"] * config["bm"] * (config["tk"] + config["tc"]) * 2


def wrw_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """dw tiles (blocks along the grid's second dimension)."""
    k, c = problem.w.lens[0], problem.w.lens[1]
    return (k // config["tk"]) * (c // config["tc"])


def wrw_split(ctx, problem: ConvProblem, config: dict[str, int]) -> int:
    """Blocks sharing each dw tile's reduction: ``occ`` blocks per multiprocessor over the dw
    tiles, no more than the row tiles."""
    row_tiles = -(-rows(problem) // config["bm"])
    return max(1, min(row_tiles, compute_units(ctx) * config["occ"] // wrw_tiles(problem, config)))


def wrw_workspace(ctx, problem: ConvProblem, config: dict[str, int]) -> int:
    """The blocks' fp32 partial dw (none where one block takes the whole reduction)."""
    split = wrw_split(ctx, problem, config)
    k, c = problem.w.lens[0], problem.w.lens[1]
    return 0 if split == 1 else split * k * c * 4


class Conv1x1StreamWrw(TunableSolver):
    name = "Conv1x1StreamWrw"
    id = 262
    primitive = "conv"
    algorithm = "gemm"
    search_in_find = True
    direction = Direction.BACKWARD_WEIGHTS

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        why = stream_reason(ctx, problem, self.direction)
        if why:
            return why
        k, c = problem.w.lens[0], problem.w.lens[1]
        if k % 64 or c % 64:
            return f"K={k} and C={c} must be multiples of 64"
        if k * c > MAX_FILTER_WRW:
            return f"K x C = {k} x {c}: more than {MAX_FILTER_WRW} filter elements (slower than cuBLAS)"
        return None

    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not _valid_fields(config, WRW_DOMAIN):
            return False
        k, c = problem.w.lens[0], problem.w.lens[1]
        if k % config["tk"] or c % config["tc"]:
            return False
        wm, wn = config["tk"] // config["wk"], config["tc"] // config["wc"]
        if wm % 16 or wn % 16 or wm * wn > 64 * 32 or wrw_threads(config) < 64:
            return False
        smem = wrw_smem(config)
        return smem <= smem_limit(ctx) and blocks_per_sm(smem, wrw_threads(config)) >= config["occ"]

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """The two widest dw tiles (of 256 x 64, 128 x 128, 128 x 64, 64 x 64) with warp tiles
        of up to 64 x 32; 64 rows 4 deep or 128 rows 3 deep with one block per multiprocessor,
        64 rows 3 deep with two. Those that fit; the first is the default. (Clusters of 4 blocks
        summing their tiles through distributed shared memory before the workspace were tried
        on the H200: 20.2 us against 17.1 at 64 x 64, 53-65 against 36-38 at 256 x 64.)"""
        k, c = problem.w.lens[0], problem.w.lens[1]
        shapes = ((256, 64, 4, 2), (128, 128, 2, 4), (128, 64, 4, 2), (64, 64, 4, 2))
        shapes = [s for s in shapes if k % s[0] == 0 and c % s[1] == 0][:2]
        out = []
        for shape in shapes:
            for bm, stages, occ in ((64, 4, 1), (128, 3, 1), (64, 3, 2)):
                config = wrw_config(*shape, bm, stages, occ)
                if self.is_valid_config(ctx, problem, config):
                    out.append(config)
        return out

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        space = list(self.search_space(ctx, problem))
        return dict(space[0]) if space else wrw_config(64, 64, 2, 2, 32, 3, 1)

    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        return wrw_workspace(ctx, problem, config or self.default_config(ctx, problem))

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        k, c = problem.w.lens[0], problem.w.lens[1]
        split = wrw_split(ctx, problem, config)
        defines = {
            "MIOPY_DTYPE": problem.dtype.code,
            "G1_M": rows(problem),
            "G1_K": k,
            "G1_C": c,
            "G1_TK": config["tk"],
            "G1_TC": config["tc"],
            "G1_WK": config["wk"],
            "G1_WC": config["wc"],
            "G1_BM": config["bm"],
            "G1_STAGES": config["stages"],
            "G1_SPLIT": split,
        }
        t = wrw_threads(config)
        gemm = KernelSpec(FILE, "gemm1x1_wrw", defines, (split * t, wrw_tiles(problem, config)), (t, 1))
        partials = Workspace() if split > 1 else None
        steps = [Launch(gemm, (Tensor("x"), Tensor("y"), Tensor("w"), partials), shared_mem=wrw_smem(config))]
        if split > 1:
            blocks = k * c // (4 * SUM_COLS)
            threads = SUM_COLS * SUM_PARTS
            total = KernelSpec(FILE, "gemm1x1_wrw_sum", defines, (blocks * threads,), (threads,))
            steps.append(Launch(total, (Workspace(), Tensor("w"))))
        return Program(tuple(steps), workspace=wrw_workspace(ctx, problem, config))
