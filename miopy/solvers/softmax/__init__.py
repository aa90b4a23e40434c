"""Softmax solvers, forward and backward: rows (the group is one contiguous row: one read and one
write per element), columns (channel mode in NCHW) and strided (any strides)."""

from miopy.solvers.softmax.direct import SoftmaxCols, SoftmaxRows, SoftmaxRowsWarp, SoftmaxStrided

__all__ = ["SoftmaxCols", "SoftmaxRows", "SoftmaxRowsWarp", "SoftmaxStrided"]
