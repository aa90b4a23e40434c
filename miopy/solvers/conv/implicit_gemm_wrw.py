"""ConvIgemmWrwNhwc: implicit-GEMM backward-weights convolution on tensor cores (MIOpen's
ImplicitGemm family), CUDA only: kernels/cuda/igemm_wrw.cu on kernels/common/igemm_core.h.

dw[K, R*S*C] = dy^T[K, N*Ho*Wo] x im2col(x)[N*Ho*Wo, R*S*C]: GEMM M = K, N = R*S*C (dw as it
lies, packed K x R x S x C), reduction over the output pixels, with x's im2col gathered on the fly.
The reduction is long and the output small, so it splits over ``split_k`` slices of pixels whose
fp32 partial sums (the workspace) a second kernel adds up and rounds to the filter's data type.
fp16 or bf16 in, fp32 accumulation, packed NHWC, groups = 1, C and K multiples of 8; any stride,
padding and dilation.

The config is ConvIgemmFwdNhwc's fields (block tile, warp grid, pipeline stages, fragment
buffers) with a wider range of splits."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from miopy.errors import bad
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.solvers.conv.implicit_gemm import (
    DOMAIN as FWD_DOMAIN,
)
from miopy.solvers.conv.implicit_gemm import (
    FIELDS,
    MIN_SLICE_TILES,
    REDUCE_THREADS,
    compute_units,
    nhwc_tensor_core_reason,
    smem_limit,
    threads,
    tile_config_ok,
)

DOMAIN: dict[str, tuple[int, ...]] = {
    **FWD_DOMAIN,
    "split_k": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128),  # slices of the pixel reduction
}
FULL_WAVE = 0.9  # a grid of at least this many blocks per multiprocessor counts as one wave
SHORT_GRID_WAVES = 1.5  # the blocks per multiprocessor a split aims at where one wave is short


def _cfg(bm: int, bn: int, bk: int, warps_m: int, warps_n: int, stages: int, split: int = 1) -> dict:
    return {
        "bm": bm,
        "bn": bn,
        "bk": bk,
        "warps_m": warps_m,
        "warps_n": warps_n,
        "stages": stages,
        "frag_bufs": 1,
        "split_k": split,
    }


# default_config's choices: the fastest on the ResNet-50 layers at batch 32 on an H200 among 7
# tile shapes x 5 splits (fp16, scripts/bench_igemm_bwd.py --configs all): 128 x 64 x 64 won on
# 20 of 22 layers, with about one block per multiprocessor.
DEFAULT_WIDE = _cfg(128, 64, 64, 2, 2, 3)
DEFAULT_NARROW = _cfg(64, 128, 64, 2, 2, 3)  # K <= 64 with R*S*C > 64 (won on C64 56² K64 3x3)
FALLBACKS = (_cfg(32, 64, 32, 1, 2, 4), _cfg(32, 32, 32, 1, 2, 2))  # little shared memory
PREFERRED = (DEFAULT_WIDE, DEFAULT_NARROW, *FALLBACKS)


def k_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Pipeline steps of the whole reduction (N*Ho*Wo pixels, ``bk`` at a time)."""
    n, _, p, q = problem.y.lens
    return -(-(n * p * q) // config["bk"])


def tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Output tiles of dw (the grid's x)."""
    k, c, r, s = problem.w.lens
    return -(-k // config["bm"]) * -(-(r * s * c) // config["bn"])


def smem_bytes(config: dict[str, int]) -> int:
    """The pipeline's stages, or the epilogue's tile and row offsets (igemm_core.h)."""
    pipeline = config["stages"] * (config["bm"] + config["bn"]) * config["bk"] * 2
    epilogue = config["bm"] * (config["bn"] + 8) * 2 + config["bm"] * 4
    return max(pipeline, epilogue)


def workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """The fp32 partial dw of each slice of a split reduction (none without a split)."""
    if config["split_k"] == 1:
        return 0
    return config["split_k"] * problem.w.element_space * 4


def default_split(problem: ConvProblem, config: dict[str, int], cus: int) -> int:
    """The largest split in DOMAIN whose grid fits one wave (one block per multiprocessor);
    where that grid is short of FULL_WAVE, the split nearest SHORT_GRID_WAVES blocks per
    multiprocessor instead (the smaller on a tie). Only splits whose slices keep
    MIN_SLICE_TILES steps; 1 if none does. On the H200 this picked the faster of the two rules
    measured on each of the 22 ResNet-50 layers (one wave won on 1x1 layers, 1.5 waves on 3x3
    layers whose one-wave grid was 0.5 to 0.8 of the SMs)."""
    n_tiles = tiles(problem, config)
    fits = [s for s in DOMAIN["split_k"] if k_tiles(problem, config) >= s * MIN_SLICE_TILES]
    split = max((s for s in fits if s * n_tiles <= cus), default=1)
    if split * n_tiles < FULL_WAVE * cus and fits:
        want = SHORT_GRID_WAVES * cus / n_tiles
        split = min(fits, key=lambda s: (abs(s - want), s))
    return split


class ConvIgemmWrwNhwc(TunableSolver):
    name = "ConvIgemmWrwNhwc"
    id = 203  # no MIOpen counterpart; outside the range of its solver ids
    algorithm = "implicit_gemm"

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        return nhwc_tensor_core_reason(ctx, problem, Direction.BACKWARD_WEIGHTS)

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not tile_config_ok(ctx, config, DOMAIN):
            return False
        if config["split_k"] > k_tiles(problem, config):
            return False  # slices with nothing to sum
        return smem_bytes(config) <= smem_limit(ctx)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """DEFAULT_NARROW for K <= 64 with a dw row longer than 64, else DEFAULT_WIDE
        (FALLBACKS where shared memory is short), with default_split's split of the reduction."""
        k, c, r, s = problem.w.lens
        chain = [DEFAULT_NARROW if k <= 64 < r * s * c else DEFAULT_WIDE, *FALLBACKS]
        valid = [cfg for cfg in chain if self.is_valid_config(ctx, problem, cfg)]
        config = dict(valid[0] if valid else chain[-1])
        config["split_k"] = default_split(problem, config, compute_units(ctx))
        return config

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Valid configs with blocks no taller than the next power of two of K (at least 32),
        128 threads or more for tiles of 64 x 64 and up, and splits from a quarter to twice
        default_split's (1 included where that range reaches it)."""
        k = problem.w.lens[0]
        cap_m = max(32, 1 << (k - 1).bit_length())
        cus = compute_units(ctx)
        out = []
        for values in itertools.product(*(DOMAIN[f] for f in FIELDS)):
            config = dict(zip(FIELDS, values))
            if config["bm"] > cap_m:
                continue
            if threads(config) < 128 and config["bm"] * config["bn"] >= 64 * 64:
                continue
            best = default_split(problem, config, cus)
            if not best / 4 <= config["split_k"] <= best * 2:
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
        # backward weights: x and dy (role y) are read, dw (role w) is written
        steps = [
            Launch(specs[0], (Tensor("x"), Tensor("y"), Tensor("w"), partials), shared_mem=smem_bytes(config))
        ]
        if split:
            steps.append(Launch(specs[1], (Workspace(), Tensor("w"))))
        return Program(tuple(steps), workspace=workspace_bytes(problem, config))


def kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """igemm_wrw: grid (dw tiles, split slices) of ``threads(config)``; with a split,
    igemm_wrw_splitk_reduce, one work item per 8 dw values."""
    n, c, h, w = problem.x.lens
    k, _, r, s = problem.w.lens
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
    }
    defines: dict[str, Any] = {"MIOPY_DTYPE": problem.dtype.code}
    defines.update({f"IG_{name}": int(v) for name, v in shape.items()})
    defines.update({f"IG_{f.upper()}": config[f] for f in FIELDS})
    local = threads(config)
    split = config["split_k"]
    grid = (tiles(problem, config) * local, split)
    specs = [KernelSpec("igemm_wrw", "igemm_wrw", defines, grid, (local, 1))]
    if split > 1:
        groups = -(-(k * r * s * c // 8) // REDUCE_THREADS)
        specs.append(
            KernelSpec(
                "igemm_wrw", "igemm_wrw_splitk_reduce", defines, (groups * REDUCE_THREADS,), (REDUCE_THREADS,)
            )
        )
    return specs
