"""Group norm in one pass over the data (kernels gn_rows_fwd / gn_rows_bwd of
kernels/common/norm.h): a row-major (NCHW) x, one work-group per (n, group) row held in registers
in its storage type, so x (and dy) are read once and y (dx) written once. Backward sums the weight
gradients per (n, channel) in the same pass; ln_pgrad_finish adds up the N partial rows."""

from __future__ import annotations

import math

import numpy as np

from miopy.solution import KernelSpec, Launch, Program, Scalar, Tensor, Workspace
from miopy.solvers.launch import MAX_GROUPS
from miopy.solvers.norm.program import LN_FX, LN_FY, VEC_BYTES, norm_spec

CUDA_LOCAL_MOST = 1024  # work items per row on CUDA
OPENCL_LOCAL_MOST = 256
CUDA_RAW_REGS = 32  # 32-bit registers per work item that may hold the row (x, and dy backward)
OPENCL_PER_MOST = 64  # values per work item on OpenCL (a CPU keeps them in memory anyway)
CG_MOST = 64  # channels per group of the backward's per-channel sums (local memory)


def gn_rows_shape(ctx, problem, local_most: int | None = None) -> tuple[int, int, int, int] | str:
    """(L, vw, local, per) of the one-pass group norm, or why it does not apply; ``local_most``
    caps the work items a row (a benchmark's variant, benchmarks/gn_sweep.py)."""
    if getattr(problem, "primitive", None) != "groupnorm":
        return "not a group norm"
    if not problem.x.packed:
        return "x is not NCHW-packed"
    backward = problem.norm_kind == "ln_bwd"
    cg = problem.x.lens[1] // problem.num_groups
    if backward and problem.affine and cg > CG_MOST:
        return f"{cg} channels per group (at most {CG_MOST})"
    hw = math.prod(problem.x.lens[2:])
    L = cg * hw
    dtype = problem.x.dtype
    cuda = getattr(ctx, "backend_name", None) == "cuda"
    step = VEC_BYTES // dtype.itemsize
    vw = step if cuda and hw % step == 0 else 1
    vectors = L // vw
    most = local_most or (CUDA_LOCAL_MOST if cuda else OPENCL_LOCAL_MOST)
    local = min(most, max(32, 1 << max(0, (vectors - 1).bit_length())))
    per = -(-vectors // local)
    if cuda and per * (4 if vw > 1 else 1) > CUDA_RAW_REGS:
        return f"groups of {L} elements do not fit the registers"
    elif per > OPENCL_PER_MOST:
        return f"groups of {L} elements are too long for one work-group"
    return L, vw, local, per


def gn_reload(ctx, problem, vw: int, per: int) -> bool:
    """Backward on CUDA: dy read again in the second pass (from L2) when x and dy together do not
    fit the registers."""
    cuda = getattr(ctx, "backend_name", None) == "cuda"
    return cuda and 2 * per * (4 if vw > 1 else 1) > CUDA_RAW_REGS


def gn_rows_program(ctx, problem, variant: dict | None = None) -> Program:
    """The program; ``variant`` (benchmarks/gn_sweep.py) may set local (the most work items a
    row) and defines."""
    v = variant or {}
    shape = gn_rows_shape(ctx, problem, v.get("local"))
    assert not isinstance(shape, str), shape
    L, vw, local, per = shape
    g = problem.num_groups
    cg = problem.x.lens[1] // g
    hwv = L // cg // vw
    rows = problem.x.element_count // L
    backward = problem.norm_kind == "ln_bwd"
    name = "gn_rows_bwd" if backward else "gn_rows_fwd"
    spec = norm_spec(name, problem, vw, (min(rows, MAX_GROUPS) * local,), (local,))
    defines = {**v.get("defines", {}), **dict(spec.defines), "GN_LOCAL": local, "GN_PER": per}
    if backward:
        defines["GN_CG_MOST"] = max(cg, 1)
        defines["GN_RELOAD"] = int(gn_reload(ctx, problem, vw, per))
    spec = KernelSpec(spec.file, spec.name, defines, spec.global_size, spec.local_size)
    affine = np.int32(1 if problem.affine else 0)
    w = Tensor("weight") if problem.affine else Tensor("x")
    geo = (np.int64(rows), np.int32(L), np.int32(g), np.int32(cg), np.int32(hwv))
    if not backward:
        b = Tensor("bias") if problem.affine else Tensor("x")
        args = (Tensor("x"), Tensor("y"), w, b, Tensor("mean"), Tensor("rstd"), *geo)
        args += (Scalar("epsilon", "float32", problem.epsilon), affine)
        return Program((Launch(spec, args),))
    ws = Workspace()
    args = (Tensor("x"), Tensor("dy"), w, Tensor("mean"), Tensor("rstd"), Tensor("dx"), ws, *geo, affine)
    steps = [Launch(spec, args)]
    if not problem.affine:
        return Program(tuple(steps), 0)
    n, c = problem.x.lens[:2]
    finish = norm_spec("ln_pgrad_finish", problem, 1, (-(-c // LN_FX) * LN_FX, LN_FY), (LN_FX, LN_FY))
    steps.append(Launch(finish, (ws, Tensor("dweight"), Tensor("dbias"), np.int64(c), np.int64(n))))
    return Program(tuple(steps), 2 * n * c * 4)


__all__ = ["gn_rows_program", "gn_rows_shape"]
