"""1x1 convolutions as one cuBLASLt product over the tensors in place (CUDA only).

With a 1x1 filter, stride 1 and no padding, every direction is a single matrix product with no
copy at all. On NHWC data (rows = N*H*W positions):

    forward        y[NHW, K]  = x[NHW, C] · w[K, C]^T
    backward data  dx[NHW, C] = dy[NHW, K] · w[K, C]
    weights        dw[K, C]   = dy[NHW, K]^T · x[NHW, C]

On NCHW data forward and backward data are a strided batch over the images; the weights need a
sum over images that one product cannot express there (GemmWrwUniversal does it).

The products are the GemmPlans of the cuBLAS solvers in gemm.py, run by cuBLASLt instead: its
heuristics list up to sixteen candidate algorithms for the shape; the config is the index of one
(``{"algo": i}``), find times every candidate (``search_in_find``) and the perf DB keeps the
winner. cuBLASLt may use up to 32 MiB of workspace (its Hopper split-K kernels want it); the
solution asks for what the chosen algorithm needs.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from miopy.problem.conv import ConvProblem
from miopy.solution import Call, Program, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.solvers.conv.gemm import (
    Dims,
    GemmBwd1x1_stride1,
    GemmFwd1x1_0_1,
    GemmPlan,
    GemmWrw1x1_stride1,
    _blas_layout,
    _blas_plan,
    _GemmSolver,
    _is_1x1_0_1,
)
from miopy.tensor import DataType

_LT_TYPES = {DataType.FP32: 0, DataType.FP16: 2, DataType.BF16: 14}


def _lt_usable(ctx) -> str | None:
    backend = getattr(ctx, "backend", None)
    name = getattr(backend, "name", None)
    if name != "cuda":
        return f"backend {name}: cuBLASLt needs the cuda backend"
    try:
        from miopy.backends import cuda_libs

        cuda_libs.cublaslt()
    except Exception as exc:  # no library: not applicable, never an error
        return f"backend cuda: cuBLASLt is not available ({exc})"
    return None


@functools.lru_cache(maxsize=256)
def _lt_gemm(key: tuple) -> Any:
    from miopy.backends.cuda_libs import LtGemm

    return LtGemm(*key)


def lt_problem(plan: GemmPlan, dtype: DataType) -> tuple[tuple, dict[str, tuple[str, int]]] | None:
    """(LtGemm arguments, {"a"|"b"|"d": (role, element offset)}) for a row-major plan, or None
    when cuBLASLt cannot express it (two batch levels, or a layout no BLAS takes)."""
    p = _blas_plan(plan)
    if p is None or (p.batch0 > 1 and p.batch1 > 1):
        return None
    level = "s0" if p.batch0 > 1 else "s1"
    batch = max(p.batch0, p.batch1)
    trans_a, lda = _blas_layout(p.a, p.m, p.k)  # type: ignore[misc]
    trans_b, ldb = _blas_layout(p.b, p.k, p.n)  # type: ignore[misc]
    _, ldc = _blas_layout(p.c, p.m, p.n)  # type: ignore[misc]
    sa, sb, sc = (getattr(o, level) if batch > 1 else 0 for o in (p.a, p.b, p.c))
    # Column-major: the row-major C = A B is C^T = B^T A^T, so cuBLASLt's A is our B.
    key = (_LT_TYPES[dtype], int(trans_b), int(trans_a), p.n, p.m, p.k, ldb, lda, ldc, batch, sb, sa, sc)
    roles = {"a": (p.b.role, p.b.offset), "b": (p.a.role, p.a.offset), "d": (p.c.role, p.c.offset)}
    return key, roles


class _LtSolver(TunableSolver):
    primitive = "conv"
    algorithm = "gemm"
    dynamic = True  # nothing to compile per shape
    search_in_find = True  # a handful of candidates: find times them all unless the perf DB knows
    base: ClassVar[_GemmSolver]

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        usable = _lt_usable(ctx)  # first: elsewhere the backend is the whole reason
        if usable is not None:
            return usable
        if problem.direction is not self.base.direction:
            return f"direction is {problem.direction.name}"
        if problem.dtype not in _LT_TYPES:
            return f"data type {problem.dtype.value}"
        if not _is_1x1_0_1(problem):
            return "not a 1x1 filter with stride 1 and no padding"
        if problem.conv.groups != 1:
            return "groups > 1"
        reason = self.base.is_applicable(ctx, problem)
        if reason is not None:
            return reason
        found = self._lt(problem)
        if found is None:
            return "the product is not one cuBLASLt matmul on this layout"
        if not _lt_gemm(found[0]).algos():
            return "cuBLASLt has no algorithm for it"
        return None

    def _lt(self, problem: ConvProblem) -> tuple[tuple, dict[str, tuple[str, int]]] | None:
        plans = [s for s in self.base._steps(problem, Dims.of(problem), own=False).steps]
        if len(plans) != 1 or not isinstance(plans[0], GemmPlan):
            return None
        return lt_problem(plans[0], problem.dtype)

    def _algos(self, problem: ConvProblem) -> list:
        found = self._lt(problem)
        return [] if found is None else _lt_gemm(found[0]).algos()

    # ---- configs ---------------------------------------------------------------------------------
    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        return {"algo": 0}

    def search_space(self, ctx, problem: ConvProblem) -> list[dict[str, Any]]:
        return [{"algo": i} for i in range(len(self._algos(problem)))]

    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not isinstance(config, dict) or set(config) != {"algo"}:
            return False
        index = config["algo"]
        return (
            isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(self._algos(problem))
        )

    def workspace_size(self, ctx, problem: ConvProblem) -> int:
        algos = self._algos(problem)
        return algos[0][1] if algos else 0

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        config = config or self.default_config(ctx, problem)
        found = self._lt(problem)
        assert found is not None, "checked by is_applicable"
        key, roles = found
        index = int(config["algo"])
        gemm = _lt_gemm(key)
        itemsize = problem.dtype.itemsize

        def operand(which: str) -> tuple[Any, int]:
            role, offset = roles[which]
            return (Workspace() if role == "ws" else Tensor(role)), offset * itemsize

        args = (gemm, index, *operand("a"), *operand("b"), *operand("d"), Workspace())
        return Program((Call("lt_matmul", args),), gemm.algos()[index][1], {"library": "cublasLt"})


class GemmLtFwd1x1(_LtSolver):
    name = "GemmLtFwd1x1"
    id = 211  # no MIOpen counterpart
    base = GemmFwd1x1_0_1()


class GemmLtBwd1x1(_LtSolver):
    name = "GemmLtBwd1x1"
    id = 212
    base = GemmBwd1x1_stride1()


class GemmLtWrw1x1(_LtSolver):
    name = "GemmLtWrw1x1"
    id = 213
    base = GemmWrw1x1_stride1()


LT_SOLVERS = [GemmLtFwd1x1(), GemmLtBwd1x1(), GemmLtWrw1x1()]

__all__ = ["LT_SOLVERS", "GemmLtBwd1x1", "GemmLtFwd1x1", "GemmLtWrw1x1", "lt_problem"]
