"""The solver registry: one ordered list per primitive (oneDNN's per-primitive implementation
lists). Order is the fallback ranking when nothing better is known. A new solver is one module,
its kernel, and one line here; a new primitive is one more key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miopy.solvers.activ import ActivBwdPacked, ActivBwdStrided, ActivFwdPacked, ActivFwdStrided
from miopy.solvers.base import Solver, TunableSolver
from miopy.solvers.conv import scaled as _conv_scaled  # noqa: F401  registers conv alpha / beta
from miopy.solvers.conv.direct_tiled import ConvDirectTiledFwd
from miopy.solvers.conv.gemm import (
    GemmBwd1x1_stride1,
    GemmBwdRest,
    GemmFwd1x1_0_1,
    GemmFwdRest,
    GemmWrw1x1_stride1,
    GemmWrwUniversal,
)
from miopy.solvers.conv.gemm1x1_stream import Conv1x1StreamBwd, Conv1x1StreamFwd, Conv1x1StreamWrw
from miopy.solvers.conv.gemm_lt import GemmLtBwd1x1, GemmLtFwd1x1, GemmLtWrw1x1
from miopy.solvers.conv.gemm_lt_wrw import GemmLtWrw1x1Nchw
from miopy.solvers.conv.implicit_gemm import ConvIgemmFwdNhwc
from miopy.solvers.conv.implicit_gemm_bwd import ConvIgemmBwdNhwc
from miopy.solvers.conv.implicit_gemm_ffma import ConvIgemmFfmaBwd, ConvIgemmFfmaFwd, ConvIgemmFfmaWrw
from miopy.solvers.conv.implicit_gemm_nchw import ConvIgemmNchwBwd, ConvIgemmNchwFwd, ConvIgemmNchwWrw
from miopy.solvers.conv.implicit_gemm_pad import ConvIgemmPadFwdNhwc
from miopy.solvers.conv.implicit_gemm_pad_bwd import ConvIgemmPadBwdNhwc
from miopy.solvers.conv.implicit_gemm_pad_c4 import ConvIgemmPadC4FwdNhwc
from miopy.solvers.conv.implicit_gemm_pad_tf32x3 import (
    ConvIgemmPadBwdTf32x3,
    ConvIgemmPadFwdTf32x3,
    ConvIgemmPadWrwTf32x3,
)
from miopy.solvers.conv.implicit_gemm_pad_wrw import ConvIgemmPadWrwNhwc
from miopy.solvers.conv.implicit_gemm_phase_tf32x3 import ConvIgemmBwdPhaseTf32x3
from miopy.solvers.conv.implicit_gemm_tf32x3 import ConvIgemmBwdTf32x3, ConvIgemmFwdTf32x3
from miopy.solvers.conv.implicit_gemm_wgmma import ConvWgmmaBwdNhwc, ConvWgmmaFwdNhwc
from miopy.solvers.conv.implicit_gemm_wgmma_wrw import ConvWgmmaWrwNhwc
from miopy.solvers.conv.implicit_gemm_wrw import ConvIgemmWrwNhwc
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import ConvIgemmWrwTf32x3
from miopy.solvers.conv.naive import ConvDirectNaiveBwd, ConvDirectNaiveFwd, ConvDirectNaiveWrw
from miopy.solvers.conv.winograd_fwd_tf32x3 import (
    ConvWinogradBwdF2x3Tf32x3,
    ConvWinogradBwdF4x3Tf32x3,
    ConvWinogradFwdF2x3Tf32x3,
    ConvWinogradFwdF4x3Tf32x3,
)
from miopy.solvers.conv.winograd_wrw_tf32x3 import ConvWinogradWrwF2x3Tf32x3
from miopy.solvers.lrn import LrnChannelsChunk, LrnCrossRing, LrnCrossRingChunk, LrnCrossSlide, LrnDirect
from miopy.solvers.norm.solvers import BNORM_SOLVERS, GROUPNORM_SOLVERS, LAYERNORM_SOLVERS
from miopy.solvers.pool import (
    PoolingBwdCpu,
    PoolingBwdDirect,
    PoolingBwdScatterCpu,
    PoolingBwdScatterRowsCpu,
    PoolingBwdTilesCpu,
    PoolingBwdVec,
    PoolingFwdDirect,
    PoolingFwdVec,
)
from miopy.solvers.reduce import (
    ReduceColumns,
    ReduceColumnsVec,
    ReduceGeneric,
    ReduceRows,
    ReduceRowsVec,
    ReduceRowsWarp,
    ReduceRowsWarpBatch,
    ReduceRowsWarpL2,
)
from miopy.solvers.softmax import SoftmaxCols, SoftmaxRows, SoftmaxRowsWarp, SoftmaxStrided
from miopy.solvers.tensorop import TensorOpPacked, TensorOpPackedVec, TensorOpStrided

if TYPE_CHECKING:
    from miopy.problem.base import Problem

SOLVERS: dict[str, list[Solver]] = {
    "conv": [
        GemmLtFwd1x1(),
        GemmLtBwd1x1(),
        GemmLtWrw1x1(),
        GemmLtWrw1x1Nchw(),
        GemmFwd1x1_0_1(),
        Conv1x1StreamFwd(),
        ConvWgmmaFwdNhwc(),
        ConvIgemmFwdNhwc(),
        ConvIgemmPadC4FwdNhwc(),
        ConvIgemmPadFwdNhwc(),
        ConvIgemmNchwFwd(),
        ConvIgemmFwdTf32x3(),
        ConvIgemmPadFwdTf32x3(),
        ConvWinogradFwdF2x3Tf32x3(),
        ConvWinogradFwdF4x3Tf32x3(),
        ConvIgemmFfmaFwd(),
        GemmFwdRest(),
        GemmBwd1x1_stride1(),
        Conv1x1StreamBwd(),
        ConvWgmmaBwdNhwc(),
        ConvIgemmBwdNhwc(),
        ConvIgemmPadBwdNhwc(),
        ConvIgemmNchwBwd(),
        ConvIgemmBwdTf32x3(),
        ConvIgemmPadBwdTf32x3(),
        ConvIgemmBwdPhaseTf32x3(),
        ConvWinogradBwdF2x3Tf32x3(),
        ConvWinogradBwdF4x3Tf32x3(),
        ConvIgemmFfmaBwd(),
        GemmBwdRest(),
        GemmWrw1x1_stride1(),
        Conv1x1StreamWrw(),
        ConvWgmmaWrwNhwc(),
        ConvIgemmWrwNhwc(),
        ConvIgemmPadWrwNhwc(),
        ConvIgemmNchwWrw(),
        ConvWinogradWrwF2x3Tf32x3(),
        ConvIgemmWrwTf32x3(),
        ConvIgemmPadWrwTf32x3(),
        ConvIgemmFfmaWrw(),
        GemmWrwUniversal(),
        ConvDirectTiledFwd(),
        ConvDirectNaiveFwd(),
        ConvDirectNaiveBwd(),
        ConvDirectNaiveWrw(),
    ],
    "activ": [ActivFwdPacked(), ActivFwdStrided(), ActivBwdPacked(), ActivBwdStrided()],
    "pool": [
        PoolingFwdVec(),
        PoolingFwdDirect(),
        PoolingBwdTilesCpu(),
        PoolingBwdScatterCpu(),
        PoolingBwdScatterRowsCpu(),
        PoolingBwdCpu(),
        PoolingBwdVec(),
        PoolingBwdDirect(),
    ],
    "bnorm": BNORM_SOLVERS,
    "tensorop": [TensorOpPacked(), TensorOpPackedVec(), TensorOpStrided()],
    "softmax": [SoftmaxRowsWarp(), SoftmaxRows(), SoftmaxCols(), SoftmaxStrided()],
    "reduce": [
        ReduceRowsWarp(),
        ReduceRowsWarpBatch(),
        ReduceRowsWarpL2(),
        ReduceRowsVec(),
        ReduceRows(),
        ReduceColumnsVec(),
        ReduceColumns(),
        ReduceGeneric(),
    ],
    "lrn": [LrnChannelsChunk(), LrnCrossRingChunk(), LrnCrossRing(), LrnCrossSlide(), LrnDirect()],
    "layernorm": LAYERNORM_SOLVERS,
    "groupnorm": GROUPNORM_SOLVERS,
}
CONV_SOLVERS = SOLVERS["conv"]


def solvers_for(problem: Problem | str) -> list[Solver]:
    """The ordered solvers of a problem's primitive (or of a primitive by name)."""
    primitive = problem if isinstance(problem, str) else problem.primitive
    return SOLVERS.get(primitive, [])


def all_solvers() -> list[Solver]:
    return [solver for solvers in SOLVERS.values() for solver in solvers]


# primitive (None: all) -> (the solvers' identities, {name or id as text: first such solver})
_INDEX: dict[str | None, tuple[tuple[int, ...], dict[str, Solver]]] = {}


def by_name(name: str | int, primitive: str | None = None) -> Solver | None:
    """A solver by its name or its id (as text or int), among ``primitive``'s solvers or all
    (ids are unique within a primitive; names everywhere): the first in registry order whose
    name or id matches, looked up in an index kept while the registry is unchanged."""
    pool = all_solvers() if primitive is None else solvers_for(primitive)
    ids = tuple(map(id, pool))
    kept = _INDEX.get(primitive)
    if kept is None or kept[0] != ids:
        index: dict[str, Solver] = {}
        for solver in pool:
            index.setdefault(solver.name, solver)
            index.setdefault(str(solver.id), solver)
        kept = _INDEX[primitive] = (ids, index)
    return kept[1].get(str(name))


_conv_scaled.use_registry(by_name)  # scaled.py finds a solution's solver (its fused epilogue) here

__all__ = ["CONV_SOLVERS", "SOLVERS", "Solver", "TunableSolver", "all_solvers", "by_name", "solvers_for"]
