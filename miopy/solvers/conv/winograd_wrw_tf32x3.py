"""ConvWinogradWrwF2x3Tf32x3: fp32 backward-weights convolution of 3x3 filters with stride 1 by
Winograd F(2x2, 3x3) (MIOpen's Winograd family), CUDA only; the GEMMs in 3xTF32 (never plain
TF32): kernels/cuda/winograd_wrw_f2x3.cu for the transforms, kernels/cuda/igemm_wrw_tf32x3.cu
batched over the 16 transform positions.

dw[k][c] = G^T M[k][c] G with M[xi][k][c] = sum over 2x2 output tiles t of U[xi][t][k] *
V[xi][t][c], U = A e A^T the transformed 2x2 dy patch and V = B^T d B the transformed 4x4 input
patch of each tile (the kernel file gives the matrices). The 16 GEMMs have K x C outputs and a
reduction over the N*ceil(P/2)*ceil(Q/2) tiles: 16*K*C*T multiply-adds where the direct form
needs 9*K*C*N*P*Q, 2.25x fewer for even output sides (1.7x on 7x7 images, whose tiles overhang).

Error: the transforms add and halve exactly up to fp32 rounding, but each of the 16 sums of
products mixes terms of opposite sign (B^T and A have entries -1), so the result carries a few
times the rounding error of a direct fp32 sum; tests/backend/test_solvers_winograd_wrw.py
states the bound it checks (against the float64 reference and next to the naive FFMA kernel).

Program: NCHW x and dy transposed to NHWC in the workspace (kernels/cuda/layout_f32.cu),
wino_in_f2x3 and wino_dy_f2x3 (V and U, channels padded to multiples of 4, in the workspace),
the batched GEMM (``split_k`` slices of partial sums), wino_out_f2x3 (sums the slices and writes
dw, K x C x 3 x 3 or K x 3 x 3 x C). fp32, groups = 1, 3x3 filters, stride 1, dilation 1,
padding 0 to 2, packed NCHW or NHWC tensors. The config is ConvIgemmWrwTf32x3's, on one of the
16 GEMMs (a 1x1 problem of C4 channels over T pixels)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Step, Tensor, Workspace
from miopy.solvers.conv.common import grid_for
from miopy.solvers.conv.igemm_common import INT32_MAX, compute_units, is_nhwc, threads
from miopy.solvers.conv.implicit_gemm_tf32x3 import (
    Tf32x3Solver,
    fp32_ungrouped_reason,
    gemm_shape,
    grid_1d,
    transpose_launch,
    unpacked_reason,
    workspace_regions,
)
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import (
    DOMAIN,
    FALLBACKS,
    MIN_SLICE_TILES,
    ConvIgemmWrwTf32x3,
    grid_blocks,
    j_tiles,
    smem_bytes,
    tile_config,
)
from miopy.tensor import DataType, TensorDesc

POSITIONS = 16  # (2 + 3 - 1)^2 transform positions: the batch of GEMMs
# The defaults, from a sweep of 6 tiles x 3 splits on the ResNet-50 3x3 layers at batch 32 on an
# H200 (scripts/bench_tf32x3_pad.py --cases wino, 2026-11-22, NCHW / NHWC us, errors checked):
# 128 x 64 x 16 with 4 stages was fastest on 128x28², 256x14² and 512x7² with the split that
# gives the 16 GEMMs about 2 blocks per SM (139.5 / 121.7, 117.0 / 101.9, 147.9 / 123.7 us),
# twice that split cost 8-15 us; on 64x56² 64 x 64 x 32 with 4 stages and a split of 16
# (200.8 / 170.9 us, against 248 / 219 us for 64 x 64 x 16 split in 64).
BLOCKS_PER_CU = 1.5  # the default splits the reduction until the 16 GEMMs have this many blocks per SM
DEFAULT_TILE = tile_config(128, 64, 16, 2, 2, 4)
DEFAULT_NARROW = tile_config(64, 64, 32, 2, 2, 4)  # K4 <= 64
WRW = ConvIgemmWrwTf32x3()


def round4(value: int) -> int:
    return -(-value // 4) * 4


def geometry(problem: ConvProblem) -> dict[str, int]:
    """The transforms' extents: tiles per image side (TH, TW), the tile count T, channels padded."""
    n, c, h, w = problem.x.lens
    k = problem.w.lens[0]
    _, _, p, q = problem.y.lens
    th, tw = -(-p // 2), -(-q // 2)
    return {
        "N": n, "C": c, "H": h, "W": w, "K": k, "P": p, "Q": q, "PH": problem.pads[0], "PW": problem.pads[1],
        "TH": th, "TW": tw, "T": n * th * tw, "C4": round4(c), "K4": round4(k),
    }  # fmt: skip


def gemm_problem(problem: ConvProblem) -> ConvProblem:
    """One of the 16 GEMMs as a 1x1 backward-weights problem: C4 channels of T pixels in, K4 out."""
    g = geometry(problem)
    x = TensorDesc(DataType.FP32, (1, g["C4"], g["T"], 1), layout="NHWC")
    w = TensorDesc(DataType.FP32, (g["K4"], g["C4"], 1, 1), layout="NHWC")
    return ConvProblem.create(x, w, ConvDesc((0, 0)), Direction.BACKWARD_WEIGHTS, y_layout="NHWC")


class ConvWinogradWrwF2x3Tf32x3(Tf32x3Solver):
    name = "ConvWinogradWrwF2x3Tf32x3"
    id = 227  # no MIOpen counterpart; outside the range of its solver ids
    algorithm = "winograd"
    direction = Direction.BACKWARD_WEIGHTS

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        why = fp32_ungrouped_reason(ctx, problem, self.direction)
        if why:
            return why
        if tuple(problem.w.lens[2:]) != (3, 3):
            return f"filter {tuple(problem.w.lens[2:])}: F(2x2, 3x3) needs 3x3"
        if tuple(problem.conv.strides) != (1, 1) or tuple(problem.conv.dilations) != (1, 1):
            return "Winograd F(2x2, 3x3) needs stride 1 and dilation 1"
        if not all(0 <= p <= 2 for p in problem.pads):
            return f"padding {tuple(problem.pads)}: 0 to 2"
        why = unpacked_reason(problem)
        if why:
            return why
        g = geometry(problem)
        if POSITIONS * g["T"] * max(g["C4"], g["K4"]) > INT32_MAX:
            return "the transformed tensors have 2^31 elements or more"
        return None

    # ---- configs: ConvIgemmWrwTf32x3's, on one GEMM ----------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        return WRW.is_valid_config(ctx, gemm_problem(problem), config)

    def _split_for(self, ctx, gemm: ConvProblem, config: dict[str, int]) -> int:
        """The smallest split giving the 16 GEMMs BLOCKS_PER_CU blocks per multiprocessor, each
        slice keeping MIN_SLICE_TILES pipeline steps."""
        want = int(BLOCKS_PER_CU * compute_units(ctx))
        split = 1
        for s in DOMAIN["split_k"]:
            if j_tiles(gemm, config) < s * MIN_SLICE_TILES:
                break
            split = s
            if grid_blocks(gemm, config) * POSITIONS * s >= want:
                break
        return split

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """DEFAULT_NARROW for K4 <= 64, else DEFAULT_TILE, with the split of ``_split_for``;
        ConvIgemmWrwTf32x3's FALLBACKS where shared memory is short."""
        gemm = gemm_problem(problem)
        first = DEFAULT_NARROW if gemm.w.lens[0] <= 64 else DEFAULT_TILE
        for base in (first, *FALLBACKS):
            config = {**base, "split_k": self._split_for(ctx, gemm, base)}
            if self.is_valid_config(ctx, problem, config):
                return config
        return dict(FALLBACKS[-1])

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """ConvIgemmWrwTf32x3's search space on one GEMM, with splits up to twice this solver's
        rule (the 16 GEMMs need fewer slices to fill the device)."""
        gemm = gemm_problem(problem)
        out = [
            c
            for c in WRW.search_space(ctx, gemm)
            if c["split_k"] <= max(1, 2 * self._split_for(ctx, gemm, c))
        ]
        return out or [self.default_config(ctx, problem)]

    # ---- program ---------------------------------------------------------------------------------
    def _layout(self, problem: ConvProblem, config: dict[str, int]) -> dict[str, int]:
        g = geometry(problem)
        sizes = {
            "x": 0 if is_nhwc(problem.x) else g["N"] * g["C"] * g["H"] * g["W"],
            "dy": 0 if is_nhwc(problem.y) else g["N"] * g["K"] * g["P"] * g["Q"],
            "v": POSITIONS * g["T"] * g["C4"],
            "u": POSITIONS * g["T"] * g["K4"],
            "m": config["split_k"] * POSITIONS * g["K4"] * g["C4"],
        }
        return workspace_regions(sizes)

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        config = self.checked_config(ctx, problem, config)
        g = geometry(problem)
        regions = self._layout(problem, config)
        steps: list[Step] = []
        ins = {}
        for role, rows, plane in (("x", g["C"], g["H"] * g["W"]), ("y", g["K"], g["P"] * g["Q"])):
            region = "x" if role == "x" else "dy"
            if regions[region] >= 0:
                off = regions[region] // 4
                steps.append(transpose_launch(Tensor(role), 0, Workspace(), off, g["N"], rows, plane))
                ins[role] = (Workspace(), np.int64(off))
            else:
                ins[role] = (Tensor(role), np.int64(0))
        names = ("N", "C", "H", "W", "K", "P", "Q", "PH", "PW", "TH", "TW", "C4", "K4")
        defines = {"MIOPY_DTYPE": 0, **{f"WG_{name}": g[name] for name in names}}
        defines.update({"WG_SPLIT": config["split_k"], "WG_OUT_NCHW": 0 if is_nhwc(problem.w) else 1})
        v = (Workspace(), np.int64(regions["v"] // 4))
        u = (Workspace(), np.int64(regions["u"] // 4))
        m = (Workspace(), np.int64(regions["m"] // 4))
        for kernel, src, dst, channels in (
            ("wino_in_f2x3", ins["x"], v, "C4"),
            ("wino_dy_f2x3", ins["y"], u, "K4"),
        ):
            global_size, local_size = grid_for(g["T"] * g[channels])
            spec = KernelSpec("winograd_wrw_f2x3", kernel, defines, global_size, local_size)
            steps.append(Launch(spec, (*src, *dst)))
        gemm = gemm_problem(problem)
        gemm_defines = {**gemm_shape(gemm).defines(config), "TX_BATCH": POSITIONS}
        local = threads(config)
        global_size = (grid_blocks(gemm, config) * local, config["split_k"], POSITIONS)
        spec = KernelSpec("igemm_wrw_tf32x3", "igemm_wrw_tf32x3", gemm_defines, global_size, (local, 1, 1))
        steps.append(Launch(spec, (*v, *u, *m, *m), shared_mem=smem_bytes(config)))
        global_size, local_size = grid_1d(g["K"] * g["C"])
        spec = KernelSpec("winograd_wrw_f2x3", "wino_out_f2x3", defines, global_size, local_size)
        steps.append(Launch(spec, (*m, Tensor("w"))))
        return Program(tuple(steps), regions["total"], {"precision": "3xtf32", "winograd": "F(2x2,3x3)"})
