"""What the tensor-core implicit-GEMM solvers share (implicit_gemm.py forward, implicit_gemm_bwd.py
backward data, implicit_gemm_wrw.py backward weights; kernels/cuda/igemm_*.cu): the config's
fields and their ranges, the applicability rule, the config checks, the kernels' shape defines,
the split-K reduction step and the program of one GEMM kernel plus, with a split, its sum.

A config is the block tile (``bm`` x ``bn`` outputs, ``bk`` reduction elements per pipeline
stage), the warp grid (``warps_m`` x ``warps_n``), the cp.async pipeline depth (``stages``), the
fragment buffers (``frag_bufs``) and the split of the reduction (``split_k``)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from miopy.errors import bad
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.tensor import DataType, packed_strides

DOMAIN: dict[str, tuple[int, ...]] = {
    "bm": (32, 64, 128, 256),  # GEMM rows per block
    "bn": (32, 64, 128, 256),  # GEMM columns per block
    "bk": (32, 64),  # reduction elements (channels or pixels) per pipeline stage
    "warps_m": (1, 2, 4),
    "warps_n": (1, 2, 4),
    "stages": (2, 3, 4, 5),
    "frag_bufs": (1, 2),  # 2: the next k-step's fragments load during this one's MMAs
    "split_k": (1, 2, 3, 4, 6, 8),  # blocks sharing the reduction (fp32 partial sums, then a sum)
}
FIELDS = tuple(DOMAIN)
DEFAULT_SMEM = 48 * 1024  # shared memory per block where the device does not say more
MAX_WARP_OUTPUTS = 64 * 64  # fp32 accumulators per warp (64 per thread) beyond which registers spill
MIN_THREADS, MAX_THREADS = 64, 256
INT32_MAX = 2**31 - 1
REDUCE_THREADS = 256  # the work-group of the split-K sum kernels
MIN_SLICE_TILES = 8  # pipeline steps of each slice of a split reduction, at least (search space)
SMALL_GRID_PER_CU = 2  # fewer blocks than this per multiprocessor: the small-grid default
SPLIT_BLOCKS_PER_CU = 4  # a small grid's default cluster split aims at no more blocks per SM than this
# the largest split a default takes: on the H200 a cluster of 2 won on the 7x7 and 14x14 ResNet
# layers, 3 and 4 lost to it by 10-40% (2026-11-22, scripts/tune_igemm_db.py --log)
MAX_DEFAULT_SPLIT = 2
SEARCH_SPLIT_BLOCKS_PER_CU = 4  # a search space's splits keep to this many blocks per SM
MAX_CLUSTER = 8  # the most blocks of a portable thread-block cluster (sm_90)
CLUSTER_ARCH = 90  # thread-block clusters and distributed shared memory from sm_90 on


def tile_config(
    bm: int, bn: int, bk: int, warps_m: int, warps_n: int, stages: int, frag_bufs: int = 1, split_k: int = 1
) -> dict[str, int]:
    return {
        "bm": bm,
        "bn": bn,
        "bk": bk,
        "warps_m": warps_m,
        "warps_n": warps_n,
        "stages": stages,
        "frag_bufs": frag_bufs,
        "split_k": split_k,
    }


def threads(config: dict[str, int]) -> int:
    return config["warps_m"] * config["warps_n"] * 32


def tile_smem_bytes(config: dict[str, int], row_offsets: bool) -> int:
    """Dynamic shared memory of a kernel: the pipeline's stages, or the epilogue's output tile
    (rows padded by 8 elements) with, where ``row_offsets``, one int per row (igemm_core.h)."""
    pipeline = config["stages"] * (config["bm"] + config["bn"]) * config["bk"] * 2
    epilogue = config["bm"] * (config["bn"] + 8) * 2 + (config["bm"] * 4 if row_offsets else 0)
    return max(pipeline, epilogue)


def cluster_tile_bytes(config: dict[str, int]) -> int:
    """Shared memory of a cluster split's fp32 partial tile (rows of bn + 4 floats, igemm_core.h)."""
    return config["bm"] * (config["bn"] + 4) * 4


def arch_number(ctx) -> int:
    """The device's sm_XY as XY (90 on Hopper); 0 where it is not a CUDA architecture."""
    info = getattr(ctx, "info", None)
    match = re.fullmatch(r"sm_(\d+)a?", getattr(info, "arch", "") or "")
    return int(match.group(1)) if match else 0


def cluster_split(ctx, config: dict[str, int]) -> bool:
    """A split of 2 to MAX_CLUSTER slices sums inside a thread-block cluster (no workspace, one
    kernel) where the device has clusters (sm_90 and later); other splits go through the
    workspace and a second kernel."""
    return 1 < config["split_k"] <= MAX_CLUSTER and arch_number(ctx) >= CLUSTER_ARCH


def split_workspace_bytes(config: dict[str, int], elements: int) -> int:
    """The fp32 partial outputs (``elements`` each) of a split reduction; none without a split."""
    return 0 if config["split_k"] == 1 else config["split_k"] * elements * 4


def is_nhwc(desc) -> bool:
    return tuple(desc.strides) == packed_strides(tuple(desc.lens), "NHWC")


def smem_limit(ctx) -> int:
    """Dynamic shared memory a block may have on the device (227 KB on Hopper)."""
    info = getattr(ctx, "info", None)
    if info is None:
        return DEFAULT_SMEM
    return info.max_dynamic_shared or info.local_mem_size


def compute_units(ctx) -> int:
    info = getattr(ctx, "info", None)
    return 132 if info is None else max(1, info.compute_units)


def cuda_2d_reason(ctx, problem: ConvProblem, direction: Direction) -> str | None:
    """Why a CUDA-only 2-D solver of ``direction`` cannot take ``problem`` (None when it can):
    the first checks of every implicit-GEMM solver's applicability."""
    backend = getattr(ctx, "backend_name", None)
    if backend != "cuda":
        return f"backend is {backend}, not cuda"
    if problem.direction is not direction:
        return f"direction is {problem.direction.name}"
    if problem.spatial_dims != 2:
        return "3-d convolution"
    return None


def not_nhwc_reason(problem: ConvProblem) -> str | None:
    """Which of x, w, y (first in that order) is not packed NHWC; None when all are."""
    for role, desc in (("x", problem.x), ("w", problem.w), ("y", problem.y)):
        if not is_nhwc(desc):
            return f"{role} is not packed NHWC"
    return None


def group_channels(problem: ConvProblem) -> tuple[int, int]:
    """(C, K) of one group: the input and output channels each group's GEMM sees."""
    groups = problem.conv.groups
    return problem.x.lens[1] // groups, problem.w.lens[0] // groups


def nhwc_tensor_core_reason(
    ctx, problem: ConvProblem, direction: Direction, grouped: bool = False
) -> str | None:
    """Why the tensor-core implicit-GEMM kernels cannot take ``problem`` in ``direction`` (None
    when they can): CUDA, 2-D, fp16 or bf16, groups = 1 unless ``grouped`` (kernels that run
    each group as its own run of blocks), packed NHWC tensors, C and K of a group multiples of
    8, every tensor under 2^31 elements (the kernels index with int32)."""
    why = cuda_2d_reason(ctx, problem, direction)
    if why:
        return why
    if problem.dtype not in (DataType.FP16, DataType.BF16):
        return f"dtype is {problem.dtype.value}, not FP16 or BF16"
    if problem.conv.groups != 1 and not grouped:
        return f"groups={problem.conv.groups}"
    why = not_nhwc_reason(problem)
    if why:
        return why
    c, k = group_channels(problem)
    if c % 8 or k % 8:
        per = " per group" if problem.conv.groups != 1 else ""
        return f"C={c} and K={k}{per} must be multiples of 8"
    for role, desc in (("x", problem.x), ("w", problem.w), ("y", problem.y)):
        if desc.element_space > INT32_MAX:
            return f"{role} has more than 2^31 elements"
    return None


def warp_grid_ok(
    ctx, config: Any, domain: dict[str, tuple[int, ...]], max_warp_outputs: int = MAX_WARP_OUTPUTS
) -> bool:
    """A tensor-core config's fields and warp grid are well formed: exactly ``domain``'s fields
    with int values from it, warp tiles of whole 16 x 16 fragments with at most
    ``max_warp_outputs`` accumulators, and MIN_THREADS to MAX_THREADS threads (no more than the
    device allows). The 3xTF32 solvers share this check with their own register budget."""
    if not isinstance(config, dict) or set(config) != set(domain):
        return False
    for key, value in config.items():
        if type(value) is not int or value not in domain[key]:
            return False
    if config["bm"] % config["warps_m"] or config["bn"] % config["warps_n"]:
        return False
    wm, wn = config["bm"] // config["warps_m"], config["bn"] // config["warps_n"]
    if wm % 16 or wn % 16 or wm * wn > max_warp_outputs:
        return False
    info = getattr(ctx, "info", None)
    max_threads = MAX_THREADS if info is None else min(MAX_THREADS, info.max_work_group_size)
    return MIN_THREADS <= threads(config) <= max_threads


def tile_config_ok(ctx, config: Any, domain: dict[str, tuple[int, ...]]) -> bool:
    """A config of the fp16 / bf16 tensor-core kernels is well formed: warp_grid_ok, and tiles
    every thread copies evenly in 8-element chunks."""
    if not warp_grid_ok(ctx, config, domain):
        return False
    t = threads(config)
    chunks = config["bk"] // 8
    return (config["bm"] * chunks) % t == 0 and (config["bn"] * chunks) % t == 0


def pow2_cap(extent: int) -> int:
    """The next power of two of ``extent``, at least 32: the widest block worth trying."""
    return max(32, 1 << (extent - 1).bit_length())


# The block shapes a search tries (bm, bn, warps_m, warps_n): warp tiles of 32 x 32 to 64 x 64,
# 2 to 8 warps, square and either way long. With TUNE_PIPES' pipelines this is a few hundred
# configs per problem at most (MIOpen's spaces are curated lists too), so that ``miopy tune``
# finishes in seconds per problem on a GPU with its parallel builds.
TUNE_TILES = (
    (32, 32, 1, 2),
    (32, 64, 1, 2),
    (64, 32, 2, 1),
    (128, 32, 4, 1),
    (64, 64, 2, 2),
    (128, 64, 2, 2),
    (128, 64, 4, 1),
    (64, 128, 2, 2),
    (128, 128, 2, 2),
    (256, 64, 4, 1),
    (128, 128, 4, 2),
    (128, 128, 2, 4),
    (256, 128, 4, 2),
)
# (bk, stages, frag_bufs) of the searched pipelines
TUNE_PIPES = ((32, 4, 2), (64, 2, 1), (64, 3, 1), (64, 3, 2), (64, 4, 2))


def tile_candidates(
    domain: dict[str, tuple[int, ...]], cap_m: int | None = None, cap_n: int | None = None
) -> Iterator[dict[str, int]]:
    """TUNE_TILES x TUNE_PIPES (no split) with ``bm`` <= ``cap_m`` and ``bn`` <= ``cap_n``
    (where given) and every value in ``domain`` (search spaces start here)."""
    for (bm, bn, wm, wn), (bk, stages, bufs) in itertools.product(TUNE_TILES, TUNE_PIPES):
        config = tile_config(bm, bn, bk, wm, wn, stages, bufs)
        if (cap_m is not None and bm > cap_m) or (cap_n is not None and bn > cap_n):
            continue
        if all(v in domain[f] for f, v in config.items()):
            yield config


def with_splits(
    configs: Iterator[dict[str, int]],
    splits: Callable[[dict[str, int]], Iterator[int]],
) -> Iterator[dict[str, int]]:
    """Each of ``configs`` with each split ``splits(config)`` gives."""
    for config in configs:
        for split in splits(config):
            yield {**config, "split_k": split}


def shape_defines(problem: ConvProblem, config: dict[str, int], **extra: int) -> dict[str, Any]:
    """The kernels' compile-time defines: MIOPY_DTYPE, the conv view's shape as IG_N ... IG_DW
    (C and K of one group, and IG_G, the groups, where there are several), ``extra`` as
    IG_<name>, and the config's fields as IG_<FIELD>."""
    defines = conv_shape_defines(problem, **extra)
    defines.update({f"IG_{f.upper()}": config[f] for f in FIELDS})
    return defines


def conv_shape_defines(problem: ConvProblem, **extra: int) -> dict[str, Any]:
    """MIOPY_DTYPE and the conv view's shape as IG_N ... IG_DW (C and K of one group, and IG_G,
    the groups, where there are several; ``extra`` as IG_<name>)."""
    n, _, h, w = problem.x.lens
    _, _, r, s = problem.w.lens
    c, k = group_channels(problem)
    _, _, p, q = problem.y.lens
    shape = {
        "N": n,
        "C": c,
        "H": h,
        "W": w,
        "K": k,
        "R": r,
        "S": s,
        "P": p,
        "Q": q,
        "PH": problem.pads[0],
        "PW": problem.pads[1],
        "SH": problem.conv.strides[0],
        "SW": problem.conv.strides[1],
        "DH": problem.conv.dilations[0],
        "DW": problem.conv.dilations[1],
        **extra,
    }
    if problem.conv.groups != 1:
        shape["G"] = problem.conv.groups
    defines: dict[str, Any] = {"MIOPY_DTYPE": problem.dtype.code}
    defines.update({f"IG_{name}": int(v) for name, v in shape.items()})
    return defines


def gemm_specs(
    file: str,
    reduce_name: str,
    defines: dict[str, Any],
    config: dict[str, int],
    tiles: tuple[int, ...],
    outputs: int,
) -> list[KernelSpec]:
    """The GEMM kernel of ``file`` (named as the file): a block of ``threads(config)`` per tile of
    the ``tiles`` grid and per slice of the reduction (the grid's last dimension); with a split,
    the sum kernel ``reduce_name``, one work item per 8 of the ``outputs``."""
    local = threads(config)
    split = config["split_k"]
    grid = (tiles[0] * local, *tiles[1:], split)
    specs = [KernelSpec(file, file, defines, grid, (local,) + (1,) * (len(grid) - 1))]
    if split > 1:
        groups = -(-(outputs // 8) // REDUCE_THREADS)
        specs.append(KernelSpec(file, reduce_name, defines, (groups * REDUCE_THREADS,), (REDUCE_THREADS,)))
    return specs


class IgemmSolver(TunableSolver):
    """A tensor-core implicit-GEMM solver: one GEMM kernel reading roles ``reads`` and writing
    role ``writes`` (with a split reduction, into fp32 partials in the workspace that a second
    kernel sums into ``writes``). A subclass names its direction and roles and gives, as static
    methods, its reduction's pipeline steps (``reduction_tiles``, what the split divides), its
    shared memory, its workspace and its kernels."""

    algorithm = "implicit_gemm"
    direction: ClassVar[Direction]
    reads: ClassVar[tuple[str, str]]
    writes: ClassVar[str]
    domain: ClassVar[dict[str, tuple[int, ...]]] = DOMAIN
    reduction_tiles: ClassVar[Callable[[ConvProblem, dict[str, int]], int]]
    smem_bytes: ClassVar[Callable[[dict[str, int]], int]]
    workspace_bytes: ClassVar[Callable[[ConvProblem, dict[str, int]], int]]
    kernel_specs: ClassVar[Callable[[ConvProblem, dict[str, int]], list[KernelSpec]]]

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        return nhwc_tensor_core_reason(ctx, problem, self.direction, grouped=True)

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not tile_config_ok(ctx, config, self.domain):
            return False
        if config["split_k"] > self.reduction_tiles(problem, config):
            return False  # slices with nothing to sum
        return self.launch_smem(ctx, config) <= smem_limit(ctx)

    def launch_smem(self, ctx, config: dict[str, int]) -> int:
        """Dynamic shared memory of the GEMM kernel: the kernel's own (``smem_bytes``), or a
        cluster split's partial tile where that is larger."""
        own = self.smem_bytes(config)
        return max(own, cluster_tile_bytes(config)) if cluster_split(ctx, config) else own

    def default_with_small_grid(
        self, ctx, problem: ConvProblem, chain: list[dict], grid_blocks: Callable[[ConvProblem, dict], int]
    ) -> dict[str, Any]:
        """The first valid config of ``chain`` (the first choice, the small-grid choice, then
        fallbacks); where the first choice is valid but its grid has fewer than
        SMALL_GRID_PER_CU blocks per multiprocessor, the next valid one; the last of ``chain``
        where none is valid."""
        first = chain[0]
        valid = [cfg for cfg in chain if self.is_valid_config(ctx, problem, cfg)]
        if not valid:
            return dict(chain[-1])
        small = grid_blocks(problem, first) < SMALL_GRID_PER_CU * compute_units(ctx)
        if valid[0] is first and small and len(valid) > 1:
            return dict(valid[1])
        return dict(valid[0])

    def small_grid_default(
        self,
        ctx,
        problem: ConvProblem,
        chain: list[dict],
        tiny: dict[str, int],
        width: int,
        grid_blocks: Callable[[ConvProblem, dict], int],
    ) -> dict[str, Any]:
        """default_with_small_grid's choice of ``chain``; where that is the small-grid choice
        (chain[1]) and its grid is still short of SMALL_GRID_PER_CU blocks per multiprocessor,
        ``tiny`` for outputs at least 128 wide (``width``) where it is valid; then
        cluster_default_split's split."""
        config = self.default_with_small_grid(ctx, problem, chain, grid_blocks)
        small = grid_blocks(problem, config) < SMALL_GRID_PER_CU * compute_units(ctx)
        if config == chain[1] and small and width >= 128 and self.is_valid_config(ctx, problem, tiny):
            config = dict(tiny)
        config["split_k"] = self.cluster_default_split(ctx, problem, config, grid_blocks)
        return config

    def cluster_default_split(
        self,
        ctx,
        problem: ConvProblem,
        config: dict[str, int],
        grid_blocks: Callable[[ConvProblem, dict], int],
    ) -> int:
        """The split a default config gets: where the device has clusters and the unsplit grid
        has fewer than SMALL_GRID_PER_CU blocks per multiprocessor, the largest cluster split
        (at most MAX_DEFAULT_SPLIT) whose grid keeps to SPLIT_BLOCKS_PER_CU blocks per multiprocessor
        and whose slices keep MIN_SLICE_TILES pipeline steps; else 1."""
        cus = compute_units(ctx)
        blocks = grid_blocks(problem, {**config, "split_k": 1})
        if blocks >= SMALL_GRID_PER_CU * cus:
            return 1
        best = 1
        for split in self.domain["split_k"]:
            candidate = {**config, "split_k": split}
            if (
                1 < split <= min(MAX_CLUSTER, MAX_DEFAULT_SPLIT)
                and cluster_split(ctx, candidate)
                and blocks * split <= SPLIT_BLOCKS_PER_CU * cus
                and self.reduction_tiles(problem, config) >= split * MIN_SLICE_TILES
                and self.is_valid_config(ctx, problem, candidate)
            ):
                best = split
        return best

    def small_grid_search_space(
        self,
        ctx,
        problem: ConvProblem,
        width: int,
        grid_blocks: Callable[[ConvProblem, dict], int],
    ) -> list[dict[str, Any]]:
        """Valid configs of the curated block shapes and pipelines (TUNE_TILES, TUNE_PIPES) no
        wider than the next power of two of the GEMM's columns ``width`` (at least 32); each
        also split where the unsplit grid has fewer than SMALL_GRID_PER_CU blocks per
        multiprocessor, into at most SEARCH_SPLIT_BLOCKS_PER_CU per multiprocessor, each slice
        keeping MIN_SLICE_TILES pipeline steps. The default config where none is valid."""
        cus = compute_units(ctx)

        def splits(config: dict[str, int]) -> Iterator[int]:
            yield 1
            blocks = grid_blocks(problem, {**config, "split_k": 1})
            if blocks >= SMALL_GRID_PER_CU * cus:
                return
            for split in self.domain["split_k"][1:]:
                if (
                    blocks * split <= SEARCH_SPLIT_BLOCKS_PER_CU * cus
                    and self.reduction_tiles(problem, config) >= split * MIN_SLICE_TILES
                ):
                    yield split

        candidates = with_splits(tile_candidates(self.domain, cap_n=pow2_cap(width)), splits)
        out = [c for c in candidates if self.is_valid_config(ctx, problem, c)]
        return out or [self.default_config(ctx, problem)]

    # ---- program ---------------------------------------------------------------------------------
    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        config = config or self.default_config(ctx, problem)
        return 0 if cluster_split(ctx, config) else self.workspace_bytes(problem, config)

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        specs = self.kernel_specs(problem, config)
        if cluster_split(ctx, config):  # the GEMM kernel alone, its slices one cluster per tile
            first = specs[0]
            gemm = KernelSpec(
                first.file,
                first.name,
                {**dict(first.defines), "IG_CLUSTER": 1},
                first.global_size,
                first.local_size,
            )
            args = (*(Tensor(role) for role in (*self.reads, self.writes)), None)
            return Program((Launch(gemm, args, shared_mem=self.launch_smem(ctx, config)),))
        split = config["split_k"] > 1
        partials = Workspace() if split else None
        a, b = self.reads
        steps = [
            Launch(
                specs[0],
                (Tensor(a), Tensor(b), Tensor(self.writes), partials),
                shared_mem=self.launch_smem(ctx, config),
            )
        ]
        if split:
            steps.append(Launch(specs[1], (Workspace(), Tensor(self.writes))))
        return Program(tuple(steps), workspace=self.workspace_bytes(problem, config))
