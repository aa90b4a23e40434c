"""ConvIgemmBwdPhaseTf32x3: fp32 backward-data convolution with strides > 1 on the 3xTF32 forward
kernel (kernels/cuda/igemm_fwd_tf32x3.cu), CUDA only, fp32 accuracy (never plain TF32).

A strided backward-data convolution touches, for each output phase (h % SH, w % SW), a
different subset of the filter taps; zero-inserting dy would make most of the products zero.
Instead the whole backward pass is one stride-1 forward convolution on dy:

    z[n][h2][w2][(ph*SW + pw)*C + c] = sum over k, dr < RR, ds < SS of
        dy[n][h2 + D0 + dr][w2 + E0 + ds][k] * w[k][c][ph + PH - SH*(D0 + dr)][pw + PW - SW*(E0 + ds)]

(taps outside the filter are zero), where h = h2*SH + ph; D0 is the lowest row offset any phase
reaches and RR the window of dy rows all phases together need (4 for a 7x7 filter with
stride 2). dx is z with its channels spread back over the phases (depth to space). The GEMM has
SH*SW*C output channels (12 for the C = 3 first layer at stride 2, 16-wide blocks), a reduction
of RR*SS*K and N*ceil(H/SH)*ceil(W/SW) rows: no zero dy is ever read, and no dx is written
twice.

Program: the rearranged filter (kernels/cuda/tf32x3_reshape.cu, phase_filter_f32) into the
workspace, dy transposed to NHWC there where it is NCHW, the GEMM into z (workspace; with a
split of the reduction the forward solver's partial sums and its sum kernel), then
phase_scatter_f32 writes dx (packed NCHW or NHWC). fp32, groups = 1, dilation 1, K a multiple
of 4, strides other than 1 x 1, padding below the filter size. The config is
ConvIgemmFwdTf32x3's, on the phase GEMM."""

from __future__ import annotations

from typing import Any

import numpy as np

from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Step, Tensor, Workspace
from miopy.solvers.conv.common import grid_for
from miopy.solvers.conv.igemm_common import INT32_MAX, is_nhwc
from miopy.solvers.conv.implicit_gemm_tf32x3 import (
    GemmShape,
    _Tf32x3Solver,
    fp32_ungrouped_reason,
    grid_1d,
    grid_blocks,
    region_operand,
    smem_bytes,
    split_gemm_spec,
    transpose_launch,
    unpacked_reason,
    workspace_regions,
)


def phase_windows(size: int, stride: int, pad: int) -> tuple[int, int]:
    """(D0, RR) along one axis: the first dy offset (relative to the output block) any phase
    reads and how many offsets the phases need together, for a filter of ``size`` taps."""
    # the lowest offset: ceil((ph + pad - (size - 1)) / stride) over the phases
    lo = min(-((size - 1 - ph - pad) // stride) for ph in range(stride))
    hi = max((ph + pad) // stride for ph in range(stride))
    return lo, hi - lo + 1


def phase_geometry(problem: ConvProblem) -> dict[str, int]:
    """The phase GEMM's extents for a backward-data conv-view problem."""
    n, c, h, w = problem.x.lens
    k, _, r, s = problem.w.lens
    _, _, p, q = problem.y.lens
    sh, sw = problem.conv.strides
    ph, pw = problem.pads
    d0, rr = phase_windows(r, sh, ph)
    e0, ss = phase_windows(s, sw, pw)
    cz = -(-(sh * sw * c) // 4) * 4
    return {
        "N": n, "C": c, "H": h, "W": w, "K": k, "R": r, "S": s, "P": p, "Q": q, "SH": sh, "SW": sw,
        "PH": ph, "PW": pw, "D0": d0, "E0": e0, "RR": rr, "SS": ss, "CZ": cz,
        "H2": -(-h // sh), "W2": -(-w // sw),
    }  # fmt: skip


class ConvIgemmBwdPhaseTf32x3(_Tf32x3Solver):
    name = "ConvIgemmBwdPhaseTf32x3"
    id = 226  # no MIOpen counterpart; outside the range of its solver ids
    direction = Direction.BACKWARD_DATA
    reads, writes = ("y", "w"), "x"

    def gemm_shape(self, problem: ConvProblem) -> GemmShape:
        g = phase_geometry(problem)
        return GemmShape(
            g["N"], g["K"], g["P"], g["Q"], g["CZ"], g["RR"], g["SS"], g["H2"], g["W2"],
            (-g["D0"], -g["E0"]), (1, 1), (1, 1),
        )  # fmt: skip

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        return phase_reason(ctx, problem)

    # ---- program ---------------------------------------------------------------------------------
    def _layout(self, problem: ConvProblem, config: dict[str, int]) -> dict[str, int]:
        shape = self.gemm_shape(problem)
        sizes = {
            "dy": 0 if is_nhwc(problem.y) else shape.n * shape.h * shape.w * shape.c,
            "filter": shape.k * shape.taps,
            "z": shape.rows * shape.k,
            "part": 0 if config["split_k"] == 1 else config["split_k"] * shape.rows * shape.k,
        }
        return workspace_regions(sizes)

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        config = self.checked_config(ctx, problem, config)
        g = phase_geometry(problem)
        shape = self.gemm_shape(problem)
        regions = self._layout(problem, config)
        steps: list[Step] = []
        if regions["dy"] >= 0:  # NCHW dy -> NHWC
            dst, plane = regions["dy"] // 4, g["P"] * g["Q"]
            steps.append(transpose_launch(Tensor("y"), 0, Workspace(), dst, g["N"], g["K"], plane))
        steps.append(self._filter_launch(problem, g, regions["filter"] // 4))
        defines = shape.defines(config)
        gemm = split_gemm_spec("igemm_fwd_tf32x3", defines, config, grid_blocks(shape, config))
        z = (Workspace(), np.int64(regions["z"] // 4))
        part = region_operand(regions, "part", None)
        args = (
            *region_operand(regions, "dy", Tensor("y")),
            Workspace(), np.int64(regions["filter"] // 4),
            *z,
            *part,
        )  # fmt: skip
        steps.append(Launch(gemm, args, shared_mem=smem_bytes(config)))
        if config["split_k"] > 1:
            global_size, local_size = grid_1d(shape.rows * shape.k // 4)
            spec = KernelSpec("igemm_fwd_tf32x3", "tf32x3_splitk_sum", defines, global_size, local_size)
            steps.append(Launch(spec, (*part, *z)))
        steps.append(self._scatter_launch(problem, g, regions["z"] // 4))
        return Program(tuple(steps), regions["total"], {"precision": "3xtf32"})

    def _filter_launch(self, problem: ConvProblem, g: dict[str, int], dst: int) -> Launch:
        names = ("K", "C", "R", "S", "SH", "SW", "PH", "PW", "D0", "E0", "RR", "SS", "CZ")
        defines = {"MIOPY_DTYPE": 0, **{f"PF_{name}": g[name] for name in names}}
        global_size, local_size = grid_1d(g["CZ"] * g["RR"] * g["SS"] * g["K"])
        spec = KernelSpec("tf32x3_reshape", "phase_filter_f32", defines, global_size, local_size)
        strides = (np.int64(v) for v in problem.w.strides)
        return Launch(spec, (Tensor("w"), Workspace(), np.int64(dst), *strides))

    def _scatter_launch(self, problem: ConvProblem, g: dict[str, int], src: int) -> Launch:
        names = ("N", "C", "H", "W", "SH", "SW", "H2", "W2", "CZ")
        defines = {"MIOPY_DTYPE": 0, "PS_NCHW": 0 if is_nhwc(problem.x) else 1}
        defines.update({f"PS_{name}": g[name] for name in names})
        global_size, local_size = grid_for(g["N"] * g["C"] * g["H"] * g["W"])
        spec = KernelSpec("tf32x3_reshape", "phase_scatter_f32", defines, global_size, local_size)
        return Launch(spec, (Workspace(), np.int64(src), Tensor("x")))


def phase_reason(ctx, problem: ConvProblem) -> str | None:
    """Why ConvIgemmBwdPhaseTf32x3 cannot take ``problem`` (None when it can)."""
    why = fp32_ungrouped_reason(ctx, problem, Direction.BACKWARD_DATA) or unpacked_reason(problem)
    if why:
        return why
    k = problem.w.lens[0]
    if k % 4:
        return f"K={k} must be a multiple of 4"
    if tuple(problem.conv.strides) == (1, 1):
        return "stride 1: ConvIgemmBwdTf32x3 (no phases)"
    if tuple(problem.conv.dilations) != (1, 1):
        return f"dilations {tuple(problem.conv.dilations)}: the phases need dilation 1"
    _, _, r, s = problem.w.lens
    if not (0 <= problem.pads[0] < r and 0 <= problem.pads[1] < s):
        return f"padding {tuple(problem.pads)} not below the filter size"
    g = phase_geometry(problem)
    if g["N"] * g["H2"] * g["W2"] * g["CZ"] > INT32_MAX:
        return "the phase GEMM's output has 2^31 elements or more"
    return None
