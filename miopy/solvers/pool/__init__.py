"""Pooling solvers, forward and backward: channels-last vectorised, and direct (any layout)."""

from miopy.solvers.pool.direct import PoolingBwdDirect, PoolingBwdVec, PoolingFwdDirect, PoolingFwdVec

__all__ = ["PoolingBwdDirect", "PoolingBwdVec", "PoolingFwdDirect", "PoolingFwdVec"]
