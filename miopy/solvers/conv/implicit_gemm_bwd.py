"""ConvIgemmBwdNhwc: implicit-GEMM backward-data convolution on tensor cores (MIOpen's
ImplicitGemm family), CUDA only: kernels/cuda/igemm_bwd.cu on kernels/common/igemm_core.h.

dx = dy convolved with the flipped, transposed filter, as one GEMM per filter phase: the dx
pixels split into SH x SW phases (by their position modulo the stride), and within a phase the
same filter taps reach every pixel, so the phase is a dense GEMM M = its pixels, N = C,
reduction (taps of the phase) x K, with dy gathered on the fly and no zero-inserted input. A
stride of 1 is one phase with every tap. fp16 or bf16 in, fp32 accumulation, packed NHWC, filter
packed K x R x S x C, groups = 1, C and K multiples of 8; any stride, padding and dilation
(transposed forward problems too, through their conv view).

The config is ConvIgemmFwdNhwc's: block tile, warp grid, pipeline stages, fragment buffers and a
split of the reduction (fp32 partials in the workspace, summed by a second kernel)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

from miopy.errors import bad
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.solvers.conv.implicit_gemm import (
    DEFAULT_NARROW,
    DEFAULT_SHORT,
    DEFAULT_SMALL_GRID,
    DEFAULT_WIDE,
    DOMAIN,
    FALLBACKS,
    FIELDS,
    MIN_SLICE_TILES,
    REDUCE_THREADS,
    SMALL_GRID_PER_CU,
    compute_units,
    nhwc_tensor_core_reason,
    smem_limit,
    threads,
    tile_config_ok,
)


def phase_steps(problem: ConvProblem) -> tuple[int, int]:
    """How far apart the filter rows (columns) that reach one dx pixel are: SH / gcd(SH, DH)."""
    (sh, sw), (dh, dw) = problem.conv.strides, problem.conv.dilations
    return sh // math.gcd(sh, dh), sw // math.gcd(sw, dw)


def max_k_tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Reduction tiles of the phase with the most taps: taps x ceil(K / bk)."""
    k, _, r, s = problem.w.lens
    rstep, sstep = phase_steps(problem)
    return -(-r // rstep) * -(-s // sstep) * -(-k // config["bk"])


def phase_rows(problem: ConvProblem) -> int:
    """dx pixels of the largest phase (the grid's rows cover it)."""
    n, _, h, w = problem.x.lens
    sh, sw = problem.conv.strides
    return n * -(-h // sh) * -(-w // sw)


def tiles(problem: ConvProblem, config: dict[str, int]) -> int:
    """Output tiles of one phase (the grid's x)."""
    c = problem.x.lens[1]
    return -(-phase_rows(problem) // config["bm"]) * -(-c // config["bn"])


def grid_blocks(problem: ConvProblem, config: dict[str, int]) -> int:
    sh, sw = problem.conv.strides
    return tiles(problem, config) * sh * sw * config["split_k"]


def smem_bytes(config: dict[str, int]) -> int:
    """The pipeline's stages, or the epilogue's tile and row offsets (igemm_core.h)."""
    pipeline = config["stages"] * (config["bm"] + config["bn"]) * config["bk"] * 2
    epilogue = config["bm"] * (config["bn"] + 8) * 2 + config["bm"] * 4
    return max(pipeline, epilogue)


def workspace_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """The fp32 partial dx of a split reduction (none without a split)."""
    if config["split_k"] == 1:
        return 0
    return config["split_k"] * problem.x.element_space * 4


class ConvIgemmBwdNhwc(TunableSolver):
    name = "ConvIgemmBwdNhwc"
    id = 202  # no MIOpen counterpart; outside the range of its solver ids
    algorithm = "implicit_gemm"

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        return nhwc_tensor_core_reason(ctx, problem, Direction.BACKWARD_DATA)

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not tile_config_ok(ctx, config, DOMAIN):
            return False
        if config["split_k"] > max_k_tiles(problem, config):
            return False  # slices with nothing to sum
        return smem_bytes(config) <= smem_limit(ctx)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """ConvIgemmFwdNhwc's choice for the GEMM of one phase (N = C, the reduction K times the
        phase's taps): DEFAULT_NARROW for C <= 64, DEFAULT_SHORT for a reduction of at most 128,
        else DEFAULT_WIDE; DEFAULT_SMALL_GRID where the grid has fewer than SMALL_GRID_PER_CU
        blocks per multiprocessor; FALLBACKS where shared memory is short. No split."""
        k, c, r, s = problem.w.lens
        rstep, sstep = phase_steps(problem)
        if c <= 64:
            first = DEFAULT_NARROW
        elif k * -(-r // rstep) * -(-s // sstep) <= 128:
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
        """As ConvIgemmFwdNhwc's: blocks no wider than the next power of two of C (at least 32),
        128 threads or more for tiles of 64 x 64 and up, splits only for grids of fewer than
        2 blocks per multiprocessor whose slices keep MIN_SLICE_TILES steps."""
        c = problem.x.lens[1]
        cap_n = max(32, 1 << (c - 1).bit_length())
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
                grid_blocks(problem, {**config, "split_k": 1}) >= 2 * cus
                or max_k_tiles(problem, config) < split * MIN_SLICE_TILES
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
        # backward data: dy is role y (read), dx is role x (written)
        steps = [
            Launch(specs[0], (Tensor("y"), Tensor("w"), Tensor("x"), partials), shared_mem=smem_bytes(config))
        ]
        if split:
            steps.append(Launch(specs[1], (Workspace(), Tensor("x"))))
        return Program(tuple(steps), workspace=workspace_bytes(problem, config))


def kernel_specs(problem: ConvProblem, config: dict[str, int]) -> list[KernelSpec]:
    """igemm_bwd: grid (output tiles of the largest phase, SH*SW phases, split slices) of
    ``threads(config)``; with a split, igemm_bwd_splitk_reduce, one work item per 8 dx values."""
    n, c, h, w = problem.x.lens
    k, _, r, s = problem.w.lens
    _, _, p, q = problem.y.lens
    rstep, sstep = phase_steps(problem)
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
        "RSTEP": rstep,
        "SSTEP": sstep,
    }
    defines: dict[str, Any] = {"MIOPY_DTYPE": problem.dtype.code}
    defines.update({f"IG_{name}": int(v) for name, v in shape.items()})
    defines.update({f"IG_{f.upper()}": config[f] for f in FIELDS})
    local = threads(config)
    phases = shape["SH"] * shape["SW"]
    split = config["split_k"]
    specs = [
        KernelSpec(
            "igemm_bwd",
            "igemm_bwd",
            defines,
            (tiles(problem, config) * local, phases, split),
            (local, 1, 1),
        )
    ]
    if split > 1:
        groups = -(-(n * h * w * c // 8) // REDUCE_THREADS)
        specs.append(
            KernelSpec(
                "igemm_bwd", "igemm_bwd_splitk_reduce", defines, (groups * REDUCE_THREADS,), (REDUCE_THREADS,)
            )
        )
    return specs
