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
    "stages": (3, 4, 5, 6),  # 64-pixel k-tiles in the shared-memory ring
    "cluster": (1, 2, 3, 4, 5, 6, 7, 8),  # slices of a tile summed in one thread-block cluster
    "parts": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32),  # cluster sums added up through the workspace
}
FIELDS = tuple(DOMAIN)
WGMMA_WIDTHS = (64, 128, 192, 256)  # the N of one warpgroup's MMA
MAX_WARPGROUPS = 4
BK = 64  # pixels per k-tile: one 128-byte row per pixel of each 64-column block
MIN_SLICE_TILES = 4  # k-tiles of each slice of a split reduction, at least
REGS = 65536  # registers of one SM (sm_90)
MAX_ACC_512 = 64  # accumulators per thread of a 512-thread block (128 registers per thread at most)
# split_for's cost model, in k-tile times: a block's fixed cost (pipeline fill, epilogue) and
# the second kernel that adds up the parts' fp32 partials
BLOCK_OVERHEAD_TILES = 3
PARTS_OVERHEAD_TILES = 4


def wrw_config(
    bm: int, bn: int, wn: int = 1, stages: int = 4, cluster: int = 1, parts: int = 1
) -> dict[str, int]:
    return {"bm": bm, "bn": bn, "wn": wn, "stages": stages, "cluster": cluster, "parts": parts}


def split_near(total: int) -> tuple[int, int]:
    """(cluster, parts) whose product is nearest ``total`` (the larger cluster on a tie)."""
    pairs = itertools.product(DOMAIN["cluster"], DOMAIN["parts"])
    return min(pairs, key=lambda cp: (abs(cp[0] * cp[1] - total), -cp[0]))


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
    """What the kernel is expected to use: its bn / wn / 2 accumulators and about 100 more
    (224-252 measured by ptxas with 96-128 accumulators)."""
    return min(255, config["bn"] // config["wn"] // 2 + 100)


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
    def tile_for(self, problem: ConvProblem) -> dict[str, int]:
        """The block tile of the default: 64 rows where K <= 64 (64 x 192 over 192-tap dw rows
        or longer, else 64 x 64 ... 64 x 128), else 128 x 256 in four 64 x 128 warpgroups where
        the dw row has at least 256 taps, else 128 x 128."""
        k, c, r, s = problem.w.lens
        rsc = r * s * c
        if k <= 64:
            return wrw_config(64, 192 if rsc >= 192 else (128 if rsc > 64 else 64), 1, 4)
        return wrw_config(128, 256, 2, 4) if rsc >= 256 else wrw_config(128, 128, 1, 4)

    def split_for(self, ctx, problem: ConvProblem, config: dict[str, int]) -> dict[str, int]:
        """``config`` with the split of the reduction that a cost model finds fastest: waves of
        resident blocks (blocks_per_sm per SM) times the k-tiles of a slice plus
        BLOCK_OVERHEAD_TILES, plus PARTS_OVERHEAD_TILES where parts go through the workspace;
        each slice keeps MIN_SLICE_TILES k-tiles. A total split is a cluster of as many slices
        as divide it (up to 8) times parts; on a tie the fewer slices, then the fewer parts."""
        slots = compute_units(ctx) * blocks_per_sm(config, smem_limit(ctx))
        n_tiles = tiles(problem, config)
        kt = k_tiles(problem)
        most = max(1, kt // MIN_SLICE_TILES)

        def cost(c: dict[str, int]) -> tuple[float, int, int]:
            total = slices(c)
            waves = -(-n_tiles * total // slots)
            time = waves * (-(-kt // total) + BLOCK_OVERHEAD_TILES)
            if c["parts"] > 1:
                time += PARTS_OVERHEAD_TILES
            return (time, total, c["parts"])

        best = {**config, "cluster": 1, "parts": 1}
        for cluster, parts in itertools.product(DOMAIN["cluster"], DOMAIN["parts"]):
            candidate = {**config, "cluster": cluster, "parts": parts}
            if cluster * parts > most or not self.is_valid_config(ctx, problem, candidate):
                continue
            if cost(candidate) < cost(best):
                best = candidate
        return best

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """tile_for's tile (fewer stages where shared memory is short) with split_for's split;
        64 x 64 with 3 stages where nothing else is valid."""
        config = self.tile_for(problem)
        while config["stages"] > 3 and smem_bytes(config) > smem_limit(ctx):
            config["stages"] -= 1
        config = self.split_for(ctx, problem, config)
        if not self.is_valid_config(ctx, problem, config):
            config = wrw_config(64, 64, 1, 3)
        return config

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Every block tile with bm no taller than the next power of two of K (at least 64) and
        bn no wider than the next multiple of 64 of R*S*C, 3 or 4 stages, each with split_for's
        split and half and twice as many slices. The default config where none is valid."""
        k, c, r, s = problem.w.lens
        cap_m = max(64, 1 << (k - 1).bit_length())
        cap_n = -(-(r * s * c) // 64) * 64
        out: list[dict[str, Any]] = []
        for bm, bn, wn, stages in itertools.product(DOMAIN["bm"], DOMAIN["bn"], DOMAIN["wn"], (3, 4)):
            if bm > cap_m or bn > max(64, cap_n):
                continue
            base = wrw_config(bm, bn, wn, stages)
            if not self.is_valid_config(ctx, problem, base):
                continue
            split = self.split_for(ctx, problem, base)
            for factor in (0.5, 1, 2):
                cluster, parts = split_near(max(1, round(slices(split) * factor)))
                config = {**split, "cluster": cluster, "parts": parts} if factor != 1 else split
                if self.is_valid_config(ctx, problem, config) and config not in out:
                    out.append(config)
        return out or [self.default_config(ctx, problem)]
