"""Tensor operations on CUDA with several 16-byte vectors of each operand in flight per work item
(kernels/common/tensorop_au.h): a work-group per chunk of AU x 256 vectors instead of
tensorop_packed's grid-stride loop of one vector at a time. For b like c (the residual add) or a
b that varies along c's innermost run (a bias in NHWC)."""

from __future__ import annotations

import numpy as np

from miopy.problem.tensorop import TensorOpProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.launch import LOCAL
from miopy.solvers.tensorop.elementwise import VEC_BYTES, TensorOpPacked, broadcast_run


class TensorOpPackedVec(TensorOpPacked):
    name = "TensorOpPackedVec"
    id = 402
    AU = 2  # TOP_AU: vectors of each operand in flight per work item (H200: 2 beat 4 and 8)
    LD_HINT = 0  # VEC_LD_HINT (common/vec.h)
    ST_HINT = 0  # VEC_ST_HINT

    def is_applicable(self, ctx, problem) -> str | None:
        if getattr(ctx, "backend_name", None) != "cuda":
            return "backend is not CUDA"
        why = super().is_applicable(ctx, problem)
        if why:
            return why
        if not problem.op.binary:
            return "set and scale (TensorOpPacked)"
        t = problem.tensors()
        n = t["c"].element_count
        vec = VEC_BYTES // problem.dtype.itemsize
        inner, mid = broadcast_run(t["b"], t["c"])
        if not (inner == 1 and (mid == n or mid % vec == 0)):
            return "b neither like c nor varying along c's innermost run by whole vectors"
        if n // vec >= 2**31:
            return "2^31 vectors or more"
        return None

    def get_program(self, ctx, problem: TensorOpProblem, config=None) -> Program:
        t = problem.tensors()
        n = t["c"].element_count
        vec = VEC_BYTES // problem.dtype.itemsize
        _, mid = broadcast_run(t["b"], t["c"])
        kind = 0 if mid == n else 3
        groups = max(1, -(-(n // vec) // (self.AU * LOCAL)))
        defines = {
            "MIOPY_DTYPE": problem.dtype.code,
            "TENSOROP_OP": problem.op.kernel_code,
            "TOP_AU": self.AU,
            "VEC_LD_HINT": self.LD_HINT,
            "VEC_ST_HINT": self.ST_HINT,
        }
        spec = KernelSpec("tensorop", "tensorop_packed_au", defines, (groups * LOCAL,), (LOCAL,))
        args = (Tensor("a"), Tensor("b"), Tensor("c"), np.int64(n), np.int64(mid), np.int32(kind))
        return Program((Launch(spec, (*args, *self._scalars(problem))),))


__all__ = ["TensorOpPackedVec"]
