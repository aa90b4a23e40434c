"""Softmax kernels (kernels/common/softmax.h) as solvers."""

from __future__ import annotations

import math

import numpy as np

from miopy.problem.keys import dense_alike
from miopy.problem.passes import Pass
from miopy.problem.softmax import SoftmaxAlgorithm, SoftmaxMode, SoftmaxProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.launch import MAX_GROUPS, cpu_grid, cpu_kernels, grid_1d

GROUP = 256  # SMAX_GROUP
MAX_CACHED = 8  # chunks of 16 bytes a thread keeps in registers


def _roles(problem: SoftmaxProblem) -> tuple[str, ...]:
    return ("x", "y") if problem.direction is Pass.FORWARD else ("y", "dy", "dx")


def _tail(problem: SoftmaxProblem) -> list:
    p = problem
    return [
        np.int32(p.algorithm is SoftmaxAlgorithm.LOG),
        np.float32(p.alpha),
        np.float32(p.beta),
        np.int32(p.beta != 0),
    ]


def rows_shape(problem: SoftmaxProblem) -> tuple[int, int] | None:
    """(rows, row length) when every group is one contiguous row of dense tensors, else None."""
    if dense_alike([d for _, d in problem.descs]):
        return None
    desc = problem.first
    lens, strides = desc.lens, desc.strides
    spatial = math.prod(lens[2:])
    if problem.mode is SoftmaxMode.INSTANCE:
        if lens[0] == 1 or strides[0] == math.prod(lens[1:]):
            return lens[0], math.prod(lens[1:])
        return None
    if strides[1] == 1 or lens[1] == 1 or spatial == 1:
        return lens[0] * spatial, lens[1]
    return None


class _Softmax(Solver):
    primitive = "softmax"
    algorithm = "direct"
    dynamic = False

    def _kernel(self, problem: SoftmaxProblem, kind: str) -> str:
        return f"softmax_{'fwd' if problem.direction is Pass.FORWARD else 'bwd'}_{kind}"


class SoftmaxRows(_Softmax):
    name = "SoftmaxRows"
    id = 500

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, SoftmaxProblem):
            return "not a softmax"
        if rows_shape(problem) is None:
            return "the groups are not contiguous rows of dense tensors"
        return None

    def get_program(self, ctx, problem: SoftmaxProblem, config=None) -> Program:
        rows, length = rows_shape(problem)
        if cpu_kernels(ctx) and problem.dtype.itemsize < 8:
            spec = KernelSpec(
                "softmax",
                self._kernel(problem, "rows_cpu"),
                {"MIOPY_DTYPE": problem.dtype.code},
                *cpu_grid(rows),
            )
            args = (*(Tensor(r) for r in _roles(problem)), np.int64(rows), np.int32(length), *_tail(problem))
            return Program((Launch(spec, args),))
        vec = 16 // problem.dtype.itemsize
        chunks = -(-length // vec)
        team = min(GROUP, max(4, 1 << max(0, math.ceil(math.log2(max(1, -(-chunks // 4)))))))
        per = -(-chunks // team)
        defines = {
            "MIOPY_DTYPE": problem.dtype.code,
            "SMAX_TEAM": team,
            "SMAX_PER": per if per <= MAX_CACHED else 0,
        }
        groups = min(-(-rows // (GROUP // team)), MAX_GROUPS)
        spec = KernelSpec("softmax", self._kernel(problem, "rows"), defines, (groups * GROUP,), (GROUP,))
        vec_ok = np.int32(length % vec == 0)
        args = (
            *(Tensor(r) for r in _roles(problem)),
            np.int64(rows),
            np.int32(length),
            vec_ok,
            *_tail(problem),
        )
        return Program((Launch(spec, args),))


WARP_MOST_PER = 8  # chunks of 16 bytes a work item of SoftmaxRowsWarp holds (SMW_PER)
WARP_MOST_PER_BWD = 4  # backward: of y and of dy each


def warp_shape(length: int, vec: int) -> tuple[int, int]:
    """(SMW_TEAM, SMW_PER) of a row of ``length`` elements in chunks of ``vec``: the smallest team
    of 4-32 work items that holds the row in at most two chunks each, more chunks each past 64."""
    chunks = -(-length // vec)
    team = min(32, max(4, 1 << max(0, math.ceil(math.log2(max(1, -(-chunks // 2)))))))
    return team, -(-chunks // team)


class SoftmaxRowsWarp(_Softmax):
    """Forward over contiguous rows of at most 32 x 8 chunks of 16 bytes (kernels/common/
    softmax_warp.h): a team of up to a warp holds its row in registers, takes the maximum, then one
    exp per element (GPU devices; CPU OpenCL has SoftmaxRows' kernels). Backward on CUDA, rows of
    at most 32 x 4 chunks: y and dy held, the dot product by shuffles, dx from the registers."""

    name = "SoftmaxRowsWarp"
    id = 503

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, SoftmaxProblem):
            return "not a softmax"
        if cpu_kernels(ctx):
            return "backend on a CPU device (SoftmaxRows has its kernels)"
        bwd = problem.direction is not Pass.FORWARD
        if bwd and getattr(ctx, "backend_name", None) != "cuda":
            return "backward on a backend other than CUDA (SoftmaxRows)"
        if problem.dtype.itemsize == 8:
            return "fp64 data"
        shape = rows_shape(problem)
        if shape is None:
            return "the groups are not contiguous rows of dense tensors"
        vec = 16 // problem.dtype.itemsize
        if shape[1] % vec:
            return f"the row length {shape[1]} is not a multiple of {vec}"
        if warp_shape(shape[1], vec)[1] > (WARP_MOST_PER_BWD if bwd else WARP_MOST_PER):
            return f"rows of {shape[1]} elements do not fit in the registers of a warp"
        return None

    def get_program(self, ctx, problem: SoftmaxProblem, config=None) -> Program:
        rows, length = rows_shape(problem)
        team, per = warp_shape(length, 16 // problem.dtype.itemsize)
        defines = {"MIOPY_DTYPE": problem.dtype.code, "SMW_TEAM": team, "SMW_PER": per}
        groups = min(-(-rows // (GROUP // team)), MAX_GROUPS)
        kernel = "softmax_fwd_warp" if problem.direction is Pass.FORWARD else "softmax_bwd_warp"
        spec = KernelSpec("softmax", kernel, defines, (groups * GROUP,), (GROUP,))
        roles = (Tensor(r) for r in _roles(problem))
        args = (*roles, np.int64(rows), np.int32(length), *_tail(problem))
        return Program((Launch(spec, args),))


COL_BLOCKS = 8  # SMAX_COL_BLOCKS: blocks of 8 positions a work item of *_cols_cpu takes


def col_runs(inner: int) -> int:
    """Work items of *_cols_cpu per outer index (smax_col_runs in kernels/common/softmax.h)."""
    blocks = inner // 8
    return -(-blocks // COL_BLOCKS) if blocks > COL_BLOCKS else 1


class SoftmaxCols(_Softmax):
    name = "SoftmaxCols"
    id = 501
    dynamic = True

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, SoftmaxProblem):
            return "not a softmax"
        if problem.mode is not SoftmaxMode.CHANNEL:
            return "instance mode"
        why = dense_alike([d for _, d in problem.descs])
        if why:
            return why
        lens, strides = problem.first.lens, problem.first.strides
        spatial = math.prod(lens[2:])
        if strides[1] != spatial or strides[0] != lens[1] * spatial:
            return "C is not the second outermost dimension (NCHW)"
        return None

    def get_program(self, ctx, problem: SoftmaxProblem, config=None) -> Program:
        lens = problem.lens
        inner = math.prod(lens[2:])
        if cpu_kernels(ctx) and problem.dtype.itemsize < 8:  # runs of 8-position blocks
            kind, (global_size, local_size) = "cols_cpu", cpu_grid(lens[0] * col_runs(inner))
        else:
            kind, (global_size, local_size) = "cols", grid_1d(lens[0] * inner)
        spec = KernelSpec(
            "softmax",
            self._kernel(problem, kind),
            {"MIOPY_DTYPE": problem.dtype.code},
            global_size,
            local_size,
        )
        args = (
            *(Tensor(r) for r in _roles(problem)),
            np.int64(lens[0]),
            np.int32(lens[1]),
            np.int64(inner),
            *_tail(problem),
        )
        return Program((Launch(spec, args),))


class SoftmaxStrided(_Softmax):
    name = "SoftmaxStrided"
    id = 502
    dynamic = True

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, SoftmaxProblem):
            return "not a softmax"
        return None

    def get_program(self, ctx, problem: SoftmaxProblem, config=None) -> Program:
        n, c, d, h, w = problem.first.lens5()
        groups = n * d * h * w if problem.mode is SoftmaxMode.CHANNEL else n
        global_size, local_size = grid_1d(groups, 64)
        spec = KernelSpec(
            "softmax",
            self._kernel(problem, "strided"),
            {"MIOPY_DTYPE": problem.dtype.code},
            global_size,
            local_size,
        )
        t = problem.tensors()
        strides = [np.int64(s) for r in _roles(problem) for s in t[r].strides5()]
        args = (
            *(Tensor(r) for r in _roles(problem)),
            *(np.int32(v) for v in (n, c, d, h, w)),
            *strides,
            np.int32(problem.mode is SoftmaxMode.CHANNEL),
            *_tail(problem),
        )
        return Program((Launch(spec, args),))
