"""Backward pooling for CPU OpenCL devices (PoCL): pool_bwd_{rows,channels}_cpu of
kernels/common/pool.h, in float8 vectors, no atomics (each work item writes only its own dx).

Rows (dx, dy and the index W-contiguous, as NCHW): a work item per 8 dx rows; the output rows
covering a dx row (at most STAGES) are staged in private rows, then each run of 8 dx positions of
one stride phase sums one unaligned load per window tap (max: masked by the index). Channels
(channels contiguous, as NHWC): a work item per stride cell of dx positions (at most CELL), 8
channels at a time, each covering output read once for the whole cell. The GPU-shaped gather
(PoolingBwdVec, PoolingBwdDirect) took 15-70 times the time of a copy of the same bytes on PoCL;
NCHW now takes a third to a quarter of its time, NHWC about the same as PoolingBwdVec
(docs/performance.md)."""

from __future__ import annotations

import math

from miopy.problem.passes import Pass
from miopy.problem.pooling import PoolingProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.launch import cpu_grid, cpu_kernels
from miopy.solvers.pool.direct import cpu_defines, shape_args

ROW_BUF = 520  # POOL_BWD_ROW of kernels/common/pool.h
STAGES = 4  # POOL_BWD_STAGES: output rows covering one dx row
CELL = 16  # POOL_BWD_CELL: dx positions of a channels-last work item (SH x SW)
ROWS_PER_ITEM = 8  # POOL_BWD_RH


def cpu_backward_refusal(ctx, problem) -> str | None:
    """Why a backward pooling solver for CPU OpenCL devices (float8 kernels) cannot take
    ``problem`` before its own layout checks, or None."""
    if not isinstance(problem, PoolingProblem):
        return "not a pooling"
    if not cpu_kernels(ctx):
        return "backend cuda: kernels for CPU OpenCL devices"
    if problem.direction is not Pass.BACKWARD:
        return f"direction is {problem.direction.name}"
    if problem.dtype.itemsize == 8:
        return "fp64 (the float8 kernels read fp32, fp16 and bf16)"
    return None


def _round8(v: int) -> int:
    return -(-v // 8) * 8


def _layout(p: PoolingProblem) -> str | None:
    """ "channels" or "rows" (which kernel), None when neither applies."""
    tensors = [p.x, p.y] + ([p.index] if p.uses_index else [])
    if all(t.strides[1] == 1 for t in tensors) and p.desc.strides[-1] * p.desc.strides[-2] <= CELL:
        return "channels"
    if all(t.strides[-1] == 1 for t in tensors):
        kw, sw, pw = p.desc.window[-1], p.desc.strides[-1], p.pads[-1]
        ms8 = _round8(-(-(p.x.lens[-1] + pw) // sw))  # the kernel's phase positions
        fits = max(ms8, _round8(p.y.lens[-1])) + 16 <= ROW_BUF
        covering = math.prod(-(-k // s) for k, s in zip(p.desc.window[:-1], p.desc.strides[:-1]))
        if fits and (kw - 1) // sw <= 8 and covering <= STAGES:
            return "rows"
    return None


class PoolingBwdCpu(Solver):
    primitive = "pool"
    name = "PoolingBwdCpu"
    id = 314
    algorithm = "direct"
    dynamic = True

    def is_applicable(self, ctx, problem) -> str | None:
        why = cpu_backward_refusal(ctx, problem)
        if why is not None:
            return why
        if _layout(problem) is None:
            return "neither channels nor rows contiguous in dx, dy and the index (or rows too long)"
        return None

    def get_program(self, ctx, problem: PoolingProblem, config=None) -> Program:
        kind = _layout(problem)
        n, c, d, h, w = problem.x.lens5()
        if kind == "channels":
            sh, sw = problem.desc.strides[-2:]
            work = n * d * -(-h // sh) * -(-w // sw)
        else:
            work = n * c * d * -(-h // ROWS_PER_ITEM)
        spec = KernelSpec("pool", f"pool_bwd_{kind}_cpu", cpu_defines(problem), *cpu_grid(work))
        index = Tensor("index" if problem.uses_index else "dy")
        return Program((Launch(spec, (Tensor("dx"), Tensor("dy"), index, *shape_args(problem))),))
