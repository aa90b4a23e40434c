"""1x1 convolutions as one cuBLASLt product over the tensors in place (CUDA only).

With a 1x1 filter, stride 1 and no padding, every direction is a single matrix product with no
copy at all. On NHWC data (rows = N*H*W positions):

    forward        y[NHW, K]  = x[NHW, C] · w[K, C]^T
    backward data  dx[NHW, C] = dy[NHW, K] · w[K, C]
    weights        dw[K, C]   = dy[NHW, K]^T · x[NHW, C]

On NCHW data forward and backward data are a strided batch over the images; the weights need a
sum over images that one product cannot express there (GemmWrwUniversal does it).

The products are the GemmPlans of the cuBLAS solvers in gemm.py, run by cuBLASLt instead, in two
formulations: column-major (the library's native one: D = y^T, so K is its M) and row-major
(every layout CUBLASLT_ORDER_ROW: the rows of y are its M). A config names one algorithm by its
attributes, ``{"order": "col"|"row", "id", "tile", "stages", "splitk", "reduction", "swizzle",
"custom", "cluster", "inner"}`` (cuda_libs.ALGO_FIELDS); the search space is the heuristics' picks
of both formulations and variations of the best few (cuda_libs.LtGemm.candidates), find times
every one (``search_in_find``) and the perf DB keeps the winner. A config is valid only when
cuBLASLt's cublasLtMatmulAlgoCheck accepts it for this product here, so a stale record (another
library version or device) is refused, never run. cuBLASLt may use up to 32 MiB of workspace (its
Hopper split-K kernels want it); the solution asks for what the chosen algorithm needs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from miopy import log
from miopy.backends.cuda_libs import ALGO_FIELDS, ORDER_COL, ORDER_ROW, lt_gemm
from miopy.errors import MiopyError
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

_log = log.get("miopy.solvers.conv.gemm_lt")

_LT_TYPES = {DataType.FP32: 0, DataType.FP16: 2, DataType.BF16: 14}
ORDERS = {"col": ORDER_COL, "row": ORDER_ROW}
CONFIG_KEYS = frozenset(("order", *ALGO_FIELDS))


def _lt_usable(ctx) -> str | None:
    backend = getattr(ctx, "backend", None)
    name = getattr(backend, "name", None)
    if name != "cuda":
        return f"backend {name}: cuBLASLt needs the cuda backend"
    return _lt_missing()


def _lt_missing() -> str | None:
    """Why cuBLASLt cannot be loaded here (a build machine without it), or None. Kept once
    known: every applicability check of the four cuBLASLt solvers asks."""
    global _LT_MISSING
    if _LT_MISSING is None:
        try:
            from miopy.backends import cuda_libs

            cuda_libs.cublaslt()
            _LT_MISSING = ""
        except Exception as exc:  # no library: not applicable, never an error
            _LT_MISSING = f"backend cuda: cuBLASLt is not available ({exc})"
    return _LT_MISSING or None


_LT_MISSING: str | None = None


def lt_unknown(ctx) -> bool:
    """A cuda target (a kernel package being built) where cuBLASLt does not load: whether a
    cuBLASLt solver applies is then unknown, not false (``Solver.without_library``)."""
    return getattr(getattr(ctx, "backend", None), "name", None) == "cuda" and _lt_missing() is not None


_lt_gemm = lt_gemm  # one LtGemm per product and process, shared with the set-up pre-checks


def lt_problem(
    plan: GemmPlan, dtype: DataType, order: int = ORDER_COL
) -> tuple[tuple, dict[str, tuple[str, int]]] | None:
    """(LtGemm arguments, {"a"|"b"|"d": (role, element offset)}) for a row-major plan, or None
    when cuBLASLt cannot express it (two batch levels, or a layout no BLAS takes). ``order``
    ORDER_COL: the column-major product C^T = B^T A^T (cuBLASLt's A is our B); ORDER_ROW: C = A B
    with every layout row-major."""
    p = _blas_plan(plan)
    if p is None or (p.batch0 > 1 and p.batch1 > 1):
        return None
    level = "s0" if p.batch0 > 1 else "s1"
    batch = max(p.batch0, p.batch1)
    trans_a, lda = _blas_layout(p.a, p.m, p.k)  # type: ignore[misc]
    trans_b, ldb = _blas_layout(p.b, p.k, p.n)  # type: ignore[misc]
    _, ldc = _blas_layout(p.c, p.m, p.n)  # type: ignore[misc]
    sa, sb, sc = (getattr(o, level) if batch > 1 else 0 for o in (p.a, p.b, p.c))
    t = _LT_TYPES[dtype]
    if order == ORDER_ROW:
        key = (t, int(trans_a), int(trans_b), p.m, p.n, p.k, lda, ldb, ldc, batch, sa, sb, sc, ORDER_ROW)
        roles = {"a": (p.a.role, p.a.offset), "b": (p.b.role, p.b.offset), "d": (p.c.role, p.c.offset)}
        return key, roles
    key = (t, int(trans_b), int(trans_a), p.n, p.m, p.k, ldb, lda, ldc, batch, sb, sa, sc, ORDER_COL)
    roles = {"a": (p.b.role, p.b.offset), "b": (p.a.role, p.a.offset), "d": (p.c.role, p.c.offset)}
    return key, roles


def config_of(order: str, algo: Any) -> dict[str, Any]:
    """The perf-DB config naming ``algo`` (a cuda_libs.LtAlgo) of formulation ``order``."""
    return {"order": order, **algo.fields()}


class _LtSolver(TunableSolver):
    primitive = "conv"
    algorithm = "gemm"
    dynamic = True  # nothing to compile per shape
    # a few hundred candidates, nothing to compile: find times them all unless the perf DB knows
    # (H200: benchmarks/conv.py over the 48 fp16/bf16 1x1 cases, finds included, took 72-103 s)
    search_in_find = True
    base: ClassVar[_GemmSolver]

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        usable = _lt_usable(ctx)  # first: elsewhere the backend is the whole reason
        if usable is not None:
            return usable
        reason = self._shape_reason(ctx, problem)
        if reason is not None:
            return reason
        if not _lt_gemm(self._lt(problem)[0]).algos():  # type: ignore[index]
            return "cuBLASLt has no algorithm for it"
        return None

    def is_applicable_with(self, ctx, problem: ConvProblem, config: Any) -> str | None:
        """A valid config (an algorithm cublasLtMatmulAlgoCheck accepts for this product) shows
        that cuBLASLt has one: no heuristics query, which costs about a millisecond a product in
        a fresh process."""
        reason = _lt_usable(ctx) or self._shape_reason(ctx, problem)
        if reason is not None:
            return reason
        if self.is_valid_config(ctx, problem, config):
            return None
        return self.is_applicable(ctx, problem)

    def without_library(self, ctx, problem: ConvProblem) -> list | None:
        """No kernel of ours: an empty list where only cuBLASLt's absence says no."""
        return [] if lt_unknown(ctx) and self._shape_reason(ctx, problem) is None else None

    def _shape_reason(self, ctx, problem: ConvProblem) -> str | None:
        """Why not, cuBLASLt's algorithms aside."""
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
        if self._lt(problem) is None:
            return "the product is not one cuBLASLt matmul on this layout"
        return None

    def _lt(
        self, problem: ConvProblem, order: int = ORDER_COL
    ) -> tuple[tuple, dict[str, tuple[str, int]]] | None:
        plans = [s for s in self.base._steps(problem, Dims.of(problem), own=False).steps]
        if len(plans) != 1 or not isinstance(plans[0], GemmPlan):
            return None
        return lt_problem(plans[0], problem.dtype, order)

    def _gemm(self, problem: ConvProblem, order: str) -> Any:
        found = self._lt(problem, ORDERS[order])
        if found is None:
            return None
        try:
            return _lt_gemm(found[0])
        except MiopyError as exc:  # e.g. a library without row-major layouts for this type
            _log.info("cuBLASLt %s-major formulation refused: %s", order, exc)
            return None

    def _resolve(self, problem: ConvProblem, config: dict[str, Any]) -> Any:
        """The checked cuda_libs.LtAlgo a config names, or None."""
        gemm = self._gemm(problem, config["order"])
        return None if gemm is None else gemm.resolve(tuple(config[f] for f in ALGO_FIELDS))

    # ---- configs ---------------------------------------------------------------------------------
    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """cuBLASLt's first heuristic pick in the column-major formulation."""
        gemm = self._gemm(problem, "col")
        for config in gemm.picks() if gemm is not None else []:
            algo = gemm.resolve(config)
            if algo is not None:
                return config_of("col", algo)
        return {"order": "col", **dict.fromkeys(ALGO_FIELDS, 0)}

    def search_space(self, ctx, problem: ConvProblem) -> list[dict[str, Any]]:
        """The column-major formulation's candidates, then the row-major one's (its heuristic
        picks and single-attribute variations of its best two: it rarely wins, by little)."""
        out = []
        for order, depth in (("col", {}), ("row", {"vary": 2, "pairs": 0})):
            gemm = self._gemm(problem, order)
            if gemm is not None:
                out += [config_of(order, algo) for algo in gemm.candidates(**depth)]
        return out

    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not isinstance(config, dict) or set(config) != CONFIG_KEYS or config["order"] not in ORDERS:
            return False
        if any(type(config[f]) is not int for f in ALGO_FIELDS):
            return False
        return self._resolve(problem, config) is not None

    def workspace_size(self, ctx, problem: ConvProblem) -> int:
        algo = self._resolve(problem, self.default_config(ctx, problem))
        return algo.workspace if algo is not None else 0

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        config = config or self.default_config(ctx, problem)
        found = self._lt(problem, ORDERS[config["order"]])
        assert found is not None, "checked by is_applicable"
        key, roles = found
        gemm = _lt_gemm(key)
        algo = self._resolve(problem, config)
        assert algo is not None, "checked by is_valid_config"
        itemsize = problem.dtype.itemsize

        def operand(which: str) -> tuple[Any, int]:
            role, offset = roles[which]
            return (Workspace() if role == "ws" else Tensor(role)), offset * itemsize

        args = (gemm, algo, *operand("a"), *operand("b"), *operand("d"), Workspace())
        return Program((Call("lt_matmul", args),), algo.workspace, {"library": "cublasLt"})


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

__all__ = [
    "LT_SOLVERS",
    "GemmLtBwd1x1",
    "GemmLtFwd1x1",
    "GemmLtWrw1x1",
    "config_of",
    "lt_problem",
    "lt_unknown",
]
