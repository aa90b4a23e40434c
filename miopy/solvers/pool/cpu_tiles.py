"""Backward pooling for CPU OpenCL devices (PoCL) when windows do not overlap (each window no
longer than its stride along every axis: 2x2/2 and the like) (pool_bwd_tiles_{rows,channels}_cpu,
kernels/common/pool_tile_cpu.h). Every dx element then lies in at most one window: it is that
output's dy (average: divided by the window's count; max: where the index names it) or 0,
computed straight from dy and stored once, with no accumulation buffer and no zeroing pass. Rows
(NCHW, NCDHW: dx, dy and the index W-contiguous) or channels contiguous (NHWC, NDHWC)."""

from __future__ import annotations

from miopy.problem.pooling import IndexMode, PoolingProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.launch import cpu_grid
from miopy.solvers.pool.cpu_bwd import cpu_backward_refusal
from miopy.solvers.pool.direct import shape_args

ROW_MOST = 1024  # PTL_ROW: dx columns and outputs of a row at most (rows kernel)
ROWS_PER_ITEM = 8  # PTL_RH
IMAGE_INDEX_LIMIT = (1 << 31) - 1  # image indices are compared as int


def _layout(p: PoolingProblem) -> str | None:
    """ "channels" or "rows" (which kernel), None when neither applies."""
    tensors = [p.x, p.y] + ([p.index] if p.uses_index else [])
    if all(t.strides[1] == 1 for t in tensors) and p.x.lens[1] > 1:
        return "channels"
    if all(t.strides[-1] == 1 for t in tensors) and max(p.x.lens[-1], p.y.lens[-1]) <= ROW_MOST:
        return "rows"
    return None


class PoolingBwdTilesCpu(Solver):
    primitive = "pool"
    name = "PoolingBwdTilesCpu"
    id = 317
    algorithm = "direct"
    dynamic = True

    def is_applicable(self, ctx, problem) -> str | None:
        why = cpu_backward_refusal(ctx, problem)
        if why is not None:
            return why
        p = problem
        if any(k > s for k, s in zip(p.desc.window, p.desc.strides)):
            return f"windows {p.desc.window} overlap (longer than the strides {p.desc.strides})"
        if _layout(p) is None:
            return f"neither channels nor rows contiguous (or rows over {ROW_MOST})"
        if p.uses_index and p.desc.index_mode is IndexMode.IMAGE:
            _, _, di, hi, wi = p.x.lens5()
            if di * hi * wi > IMAGE_INDEX_LIMIT:
                return f"image indices up to {di * hi * wi} (compared as 32-bit int)"
        return None

    def get_program(self, ctx, problem: PoolingProblem, config=None) -> Program:
        p = problem
        kind = _layout(p)
        n, c, d, h, _ = p.x.lens5()
        work = n * d * h if kind == "channels" else n * c * d * -(-h // ROWS_PER_ITEM)
        defines = {"MIOPY_DTYPE": p.dtype.code, "POOL_MODE": p.desc.mode.code}
        if p.uses_index:
            defines.update(
                POOL_INDEX_TYPE=p.desc.index_type.code,
                POOL_INDEX_IMAGE=int(p.desc.index_mode is IndexMode.IMAGE),
            )
        spec = KernelSpec("pool_tile", f"pool_bwd_tiles_{kind}_cpu", defines, *cpu_grid(work))
        index = Tensor("index" if p.uses_index else "dy")
        return Program((Launch(spec, (Tensor("dx"), Tensor("dy"), index, *shape_args(p))),))
