"""The ordered solver registry: order is the fallback ranking when nothing better is known.
A new solver is one module, its kernel, and one line here."""

from __future__ import annotations

from miopy.solvers.base import Solver, TunableSolver
from miopy.solvers.conv.direct_tiled import ConvDirectTiledFwd
from miopy.solvers.conv.gemm import (
    GemmBwd1x1_stride1,
    GemmBwdRest,
    GemmFwd1x1_0_1,
    GemmFwdRest,
    GemmWrw1x1_stride1,
    GemmWrwUniversal,
)
from miopy.solvers.conv.implicit_gemm import ConvIgemmFwdNhwc
from miopy.solvers.conv.naive import ConvDirectNaiveBwd, ConvDirectNaiveFwd, ConvDirectNaiveWrw

CONV_SOLVERS: list[Solver] = [
    GemmFwd1x1_0_1(),
    ConvIgemmFwdNhwc(),
    GemmFwdRest(),
    GemmBwd1x1_stride1(),
    GemmBwdRest(),
    GemmWrw1x1_stride1(),
    GemmWrwUniversal(),
    ConvDirectTiledFwd(),
    ConvDirectNaiveFwd(),
    ConvDirectNaiveBwd(),
    ConvDirectNaiveWrw(),
]


def by_name(name: str) -> Solver | None:
    """A solver by its name or its id (as text or int)."""
    for solver in CONV_SOLVERS:
        if solver.name == str(name) or str(solver.id) == str(name):
            return solver
    return None


__all__ = ["CONV_SOLVERS", "Solver", "TunableSolver", "by_name"]
