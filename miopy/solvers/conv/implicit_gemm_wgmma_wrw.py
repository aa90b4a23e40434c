"""ConvWgmmaWrwNhwc: implicit-GEMM backward-weights convolution on Hopper's warpgroup MMA (wgmma),
CUDA on compute capability 9.0 only (kernels/cuda/wgmma_wrw.cu, built for sm_90a;
kernels/common/wgmma_sm90.h).

The GEMM of ConvIgemmWrwNhwc: dw[K, R*S*C] = dy^T[K, N*Ho*Wo] x im2col(x)[N*Ho*Wo, R*S*C] (M = K,
N = R*S*C, dw as it lies), the reduction over the output pixels with x's im2col gathered while
loading. Both operands reach shared memory with pixels as rows, so both are MN-major and the
MMA reads them transposed. fp16 or bf16 in, fp32 accumulation, packed NHWC, groups = 1, C and K
multiples of 8, any stride, padding and dilation. Shape and config are compiled in.

A config is the block tile (``bm`` x ``bn``: ``bm`` / 64 x ``wn`` warpgroups of 128 threads,
each 64 rows by ``bn`` / ``wn`` columns, one wgmma m64nNk16 per 16-pixel slice of a 64-pixel
k-tile), the depth of the cp.async ring (``stages``), and the split of the long pixel reduction:
``cluster`` x ``parts`` slices, the ``cluster`` slices of a tile one thread-block cluster
summing through distributed shared memory, the ``parts`` cluster sums fp32 partials in the
workspace that a second kernel adds up (``parts`` = 1: the cluster writes dw itself); ``ws`` = 1
adds a producer warpgroup that alone fills the ring (mbarriers between it and the MMA
warpgroups, which then never wait at a block-wide barrier inside the loop); ``fix`` = 1 sums the
``parts`` inside the one kernel: each slice leaves its fp32 partial in the workspace, signals the
tile's other slices through flags there, and once it has theirs sums its share of the tile and
stores it (no second kernel, no pass over every partial of every tile by one launch); ``rot`` = 1
starts each tile's slice at its own k-tile (spread over the tiles, wrapping around)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from miopy.errors import bad
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.conv.igemm_common import (
    REDUCE_THREADS,
    IgemmSolver,
    compute_units,
    conv_shape_defines,
    nhwc_tensor_core_reason,
    smem_limit,
)
from miopy.solvers.conv.implicit_gemm_wgmma import ALIGN_SLACK, wgmma_reason

DOMAIN: dict[str, tuple[int, ...]] = {
    "bm": (64, 128, 256),  # dw rows (output channels) per block: 64 per warpgroup row
    "bn": (64, 128, 192, 256, 384, 512),  # dw columns (filter taps) per block
    "wn": (1, 2),  # warpgroups side by side along the columns (each bn / wn wide)
    "stages": (3, 4, 5, 6, 7, 8),  # 64-pixel k-tiles in the shared-memory ring
    # slices of a tile summed in one thread-block cluster (on the H200 clusters of 3, 5 and 7
    # took up to twice as long as the same split without: they fit a GPC's SMs badly)
    "cluster": (1, 2, 4, 8),
    "parts": (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32),  # sums through the workspace
    # 1: warp-specialised, a producer warpgroup fills the ring (mbarriers), the MMA warpgroups
    # only compute; no clusters, at most 2 MMA warpgroups; 2: the same with 8 producer threads
    # per pixel row (a warp's copies cover whole 128-byte lines) instead of 2
    "ws": (0, 1, 2),
    # 1: the parts sum each other's partials inside the kernel (flags in the workspace) instead
    # of a second kernel; only with parts > 1 and no clusters
    "fix": (0, 1),
    # 1: each tile starts its slice of the reduction at its own k-tile (spread over the tiles)
    # and wraps around, so that the blocks sharing an operand tile do not read it all at once
    "rot": (0, 1),
}
OPTIONAL = ("ws", "fix", "rot")  # fields that records from before them lack (meaning 0)
FIELDS = tuple(DOMAIN)
WGMMA_WIDTHS = (64, 128, 192, 256)  # the N of one warpgroup's MMA
MAX_WARPGROUPS = 4
BK = 64  # pixels per k-tile: one 128-byte row per pixel of each 64-column block
MIN_SLICE_TILES = 4  # k-tiles of each slice of a split reduction, at least
REGS = 65536  # registers of one SM (sm_90)
MAX_ACC_512 = 64  # accumulators per thread of a 512-thread block (128 registers per thread at most)
# The default's candidates, (bm, bn, wn, stages) and their weight in speed(): the fastest
# configs of a sweep on the H200 (fp16, L2 flushed, scripts/bench_wgmma_wrw.py, 2026-11-23)
# were these tiles with a split filling one wave of resident blocks: 56x56 K64 64 x 64 with 6
# stages in 28 parts 36.6 us; 28x28 K128 128 x 128 with 6 stages in 14 parts 27.2 us (128 x 192
# in 20 parts 29.8 us); 14x14 K256 256 x 128 in 7 parts 27.5 us (128 x 192 in 5 parts 28.3 us,
# 128 x 128 in 3 parts 28.6 us); 7x7 K512 128 x 192 unsplit 26.5 us (256 x 128 28.1 us). The
# weights rank those as measured.
DEFAULT_TILES_NARROW = {(64, 64, 1, 6): 1.0}  # K <= 64
DEFAULT_TILES_WIDE = {(128, 192, 1, 4): 0.85, (256, 128, 1, 4): 0.9, (128, 128, 1, 6): 0.95}
# Tiles whose default is warp-specialised where the grid is unsplit: on the H200 (2026-11-23,
# scripts/bench_wgmma_wrw.py --configs ws) 7x7 K512 128 x 192 unsplit took 24.9 us fp16 / 25.1 us
# bf16 warp-specialised against 26.5 / 26.6 us without; split into 5 or 20 parts (14x14, 28x28)
# and the 128-column tiles it was slower (30.9 against 28.1 us, 33.7 against 28.9 us).
# With its k-tile starts spread over the tiles (rot = 1; scripts/bench_wgmma_wrw.py --configs rot,
# 2026-11-23) it took 23.6 us against 24.2 us fp16.
WS_UNSPLIT_TILES = {(128, 192, 1)}
# Tiles whose default is warp-specialised with 8 producer threads per pixel row (ws = 2) where
# the grid is split in workspace parts: 28x28 K128 128 x 128 in 14 parts 24.1 us fp16 against
# 26.1 us without a producer (both summed in the kernel), 14x14 K256 in 3 parts 27.8 against
# 29.5 us (H200, --configs rot / fix, 2026-11-23). Unsplit it was not measured; 64 x 64 tied
# (34.0 against 33.8 us), and the 128 x 192 unsplit tile was slower with it (25.7 against 24.2 us).
WS2_SPLIT_TILES = {(128, 128, 1)}
SEARCH_TILES = (
    (64, 64, 1),
    (64, 128, 1),
    (64, 192, 1),
    (64, 256, 2),
    (128, 128, 1),
    (128, 192, 1),
    (128, 256, 2),
    (256, 128, 1),
)
SEARCH_STAGES = (3, 4, 5, 6)
WS_SEARCH_STAGES = (4, 5, 6)  # warp-specialised: the ring runs stages - 1 k-tiles ahead
LOADERS = 128  # the producer warpgroup of a warp-specialised config
MAX_WS_MMA_THREADS = 256  # two MMA warpgroups beside it at most (registers)
MAX_PARTS_ALONE = 32  # splits beyond this many slices sum in clusters of 2, 4 or 8 first


def wrw_config(
    bm: int,
    bn: int,
    wn: int = 1,
    stages: int = 4,
    cluster: int = 1,
    parts: int = 1,
    ws: int = 0,
    *,
    fix: int = 0,
    rot: int = 0,
) -> dict[str, int]:
    return {
        "bm": bm,
        "bn": bn,
        "wn": wn,
        "stages": stages,
        "cluster": cluster,
        "parts": parts,
        "ws": ws,
        "fix": fix,
        "rot": rot,
    }


def split_near(total: int) -> tuple[int, int]:
    """(cluster, parts) whose product is nearest ``total`` (the smaller cluster on a tie)."""
    pairs = itertools.product(DOMAIN["cluster"], DOMAIN["parts"])
    return min(pairs, key=lambda cp: (abs(cp[0] * cp[1] - total), cp[0]))


def threads(config: dict[str, int]) -> int:
    """128 threads (one warpgroup) per 64 rows and per ``wn`` column block of the tile: the MMA
    warpgroups."""
    return config["bm"] // 64 * config["wn"] * 128


def block_threads(config: dict[str, int]) -> int:
    """The MMA warpgroups and, warp-specialised, the producer warpgroup."""
    return threads(config) + (LOADERS if config.get("ws", 0) else 0)


def slices(config: dict[str, int]) -> int:
    """Blocks sharing one tile's reduction (the grid's y)."""
    return config["cluster"] * config["parts"]


def k_tiles(problem: ConvProblem) -> int:
    """64-pixel k-tiles of the whole reduction (N*Ho*Wo output pixels)."""
    n, _, p, q = problem.y.lens
    return -(-(n * p * q) // BK)


def tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """dw tiles: K rows by R*S*C columns."""
    k, c, r, s = problem.w.lens
    return -(-k // config["bm"]) * -(-(r * s * c) // config["bn"])


def ring_bytes(config: dict[str, int]) -> int:
    return config["stages"] * (config["bm"] + config["bn"]) * 128


def smem_bytes(config: dict[str, int]) -> int:
    """The ring of ``stages`` k-tiles of A and B (128 bytes per 64 columns and pixel), the
    unsplit (or warp-specialised) epilogue's rounded tile (rows of bn + 8 elements) or a
    cluster's fp32 partial tile (rows of bn + 4 floats) where larger, the mbarriers of a
    warp-specialised config, plus the alignment slack."""
    need = ring_bytes(config)
    if slices(config) == 1 or config.get("ws", 0):
        need = max(need, config["bm"] * (config["bn"] + 8) * 2)
    if config["cluster"] > 1:
        need = max(need, config["bm"] * (config["bn"] + 4) * 4)
    if config.get("ws", 0):
        need += 16 * config["stages"]  # a full and an empty barrier per stage, past the rest
    return need + ALIGN_SLACK


def regs_per_thread(config: dict[str, int]) -> int:
    """What the kernel is expected to use: its bn / wn / 2 accumulators and about 50 more with
    two or more warpgroups, 75 with one (ptxas: 113 for 128 x 128, 158 for 128 x 192, 144 for
    64 x 128, 166 for 64 x 192)."""
    extra = 75 if threads(config) == 128 else 50
    return min(255, config["bn"] // config["wn"] // 2 + extra)


def blocks_per_sm(config: dict[str, int], smem: int) -> int:
    """Resident blocks of ``config`` on one SM by shared memory (``smem`` available) and
    registers (at least one)."""
    by_regs = REGS // (block_threads(config) * regs_per_thread(config))
    return max(1, min(smem // smem_bytes(config), by_regs))


def fix_flag_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """``fix``: a u64 flag per writing and reading part of each tile, in 256-byte units."""
    return -(-(tiles(problem, config) * config["parts"] ** 2 * 8) // 256) * 256


def workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """The fp32 partial dw of each part (none with one part); with ``fix`` the flags and each
    part's whole fp32 tiles (edge tiles included)."""
    if config["parts"] == 1:
        return 0
    if config.get("fix", 0):
        tile_floats = tiles(problem, config) * config["bm"] * config["bn"]
        return fix_flag_bytes(problem, config) + config["parts"] * tile_floats * 4
    return config["parts"] * problem.w.element_space * 4


def kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """wgmma_wrw, one block of ``block_threads(config)`` per dw tile (grid x) and slice of the
    reduction (grid y); with several parts igemm_splitk_reduce, one work item per 8 dw values.
    The shape and the config are defines (IG_<shape>, WG_BM, WG_BN, WG_WN, WG_STAGES,
    IG_SPLIT_K the slices, WG_CLUSTER; IG_CLUSTER where one cluster holds all slices; WG_FIX:
    the parts sum in the kernel, whose grid is then 1-D with a tile's parts consecutive)."""
    split = slices(config)
    defines = {
        **conv_shape_defines(problem),
        "WG_BM": config["bm"],
        "WG_BN": config["bn"],
        "WG_WN": config["wn"],
        "WG_STAGES": config["stages"],
        "IG_SPLIT_K": split,
        "WG_CLUSTER": config["cluster"],
        "WG_WS": config.get("ws", 0),
        "WG_FIX": config.get("fix", 0),
        "WG_ROT": config.get("rot", 0),
    }
    if config["cluster"] > 1 and config["parts"] == 1:
        defines["IG_CLUSTER"] = 1
    local = block_threads(config)
    fix = config.get("fix", 0)
    grid = (tiles(problem, config) * split * local, 1) if fix else (tiles(problem, config) * local, split)
    specs = [KernelSpec("wgmma_wrw", "wgmma_wrw", defines, grid, (local, 1))]
    if config["parts"] > 1 and not fix:
        work = -(-(problem.w.element_space // 8) // REDUCE_THREADS) * REDUCE_THREADS
        specs.append(KernelSpec("wgmma_wrw", "igemm_splitk_reduce", defines, (work,), (REDUCE_THREADS,)))
    return specs


class ConvWgmmaWrwNhwc(IgemmSolver):
    name = "ConvWgmmaWrwNhwc"
    id = 242  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.BACKWARD_WEIGHTS
    reads, writes = ("x", "y"), "w"  # backward weights: x and dy (role y) are read, dw (role w) written
    epilogue_files = frozenset({"wgmma_wrw"})
    domain = DOMAIN
    smem_bytes = staticmethod(smem_bytes)
    workspace_bytes = staticmethod(workspace_bytes)
    kernel_specs = staticmethod(kernel_specs)

    @staticmethod
    def reduction_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
        return k_tiles(problem)

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        return nhwc_tensor_core_reason(ctx, problem, self.direction) or wgmma_reason(ctx)

    def defers(self, ctx, problem: ConvProblem) -> bool:
        """Immediate mode lists it after ConvIgemmWrwNhwc for 1x1 filters (not measured against
        it there; find times both). Its defaults beat that solver's on the ResNet-50 3x3 layers
        on the H200 (fp16, 2026-11-23: 36.6 / 27.2 / 27.5 / 26.5 us against 42.8 / 34.9 / 31.6 /
        30.8 us)."""
        _, _, r, s = problem.w.lens
        return r * s == 1

    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        """Exactly DOMAIN's fields (OPTIONAL ones may be missing: 0) with values from it; bn / wn
        one of the wgmma widths; at most MAX_WARPGROUPS warpgroups (and the device's threads per
        block); warp-specialised only without clusters and with at most MAX_WS_MMA_THREADS MMA
        threads; ``fix`` only with parts > 1 and no clusters; slices of at least one k-tile
        each; shared memory within the device's limit."""
        if not isinstance(config, dict) or not set(DOMAIN) - set(OPTIONAL) <= set(config) <= set(DOMAIN):
            return False  # records from before "ws" or "fix" mean 0
        if any(type(v) is not int or v not in DOMAIN[f] for f, v in config.items()):
            return False
        if config["bn"] % config["wn"] or config["bn"] // config["wn"] not in WGMMA_WIDTHS:
            return False
        if config["bm"] // 64 * config["wn"] > MAX_WARPGROUPS:
            return False
        if threads(config) == 512 and config["bn"] // config["wn"] // 2 > MAX_ACC_512:
            return False  # 128 registers per thread could not hold them
        if config.get("ws", 0) and (config["cluster"] > 1 or threads(config) > MAX_WS_MMA_THREADS):
            return False
        if config.get("fix", 0) and (config["cluster"] > 1 or config["parts"] == 1):
            return False
        info = getattr(ctx, "info", None)
        if info is not None and block_threads(config) > info.max_work_group_size:
            return False
        if slices(config) > k_tiles(problem):
            return False  # slices with nothing to sum
        return smem_bytes(config) <= smem_limit(ctx)

    def launch_smem(self, ctx, config: dict[str, int]) -> int:
        return smem_bytes(config)

    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        return workspace_bytes(problem, config or self.default_config(ctx, problem))

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        """wgmma_wrw on (x, dy, dw, the workspace); with several parts (and no ``fix``) then the
        sum of the parts' fp32 partials into dw."""
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        specs = kernel_specs(problem, config)
        partials = Workspace() if config["parts"] > 1 else None
        args = (Tensor("x"), Tensor("y"), Tensor("w"), partials)
        steps = [Launch(specs[0], args, shared_mem=smem_bytes(config))]
        if len(specs) > 1:
            steps.append(Launch(specs[1], (Workspace(), Tensor("w"))))
        return Program(tuple(steps), workspace=workspace_bytes(problem, config))

    # ---- default and search space ----------------------------------------------------------------
    def fill_split(self, ctx, problem: ConvProblem, config: dict[str, int]) -> dict[str, int]:
        """``config`` with the most slices of the reduction whose grid still fits one wave of
        resident blocks (blocks_per_sm per SM), each slice keeping MIN_SLICE_TILES k-tiles:
        workspace parts alone up to MAX_PARTS_ALONE slices (on the H200 parts alone were as fast
        as clusters or faster), beyond that clusters of 2, 4 or 8 times parts. Unsplit where the
        tiles alone fill a wave."""
        slots = compute_units(ctx) * blocks_per_sm(config, smem_limit(ctx))
        want = min(slots // tiles(problem, config), k_tiles(problem) // MIN_SLICE_TILES)
        best = {**config, "cluster": 1, "parts": 1}
        for cluster, parts in itertools.product(DOMAIN["cluster"], DOMAIN["parts"]):
            total = cluster * parts
            if total > want or (cluster > 1 and total <= MAX_PARTS_ALONE):
                continue
            candidate = {**config, "cluster": cluster, "parts": parts}
            if total > slices(best) and self.is_valid_config(ctx, problem, candidate):
                best = candidate
        return best

    def speed(self, ctx, problem: ConvProblem, config: dict[str, int], weight: float) -> float:
        """The default's ranking of a candidate: ``weight`` times the share of the computed
        outputs that dw has (tiles past its edges compute nothing useful) times the share of
        the waves' block slots that the grid fills."""
        k, c, r, s = problem.w.lens
        n_tiles = tiles(problem, config)
        useful = k * r * s * c / (n_tiles * config["bm"] * config["bn"])
        slots = compute_units(ctx) * blocks_per_sm(config, smem_limit(ctx))
        blocks = n_tiles * slices(config)
        return weight * useful * blocks / (-(-blocks // slots) * slots)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """Of DEFAULT_TILES_NARROW (K <= 64) or DEFAULT_TILES_WIDE (fewer stages where shared
        memory is short), each with fill_split's split, the one speed() ranks first,
        warp-specialised where it is unsplit and one of WS_UNSPLIT_TILES (with spread k-tile
        starts) or split in parts and one of WS2_SPLIT_TILES (8 producer threads a row), its
        parts summed in the kernel (``fix``) where it has parts and no clusters (H200, fp16,
        2026-11-23; scripts/bench_wgmma_wrw.py --configs fix, rotating inputs: 56x56 K64 64 x 64
        in 28 parts 33.7 us against 35.8 us with igemm_splitk_reduce, 14x14 K256 256 x 128 in 7
        parts 25.6 against 27.9 us; ncu there: the main kernel 23.6 us and the reduce 6.4 us
        before, the one kernel 25.5 us now; benchmarks/conv.py, L2 flushed before each run:
        36.2 against 37.2 us and 28.1 against 28.6 us); 64 x 64 with 3 stages where none is valid."""
        k = problem.w.lens[0]
        out, best = None, 0.0
        for (bm, bn, wn, stages), weight in (DEFAULT_TILES_NARROW if k <= 64 else DEFAULT_TILES_WIDE).items():
            config = wrw_config(bm, bn, wn, stages)
            while config["stages"] > 3 and smem_bytes(config) > smem_limit(ctx):
                config["stages"] -= 1
            if not self.is_valid_config(ctx, problem, config):
                continue
            config = self.fill_split(ctx, problem, config)
            score = self.speed(ctx, problem, config, weight)
            if score > best:
                out, best = config, score
        tile = (out["bm"], out["bn"], out["wn"]) if out else None
        if out and out["parts"] > 1 and out["cluster"] == 1 and tile in WS2_SPLIT_TILES:
            ws = {**out, "ws": 2}
            if self.is_valid_config(ctx, problem, ws):
                out = ws
        if out and slices(out) == 1 and tile in WS_UNSPLIT_TILES:
            ws = {**out, "ws": 1, "rot": 1}
            if self.is_valid_config(ctx, problem, ws):
                out = ws
        if out and out["parts"] > 1 and out["cluster"] == 1:
            out = {**out, "fix": 1}
        return out or wrw_config(64, 64, 1, 3)

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """SEARCH_TILES no taller than the next power of two of K (at least 64) and no wider
        than the next multiple of 64 of R*S*C, with SEARCH_STAGES, each with fill_split's split,
        that split in clusters of 2 (where even), and half and twice as many slices; then each
        tile warp-specialised (both producer layouts) with WS_SEARCH_STAGES and fill_split's
        split; every one of those in workspace parts without clusters also with ``fix``; each
        fill_split config with ``rot`` too. The default config where none is valid."""
        k, c, r, s = problem.w.lens
        cap_m = max(64, 1 << (k - 1).bit_length())
        cap_n = max(64, -(-(r * s * c) // 64) * 64)
        out: list[dict[str, Any]] = []

        def add(config: dict[str, Any]) -> None:
            for variant in (config, {**config, "fix": 1}):
                if variant not in out and self.is_valid_config(ctx, problem, variant):
                    out.append(variant)

        for (bm, bn, wn), stages in itertools.product(SEARCH_TILES, SEARCH_STAGES):
            base = wrw_config(bm, bn, wn, stages)
            if bm > cap_m or bn > cap_n or not self.is_valid_config(ctx, problem, base):
                continue
            fill = self.fill_split(ctx, problem, base)
            add(fill)
            add({**fill, "rot": 1})
            total = slices(fill)
            if total % 2 == 0 and total <= 2 * MAX_PARTS_ALONE:
                add({**base, "cluster": 2, "parts": total // 2})
            for factor in (0.5, 2):
                cluster, parts = split_near(max(1, round(total * factor)))
                add({**base, "cluster": cluster, "parts": parts})
        for (bm, bn, wn), stages, ws in itertools.product(SEARCH_TILES, WS_SEARCH_STAGES, (1, 2)):
            base = wrw_config(bm, bn, wn, stages, ws=ws)
            if bm <= cap_m and bn <= cap_n and self.is_valid_config(ctx, problem, base):
                add(self.fill_split(ctx, problem, base))
                add({**self.fill_split(ctx, problem, base), "rot": 1})
        return out or [self.default_config(ctx, problem)]
