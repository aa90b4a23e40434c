"""Reduction solvers: rows (the reduced elements of each output are one contiguous run: a team of
work items per output) and generic (any dims and strides: one work item per output)."""

from miopy.solvers.reduce.direct import ReduceGeneric, ReduceRows

__all__ = ["ReduceGeneric", "ReduceRows"]
