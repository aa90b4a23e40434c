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
workspace that a second kernel adds up (``parts`` = 1: the cluster writes dw itself)."""

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
}
FIELDS = tuple(DOMAIN)
WGMMA_WIDTHS = (64, 128, 192, 256)  # the N of one warpgroup's MMA
MAX_WARPGROUPS = 4
BK = 64  # pixels per k-tile: one 128-byte row per pixel of each 64-column block
MIN_SLICE_TILES = 4  # k-tiles of each slice of a split reduction, at least
REGS = 65536  # registers of one SM (sm_90)
MAX_ACC_512 = 64  # accumulators per thread of a 512-thread block (128 registers per thread at most)
# estimate()'s cost model (ns on the H200, fitted to the first sweep, 2026-11-23): the share of
# an SM's tensor peak (4096 fp16 FLOP a cycle at 1.75 GHz) a block tile reaches with the
# blocks that share the SM, a block's fixed cost (pipeline fill, epilogue), a cluster's sum
# through distributed shared memory, and the second kernel that adds up the parts
TILE_EFFICIENCY = {
    (128, 192, 1): 0.43,
    (128, 128, 1): 0.38,
    (128, 256, 2): 0.36,
    (256, 128, 1): 0.36,
    (64, 192, 1): 0.22,
    (64, 256, 2): 0.22,
    (64, 128, 1): 0.18,
    (64, 64, 1): 0.15,
}
OTHER_EFFICIENCY = 0.15
SM_FLOP_PER_NS = 4096 * 1.75
BLOCK_OVERHEAD_NS = 4000
CLUSTER_OVERHEAD_NS = 1500
REDUCE_LAUNCH_NS = 2000
REDUCE_BYTES_PER_NS = 2500  # the parts' partials, mostly from L2
DEFAULT_TILES_NARROW = ((64, 128, 1), (64, 192, 1), (64, 64, 1), (64, 256, 2))  # K <= 64
DEFAULT_TILES_WIDE = ((128, 192, 1), (128, 128, 1), (128, 256, 2), (64, 128, 1))
DEFAULT_STAGES = 4
SEARCH_TILES = (*DEFAULT_TILES_WIDE, (64, 64, 1), (64, 192, 1), (64, 256, 2), (256, 128, 1))
SEARCH_STAGES = (4, 6)


def wrw_config(
    bm: int, bn: int, wn: int = 1, stages: int = 4, cluster: int = 1, parts: int = 1
) -> dict[str, int]:
    return {"bm": bm, "bn": bn, "wn": wn, "stages": stages, "cluster": cluster, "parts": parts}


def split_near(total: int) -> tuple[int, int]:
    """(cluster, parts) whose product is nearest ``total`` (the smaller cluster on a tie)."""
    pairs = itertools.product(DOMAIN["cluster"], DOMAIN["parts"])
    return min(pairs, key=lambda cp: (abs(cp[0] * cp[1] - total), cp[0]))


def threads(config: dict[str, int]) -> int:
    """128 threads (one warpgroup) per 64 rows and per ``wn`` column block of the tile."""
    return config["bm"] // 64 * config["wn"] * 128


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
    unsplit epilogue's rounded tile (rows of bn + 8 elements) or a cluster's fp32 partial tile
    (rows of bn + 4 floats) where larger, plus the alignment slack."""
    need = ring_bytes(config)
    if slices(config) == 1:
        need = max(need, config["bm"] * (config["bn"] + 8) * 2)
    if config["cluster"] > 1:
        need = max(need, config["bm"] * (config["bn"] + 4) * 4)
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
    by_regs = REGS // (threads(config) * regs_per_thread(config))
    return max(1, min(smem // smem_bytes(config), by_regs))


def workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """The fp32 partial dw of each part (none with one part)."""
    return 0 if config["parts"] == 1 else config["parts"] * problem.w.element_space * 4


def kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """wgmma_wrw, one block of ``threads(config)`` per dw tile (grid x) and slice of the
    reduction (grid y); with several parts igemm_splitk_reduce, one work item per 8 dw values.
    The shape and the config are defines (IG_<shape>, WG_BM, WG_BN, WG_WN, WG_STAGES,
    IG_SPLIT_K the slices, WG_CLUSTER; IG_CLUSTER where one cluster holds all slices)."""
    split = slices(config)
    defines = {
        **conv_shape_defines(problem),
        "WG_BM": config["bm"],
        "WG_BN": config["bn"],
        "WG_WN": config["wn"],
        "WG_STAGES": config["stages"],
        "IG_SPLIT_K": split,
        "WG_CLUSTER": config["cluster"],
    }
    if config["cluster"] > 1 and config["parts"] == 1:
        defines["IG_CLUSTER"] = 1
    local = threads(config)
    grid = (tiles(problem, config) * local, split)
    specs = [KernelSpec("wgmma_wrw", "wgmma_wrw", defines, grid, (local, 1))]
    if config["parts"] > 1:
        work = -(-(problem.w.element_space // 8) // REDUCE_THREADS) * REDUCE_THREADS
        specs.append(KernelSpec("wgmma_wrw", "igemm_splitk_reduce", defines, (work,), (REDUCE_THREADS,)))
    return specs


class ConvWgmmaWrwNhwc(IgemmSolver):
    name = "ConvWgmmaWrwNhwc"
    id = 242  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.BACKWARD_WEIGHTS
    reads, writes = ("x", "y"), "w"  # backward weights: x and dy (role y) are read, dw (role w) written
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
        """Immediate mode lists it after ConvIgemmWrwNhwc until its defaults are measured faster
        (find times both)."""
        return True

    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        """Exactly DOMAIN's fields with values from it; bn / wn one of the wgmma widths; at most
        MAX_WARPGROUPS warpgroups (and the device's threads per block); slices of at least one
        k-tile each; shared memory within the device's limit."""
        if not isinstance(config, dict) or set(config) != set(DOMAIN):
            return False
        if any(type(v) is not int or v not in DOMAIN[f] for f, v in config.items()):
            return False
        if config["bn"] % config["wn"] or config["bn"] // config["wn"] not in WGMMA_WIDTHS:
            return False
        if config["bm"] // 64 * config["wn"] > MAX_WARPGROUPS:
            return False
        if threads(config) == 512 and config["bn"] // config["wn"] // 2 > MAX_ACC_512:
            return False  # 128 registers per thread could not hold them
        info = getattr(ctx, "info", None)
        if info is not None and threads(config) > info.max_work_group_size:
            return False
        if slices(config) > k_tiles(problem):
            return False  # slices with nothing to sum
        return smem_bytes(config) <= smem_limit(ctx)

    def launch_smem(self, ctx, config: dict[str, int]) -> int:
        return smem_bytes(config)

    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        return workspace_bytes(problem, config or self.default_config(ctx, problem))

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        """wgmma_wrw on (x, dy, dw, the workspace); with several parts then the sum of the
        parts' fp32 partials into dw."""
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        specs = kernel_specs(problem, config)
        partials = Workspace() if config["parts"] > 1 else None
        args = (Tensor("x"), Tensor("y"), Tensor("w"), partials)
        steps = [Launch(specs[0], args, shared_mem=smem_bytes(config))]
        if config["parts"] > 1:
            steps.append(Launch(specs[1], (Workspace(), Tensor("w"))))
        return Program(tuple(steps), workspace=workspace_bytes(problem, config))

    # ---- default and search space ----------------------------------------------------------------
    def estimate(self, ctx, problem: ConvProblem, config: dict[str, int]) -> float:
        """The cost model's time of ``config`` in ns: waves of resident blocks (blocks_per_sm per
        SM) times a block's k-tiles at its tile's TILE_EFFICIENCY (slower where blocks share an
        SM) plus BLOCK_OVERHEAD_NS; a cluster's sum; the parts' sum kernel."""
        cus = compute_units(ctx)
        per_sm = blocks_per_sm(config, smem_limit(ctx))
        blocks = tiles(problem, config) * slices(config)
        waves = -(-blocks // (cus * per_sm))
        sharing = min(per_sm, -(-blocks // cus))
        eff = TILE_EFFICIENCY.get((config["bm"], config["bn"], config["wn"]), OTHER_EFFICIENCY)
        tile_ns = 2 * BK * config["bm"] * config["bn"] * sharing / (eff * SM_FLOP_PER_NS)
        time = waves * (-(-k_tiles(problem) // slices(config)) * tile_ns + BLOCK_OVERHEAD_NS)
        if config["cluster"] > 1:
            time += CLUSTER_OVERHEAD_NS
        if config["parts"] > 1:
            time += REDUCE_LAUNCH_NS + config["parts"] * problem.w.element_space * 4 / REDUCE_BYTES_PER_NS
        return time

    def split_for(
        self, ctx, problem: ConvProblem, config: dict[str, int], clusters: Iterable[int] = DOMAIN["cluster"]
    ) -> dict[str, int]:
        """``config`` with the split of the reduction (cluster x parts, the cluster one of
        ``clusters``, each slice keeping MIN_SLICE_TILES k-tiles) that estimate() finds fastest;
        on a tie the fewer slices."""
        most = max(1, k_tiles(problem) // MIN_SLICE_TILES)
        best, best_key = None, None
        for cluster, parts in itertools.product(clusters, DOMAIN["parts"]):
            candidate = {**config, "cluster": cluster, "parts": parts}
            if cluster * parts > most or not self.is_valid_config(ctx, problem, candidate):
                continue
            key = (self.estimate(ctx, problem, candidate), cluster * parts, parts)
            if best_key is None or key < best_key:
                best, best_key = candidate, key
        return best or {**config, "cluster": 1, "parts": 1}

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """Of DEFAULT_TILES_NARROW (K <= 64) or DEFAULT_TILES_WIDE with DEFAULT_STAGES (fewer
        where shared memory is short), each with split_for's split, the one estimate() finds
        fastest; 64 x 64 with 3 stages where none is valid."""
        k = problem.w.lens[0]
        out, best = None, None
        for bm, bn, wn in DEFAULT_TILES_NARROW if k <= 64 else DEFAULT_TILES_WIDE:
            config = wrw_config(bm, bn, wn, DEFAULT_STAGES)
            while config["stages"] > 3 and smem_bytes(config) > smem_limit(ctx):
                config["stages"] -= 1
            if not self.is_valid_config(ctx, problem, config):
                continue
            config = self.split_for(ctx, problem, config)
            time = self.estimate(ctx, problem, config)
            if best is None or time < best:
                out, best = config, time
        return out or wrw_config(64, 64, 1, 3)

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """SEARCH_TILES no taller than the next power of two of K (at least 64) and no wider
        than the next multiple of 64 of R*S*C, with SEARCH_STAGES, each with split_for's split
        for a cluster of 1, 2 and 4 and the best of those with twice and half the slices. The
        default config where none is valid."""
        k, c, r, s = problem.w.lens
        cap_m = max(64, 1 << (k - 1).bit_length())
        cap_n = max(64, -(-(r * s * c) // 64) * 64)
        out: list[dict[str, Any]] = []

        def add(config: dict[str, Any]) -> None:
            if config not in out and self.is_valid_config(ctx, problem, config):
                out.append(config)

        for (bm, bn, wn), stages in itertools.product(SEARCH_TILES, SEARCH_STAGES):
            base = wrw_config(bm, bn, wn, stages)
            if bm > cap_m or bn > cap_n or not self.is_valid_config(ctx, problem, base):
                continue
            splits = [self.split_for(ctx, problem, base, (cluster,)) for cluster in (1, 2, 4)]
            for config in splits:
                add(config)
            best = min(splits, key=lambda cfg: self.estimate(ctx, problem, cfg))
            for factor in (0.5, 2):
                cluster, parts = split_near(max(1, round(slices(best) * factor)))
                add({**base, "cluster": cluster, "parts": parts})
        return out or [self.default_config(ctx, problem)]
