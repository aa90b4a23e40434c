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
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import TunableSolver
from miopy.tensor import DataType, packed_strides

DOMAIN: dict[str, tuple[int, ...]] = {
    "bm": (32, 64, 128, 256),  # output pixels per block
    "bn": (32, 64, 128, 256),  # output channels per block
    "bk": (32, 64),  # filter taps (channels) per pipeline stage
    "warps_m": (1, 2, 4),
    "warps_n": (1, 2, 4),
    "stages": (2, 3, 4, 5),
}
FIELDS = tuple(DOMAIN)
STATIC_SMEM = 48 * 1024  # the kernel's shared memory is static: 48 KB at most
MAX_WARP_OUTPUTS = 64 * 64  # fp32 accumulators per warp (64 per thread) beyond which registers spill
MIN_THREADS, MAX_THREADS = 64, 256
INT32_MAX = 2**31 - 1
# default_config's choices, most preferred first (all fit the 48 KB of static shared memory):
# the fastest on ResNet-50 layers at batch 32 on an H200 among 16 configs (fp16, 2026-11-22).
PREFERRED_WIDE: tuple[dict[str, int], ...] = (  # K > 64
    {"bm": 64, "bn": 128, "bk": 64, "warps_m": 2, "warps_n": 2, "stages": 2},
    {"bm": 64, "bn": 64, "bk": 64, "warps_m": 2, "warps_n": 2, "stages": 3},
    {"bm": 32, "bn": 64, "bk": 64, "warps_m": 1, "warps_n": 2, "stages": 4},
    {"bm": 32, "bn": 32, "bk": 32, "warps_m": 1, "warps_n": 2, "stages": 4},
)
PREFERRED_NARROW: tuple[dict[str, int], ...] = (  # K <= 64
    {"bm": 128, "bn": 64, "bk": 64, "warps_m": 2, "warps_n": 2, "stages": 2},
    *PREFERRED_WIDE[1:],
)
PREFERRED = PREFERRED_WIDE + PREFERRED_NARROW[:1]
# A grid of fewer blocks than this many per multiprocessor leaves the tensor cores idle: the
# default takes a smaller tile then.
MIN_BLOCKS_PER_CU = 1.5


def threads(config: dict[str, int]) -> int:
    return config["warps_m"] * config["warps_n"] * 32


def smem_bytes(config: dict[str, int]) -> int:
    """Static shared memory of the kernel: the pipeline's stages, or the epilogue's output tile."""
    pipeline = config["stages"] * (config["bm"] + config["bn"]) * config["bk"] * 2
    epilogue = config["bm"] * (config["bn"] + 8) * 2
    return max(pipeline, epilogue)


def grid_blocks(problem: ConvProblem, config: dict[str, int]) -> int:
    n, _, ho, wo = problem.y.lens
    k = problem.w.lens[0]
    return -(-(n * ho * wo) // config["bm"]) * -(-k // config["bn"])


def _is_nhwc(desc) -> bool:
    return tuple(desc.strides) == packed_strides(tuple(desc.lens), "NHWC")


def _local_mem(ctx) -> int:
    info = getattr(ctx, "info", None)
    return STATIC_SMEM if info is None else min(STATIC_SMEM, info.local_mem_size)


def _compute_units(ctx) -> int:
    info = getattr(ctx, "info", None)
    return 132 if info is None else max(1, info.compute_units)


class ConvIgemmFwdNhwc(TunableSolver):
    primitive = "conv"
    name = "ConvIgemmFwdNhwc"
    id = 201  # no MIOpen counterpart; outside the range of its solver ids
    algorithm = "implicit_gemm"

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        backend = getattr(ctx, "backend_name", None)
        if backend != "cuda":
            return f"backend is {backend}, not cuda"
        if problem.direction is not Direction.FORWARD:
            return f"direction is {problem.direction.name}"
        if problem.spatial_dims != 2:
            return "3-d convolution"
        if problem.dtype not in (DataType.FP16, DataType.BF16):
            return f"dtype is {problem.dtype.value}, not FP16 or BF16"
        if problem.conv.groups != 1:
            return f"groups={problem.conv.groups}"
        for role, desc in (("x", problem.x), ("w", problem.w), ("y", problem.y)):
            if not _is_nhwc(desc):
                return f"{role} is not packed NHWC"
        n, c, h, w = problem.x.lens
        k = problem.w.lens[0]
        if c % 8 or k % 8:
            return f"C={c} and K={k} must be multiples of 8"
        if h * w * c > INT32_MAX:
            return "an image of more than 2^31 elements"
        if n * problem.y.lens[2] * problem.y.lens[3] > INT32_MAX:
            return "more than 2^31 output pixels"
        return None

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not isinstance(config, dict) or set(config) != set(FIELDS):
            return False
        for key, value in config.items():
            if type(value) is not int or value not in DOMAIN[key]:
                return False
        wm, wn = config["bm"] // config["warps_m"], config["bn"] // config["warps_n"]
        if config["bm"] % config["warps_m"] or config["bn"] % config["warps_n"]:
            return False
        if wm % 16 or wn % 16 or wm * wn > MAX_WARP_OUTPUTS:
            return False
        t = threads(config)
        info = getattr(ctx, "info", None)
        max_threads = MAX_THREADS if info is None else min(MAX_THREADS, info.max_work_group_size)
        if not MIN_THREADS <= t <= max_threads:
            return False
        chunks = config["bk"] // 8
        if (config["bm"] * chunks) % t or (config["bn"] * chunks) % t:
            return False  # every thread copies the same number of 16-byte chunks
        return smem_bytes(config) <= _local_mem(ctx)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """The first preferred config (``PREFERRED_WIDE`` for K > 64, else ``PREFERRED_NARROW``)
        whose grid has MIN_BLOCKS_PER_CU blocks per multiprocessor; the smallest when none has."""
        preferred = PREFERRED_WIDE if problem.w.lens[0] > 64 else PREFERRED_NARROW
        want = MIN_BLOCKS_PER_CU * _compute_units(ctx)
        candidates = [c for c in preferred if self.is_valid_config(ctx, problem, c)]
        for config in candidates:
            if grid_blocks(problem, config) >= want:
                return dict(config)
        return dict(candidates[-1] if candidates else preferred[-1])

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Valid configs whose block is no wider than the next power of two of K (at least 32)
        with 128 or more threads where the block has room for them."""
        k = problem.w.lens[0]
        cap_n = max(32, 1 << (k - 1).bit_length())
        out = []
        for values in itertools.product(*(DOMAIN[f] for f in FIELDS)):
            config = dict(zip(FIELDS, values))
            if config["bn"] > cap_n:
                continue
            if threads(config) < 128 and config["bm"] * config["bn"] >= 64 * 64:
                continue
            if self.is_valid_config(ctx, problem, config):
                out.append(config)
        return out or [self.default_config(ctx, problem)]

    # ---- program ---------------------------------------------------------------------------------
    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        spec = kernel_spec(problem, config)
        return Program((Launch(spec, (Tensor("x"), Tensor("w"), Tensor("y"))),))


def kernel_spec(problem: ConvProblem, config: dict[str, int]) -> KernelSpec:
    """The kernel of ``config`` for a conv-view forward problem: shape and config as defines,
    one block of ``threads(config)`` per output tile."""
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
    return KernelSpec("igemm_fwd", "igemm_fwd", defines, (grid_blocks(problem, config) * local,), (local,))
