"""Backward pooling for CPU OpenCL devices (PoCL) over channels-contiguous tensors (NHWC, NDHWC) by
scatter into private bands of dx (kernels/common/pool_scatter_cpu.h): a work item per (n, d, band
of dx rows, 8 channels) zeroes its band in private memory, adds into it the dy of every output
whose window touches the band (max: the lanes masked by the index; average: divided by the
window's count) and stores the band. Every output and its index are read and converted once a
band, where the gathers of PoolingBwdCpu and PoolingBwdVec read them once for every dx cell they
cover; no atomics (a work item writes only its band). Rows-contiguous tensors (NCHW) keep
PoolingBwdCpu: a scalar scatter there measured twice as slow as its vector gather."""

from __future__ import annotations

import numpy as np

from miopy.problem.pooling import IndexMode, PoolingProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.launch import cpu_grid
from miopy.solvers.pool.cpu_bwd import cpu_backward_refusal
from miopy.solvers.pool.direct import shape_args

BUF = 4096  # PSC_BUF: floats of a work item's private band
BAND_MOST = 64  # dx rows of a band at most (the outputs covering two bands are read by both)
IMAGE_INDEX_LIMIT = (1 << 31) - 1  # image indices are compared as int


def _fits(p: PoolingProblem) -> bool:
    """dx and dy channels contiguous, one row of the band (8 floats a position) in the buffer."""
    return all(t.strides[1] == 1 for t in (p.x, p.y)) and p.x.lens[1] > 1 and 8 * p.x.lens[-1] <= BUF


def band_rows(p: PoolingProblem) -> int:
    """dx rows of a work item's band: as many as fit the private buffer, at most BAND_MOST."""
    hi, wi = p.x.lens[-2], p.x.lens[-1]
    return max(1, min(hi, BUF // (8 * wi), BAND_MOST))


class PoolingBwdScatterCpu(Solver):
    primitive = "pool"
    name = "PoolingBwdScatterCpu"
    id = 315
    algorithm = "direct"
    dynamic = True

    def is_applicable(self, ctx, problem) -> str | None:
        why = cpu_backward_refusal(ctx, problem)
        if why is not None:
            return why
        if not _fits(problem):
            return "dx and dy not channels-contiguous (or rows too long for the band)"
        _, _, di, hi, wi = problem.x.lens5()
        if (
            problem.uses_index
            and problem.desc.index_mode is IndexMode.IMAGE
            and di * hi * wi > IMAGE_INDEX_LIMIT
        ):
            return f"image indices up to {di * hi * wi} (compared as 32-bit int)"
        return None

    def get_program(self, ctx, problem: PoolingProblem, config=None) -> Program:
        p = problem
        rh = band_rows(p)
        n, c, d, h, _ = p.x.lens5()
        work = n * d * -(-h // rh) * -(-c // 8)
        defines = {"MIOPY_DTYPE": p.dtype.code, "POOL_MODE": p.desc.mode.code}
        if p.uses_index:
            defines.update(
                POOL_INDEX_TYPE=p.desc.index_type.code,
                POOL_INDEX_IMAGE=int(p.desc.index_mode is IndexMode.IMAGE),
            )
        spec = KernelSpec("pool_scatter", "pool_bwd_scatter_channels_cpu", defines, *cpu_grid(work))
        index = Tensor("index" if p.uses_index else "dy")
        args = (Tensor("dx"), Tensor("dy"), index, *shape_args(p), np.int32(rh))
        return Program((Launch(spec, args),))
