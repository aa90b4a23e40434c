"""ConvIgemmFwdNhwc: implicit-GEMM forward convolution on tensor cores (MIOpen's ImplicitGemm
family), CUDA only: kernels/cuda/igemm_fwd.cu with the helpers of kernels/common/mma_sm80.h.

GEMM view: M = N*Ho*Wo output pixels, N = K output channels, reduction over R*S*C filter taps,
the im2col gather done while loading tiles (no workspace). fp16 or bf16 in, fp32 accumulation,
packed NHWC x and y, filter packed in NHWC order (K, R, S, C), groups = 1, C and K multiples of 8
(16-byte loads of 8 channels). Any stride, padding and dilation. Shape and config are compiled in.

The config is the block tile (``bm`` x ``bn`` outputs, ``bk`` taps per pipeline stage), the warp
grid (``warps_m`` x ``warps_n``) and the cp.async pipeline depth (``stages``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from miopy.errors import bad
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.tensor import DataType, packed_strides

DOMAIN: dict[str, tuple[int, ...]] = {
    "bm": (32, 64, 128, 256),  # output pixels per block
    "bn": (32, 64, 128, 256),  # output channels per block
    "bk": (32, 64),  # filter taps (channels) per pipeline stage
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


def _cfg(bm: int, bn: int, bk: int, warps_m: int, warps_n: int, stages: int, frag_bufs: int = 1) -> dict:
    return {
        "bm": bm,
        "bn": bn,
        "bk": bk,
        "warps_m": warps_m,
        "warps_n": warps_n,
        "stages": stages,
        "frag_bufs": frag_bufs,
        "split_k": 1,
    }


# default_config's choices: the fastest on the ResNet-50 layers at batch 32 on an H200 among 47
# configs (fp16, 2026-11-22; scripts/bench_igemm.py). 128 x 64 tiles of 64 x 32 per warp won on
# most layers (within 8% of each layer's best on average).
DEFAULT_WIDE = _cfg(128, 64, 64, 2, 2, 3)  # K > 64
DEFAULT_NARROW = _cfg(128, 64, 64, 2, 2, 2)  # K <= 64
DEFAULT_SHORT = _cfg(128, 128, 32, 2, 2, 3)  # K > 64 and R*S*C <= 128: one or two steps
DEFAULT_SMALL_GRID = _cfg(64, 64, 64, 2, 2, 3, frag_bufs=2)  # fewer than 2 blocks per SM
FALLBACKS = (_cfg(32, 64, 64, 1, 2, 4), _cfg(32, 32, 32, 1, 2, 4))  # little shared memory
PREFERRED = (DEFAULT_WIDE, DEFAULT_NARROW, DEFAULT_SHORT, DEFAULT_SMALL_GRID, *FALLBACKS)
SMALL_GRID_PER_CU = 2  # fewer blocks than this per multiprocessor: DEFAULT_SMALL_GRID
MIN_SLICE_TILES = 8  # pipeline steps of each slice of a split reduction, at least (search space)


REDUCE_THREADS = 256  # the work-group of igemm_splitk_reduce


def k_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Pipeline steps of the whole reduction (R*S*C taps, ``bk`` at a time)."""
    k, c, r, s = problem.w.lens
    return -(-(r * s * c) // config["bk"])


def workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """The fp32 partial outputs of a split reduction (none without a split)."""
    if config["split_k"] == 1:
        return 0
    n, k, ho, wo = problem.y.lens
    return config["split_k"] * n * ho * wo * k * 4


def threads(config: dict[str, int]) -> int:
    return config["warps_m"] * config["warps_n"] * 32


def smem_bytes(config: dict[str, int]) -> int:
    """Dynamic shared memory of the kernel: the pipeline's stages, or the epilogue's output tile."""
    pipeline = config["stages"] * (config["bm"] + config["bn"]) * config["bk"] * 2
    epilogue = config["bm"] * (config["bn"] + 8) * 2
    return max(pipeline, epilogue)


def grid_blocks(problem: ConvProblem, config: dict[str, int]) -> int:
    n, _, ho, wo = problem.y.lens
    k = problem.w.lens[0]
    return -(-(n * ho * wo) // config["bm"]) * -(-k // config["bn"])


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


def nhwc_tensor_core_reason(ctx, problem: ConvProblem, direction: Direction) -> str | None:
    """Why the tensor-core implicit-GEMM kernels cannot take ``problem`` in ``direction`` (None
    when they can): CUDA, 2-D, fp16 or bf16, groups = 1, packed NHWC tensors, C and K multiples
    of 8, every tensor under 2^31 elements (the kernels index with int32)."""
    backend = getattr(ctx, "backend_name", None)
    if backend != "cuda":
        return f"backend is {backend}, not cuda"
    if problem.direction is not direction:
        return f"direction is {problem.direction.name}"
    if problem.spatial_dims != 2:
        return "3-d convolution"
    if problem.dtype not in (DataType.FP16, DataType.BF16):
        return f"dtype is {problem.dtype.value}, not FP16 or BF16"
    if problem.conv.groups != 1:
        return f"groups={problem.conv.groups}"
    for role, desc in (("x", problem.x), ("w", problem.w), ("y", problem.y)):
        if not is_nhwc(desc):
            return f"{role} is not packed NHWC"
    c = problem.x.lens[1]
    k = problem.w.lens[0]
    if c % 8 or k % 8:
        return f"C={c} and K={k} must be multiples of 8"
    for role, desc in (("x", problem.x), ("w", problem.w), ("y", problem.y)):
        if desc.element_space > INT32_MAX:
            return f"{role} has more than 2^31 elements"
    return None


def tile_config_ok(ctx, config: Any, domain: dict[str, tuple[int, ...]]) -> bool:
    """A config of the tensor-core kernels is well formed: exactly ``domain``'s fields with
    values from it, warp tiles of whole 16 x 16 fragments that fit the registers, 64 to 256
    threads (no more than the device allows), and tiles every thread copies evenly."""
    if not isinstance(config, dict) or set(config) != set(domain):
        return False
    for key, value in config.items():
        if type(value) is not int or value not in domain[key]:
            return False
    if config["bm"] % config["warps_m"] or config["bn"] % config["warps_n"]:
        return False
    wm, wn = config["bm"] // config["warps_m"], config["bn"] // config["warps_n"]
    if wm % 16 or wn % 16 or wm * wn > MAX_WARP_OUTPUTS:
        return False
    t = threads(config)
    info = getattr(ctx, "info", None)
    max_threads = MAX_THREADS if info is None else min(MAX_THREADS, info.max_work_group_size)
    if not MIN_THREADS <= t <= max_threads:
        return False
    chunks = config["bk"] // 8
    return (config["bm"] * chunks) % t == 0 and (config["bn"] * chunks) % t == 0


class ConvIgemmFwdNhwc(TunableSolver):
    name = "ConvIgemmFwdNhwc"
    id = 201  # no MIOpen counterpart; outside the range of its solver ids
    algorithm = "implicit_gemm"

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        return nhwc_tensor_core_reason(ctx, problem, Direction.FORWARD)

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not tile_config_ok(ctx, config, DOMAIN):
            return False
        if config["split_k"] > k_tiles(problem, config):
            return False  # a block with nothing to sum
        return smem_bytes(config) <= smem_limit(ctx)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """DEFAULT_NARROW for K <= 64, DEFAULT_SHORT for a reduction of at most 128 taps, else
        DEFAULT_WIDE; DEFAULT_SMALL_GRID where that grid has fewer than SMALL_GRID_PER_CU blocks
        per multiprocessor; FALLBACKS where shared memory is short. No split reduction (tuning
        may choose one)."""
        k, c, r, s = problem.w.lens
        if k <= 64:
            first = DEFAULT_NARROW
        elif r * s * c <= 128:
            first = DEFAULT_SHORT
        else:
            first = DEFAULT_WIDE
        chain = [first, DEFAULT_SMALL_GRID, *FALLBACKS]
        valid = [cfg for cfg in chain if self.is_valid_config(ctx, problem, cfg)]
        if not valid:
            return dict(chain[-1])
        small = grid_blocks(problem, first) < SMALL_GRID_PER_CU * compute_units(ctx)
        if valid[0] is first and small and len(valid) > 1:
            return dict(valid[1])
        return dict(valid[0])

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Valid configs whose block is no wider than the next power of two of K (at least 32)
        with 128 or more threads where the block has room for them; splits of the reduction
        only where the unsplit grid has fewer than 2 blocks per multiprocessor and each slice
        keeps MIN_SLICE_TILES pipeline steps."""
        k = problem.w.lens[0]
        cap_n = max(32, 1 << (k - 1).bit_length())
        cus = compute_units(ctx)
        out = []
        for values in itertools.product(*(DOMAIN[f] for f in FIELDS)):
            config = dict(zip(FIELDS, values))
            if config["bn"] > cap_n:
                continue
            if threads(config) < 128 and config["bm"] * config["bn"] >= 64 * 64:
                continue
            split = config["split_k"]
            if split > 1 and (
                grid_blocks(problem, config) >= 2 * cus or k_tiles(problem, config) < split * MIN_SLICE_TILES
            ):
                continue
            if self.is_valid_config(ctx, problem, config):
                out.append(config)
        return out or [self.default_config(ctx, problem)]

    # ---- program ---------------------------------------------------------------------------------
    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        return workspace_bytes(problem, config or self.default_config(ctx, problem))

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        specs = kernel_specs(problem, config)
        split = config["split_k"] > 1
        partials = Workspace() if split else None
        steps = [
            Launch(specs[0], (Tensor("x"), Tensor("w"), Tensor("y"), partials), shared_mem=smem_bytes(config))
        ]
        if split:
            steps.append(Launch(specs[1], (Workspace(), Tensor("y"))))
        return Program(tuple(steps), workspace=workspace_bytes(problem, config))


def kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """The kernels of ``config`` for a conv-view forward problem, shape and config as defines:
    igemm_fwd, one block of ``threads(config)`` per output tile and reduction slice, and with
    a split reduction igemm_splitk_reduce, one work item per 8 outputs."""
    n, c, h, w = problem.x.lens
    k, _, r, s = problem.w.lens
    _, _, ho, wo = problem.y.lens
    shape = {
        "N": n,
        "C": c,
        "H": h,
        "W": w,
        "K": k,
        "R": r,
        "S": s,
        "P": ho,
        "Q": wo,
        "PH": problem.pads[0],
        "PW": problem.pads[1],
        "SH": problem.conv.strides[0],
        "SW": problem.conv.strides[1],
        "DH": problem.conv.dilations[0],
        "DW": problem.conv.dilations[1],
    }
    defines: dict[str, Any] = {"MIOPY_DTYPE": problem.dtype.code}
    defines.update({f"IG_{name}": int(v) for name, v in shape.items()})
    defines.update({f"IG_{f.upper()}": config[f] for f in FIELDS})
    local = threads(config)
    split = config["split_k"]
    specs = [
        KernelSpec(
            "igemm_fwd", "igemm_fwd", defines, (grid_blocks(problem, config) * local, split), (local, 1)
        )
    ]
    if split > 1:
        groups = -(-(n * ho * wo * k // 8) // REDUCE_THREADS)
        reduce = KernelSpec(
            "igemm_fwd", "igemm_splitk_reduce", defines, (groups * REDUCE_THREADS,), (REDUCE_THREADS,)
        )
        specs.append(reduce)
    return specs
