"""ConvWinograd{Fwd,Bwd}F2x3Tf32x3 and ConvWinograd{Fwd,Bwd}F4x3Tf32x3: fp32 forward and
backward-data convolution of 3x3 filters with stride 1 by Winograd F(2x2, 3x3) and F(4x4, 3x3)
(MIOpen's Winograd family), CUDA only; the GEMMs in 3xTF32 (never plain TF32):
kernels/cuda/winograd_fwd.cu for the transforms (WF_M = 2 or 4), the batched GEMM of
kernels/cuda/igemm_wrw_tf32x3.cu over the (m + 2)^2 positions.

y[t][co] = A^T M[t][co] A with M[xi][t][co] = sum over input channels ci of V[xi][ci][t] *
U[xi][ci][co], V = B^T d B the transformed (m+2)x(m+2) input patch of m x m output tile t and
U = G g G^T the transformed filter (common/winograd_f2x3.h and winograd_f4x3.h give the matrices).
Each GEMM has T x CO outputs and a reduction over CI: (m+2)^2*T*CI*CO multiply-adds against
9*N*Ho*Wo*CI*CO for the direct form, 2.25x fewer for F(2x2), 4x for F(4x4) (output sides that are
multiples of m). The transformed input is (m+2)^2/m^2 times the activations: 4x for F(2x2),
2.25x for F(4x4). The batched wrw GEMM computes out[m][n] = sum_j A[j][m] * B[j][n] (both
operands with the reduction index outermost), so V is laid out [xi][CI4][T4], U [xi][CI4][CO4]
and M comes out [xi][T4][CO4] (tiles and channels padded to multiples of 4).

Backward data with stride 1 is the forward convolution of dy with the filter rotated by 180
degrees and its channel axes swapped, padding 2 - p: the same kernels with WF_BWD = 1 (the
filter transform reads the rotated taps), so padding is limited to 0..2 there; forward takes any.

Error: the transforms add, subtract and scale, so each of the sums mixes terms of opposite sign
and the result carries several times the rounding error of a direct fp32 sum, more for F(4x4)
(constants up to 8). tests/backend/test_solvers_winograd_fwd.py states and checks it (RMS error
over the output's range against float64, on the same data as the naive FFMA kernel): F(2x2)
below 8x the FFMA error + 1e-6 and 10x below plain TF32's; F(4x4) below 8x the FFMA error + 5e-7
and 50x below TF32's (measured on an H200: 1.5e-7 to 2.6e-7, about 4x F(2x2)'s, and 220x to 400x
below TF32's).

Program: wf_filter (U), wf_in (V, read straight from NCHW or NHWC), the batched GEMM (one slice:
the reduction over CI is short), wf_out (y written NCHW or NHWC). fp32,
groups = 1, 3x3 filters, stride 1, dilation 1, packed NCHW or NHWC tensors (any mix). The config
is ConvIgemmWrwTf32x3's without a split, on one of the GEMMs (a 1x1 problem: CO4 channels of
CI4 pixels in, T4 filters out)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.conv.common import grid_for
from miopy.solvers.conv.igemm_common import INT32_MAX, is_nhwc, threads
from miopy.solvers.conv.implicit_gemm_tf32x3 import (
    Tf32x3Solver,
    fp32_ungrouped_reason,
    gemm_shape,
    unpacked_reason,
    workspace_regions,
)
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import (
    FALLBACKS,
    ConvIgemmWrwTf32x3,
    grid_blocks,
    smem_bytes,
    tile_config,
)
from miopy.tensor import DataType, TensorDesc

POSITIONS = 16  # F(2x2, 3x3): (2 + 3 - 1)^2 transform positions, the batch of GEMMs
# 128 tiles x 64 output channels per block, 16-deep stages, 4 of them: the wrw Winograd's
# default tile (the GEMMs here have the same operand layout), not yet swept for this solver.
DEFAULT_TILE = tile_config(128, 64, 16, 2, 2, 4)
WRW = ConvIgemmWrwTf32x3()


def round4(value: int) -> int:
    return -(-value // 4) * 4


def positions(m: int) -> int:
    """Transform positions of F(m x m, 3x3): (m + 3 - 1)^2, the batch of GEMMs."""
    return (m + 2) ** 2


def geometry(problem: ConvProblem, m: int = 2) -> dict[str, int]:
    """The convolution the kernels run (input CI x HI x WI -> output CO x HO x WO, padding of the
    forward form), m x m tiles per image side (TH, TW), the tile count T and the padded extents."""
    shape = gemm_shape(problem)  # backward data: dy -> dx with K and C swapped, padding 2 - p
    th, tw = -(-shape.p // m), -(-shape.q // m)
    t = shape.n * th * tw
    return {
        "N": shape.n, "CI": shape.c, "HI": shape.h, "WI": shape.w, "CO": shape.k, "HO": shape.p,
        "WO": shape.q, "PH": shape.pads[0], "PW": shape.pads[1], "TH": th, "TW": tw, "T": t,
        "T4": round4(t), "CI4": round4(shape.c), "CO4": round4(shape.k),
    }  # fmt: skip


def gemm_problem(problem: ConvProblem, m: int = 2) -> ConvProblem:
    """One of the GEMMs of F(m x m, 3x3) as the 1x1 backward-weights problem the wrw kernel runs:
    U as x (CO4 channels of CI4 pixels), V as dy (T4 channels of the same pixels), M as dw."""
    g = geometry(problem, m)
    x = TensorDesc(DataType.FP32, (1, g["CO4"], g["CI4"], 1), layout="NHWC")
    w = TensorDesc(DataType.FP32, (g["T4"], g["CO4"], 1, 1), layout="NHWC")
    return ConvProblem.create(x, w, ConvDesc((0, 0)), Direction.BACKWARD_WEIGHTS, y_layout="NHWC")


class _WinogradTf32x3(Tf32x3Solver):
    algorithm = "winograd"
    m = 2  # output tile side: F(m x m, 3x3)
    # roles of the conv view: (the convolution's input, its output)
    roles: tuple[str, str] = ("x", "y")

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        why = fp32_ungrouped_reason(ctx, problem, self.direction)
        if why:
            return why
        if tuple(problem.w.lens[2:]) != (3, 3):
            return f"filter {tuple(problem.w.lens[2:])}: {self.winograd} needs 3x3"
        if tuple(problem.conv.strides) != (1, 1) or tuple(problem.conv.dilations) != (1, 1):
            return f"Winograd {self.winograd} needs stride 1 and dilation 1"
        if self.direction is Direction.BACKWARD_DATA and not all(0 <= p <= 2 for p in problem.pads):
            return f"padding {tuple(problem.pads)}: backward data by the flipped filter needs 0 to 2"
        why = unpacked_reason(problem)
        if why:
            return why
        g = geometry(problem, self.m)
        if g["HO"] < 1 or g["WO"] < 1:
            return "empty output"
        if positions(self.m) * max(g["CI4"] * g["T4"], g["T4"] * g["CO4"], g["CI4"] * g["CO4"]) > INT32_MAX:
            return "the transformed tensors have 2^31 elements or more"
        return None

    # ---- configs: ConvIgemmWrwTf32x3's without a split, on one GEMM -------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not isinstance(config, dict) or config.get("split_k") != 1:
            return False
        return WRW.is_valid_config(ctx, gemm_problem(problem, self.m), config)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """DEFAULT_TILE unsplit; ConvIgemmWrwTf32x3's FALLBACKS where shared memory is short."""
        for base in (DEFAULT_TILE, *FALLBACKS):
            config = {**base, "split_k": 1}
            if self.is_valid_config(ctx, problem, config):
                return config
        return {**FALLBACKS[-1], "split_k": 1}

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """ConvIgemmWrwTf32x3's unsplit configs on one GEMM."""
        gemm = gemm_problem(problem, self.m)
        out = [c for c in WRW.search_space(ctx, gemm) if c["split_k"] == 1]
        return out or [self.default_config(ctx, problem)]

    # ---- program ---------------------------------------------------------------------------------
    @property
    def winograd(self) -> str:
        return f"F({self.m}x{self.m}, 3x3)"

    def _layout(self, problem: ConvProblem, config: dict[str, int]) -> dict[str, int]:
        g, batch = geometry(problem, self.m), positions(self.m)
        sizes = {
            "u": batch * g["CI4"] * g["CO4"],
            "v": batch * g["CI4"] * g["T4"],
            "m": batch * g["T4"] * g["CO4"],
        }
        return workspace_regions(sizes)

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        config = self.checked_config(ctx, problem, config)
        g, batch = geometry(problem, self.m), positions(self.m)
        regions = self._layout(problem, config)
        src, dst = self.roles
        names = ("N", "CI", "HI", "WI", "CO", "HO", "WO", "PH", "PW", "TH", "TW", "T4", "CI4", "CO4")
        defines = {"MIOPY_DTYPE": 0, "WF_M": self.m, **{f"WF_{name}": g[name] for name in names}}
        defines.update(
            {
                "WF_IN_NHWC": int(is_nhwc(getattr(problem, src))),
                "WF_OUT_NHWC": int(is_nhwc(getattr(problem, dst))),
                "WF_FILT_NHWC": int(is_nhwc(problem.w)),
                "WF_BWD": int(self.direction is Direction.BACKWARD_DATA),
            }
        )
        u, v, m = ((Workspace(), np.int64(regions[name] // 4)) for name in ("u", "v", "m"))
        steps = []
        global_size, local_size = grid_for(g["CI4"] * g["CO4"])
        spec = KernelSpec("winograd_fwd", "wf_filter", defines, global_size, local_size)
        steps.append(Launch(spec, (Tensor("w"), *u)))
        global_size, local_size = grid_for(g["CI4"] * g["T4"])
        spec = KernelSpec("winograd_fwd", "wf_in", defines, global_size, local_size)
        steps.append(Launch(spec, (Tensor(src), np.int64(0), *v)))
        gemm = gemm_problem(problem, self.m)
        gemm_defines = {**gemm_shape(gemm).defines(config), "TX_BATCH": batch}
        local = threads(config)
        global_size = (grid_blocks(gemm, config) * local, 1, batch)
        spec = KernelSpec("igemm_wrw_tf32x3", "igemm_wrw_tf32x3", gemm_defines, global_size, (local, 1, 1))
        steps.append(Launch(spec, (*u, *v, *m, *m), shared_mem=smem_bytes(config)))
        global_size, local_size = grid_for(g["T"] * g["CO"])
        spec = KernelSpec("winograd_fwd", "wf_out", defines, global_size, local_size)
        steps.append(Launch(spec, (*m, Tensor(dst))))
        info = {"precision": "3xtf32", "winograd": self.winograd.replace(" ", "")}
        return Program(tuple(steps), regions["total"], info)


class ConvWinogradFwdF2x3Tf32x3(_WinogradTf32x3):
    name = "ConvWinogradFwdF2x3Tf32x3"
    id = 228  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.FORWARD
    roles = ("x", "y")


class ConvWinogradBwdF2x3Tf32x3(_WinogradTf32x3):
    name = "ConvWinogradBwdF2x3Tf32x3"
    id = 229  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.BACKWARD_DATA
    roles = ("y", "x")


class ConvWinogradFwdF4x3Tf32x3(ConvWinogradFwdF2x3Tf32x3):
    name = "ConvWinogradFwdF4x3Tf32x3"
    id = 230  # no MIOpen counterpart; outside the range of its solver ids
    m = 4


class ConvWinogradBwdF4x3Tf32x3(ConvWinogradBwdF2x3Tf32x3):
    name = "ConvWinogradBwdF4x3Tf32x3"
    id = 231  # no MIOpen counterpart; outside the range of its solver ids
    m = 4
