"""Variants of the CUDA solvers of softmax, tensor ops, reductions and LRN (their class knobs:
vectors in flight, load / store cache hints, team shapes) timed next to every applicable solver
and PyTorch through misc_prims.py's cases; each case's every solver and variant is printed after
misc_prims.py's own table (the best one is what find would pick).

    python benchmarks/prims_sweep.py [misc_prims.py's options, e.g. --only reduce --dtypes fp16]
"""

from __future__ import annotations

import sys

import misc_prims

from miopy.problem.lrn import LRNProblem
from miopy.problem.passes import Pass
from miopy.problem.reduce import ReduceProblem
from miopy.problem.tensorop import TensorOpProblem
from miopy.solvers.lrn.direct import LrnChannelsChunk, LrnCrossRingChunk
from miopy.solvers.reduce.direct import (
    ReduceColumnsVec,
    ReduceRowsWarp,
    ReduceRowsWarpBatch,
    ReduceRowsWarpL2,
)
from miopy.solvers.tensorop.vectors import TensorOpPackedVec

F, B = Pass.FORWARD, Pass.BACKWARD
# (base solver, {class attribute: value}) of each variant
VARIANTS = {
    TensorOpProblem: [
        (TensorOpPackedVec, {"AU": 4}),
        (TensorOpPackedVec, {"AU": 2, "LD_HINT": 1}),
        (TensorOpPackedVec, {"AU": 2, "ST_HINT": 1}),
        (TensorOpPackedVec, {"AU": 4, "LD_HINT": 1, "ST_HINT": 1}),
        (TensorOpPackedVec, {"AU": 1}),
    ],
    ReduceProblem: [
        (ReduceColumnsVec, {"ITEMS_PER_CU": 256}),
        (ReduceColumnsVec, {"ITEMS_PER_CU": 1024}),
        (ReduceRowsWarpBatch, {"LD_HINT": 1}),
        (ReduceRowsWarpBatch, {"LD_HINT": 0}),
        (ReduceRowsWarpBatch, {"MOST_LOADS": 8}),
        (ReduceRowsWarp, {"LOADS": 16, "LD_HINT": 2}),
        (ReduceRowsWarpL2, {"LOADS": 16}),
        (ReduceRowsWarpL2, {"LOADS": 4}),
    ],
    LRNProblem: [
        (LrnChannelsChunk, {"VECTORS": {F: 2, B: 1}}),
        (LrnChannelsChunk, {"VECTORS": {F: 4, B: 4}}),
        (LrnCrossRingChunk, {"RING_CHUNK": {F: 4, B: 2}}),
        (LrnCrossRingChunk, {"RING_CHUNK": {F: 16, B: 8}}),
    ],
}


def _variant(base: type, attrs: dict):
    def text(v) -> str:
        return "-".join(map(str, v.values())) if isinstance(v, dict) else str(v)

    tag = "_".join(f"{k}{text(v)}" for k, v in attrs.items())
    name = f"X{base.name}_{tag}"
    return type(name, (base,), {"name": name, **attrs})()


_solvers_for = misc_prims.solvers_for


def solvers_for(problem):
    extra = [_variant(b, a) for kind, vs in VARIANTS.items() if isinstance(problem, kind) for b, a in vs]
    return [*_solvers_for(problem), *extra]


misc_prims.solvers_for = solvers_for
_measure = misc_prims.measure


def measure(*args, **kwargs) -> dict:
    row = _measure(*args, **kwargs)
    for r in sorted(row["all"], key=lambda r: r["us"]):
        ok = "" if r["err"] <= 1.0 else f"  WRONG (err {r['err']:.2g})"
        print(f"    {row['dtype']} {row['case']:>40}: {r['solver']:50s} {r['us']:8.2f} us{ok}", flush=True)
    print(f"    {row['dtype']} {row['case']:>40}: {'torch':50s} {row['torch_us']:8.2f} us", flush=True)
    return row


misc_prims.measure = measure

if __name__ == "__main__":
    sys.exit(misc_prims.main())
