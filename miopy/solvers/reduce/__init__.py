"""Reduction solvers: rows (the reduced elements of each output are one contiguous run: a team of
work items per output), columns (the reduced dimensions outermost: a split pass and a merge) and
generic (any dims and strides: one work item per output)."""

from miopy.solvers.reduce.direct import (
    ReduceColumns,
    ReduceColumnsVec,
    ReduceGeneric,
    ReduceRows,
    ReduceRowsVec,
    ReduceRowsWarp,
    ReduceRowsWarpBatch,
    ReduceRowsWarpL2,
)

__all__ = [
    "ReduceColumns",
    "ReduceColumnsVec",
    "ReduceGeneric",
    "ReduceRows",
    "ReduceRowsVec",
    "ReduceRowsWarp",
    "ReduceRowsWarpBatch",
    "ReduceRowsWarpL2",
]
