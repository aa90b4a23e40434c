"""Group norm forward in one pass over channels-last data (kernel gn_nhwc_fwd of
kernels/common/gn_nhwc.h): one work-group per (n, group), the group's H*W pixels of cg contiguous
channels held in registers, so x is read once and y written once. GPU devices (CPU OpenCL has its
own channels-last kernels)."""

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


def gn_nhwc_shape(ctx, problem) -> tuple[int, int, int, int] | str:
    """(cg, vw, local, per) of the one-pass channels-last group norm, or why it does not apply."""
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
    cg = problem.x.lens[1] // problem.num_groups
    hw = math.prod(problem.x.lens[2:])
    cuda = getattr(ctx, "backend_name", None) == "cuda"
    step = VEC_BYTES // problem.x.dtype.itemsize
    vw = step if cuda and cg % step == 0 else 1  # (norm.h's raw vectors are CUDA's)
    vectors = cg * hw // vw
    most = LOCAL_MOST if cuda else OPENCL_LOCAL_MOST
    local = min(most, max(32, 1 << max(0, (vectors - 1).bit_length())))
    per = -(-vectors // local)
    if cuda and per * (4 if vw > 1 else 1) > RAW_REGS:
        return f"groups of {cg * hw} elements do not fit the registers"
    if not cuda and per > OPENCL_PER_MOST:
        return f"groups of {cg * hw} elements are too long for one work-group"
    return cg, vw, local, per


class GroupNormFwdNhwc(Solver):
    """Group norm forward, one pass over channels-last x (see the module's text)."""

    primitive = "groupnorm"
    name = "GroupNormFwdNhwc"
    id = 426
    algorithm = "direct"
    dynamic = False

    def is_applicable(self, ctx, problem) -> str | None:
        shape = gn_nhwc_shape(ctx, problem)
        return shape if isinstance(shape, str) else None

    def get_program(self, ctx, problem, config=None) -> Program:
        cg, vw, local, per = gn_nhwc_shape(ctx, problem)
        n, c = problem.x.lens[:2]
        g = problem.num_groups
        hw = math.prod(problem.x.lens[2:])
        rows = n * g
        defines = {
            "MIOPY_DTYPE": problem.x.dtype.code,
            "NORM_PTYPE": problem.param_dtype.code,
            "NORM_VW": vw,
            "NORM_ONLY": KERNEL_IDS["gn_rows_fwd"],  # gn_nhwc_fwd uses that kernel's helpers
            "GN_LOCAL": local,
            "GN_PER": per,
        }
        spec = KernelSpec("norm", "gn_nhwc_fwd", defines, (min(rows, MAX_GROUPS) * local,), (local,))
        affine = np.int32(1 if problem.affine else 0)
        w = Tensor("weight") if problem.affine else Tensor("x")
        b = Tensor("bias") if problem.affine else Tensor("x")
        args = (Tensor("x"), Tensor("y"), w, b, Tensor("mean"), Tensor("rstd"), np.int64(rows))
        args += (np.int32(g), np.int32(cg), np.int32(hw), np.int32(c))
        args += (Scalar("epsilon", "float32", problem.epsilon), affine)
        return Program((Launch(spec, args),))


__all__ = ["GroupNormFwdNhwc", "gn_nhwc_shape"]
