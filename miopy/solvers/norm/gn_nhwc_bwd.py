"""Group norm backward in one pass over channels-last data (kernel gn_nhwc_bwd of
kernels/common/gn_nhwc_bwd.h, CUDA): gn_nhwc_fwd's work-groups (gpb neighbouring groups of an
image, so that a pixel's read is up to 64 contiguous bytes), x held in registers and read once,
dy read for the sums and again from L2 for dx where x and dy together do not fit the registers;
the weight gradients' partial sums per (n, channel) from the same pass, added up over n by
ln_pgrad_finish (as GroupNormBwdRows)."""

from __future__ import annotations

import math

import numpy as np

from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import Solver
from miopy.solvers.launch import MAX_GROUPS
from miopy.solvers.norm.program import LN_FX, LN_FY, VEC_BYTES, norm_spec

LOCAL_MOST = 512  # work items a work-group (__launch_bounds__: up to 128 registers each)
RAW_REGS = 64  # 32-bit registers a work item may hold data in (x, and dy unless reloaded)
PIXEL_BYTES = 64  # contiguous bytes of a pixel worth reading at once
SPAN_MOST = 32  # vectors a pixel of the work-group (a warp's lanes)


def gn_nhwc_bwd_shape(ctx, problem) -> tuple[int, int, int, int, int, int] | str:
    """(cg, vw, local, per, gpb, reload) of the one-pass channels-last backward, or why not."""
    if getattr(ctx, "backend_name", None) != "cuda":
        return "backend is not CUDA"
    if getattr(problem, "primitive", None) != "groupnorm":
        return "not a group norm"
    if problem.norm_kind != "ln_bwd":
        return "forward"
    if not problem.channels_last:
        return "x is not channels-last (NHWC) packed"
    if problem.x.element_count >= 2**31:
        return "2^31 elements or more"
    item = problem.x.dtype.itemsize
    g = problem.num_groups
    cg = problem.x.lens[1] // g
    hw = math.prod(problem.x.lens[2:])
    step = VEC_BYTES // item
    vw = step if cg % step == 0 else 1
    vpp = cg // vw
    if vpp & (vpp - 1) or vpp > SPAN_MOST:
        return f"{cg} channels a group: not a power of two of vectors up to {SPAN_MOST}"
    regs = 4 if vw > 1 else 1
    best = None
    gpb = 1
    while True:
        span = vpp * gpb
        vectors = hw * span
        local = max(32, span)
        while local * 2 <= LOCAL_MOST and local < vectors:
            local *= 2
        per = -(-vectors // local)
        if per * regs > RAW_REGS:
            break
        best = (cg, vw, local, per, gpb, int(2 * per * regs > RAW_REGS))
        if g % (2 * gpb) or 2 * span > SPAN_MOST or span * vw * item >= PIXEL_BYTES:
            break
        gpb *= 2
    if best is None:
        return f"groups of {cg * hw} elements do not fit the registers"
    return best


class GroupNormBwdNhwc(Solver):
    """Group norm backward, one pass over channels-last x and dy (see the module's text)."""

    primitive = "groupnorm"
    name = "GroupNormBwdNhwc"
    id = 427
    algorithm = "direct"
    dynamic = False

    def is_applicable(self, ctx, problem) -> str | None:
        shape = gn_nhwc_bwd_shape(ctx, problem)
        return shape if isinstance(shape, str) else None

    def workspace_size(self, ctx, problem) -> int:
        return self.get_program(ctx, problem).workspace

    def get_program(self, ctx, problem, config=None) -> Program:
        cg, vw, local, per, gpb, reload = gn_nhwc_bwd_shape(ctx, problem)
        n, c = problem.x.lens[:2]
        g = problem.num_groups
        hw = math.prod(problem.x.lens[2:])
        blocks = n * g // gpb
        defines = {
            "MIOPY_DTYPE": problem.x.dtype.code,
            "NORM_PTYPE": problem.param_dtype.code,
            "NORM_VW": vw,
            "GNB_LOCAL": local,
            "GNB_PER": per,
            "GNB_GPB": gpb,
            "GNB_VPP": cg // vw,
            "GNB_RELOAD": reload,
        }
        spec = KernelSpec("gn_nhwc_bwd", "gn_nhwc_bwd", defines, (min(blocks, MAX_GROUPS) * local,), (local,))
        w = Tensor("weight") if problem.affine else Tensor("x")
        ws = Workspace() if problem.affine else Tensor("dx")  # partial sums only with weights
        args = (Tensor("x"), Tensor("dy"), w, Tensor("mean"), Tensor("rstd"), Tensor("dx"), ws)
        args += (np.int64(blocks), np.int32(g), np.int32(cg), np.int32(hw), np.int32(c))
        args += (np.int32(1 if problem.affine else 0),)
        steps = [Launch(spec, args)]
        if not problem.affine:
            return Program(tuple(steps), 0)
        finish = norm_spec("ln_pgrad_finish", problem, 1, (-(-c // LN_FX) * LN_FX, LN_FY), (LN_FX, LN_FY))
        steps.append(
            Launch(finish, (Workspace(), Tensor("dweight"), Tensor("dbias"), np.int64(c), np.int64(n)))
        )
        return Program(tuple(steps), 2 * n * c * 4)


__all__ = ["GroupNormBwdNhwc", "gn_nhwc_bwd_shape"]
