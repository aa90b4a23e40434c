"""Group norm forward in one pass over channels-last data (kernel gn_nhwc_fwd of
kernels/common/gn_nhwc.h): one work-group per gpb neighbouring groups of an image (so that a
pixel's read is up to 64 contiguous bytes), their H*W pixels of cg contiguous channels held in
registers, so x is read once and y written once. GPU devices (CPU OpenCL has its own
channels-last kernels)."""

from __future__ import annotations

import math

import numpy as np

from miopy.solution import KernelSpec, Launch, Program, Scalar, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.launch import MAX_GROUPS, cpu_kernels
from miopy.solvers.norm.program import KERNEL_IDS, VEC_BYTES

LOCAL_MOST = 1024  # work items per group of the data (CUDA)
RAW_REGS = 32  # 32-bit registers per work item that may hold the group (CUDA)
OPENCL_LOCAL_MOST = 256  # OpenCL (GPU-shaped on PoCL in the tests): scalar access
OPENCL_PER_MOST = 64
PIXEL_BYTES = 64  # contiguous bytes a pixel worth reading at once (a DRAM access)


def gn_nhwc_shape(ctx, problem) -> tuple[int, int, int, int, int] | str:
    """(cg, vw, local, per, gpb) of the one-pass channels-last group norm (gpb groups per
    work-group), or why it does not apply."""
    if getattr(problem, "primitive", None) != "groupnorm":
        return "not a group norm"
    if cpu_kernels(ctx):
        return "backend on a CPU device (it has channels-last kernels of its own)"
    if problem.norm_kind != "ln_fwd":
        return "backward"
    if not problem.channels_last:
        return "x is not channels-last (NHWC) packed"
    if problem.x.element_count >= 2**31:
        return "2^31 elements or more"
    cuda = getattr(ctx, "backend_name", None) == "cuda"
    item = problem.x.dtype.itemsize
    g = problem.num_groups
    cg = problem.x.lens[1] // g
    hw = math.prod(problem.x.lens[2:])
    step = VEC_BYTES // item
    vw = step if cuda and cg % step == 0 else 1  # (norm.h's raw vectors are CUDA's)
    vpp = cg // vw
    most = LOCAL_MOST if cuda else OPENCL_LOCAL_MOST
    regs = 4 if vw > 1 else 1
    best = None
    gpb = 1
    while True:  # more groups a work-group: longer contiguous reads a pixel, more registers
        span = vpp * gpb
        unit = math.lcm(32, span)
        vectors = hw * span
        local = unit
        while local * 2 <= most and local < vectors:
            local *= 2
        per = -(-vectors // local)
        fits = per * regs <= RAW_REGS if cuda else per <= OPENCL_PER_MOST
        if local > most or not fits:
            break
        best = (cg, vw, local, per, gpb)
        pow2 = vpp & (vpp - 1) == 0
        if not pow2 or g % (2 * gpb) or 2 * span > 32 or span * vw * item >= PIXEL_BYTES:
            break
        gpb *= 2
    if best is None:
        return f"groups of {cg * hw} elements do not fit the registers"
    return best


class GroupNormFwdNhwc(Solver):
    """Group norm forward, one pass over channels-last x (see the module's text)."""

    primitive = "groupnorm"
    name = "GroupNormFwdNhwc"
    id = 426
    algorithm = "direct"
    dynamic = False
    variant: dict | None = None  # defines benchmarks/gn_sweep.py's variants add

    def is_applicable(self, ctx, problem) -> str | None:
        shape = gn_nhwc_shape(ctx, problem)
        return shape if isinstance(shape, str) else None

    def get_program(self, ctx, problem, config=None) -> Program:
        cg, vw, local, per, gpb = gn_nhwc_shape(ctx, problem)
        n, c = problem.x.lens[:2]
        g = problem.num_groups
        hw = math.prod(problem.x.lens[2:])
        blocks = n * g // gpb
        defines = {
            **(self.variant or {}).get("defines", {}),
            "MIOPY_DTYPE": problem.x.dtype.code,
            "NORM_PTYPE": problem.param_dtype.code,
            "NORM_VW": vw,
            "NORM_ONLY": KERNEL_IDS["gn_rows_fwd"],  # gn_nhwc_fwd uses that kernel's helpers
            "GN_LOCAL": local,
            "GN_PER": per,
            "GN_GPB": gpb,
            "GN_VPP": cg // vw,
        }
        spec = KernelSpec("norm", "gn_nhwc_fwd", defines, (min(blocks, MAX_GROUPS) * local,), (local,))
        affine = np.int32(1 if problem.affine else 0)
        w = Tensor("weight") if problem.affine else Tensor("x")
        b = Tensor("bias") if problem.affine else Tensor("x")
        args = (Tensor("x"), Tensor("y"), w, b, Tensor("mean"), Tensor("rstd"), np.int64(blocks))
        args += (np.int32(g), np.int32(cg), np.int32(hw), np.int32(c))
        args += (Scalar("epsilon", "float32", problem.epsilon), affine)
        return Program((Launch(spec, args),))


__all__ = ["GroupNormFwdNhwc", "gn_nhwc_shape"]
