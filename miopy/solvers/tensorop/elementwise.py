"""Tensor operations as one elementwise kernel (kernels/common/tensorop.h)."""

from __future__ import annotations

import math

import numpy as np

from miopy.problem.keys import dense_alike, memory_order
from miopy.problem.tensorop import TensorOpProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.launch import cpu_grid, cpu_kernels, grid_1d, specialize
from miopy.tensor import TensorDesc

VEC_BYTES = 16


def broadcast_run(b: TensorDesc, c: TensorDesc) -> tuple[int, int] | None:
    """(inner, mid) such that b's element for c's flat index i is (i // inner) % mid, when c is
    dense and b varies (packed) over one contiguous run of c's memory-order dimensions; else None."""
    order = memory_order(c)
    lc = [c.lens[a] for a in order]
    lb = [b.lens[a] for a in order]
    sb = [b.strides[a] for a in order]
    vary = [i for i, n in enumerate(lb) if n > 1]
    if not vary:
        return 1, 1
    p, q = vary[0], vary[-1] + 1
    if any(lc[i] > 1 and lb[i] == 1 for i in range(p, q)):
        return None
    expected = 1
    for i in reversed(range(p, q)):
        if lb[i] > 1:
            if sb[i] != expected:
                return None
            expected *= lb[i]
    return math.prod(lc[q:]), math.prod(lc[p:q])


CPU_RUN = 64  # elements a work item of tensorop_packed_cpu takes (TOP_RUN)


def _dims(desc: TensorDesc) -> list:
    return [np.int32(v) for v in desc.lens5()]


def _strides(desc: TensorDesc, like: TensorDesc | None = None) -> list:
    """N,C,D,H,W strides; 0 where ``desc`` broadcasts against ``like``."""
    lens = desc.lens5()
    full = like.lens5() if like is not None else lens
    return [np.int64(0 if n == 1 and f != 1 else s) for n, f, s in zip(lens, full, desc.strides5())]


class _TensorOp(Solver):
    primitive = "tensorop"
    algorithm = "direct"
    dynamic = True

    def _spec(self, ctx, problem: TensorOpProblem, kernel: str, work: int, grid=None) -> KernelSpec:
        global_size, local_size = grid or grid_1d(work)
        defines = {"MIOPY_DTYPE": problem.dtype.code}
        if specialize(ctx):
            defines["TENSOROP_OP"] = problem.op.kernel_code
        return KernelSpec("tensorop", kernel, defines, global_size, local_size)

    def _scalars(self, problem: TensorOpProblem) -> list:
        p = problem
        if not p.op.binary:
            return [np.int32(p.op.kernel_code), np.float32(p.value)]
        return [
            np.int32(p.op.kernel_code),
            np.float32(p.alpha1),
            np.float32(p.alpha2),
            np.float32(p.beta),
            np.int32(p.beta != 0),
        ]


class TensorOpPacked(_TensorOp):
    name = "TensorOpPacked"
    id = 400

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, TensorOpProblem):
            return "not a tensor operation"
        t = problem.tensors()
        if not problem.op.binary:
            return dense_alike([t["y"]])
        why = dense_alike([t["a"], t["c"]])
        if why:
            return why
        if broadcast_run(t["b"], t["c"]) is None:
            return "b does not vary over one packed run of c's dimensions"
        return None

    def get_program(self, ctx, problem: TensorOpProblem, config=None) -> Program:
        t = problem.tensors()
        out = problem.out
        n = out.element_count
        vec = VEC_BYTES // problem.dtype.itemsize
        if not problem.op.binary:
            spec = self._spec(ctx, problem, "tensor_set_packed", -(-n // vec))
            return Program((Launch(spec, (Tensor("y"), np.int64(n), *self._scalars(problem))),))
        inner, mid = broadcast_run(t["b"], t["c"])
        if cpu_kernels(ctx) and problem.dtype.itemsize < 8:
            vec = 8  # tensorop_packed_cpu: float8 vectors, runs of CPU_RUN elements a work item
        if inner == 1 and mid == n:
            kind = 0  # b like c
        elif inner % vec == 0:
            kind = 1  # one b per vector
        elif inner == 1 and mid % vec == 0:
            kind = 3  # b's run innermost: vector loads of b
        else:
            kind = 2
        if cpu_kernels(ctx) and problem.dtype.itemsize < 8:
            spec = self._spec(ctx, problem, "tensorop_packed_cpu", 0, cpu_grid(-(-n // CPU_RUN)))
        else:
            spec = self._spec(ctx, problem, "tensorop_packed", -(-n // vec))
        args = (
            Tensor("a"),
            Tensor("b"),
            Tensor("c"),
            np.int64(n),
            np.int64(inner),
            np.int64(mid),
            np.int32(kind),
            *self._scalars(problem),
        )
        return Program((Launch(spec, args),))


class TensorOpStrided(_TensorOp):
    name = "TensorOpStrided"
    id = 401

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, TensorOpProblem):
            return "not a tensor operation"
        return None

    def get_program(self, ctx, problem: TensorOpProblem, config=None) -> Program:
        t = problem.tensors()
        out = problem.out
        if not problem.op.binary:
            spec = self._spec(ctx, problem, "tensor_set_strided", out.element_count)
            args = (Tensor("y"), *_dims(out), *_strides(out), *self._scalars(problem))
            return Program((Launch(spec, args),))
        spec = self._spec(ctx, problem, "tensorop_strided", out.element_count)
        args = (
            Tensor("a"),
            Tensor("b"),
            Tensor("c"),
            *_dims(out),
            *_strides(t["a"]),
            *_strides(t["b"], out),
            *_strides(t["c"]),
            *self._scalars(problem),
        )
        return Program((Launch(spec, args),))
