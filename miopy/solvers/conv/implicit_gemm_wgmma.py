"""ConvWgmmaFwdNhwc: implicit-GEMM forward convolution on Hopper's warpgroup MMA (wgmma), CUDA
on compute capability 9.0 only (kernels/cuda/wgmma_fwd.cu, built for sm_90a;
kernels/common/wgmma_sm90.h).

The GEMM of ConvIgemmFwdNhwc (M = N*Ho*Wo output pixels, N = K output channels, reduction over
R*S*C filter taps, the im2col gather done while loading tiles): fp16 or bf16 in, fp32
accumulation, packed NHWC x and y, filter packed in NHWC order (K, R, S, C), groups = 1, C and K
multiples of 8, any stride, padding and dilation. Shape and config are compiled in.

A config is the block tile (``bm`` x ``bn``: ``bm`` / 64 warpgroups of 128 threads, each 64 rows
by ``bn`` columns, one wgmma m64n``bn``k16 per 16-wide slice of a 64-wide k-tile), the depth of
the cp.async ring (``stages``; ``stages`` - 2 k-tiles of copies in flight while the MMAs run) and
the split of the reduction (``split_k``: a thread-block cluster summing through distributed
shared memory, or beyond 8 slices fp32 partials in the workspace and a second kernel), or
stream-K (``sk``: that many blocks, each an even run of the tiles' k-tiles laid end to end, a tile
cut between blocks summed through fp32 partials and 64-bit flags in the workspace), and for a
warp-specialized unsplit block of 128 or 256 rows the operands swapped (``swap``: ``bn`` / 64
warpgroups of 64 output channels by all ``bm`` pixels, one wgmma m64n``bm``k16 each)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

from miopy import config as knobs
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.conv.igemm_common import (
    REDUCE_THREADS,
    IgemmSolver,
    arch_number,
    cluster_split,
    cluster_tile_bytes,
    compute_units,
    conv_shape_defines,
    nhwc_tensor_core_reason,
    smem_limit,
    split_workspace_bytes,
)

WGMMA_ARCH = 90  # wgmma exists on sm_90a alone (not on later architectures' plain targets)
DOMAIN: dict[str, tuple[int, ...]] = {
    # GEMM rows per block: one to four warpgroups of 64 rows (192: three, warp-specialized only)
    "bm": (64, 128, 192, 256),
    "bn": (64, 128, 256),  # GEMM columns per block: the wgmma's N
    "stages": (3, 4, 5, 6, 7, 8),  # k-tiles of 64 in the shared-memory ring
    "split_k": (1, 2, 3, 4, 6, 8),  # blocks sharing the reduction
    # 1: one more warpgroup loads, signalling stages through mbarriers (splits in a cluster only);
    # 2: the same, each stage signalled by its copies themselves (cp.async.mbarrier.arrive)
    "ws": (0, 1, 2),
}
# ``sk`` (not in DOMAIN: its values are block counts up to the device's resident blocks): 0, or
# stream-K over that many blocks (warp-specialized, unsplit). A config without it (a record from
# before stream-K) means 0.
SK = "sk"
# ``swap`` (not in DOMAIN; absent means 0): 1 swaps the operands (D^T = B A^T) of a
# warp-specialized unsplit block of 128 or 256 rows and 64 or 128 columns: bn / 64 consumer
# warpgroups each own 64 output channels and all bm pixels (wgmma m64n``bm``k16, the filter tile
# as A), so a 256 x 128 tile is two m64n256 MMAs per k-slice instead of four m64n128, and
# 256 x 64 one m64n256 instead of 128 x 64's two m64n64: less shared memory read per MMA cycle
# (wgmma_fwd.cu, WG_SWAP). 2: the same with the tap-mask copies (WG_TAP_MASK: each A row's
# in-image taps found once per tile, a copy a bit test and an add), where a k-tile is 64 channels
# of one tap (the gathered tensor's channels a multiple of 64, at most 32 taps).
SWAP = "swap"
FIELDS = (*DOMAIN, SK, SWAP)
SWAP_ROWS = (128, 256)
SWAP_COLS = (64, 128)
# Grids of at least this many waves of 256 x 128 blocks (the large VGG-16 / ResNet-18 layers;
# every stride-1 3x3 ResNet-50 layer has fewer) take LARGE_TILES' block by default.
SWAP_MIN_WAVES = 4
# The default block of such grids by the GEMM's width (K forward, C backward data): (width at
# most, bm, bn, ws, swap); None keeps the small-grid default; swap 2 falls back to 1 where the
# tap-mask copies do not apply. H200, fp16, batch 32, L2 flushed, scripts/bench_wgmma.py,
# 2026-11-23 (µs; "before": the block find chose before this table):
#   forward   64x224² K64   128 x 64 swap 2 325.8 (swap 1 329.3; before 128 x 64 ws 349.9)
#             64x112² K128  256 x 128 swap 2 133.1 (swap 1 138.6; before 256 x 128 147.3)
#             128x112² K128 256 x 128 swap 2 213.6 (swap 1 236.9; before 246.4)
#             256x56² K256  256 x 128 swap 2 189.0 (128 x 256 ws 205.6; before 220.8)
#   backward  64x224² C64   128 x 64 swap 1 or 2 326.1 (before 128 x 64 ws 346.9)
#             128x112² C128 256 x 128 swap 2 213.4 (swap 1 231.1; before 239.1)
#             256x56² C256  128 x 256 ws 177.3 (256 x 128 swap 2 188.3; before 209)
LARGE_TILES = ((64, 128, 64, 1, 2), (1 << 30, 256, 128, 1, 2))
BWD_LARGE_TILES = ((64, 128, 64, 1, 2), (128, 256, 128, 1, 2), (1 << 30, 128, 256, 1, 0))
MAX_BLOCK_OUTPUTS = 256 * 128  # 128 x 256 or 256 x 128: 128 accumulators per thread at most
BK = 64  # reduction elements per k-tile: one 128-byte swizzled row of fp16 / bf16
ALIGN_SLACK = 1024  # the ring starts at the first 1024-byte boundary of dynamic shared memory
MIN_SLICE_TILES = 6  # k-tiles of each slice of a split reduction, at least
SEARCH_STAGES = (3, 4, 5, 6)
# The block tiles the default chooses among for outputs wider than 64 (bm, bn, ws), by
# wave_config's model: 192 rows (three consumer warpgroups) fit 131 tiles in a wave where 256
# rows leave a quarter of the SMs idle (the 28x28 ResNet layer: 25088 rows). 192 x 64 takes the
# copy-signalled pipeline (ws 2), which was faster there and slower for the wider tiles (below).
DEFAULT_TILES = ((256, 128, 0), (192, 128, 1), (128, 128, 1), (192, 64, 2))
# Backward data's: 128 x 128 with the copy-signalled pipeline (ws 2). With the kernel's fast
# copies (WG_FAST_LOAD) it was the faster pipeline on the 7x7 ResNet layer (H200, L2 flushed,
# split 2, 2026-11-23: 25.3 against 27.7 us fp16, 25.2 against 27.5 bf16 with their first
# version; 23.7 us fp16 with the final one); before them it was the slower (30.4 against 29.0).
BWD_DEFAULT_TILES = ((256, 128, 0), (192, 128, 1), (128, 128, 2), (192, 64, 2))
TWO_BLOCK_SMEM = (233_472 - 2 * 1024) // 2  # two blocks' shared memory on an H100/H200 SM (228 KB)
SK_MAX_WAVES = 3  # stream-K variants in the search space for grids of up to this many waves
SPLIT_COST = 0.05  # a cluster split's epilogue, as a share of the block's reduction, per slice


def wg_config(
    bm: int, bn: int, stages: int, split_k: int = 1, ws: int = 0, sk: int = 0, swap: int = 0
) -> dict[str, int]:
    """A config; ``swap`` is a field only where it is not 0 (the configs of before it stay as
    they were)."""
    config = {"bm": bm, "bn": bn, "stages": stages, "split_k": split_k, "ws": ws, SK: sk}
    return {**config, SWAP: swap} if swap else config


def swapped(config: dict[str, int]) -> bool:
    """Whether ``config`` swaps the operands (``swap`` 1 or 2; absent means 0)."""
    return config.get(SWAP, 0) in (1, 2)


def sk_blocks(config: dict[str, int]) -> int:
    """The stream-K block count of ``config`` (0: none)."""
    return config.get(SK, 0)


def sk_flag_words(config: dict[str, int]) -> int:
    """The 4-byte words of stream-K's flags (8 bytes per block) before the partial tiles, 64-word
    aligned."""
    return -(-2 * sk_blocks(config) // 64) * 64


def sk_workspace_bytes(config: dict[str, int]) -> int:
    """Stream-K's workspace: the flags, then one fp32 bm x bn partial tile per block."""
    sk = sk_blocks(config)
    return 4 * (sk_flag_words(config) + sk * config["bm"] * config["bn"]) if sk else 0


def threads(config: dict[str, int]) -> int:
    """128 threads (one warpgroup) per 64 rows of the block tile (with ``swap``: per 64 columns),
    and one more warpgroup (the producer) with ``ws``."""
    consumers = config["bn"] // 64 if swapped(config) else config["bm"] // 64
    return (consumers + (1 if config["ws"] else 0)) * 128


def k_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """k-tiles of the whole reduction (R*S*C taps, 64 at a time)."""
    k, c, r, s = problem.w.lens
    return -(-(r * s * c) // BK)


def smem_bytes(config: dict[str, int]) -> int:
    """The ring of ``stages`` k-tiles of A and B (128 bytes per tile row), or the epilogue's
    rounded tile (rows of bn + 8 elements and one int per row) where larger, the mbarriers of
    ``ws``, plus the alignment slack."""
    ring = config["stages"] * (config["bm"] + config["bn"]) * 128
    epilogue = config["bm"] * (config["bn"] + 8) * 2 + config["bm"] * 4
    barriers = 16 * config["stages"] if config["ws"] else 0  # a full and an empty mbarrier per stage
    if sk_blocks(config):  # the mbarriers' 256 bytes, then stream-K's own rounded output tile
        return max(ring, epilogue) + 256 + config["bm"] * (config["bn"] + 8) * 2 + ALIGN_SLACK
    return max(ring, epilogue) + barriers + ALIGN_SLACK


def min_blocks(config: dict[str, int]) -> int:
    """The blocks per SM the kernel's registers are bounded for (``__launch_bounds__``, WG_MINB):
    2 for 64-wide blocks of up to 384 threads, not stream-K, whose shared memory (a cluster
    split's fp32 tile too) lets two share an H100/H200 SM (at most 80 registers a thread: 32
    accumulators), else 1.
    Backward data's 128 x 64 producer-warpgroup kernel took 91 registers unbounded (one block
    per SM) and takes 64 bounded, without spilling, as the forward kernel does unbounded."""
    smem = max(smem_bytes(config), cluster_tile_bytes(config) + ALIGN_SLACK if config["split_k"] > 1 else 0)
    fits = smem <= TWO_BLOCK_SMEM and not sk_blocks(config)
    few_acc = not swapped(config) or config["bm"] <= 128  # swapped: bm / 2 accumulators a thread
    return 2 if config["bn"] == 64 and threads(config) <= 384 and fits and few_acc else 1


def blocks_per_sm(ctx, config: dict[str, int]) -> int:
    """Blocks of ``config`` resident on one SM by shared memory, at most 2 (the register file
    holds two blocks of 256 threads at up to 128 registers each, or of 384 threads bounded by
    min_blocks), 1 of 512 threads."""
    cap = 2 if threads(config) <= 256 or min_blocks(config) == 2 else 1
    return max(1, min(cap, smem_limit(ctx) // smem_bytes(config)))


def workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """The fp32 partial outputs of a split reduction outside a cluster (none without a split),
    or stream-K's flags and partial tiles."""
    if sk_blocks(config):
        return sk_workspace_bytes(config)
    n, k, ho, wo = problem.y.lens
    return split_workspace_bytes(config, n * ho * wo * k)


def grid_blocks(problem: ConvProblem, config: dict[str, int]) -> int:
    """Output tiles times slices of the reduction (stream-K: its block count)."""
    if sk_blocks(config):
        return sk_blocks(config)
    n, _, ho, wo = problem.y.lens
    k = problem.w.lens[0]
    return -(-(n * ho * wo) // config["bm"]) * -(-k // config["bn"]) * config["split_k"]


def kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """wgmma_fwd, one block of ``threads(config)`` per output tile and slice of the reduction
    (grid dimension 1); with a split outside a cluster igemm_splitk_reduce, one work item per 8
    outputs. The shape and the config are defines (IG_<shape>, WG_BM, WG_BN, WG_STAGES,
    IG_SPLIT_K)."""
    n, _, ho, wo = problem.y.lens
    k = problem.w.lens[0]
    tiles = grid_blocks(problem, {**config, "split_k": 1, SK: 0})
    return specs_of(conv_shape_defines(problem), config, tiles, n * ho * wo * k)


def specs_of(defines: dict[str, Any], config: dict[str, int], tiles: int, outputs: int) -> list[KernelSpec]:
    """The launches of wgmma_fwd with the shape ``defines`` over ``tiles`` output tiles, and the
    split-K sum of ``outputs`` outputs where the split needs one. Stream-K (WG_SK): ``sk`` blocks
    of wgmma_fwd."""
    defines = {
        **defines,
        "WG_BM": config["bm"],
        "WG_BN": config["bn"],
        "WG_STAGES": config["stages"],
        "IG_SPLIT_K": config["split_k"],
        "WG_WS": config["ws"],
    }
    if min_blocks(config) > 1:
        defines["WG_MINB"] = min_blocks(config)
    if swapped(config):
        defines["WG_SWAP"] = 1
    if config.get(SWAP, 0) == 2:
        defines["WG_TAP_MASK"] = 1
    local = threads(config)
    split = config["split_k"]
    sk = sk_blocks(config)
    if sk:
        defines["WG_SK"] = sk
        return [KernelSpec("wgmma_fwd", "wgmma_fwd", defines, (sk * local, 1), (local, 1))]
    specs = [KernelSpec("wgmma_fwd", "wgmma_fwd", defines, (tiles * local, split), (local, 1))]
    if split > 1:
        work = -(-(outputs // 8) // REDUCE_THREADS) * REDUCE_THREADS
        specs.append(KernelSpec("wgmma_fwd", "igemm_splitk_reduce", defines, (work,), (REDUCE_THREADS,)))
    return specs


def wgmma_reason(ctx) -> str | None:
    """Why the device cannot run wgmma kernels (None when it can): it must be sm_90 (built for
    sm_90a)."""
    arch = arch_number(ctx)
    if arch != WGMMA_ARCH:
        return f"wgmma needs sm_90 (the device is {getattr(getattr(ctx, 'info', None), 'arch', None)})"
    return None


class ConvWgmmaFwdNhwc(IgemmSolver):
    name = "ConvWgmmaFwdNhwc"
    id = 240  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.FORWARD
    reads, writes = ("x", "w"), "y"
    domain = DOMAIN
    reduction_tiles = staticmethod(k_tiles)
    smem_bytes = staticmethod(smem_bytes)
    workspace_bytes = staticmethod(workspace_bytes)
    kernel_specs = staticmethod(kernel_specs)
    k_tiles = staticmethod(k_tiles)
    grid_blocks = staticmethod(grid_blocks)
    width_of = staticmethod(lambda problem: problem.w.lens[0])  # the GEMM's columns
    gather_channels = staticmethod(lambda problem: problem.w.lens[1])  # channels of a gathered A row
    default_tiles = DEFAULT_TILES
    large_tiles = LARGE_TILES
    epilogue_files = frozenset({"wgmma_fwd"})
    epilogue_bias = True

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        return nhwc_tensor_core_reason(ctx, problem, self.direction) or wgmma_reason(ctx)

    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        """Exactly DOMAIN's fields with values from it; at most MAX_BLOCK_OUTPUTS outputs per
        block (256 x 256 would need 256 accumulators per thread); no more slices than k-tiles;
        shared memory within the device's limit; no more threads than the device allows."""
        if not isinstance(config, dict) or not set(DOMAIN) <= set(config) <= set(FIELDS):
            return False
        if any(type(v) is not int or v not in DOMAIN[f] for f, v in config.items() if f in DOMAIN):
            return False
        if SK in config and not self.sk_ok(ctx, problem, config):
            return False
        if SWAP in config and not self.swap_ok(problem, config):
            return False
        if config["split_k"] > self.k_tiles(problem, config):
            return False
        if config["ws"] and config["split_k"] > 1 and not cluster_split(ctx, config):
            return False  # the warp-specialized kernel splits in a cluster only
        if config["bm"] == 192 and not config["ws"]:
            return False  # three warpgroups copy evenly only as the producer warpgroup of ws
        if config["bm"] * config["bn"] > MAX_BLOCK_OUTPUTS:
            return False  # 256 accumulators per thread would not fit
        info = getattr(ctx, "info", None)
        if info is not None and threads(config) > info.max_work_group_size:
            return False
        return self.launch_smem(ctx, config) <= smem_limit(ctx)

    def swap_ok(self, problem: ConvProblem, config: dict[str, int]) -> bool:
        """``swap`` 0, 1 or 2; 1 and 2 only warp-specialized, unsplit, not stream-K, with bm in
        SWAP_ROWS and bn in SWAP_COLS; 2 only where the gathered tensor's channels are a multiple
        of 64 and the filter has at most 32 taps."""
        swap = config[SWAP]
        if type(swap) is not int or swap not in (0, 1, 2):
            return False
        _, _, r, s = problem.w.lens
        if swap == 2 and (self.gather_channels(problem) % 64 or r * s > 32):
            return False
        return not swap or (
            config["ws"] > 0
            and config["split_k"] == 1
            and not sk_blocks(config)
            and config["bm"] in SWAP_ROWS
            and config["bn"] in SWAP_COLS
        )

    def sk_ok(self, ctx, problem: ConvProblem, config: dict[str, int]) -> bool:
        """``sk`` 0, or stream-K: warp-specialized, unsplit, at least 2 blocks, no more blocks than
        the device holds at once (a block waits for later blocks' partials) nor than the
        (tile, k-tile) steps."""
        sk = config[SK]
        if type(sk) is not int or sk < 0:
            return False
        if sk == 0:
            return True
        if not config["ws"] or config["split_k"] != 1 or sk < 2:
            return False
        tiles = self.grid_blocks(problem, {**config, SK: 0})
        steps = tiles * self.k_tiles(problem, config)
        return sk <= steps and sk <= compute_units(ctx) * blocks_per_sm(ctx, config)

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        """IgemmSolver's program, or with stream-K the GEMM kernel on the workspace (flags and
        partial tiles; the flags need no clearing, see wgmma_fwd.cu)."""
        if config is None:
            config = self.default_config(ctx, problem)
        if not sk_blocks(config) or not self.is_valid_config(ctx, problem, config):
            return super().get_program(ctx, problem, config)
        (gemm,) = self.kernel_specs(problem, config)
        a, b = self.reads
        args = (Tensor(a), Tensor(b), Tensor(self.writes), Workspace())
        launch = Launch(gemm, args, shared_mem=self.launch_smem(ctx, config))
        return Program((launch,), workspace=self.workspace_bytes(problem, config))

    def launch_smem(self, ctx, config: dict[str, int]) -> int:
        """smem_bytes, or a cluster split's fp32 partial tile (plus the alignment slack) where
        that is larger."""
        own = smem_bytes(config)
        if cluster_split(ctx, config):
            return max(own, cluster_tile_bytes(config) + ALIGN_SLACK)
        return own

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """Grids of many waves: large_config's block. Else for K <= 64 (the GEMM's columns):
        128 x 64 blocks, 4 stages, warp-specialized (two blocks per SM; on the H200, fp16,
        2026-11-22: 25.5 us on 56x56 K64 against 26.2 without the producer warpgroup). Wider:
        wave_config's choice. 64 x 64 with 3 stages where
        neither is valid (a small device). MIOPY_DEBUG_WGMMA_CONFIG's fields replace the
        choice's where the result is valid."""
        config = self.large_config(ctx, problem)
        if config is None and self.width_of(problem) <= 64:
            config = wg_config(128, 64, 4, ws=1)
        elif config is None:
            config = self.wave_config(ctx, problem) or wg_config(64, 64, 3)
        if not self.is_valid_config(ctx, problem, config):
            config = wg_config(64, 64, 3)
        forced = knobs.debug_wgmma_config()
        if forced and self.is_valid_config(ctx, problem, {**config, **forced}):
            config = {**config, **forced}
        return config

    def large_config(self, ctx, problem: ConvProblem) -> dict[str, Any] | None:
        """For grids of at least SWAP_MIN_WAVES waves of 256 x 128 blocks (one per SM): the
        large_tiles block of the GEMM's width, 4 stages (``swap`` 1 where 2 is not valid); None
        for smaller grids, where that is None, or where it is not valid."""
        if self.grid_blocks(problem, wg_config(256, 128, 4)) < SWAP_MIN_WAVES * compute_units(ctx):
            return None
        width = self.width_of(problem)
        tile = next(t for t in self.large_tiles if width <= t[0])
        if tile[1] is None:
            return None
        _, bm, bn, ws, swap = tile
        config = wg_config(bm, bn, 4, ws=ws, swap=swap)
        if swap == 2 and not self.is_valid_config(ctx, problem, config):
            config = wg_config(bm, bn, 4, ws=ws, swap=1)  # no tap-mask copies for this shape
        return config if self.is_valid_config(ctx, problem, config) else None

    def wave_config(self, ctx, problem: ConvProblem) -> dict[str, Any] | None:
        """The default_tiles block (4 stages) and cluster split with the least modelled time: the
        waves of resident blocks (blocks_per_sm per SM) times one block's work (bm x bn outputs
        over its share of the k-tiles, SPLIT_COST more per extra slice); each slice keeps
        MIN_SLICE_TILES k-tiles and a split grid stays within one wave. Ties keep the earlier
        tile, then the smaller split. None where no tile is valid.

        The ResNet-50 3x3 layers at batch 32 on 132 SMs: 28x28 (25088 rows, K128) 131 blocks of
        192 x 128 (256 x 128: 98 blocks); 14x14 (6272 rows, K256) 132 blocks of 192 x 64 (tied
        with 192 x 128 split in 2; 128 x 128: 98 blocks); 7x7 (1568 rows, K512) 104 blocks of
        128 x 128 split in 2. On the H200 (fp16, L2 flushed, scripts/bench_wgmma.py, 2026-11-23)
        these were the fastest of the 4-stage sweep, forward and backward data: 28x28 20.2 us
        (256 x 128: 25.1), 14x14 22.7 us (192 x 128 split 2: 23.2; 128 x 128: 24.3), 7x7 26.9 us;
        every config of more than one wave of blocks was slower (28x28, 128 x 128: 28.1 us).
        Pipelines (same sweep with ws 1 / 2 and 3-6 stages, then benchmarks/conv.py with
        MIOPY_DEBUG_WGMMA_CONFIG): ws 2 made 192 x 64 on 14x14 faster in all four measurements
        (forward 22.5 against 23.2 us, backward 23.9 against 24.4; in the benchmark fp16 / bf16
        forward 22.5 / 22.3 against 22.8 / 23.1 us, backward 23.9 / 23.9 against 24.3 / 24.3) but
        192 x 128 on 28x28 slower (21.9 against 20.3 us forward) and 128 x 128 split 2 on 7x7
        backward too (30.4 against 29.0), with more registers per thread (128 and 164 against
        95 and 110); 5 stages were within 1% of 4."""
        cus = compute_units(ctx)
        kt = self.k_tiles(problem, wg_config(64, 64, 3))
        best: dict[str, Any] | None = None
        best_cost = math.inf
        for bm, bn, ws in self.default_tiles:
            base = wg_config(bm, bn, 4, ws=ws)
            if not self.is_valid_config(ctx, problem, base):
                continue
            slots = cus * blocks_per_sm(ctx, base)
            tiles = self.grid_blocks(problem, base)
            for split in DOMAIN["split_k"]:
                config = {**base, "split_k": split}
                if split > 1 and (
                    not cluster_split(ctx, config)
                    or kt < split * MIN_SLICE_TILES
                    or tiles * split > slots
                    or not self.is_valid_config(ctx, problem, config)
                ):
                    continue
                waves = -(-tiles * split // slots)
                cost = waves * bm * bn * -(-kt // split) * (1 + SPLIT_COST * (split - 1))
                if cost < best_cost * (1 - 1e-9):
                    best, best_cost = config, cost
        return best

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Every block tile (bn no wider than the next power of two of K, at least 64) with 3 to
        6 stages, each also split (2 to 8, clusters where the device has them) where the
        unsplit grid has fewer blocks than twice the SMs, into at most 4 blocks per SM with
        MIN_SLICE_TILES k-tiles per slice; each also warp-specialized (ws) where valid (192-row
        blocks only so; splits only in a cluster), and that with the operands swapped (``swap``)
        where valid, with the general and with the tap-mask copies (``swap`` 1 and 2). The
        default config where none is valid."""
        k = self.width_of(problem)
        cap = max(64, 1 << (k - 1).bit_length())
        cus = compute_units(ctx)
        out = []
        for bm, bn, stages in itertools.product(DOMAIN["bm"], DOMAIN["bn"], SEARCH_STAGES):
            if bn > cap:
                continue
            base = wg_config(bm, bn, stages)
            blocks = self.grid_blocks(problem, base)
            for split in DOMAIN["split_k"]:
                if split > 1 and (
                    blocks >= 2 * cus
                    or blocks * split > 4 * cus
                    or self.k_tiles(problem, base) < split * MIN_SLICE_TILES
                ):
                    continue
                config = {**base, "split_k": split}
                if self.is_valid_config(ctx, problem, config):
                    out.append(config)
                for ws in DOMAIN["ws"][1:]:  # a producer warpgroup loads
                    specialised = {**config, "ws": ws}
                    if self.is_valid_config(ctx, problem, specialised):
                        out.append(specialised)
                        streamed = self.sk_variant(ctx, problem, specialised)
                        if streamed:
                            out.append(streamed)
                        for swap in (1, 2):
                            swapped_config = {**specialised, SWAP: swap}
                            if self.is_valid_config(ctx, problem, swapped_config):
                                out.append(swapped_config)
        return out or [self.default_config(ctx, problem)]

    def sk_variant(self, ctx, problem: ConvProblem, config: dict[str, Any]) -> dict[str, Any] | None:
        """``config`` as stream-K over every resident block (compute units x blocks_per_sm), where
        it is unsplit with 4 stages and its grid is short of a whole number of waves within
        SK_MAX_WAVES; None where not (or not valid)."""
        if config["split_k"] != 1 or not config["ws"] or config["stages"] != 4:
            return None
        slots = compute_units(ctx) * blocks_per_sm(ctx, {**config, SK: 1})
        blocks = self.grid_blocks(problem, {**config, SK: 0})
        if blocks % slots == 0 or blocks > SK_MAX_WAVES * slots:
            return None
        streamed = {**config, SK: slots}
        return streamed if self.is_valid_config(ctx, problem, streamed) else None


# ---- backward data, stride 1 -----------------------------------------------------------------------
def bwd_defines(problem: ConvProblem) -> dict[str, Any]:
    """The forward kernel's shape defines for the backward-data GEMM of a stride-1 problem: dy
    (N, K, Ho, Wo) is its input, dx (N, C, H, W) its output, the taps reach dy at
    h + pad - r * dilation (negative padding and dilation), and WG_B_MN reads the filter as it
    lies (rows k of each tap, C contiguous)."""
    n, c, h, w = problem.x.lens
    k, _, r, s = problem.w.lens
    _, _, p, q = problem.y.lens
    (ph, pw), (dh, dw) = problem.pads, problem.conv.dilations
    shape = dict(N=n, C=k, H=p, W=q, K=c, R=r, S=s, P=h, Q=w, PH=-ph, PW=-pw, SH=1, SW=1, DH=-dh, DW=-dw)
    defines: dict[str, Any] = {"MIOPY_DTYPE": problem.dtype.code}
    defines.update({f"IG_{name}": int(v) for name, v in shape.items()})
    defines["WG_B_MN"] = 1
    return defines


def bwd_k_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """k-tiles of the backward-data reduction (R*S*K: the taps by dy's channels)."""
    k, _, r, s = problem.w.lens
    return -(-(r * s * k) // BK)


def bwd_workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    if sk_blocks(config):
        return sk_workspace_bytes(config)
    n, c, h, w = problem.x.lens
    return split_workspace_bytes(config, n * h * w * c)


def bwd_grid_blocks(problem: ConvProblem, config: dict[str, int]) -> int:
    """dx tiles (N*H*W pixels by C channels) times slices of the reduction (stream-K: its block
    count)."""
    if sk_blocks(config):
        return sk_blocks(config)
    n, c, h, w = problem.x.lens
    return -(-(n * h * w) // config["bm"]) * -(-c // config["bn"]) * config["split_k"]


def bwd_kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """kernel_specs' launches with bwd_defines (wgmma_fwd on dy with the N-major filter)."""
    n, c, h, w = problem.x.lens
    tiles = bwd_grid_blocks(problem, {**config, "split_k": 1, SK: 0})
    return specs_of(bwd_defines(problem), config, tiles, n * h * w * c)


class ConvWgmmaBwdNhwc(ConvWgmmaFwdNhwc):
    """Backward data of stride-1 problems: wgmma_fwd on dy (taps mirrored through negative
    padding and dilation), B the filter as it lies read N-major (wgmma's transposed B)."""

    name = "ConvWgmmaBwdNhwc"
    id = 241
    direction = Direction.BACKWARD_DATA
    reads, writes = ("y", "w"), "x"  # dy is role y (read), dx is role x (written)
    reduction_tiles = staticmethod(bwd_k_tiles)
    workspace_bytes = staticmethod(bwd_workspace_bytes)
    kernel_specs = staticmethod(bwd_kernel_specs)
    k_tiles = staticmethod(bwd_k_tiles)
    grid_blocks = staticmethod(bwd_grid_blocks)
    width_of = staticmethod(lambda problem: problem.x.lens[1])
    gather_channels = staticmethod(lambda problem: problem.w.lens[0])  # dy's channels
    default_tiles = BWD_DEFAULT_TILES
    large_tiles = BWD_LARGE_TILES
    epilogue_bias = False  # dx has no bias

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        why = nhwc_tensor_core_reason(ctx, problem, self.direction) or wgmma_reason(ctx)
        if why:
            return why
        if tuple(problem.conv.strides) != (1, 1):
            return f"strides={tuple(problem.conv.strides)}: stride 1 only"
        return None

    def defers(self, ctx, problem: ConvProblem) -> bool:
        """Immediate mode lists it after ConvIgemmBwdNhwc where C <= 64 (the GEMM's columns):
        on the H200 it was 3% slower than that solver on the 64-channel 56x56 ResNet layer, and
        as fast or faster on the wider ones (2026-11-22); with two blocks per SM (min_blocks)
        it ties there (29.0-29.3 against 29.2-29.5 us, 2026-11-23), so the order stays."""
        return self.width_of(problem) <= 64
