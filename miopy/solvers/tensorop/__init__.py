"""Tensor operation solvers: packed (vectorised, b broadcast along one run of dimensions) and
strided (any lens and strides); on CUDA, packed with several vectors in flight a work item."""

from miopy.solvers.tensorop.elementwise import TensorOpPacked, TensorOpStrided
from miopy.solvers.tensorop.vectors import TensorOpPackedVec

__all__ = ["TensorOpPacked", "TensorOpPackedVec", "TensorOpStrided"]
