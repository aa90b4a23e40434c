"""Pooling solvers, forward and backward: channels-last vectorised, direct (any layout), and the
backward for CPU OpenCL devices."""

from miopy.solvers.pool.cpu_bwd import PoolingBwdCpu
from miopy.solvers.pool.cpu_scatter import PoolingBwdScatterCpu
from miopy.solvers.pool.cpu_scatter_rows import PoolingBwdScatterRowsCpu
from miopy.solvers.pool.cpu_tiles import PoolingBwdTilesCpu
from miopy.solvers.pool.direct import PoolingBwdDirect, PoolingBwdVec, PoolingFwdDirect, PoolingFwdVec

__all__ = [
    "PoolingBwdCpu",
    "PoolingBwdDirect",
    "PoolingBwdScatterCpu",
    "PoolingBwdScatterRowsCpu",
    "PoolingBwdTilesCpu",
    "PoolingBwdVec",
    "PoolingFwdDirect",
    "PoolingFwdVec",
]
