"""Tensor operation solvers: packed (vectorised, b broadcast along one run of dimensions) and
strided (any lens and strides)."""

from miopy.solvers.tensorop.elementwise import TensorOpPacked, TensorOpStrided

__all__ = ["TensorOpPacked", "TensorOpStrided"]
