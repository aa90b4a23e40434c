"""Max pooling backward for CPU OpenCL devices (PoCL) over rows-contiguous tensors (NCHW, NCDHW
with 2-D windows) by scatter into a private band of dx (pool_bwd_scatter_rows_cpu,
kernels/common/pool_scatter_cpu.h): a work item per (n, c, d, band of dx rows) zeroes the rows
its covering outputs' windows span, decodes 8 indices at a time into their targets in vector
operations and adds each output's dy once (a scalar add), then stores the band's rows. The
gathering PoolingBwdCpu tests every window tap of every dx element instead (2.25 compare-selects
an element for a 3x3/2 window). Average pooling keeps PoolingBwdCpu."""

from __future__ import annotations

import numpy as np

from miopy.problem.pooling import IndexMode, PoolingProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.launch import cpu_grid
from miopy.solvers.pool.cpu_bwd import cpu_backward_refusal
from miopy.solvers.pool.direct import shape_args

BUF = 8192  # PSR_BUF: floats of a work item's private band
BAND_MOST = 64  # dx rows of a band at most
IMAGE_INDEX_LIMIT = (1 << 31) - 1  # image indices are compared as int


def _round8(v: int) -> int:
    return -(-v // 8) * 8


def _geometry(p: PoolingProblem) -> tuple[int, ...]:
    """(kd, kh, kw, sd, sh, sw, pd, ph, pw) with a 2-D pooling's depth as 1, 1, 0."""
    two = p.spatial_dims == 2
    window = (1, *p.desc.window) if two else tuple(p.desc.window)
    strides = (1, *p.desc.strides) if two else tuple(p.desc.strides)
    pads = (0, *p.pads) if two else tuple(p.pads)
    return (*window, *strides, *pads)


def buffer_width(p: PoolingProblem) -> int:
    """BW: floats of a buffer row, every window's columns (from -pw) and the stored row's."""
    _, _, kw, _, _, sw, _, _, pw = _geometry(p)
    return _round8(max((p.y.lens[-1] - 1) * sw + kw, pw + _round8(p.x.lens[-1])))


def _buffer_rows(p: PoolingProblem, rh: int) -> int:
    """The most buffer rows a band of ``rh`` dx rows needs (the kernel's ``rows``)."""
    _, kh, _, _, sh, _, _, ph, _ = _geometry(p)
    hi, ho = p.x.lens[-2], p.y.lens[-2]
    most = 0
    for h0 in range(0, hi, rh):
        h1 = min(h0 + rh, hi)
        lo = h0 + ph - kh + 1
        oh0 = 0 if lo <= 0 else -(-lo // sh)
        oh1 = min((h1 - 1 + ph) // sh + 1, ho)
        if oh1 > oh0:
            most = max(most, (oh1 - 1 - oh0) * sh + kh)
    return most


def band_rows(p: PoolingProblem) -> int:
    """dx rows of a band: the most (up to BAND_MOST) whose buffer fits BUF; 0 when none fits."""
    bw = buffer_width(p)
    for rh in range(min(p.x.lens[-2], BAND_MOST), 0, -1):
        if _buffer_rows(p, rh) * bw <= BUF:
            return rh
    return 0


class PoolingBwdScatterRowsCpu(Solver):
    primitive = "pool"
    name = "PoolingBwdScatterRowsCpu"
    id = 316
    algorithm = "direct"
    dynamic = True

    def is_applicable(self, ctx, problem) -> str | None:
        why = cpu_backward_refusal(ctx, problem)
        if why is not None:
            return why
        p = problem
        if not p.uses_index:
            return "not max pooling (average keeps PoolingBwdCpu)"
        if any(t.strides[-1] != 1 for t in (p.x, p.y, p.index)):
            return "dx, dy or the index not W-contiguous"
        kd, _, kw, _, _, _, pd, _, _ = _geometry(p)
        if kd != 1 or pd != 0:
            return f"window depth {kd} with depth padding {pd} (2-D windows only)"
        _, _, di, hi, wi = p.x.lens5()
        if p.desc.index_mode is IndexMode.IMAGE:
            if kw > wi:
                return f"image index with a window wider ({kw}) than the rows ({wi})"
            if di * hi * wi > IMAGE_INDEX_LIMIT:
                return f"image indices up to {di * hi * wi} (compared as 32-bit int)"
        if band_rows(p) == 0:
            return f"rows too long for the private buffer ({BUF} floats)"
        return None

    def get_program(self, ctx, problem: PoolingProblem, config=None) -> Program:
        p = problem
        rh = band_rows(p)
        n, c, d, h, _ = p.x.lens5()
        work = n * c * d * -(-h // rh)
        defines = {
            "MIOPY_DTYPE": p.dtype.code,
            "POOL_MODE": p.desc.mode.code,
            "POOL_INDEX_TYPE": p.desc.index_type.code,
            "POOL_INDEX_IMAGE": int(p.desc.index_mode is IndexMode.IMAGE),
        }
        spec = KernelSpec("pool_scatter", "pool_bwd_scatter_rows_cpu", defines, *cpu_grid(work))
        args = (Tensor("dx"), Tensor("dy"), Tensor("index"), *shape_args(p))
        return Program((Launch(spec, (*args, np.int32(rh), np.int32(buffer_width(p)))),))
