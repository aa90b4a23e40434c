"""LRN kernels (kernels/common/lrn.h) as solvers."""

from __future__ import annotations

import numpy as np

from miopy.problem.lrn import LRNMode, LRNProblem
from miopy.problem.passes import Pass
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.launch import MAX_GROUPS, cpu_grid, cpu_kernels, grid_1d

GROUP = 256  # LRNC_GROUP


def _shape(problem: LRNProblem) -> list:
    return [np.int32(v) for v in problem.x.lens]


def _strides(problem: LRNProblem, *roles: str) -> list:
    t = problem.tensors()
    return [np.int64(s) for r in roles for s in t[r].strides]


def _spec(problem: LRNProblem, kernel: str, work: int) -> KernelSpec:
    global_size, local_size = grid_1d(work)
    return KernelSpec("lrn", kernel, {"MIOPY_DTYPE": problem.dtype.code}, global_size, local_size)


def _fwd_buffers(problem: LRNProblem) -> tuple:
    return (Tensor("x"), Tensor("y"), Tensor("scale" if problem.save_scale else "y"))


def _fwd_tail(problem: LRNProblem) -> tuple:
    """The forward kernels' last arguments: alpha, beta, k and whether to save the scale."""
    p = problem
    return (np.float32(p.alpha), np.float32(p.beta), np.float32(p.k), np.int32(p.save_scale))


BWD_ROLES = ("x", "y", "dy", "scale", "dx")  # the backward kernels' tensors, in argument order


PLANE_RUN = 64  # pixels of a plane per work item (lrn_fwd_planes_cpu)
BWD_PLANE_RUN = 32  # pixels of a plane per work item (lrn_bwd_planes_cpu, all channels)
TERMS_MOST = 16  # LRN_TERMS: the widest window lrn_bwd_planes_cpu keeps the terms of


def cpu_program(ctx, problem: LRNProblem) -> Program | None:
    """The kernels for CPU OpenCL devices when every tensor of the call has the same strides:
    cross-channel (lrn_{fwd,bwd}_{planes,channels}_cpu) with each image's planes contiguous (NCHW,
    H W >= 8) or its channels contiguous (NHWC), within-channel (_within_program); else None."""
    p = problem
    if not cpu_kernels(ctx) or p.dtype.itemsize == 8:
        return None
    t = p.tensors()
    strides = {t[r].strides for r in t}
    if len(strides) != 1:
        return None
    (sn, sc, sh, sw) = strides.pop()
    n, c, h, w = p.x.lens
    if p.mode is not LRNMode.CROSS_CHANNEL:
        return _within_program(p, (sn, sc, sh, sw))
    forward = p.direction is Pass.FORWARD
    run = min(PLANE_RUN if forward else BWD_PLANE_RUN, (h * w) // 8 * 8)
    if sw == 1 and sh == w and h * w >= 8 and (forward or p.n <= TERMS_MOST):
        # forward: a work item per (run, channel); backward: per run, walking the channels
        layout, work, inner = "planes", n * -(-(h * w) // run) * (c if forward else 1), sc
    elif sc == 1 and (h == 1 or sh == w * sw):
        layout, work, inner = "channels", n * h * w, sw
    else:
        return None
    kernel = f"lrn_{'fwd' if forward else 'bwd'}_{layout}_cpu"
    spec = KernelSpec("lrn", kernel, {"MIOPY_DTYPE": p.dtype.code}, *cpu_grid(work))
    shape = (np.int32(n), np.int32(c), np.int64(h * w), np.int64(sn), np.int64(inner), np.int32(p.n))
    if forward:
        args = (*_fwd_buffers(p), *shape, *_fwd_tail(p))
    else:
        args = (*(Tensor(r) for r in BWD_ROLES), *shape, np.float32(p.alpha), np.float32(p.beta))
    if layout == "planes":
        args = (*args, np.int32(run))
    return Program((Launch(spec, args),))


TB_FLOATS = 1056  # LRN_TB: the private zero-padded row of lrn_*_within_*_cpu
RING_FLOATS = 4096  # LRN_RING / LRN_RING8 * 8: the ring of `size` rows of window sums
BAND_ROWS = 64  # output rows of a work item of lrn_*_within_*_cpu (its window rows summed once)


def _within_program(p: LRNProblem, strides: tuple[int, ...]) -> Program | None:
    """lrn_{fwd,bwd}_within_{rows,channels}_cpu: rows contiguous (NCHW-like) or channels
    contiguous (NHWC-like), a row and `size` rows of window sums fitting the private buffers; else
    None."""
    (sn, sc, sh, sw) = strides
    n, c, h, w = p.x.lens
    band = min(h, BAND_ROWS)
    bands = -(-h // band)
    wr = -(-w // 8) * 8
    if sw == 1 and (h == 1 or sh == w) and wr + p.n - 1 <= TB_FLOATS and p.n * wr <= RING_FLOATS:
        layout, work, tail = "rows", n * c * bands, (np.int64(sn), np.int64(sc))
    elif sc == 1 and 8 * (w + p.n - 1) <= TB_FLOATS and 8 * p.n * w <= RING_FLOATS:
        layout, work = "channels", n * bands * -(-c // 8)
        tail = (np.int64(sn), np.int64(sh), np.int64(sw))
    else:
        return None
    forward = p.direction is Pass.FORWARD
    kernel = f"lrn_{'fwd' if forward else 'bwd'}_within_{layout}_cpu"
    spec = KernelSpec("lrn", kernel, {"MIOPY_DTYPE": p.dtype.code}, *cpu_grid(work))
    shape = (*_shape(p), *tail, np.int32(p.n))
    if forward:
        return Program((Launch(spec, (*_fwd_buffers(p), *shape, *_fwd_tail(p), np.int32(band))),))
    args = (*(Tensor(r) for r in BWD_ROLES), *shape, np.float32(p.alpha), np.float32(p.beta), np.int32(band))
    return Program((Launch(spec, args),))


class _Lrn(Solver):
    primitive = "lrn"
    algorithm = "direct"
    dynamic = True


class LrnDirect(_Lrn):
    name = "LrnDirect"
    id = 700

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, LRNProblem):
            return "not an LRN"
        return None

    def get_program(self, ctx, problem: LRNProblem, config=None) -> Program:
        p = problem
        if p.direction is not Pass.FORWARD or p.mode is not LRNMode.CROSS_CHANNEL:
            # (cross-channel forward: LrnCrossSlide has the CPU kernels)
            program = cpu_program(ctx, p)
            if program is not None:
                return program
        cross = np.int32(p.mode is LRNMode.CROSS_CHANNEL)
        spec_kernel = "lrn_fwd_direct" if p.direction is Pass.FORWARD else "lrn_bwd_direct"
        spec = _spec(p, spec_kernel, p.x.element_count)
        if p.direction is Pass.FORWARD:
            args = (
                *_fwd_buffers(p),
                *_shape(p),
                *_strides(p, "x", "y"),
                cross,
                np.int32(p.n),
                *_fwd_tail(p),
            )
        else:
            args = (
                *(Tensor(r) for r in BWD_ROLES),
                *_shape(p),
                *_strides(p, *BWD_ROLES),
                cross,
                np.int32(p.n),
                np.float32(p.alpha),
                np.float32(p.beta),
            )
        return Program((Launch(spec, args),))


class LrnCrossSlide(_Lrn):
    name = "LrnCrossSlide"
    id = 701

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, LRNProblem):
            return "not an LRN"
        if problem.direction is not Pass.FORWARD:
            return "backward"
        if problem.mode is not LRNMode.CROSS_CHANNEL:
            return "within-channel"
        return None

    def get_program(self, ctx, problem: LRNProblem, config=None) -> Program:
        p = problem
        program = cpu_program(ctx, p)
        if program is not None:
            return program
        n, _, h, w = p.x.lens
        spec = _spec(p, "lrn_fwd_cross_slide", n * h * w)
        args = (
            *_fwd_buffers(p),
            *_shape(p),
            *_strides(p, "x", "y"),
            np.int32(p.n),
            *_fwd_tail(p),
        )
        return Program((Launch(spec, args),))


RING_MOST = 16  # window sizes the ring kernels keep in registers


class LrnCrossRing(_Lrn):
    """Cross-channel LRN, forward and backward: one work item per pixel walks the channels with
    the window's terms in registers (the window size compiled in), every element read once."""

    name = "LrnCrossRing"
    id = 702

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, LRNProblem):
            return "not an LRN"
        if problem.mode is not LRNMode.CROSS_CHANNEL:
            return "within-channel"
        if problem.n > RING_MOST:
            return f"window {problem.n} > {RING_MOST}"
        return None

    KERNELS = {Pass.FORWARD: "lrn_fwd_cross_ring", Pass.BACKWARD: "lrn_bwd_cross_ring"}

    def _defines(self, problem: LRNProblem) -> dict:
        return {"MIOPY_DTYPE": problem.dtype.code, "LRN_SIZE": int(problem.n)}

    def get_program(self, ctx, problem: LRNProblem, config=None) -> Program:
        p = problem
        n, _, h, w = p.x.lens
        forward = p.direction is Pass.FORWARD
        global_size, local_size = grid_1d(n * h * w)
        spec = KernelSpec("lrn", self.KERNELS[p.direction], self._defines(p), global_size, local_size)
        if forward:
            args = (*_fwd_buffers(p), *_shape(p), *_strides(p, "x", "y"), *_fwd_tail(p))
        else:
            args = (*(Tensor(r) for r in BWD_ROLES), *_shape(p), *_strides(p, *BWD_ROLES))
            args += (np.float32(p.alpha), np.float32(p.beta))
        return Program((Launch(spec, args),))


class LrnCrossRingChunk(LrnCrossRing):
    """LrnCrossRing on CUDA with the channels walked in chunks whose loads are all in flight
    before any is used (kernels/common/lrn_ring_chunk.h: RING_CHUNK[direction] channels a chunk);
    the ring kernels waited on one load a channel. H200, fp32 NCHW 64x96x55x55
    (benchmarks/prims_sweep.py): backward 127.4 us against LrnCrossRing's 251.8 (128.4 with
    chunks of 2, 164.0 with 8); forward 108.2 against 109.2 (107.3 with 16, 120.4 with 4)."""

    name = "LrnCrossRingChunk"
    id = 704
    RING_CHUNK = {Pass.FORWARD: 8, Pass.BACKWARD: 4}  # LRNR_U

    def is_applicable(self, ctx, problem) -> str | None:
        if getattr(ctx, "backend_name", None) != "cuda":
            return "backend is not CUDA (lrn_ring_chunk.h is CUDA code)"
        return super().is_applicable(ctx, problem)

    KERNELS = {Pass.FORWARD: "lrn_fwd_ring_chunk", Pass.BACKWARD: "lrn_bwd_ring_chunk"}

    def _defines(self, problem: LRNProblem) -> dict:
        return {**super()._defines(problem), "LRNR_U": self.RING_CHUNK[problem.direction]}


CHUNK_REACH = 4  # LRNC_REACH: channels a window of LrnChannelsChunk reaches each side
CHUNK_SHARED = 48 * 1024 - 64  # static shared memory lrn_*_chunk may take for its window terms


class LrnChannelsChunk(_Lrn):
    """Cross-channel LRN, forward and backward, on GPU devices when every tensor is packed with the
    channels innermost (NHWC): 16-byte vectors along the flat run, the window terms shared through
    local memory (kernels/common/lrn_chunk.h); every element read once, coalesced."""

    name = "LrnChannelsChunk"
    id = 703
    # 16-byte vectors a work item on CUDA (LRNC_U), all loaded before the first is used. H200, fp16
    # NHWC 64x96x55x55 (benchmarks/prims_sweep.py): backward 177.0 us with 1, 119.7 with 2, 196.9
    # with 4; forward 74.3 with 1, 76.6 with 2, 94.5 with 4
    VECTORS = {Pass.FORWARD: 1, Pass.BACKWARD: 2}

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, LRNProblem):
            return "not an LRN"
        if cpu_kernels(ctx):
            return "backend on a CPU device (LrnDirect has its kernels)"
        if problem.mode is not LRNMode.CROSS_CHANNEL:
            return "within-channel"
        if problem.dtype.itemsize == 8:
            return "fp64 data"
        n, c, h, w = problem.x.lens
        packed = (h * w * c, 1, w * c, c)
        for role, desc in problem.tensors().items():
            if tuple(desc.strides) != packed and n * h * w > 1:
                return f"{role} is not packed with the channels innermost (NHWC)"
        vec = 16 // problem.dtype.itemsize
        if problem.x.element_count % vec:
            return f"{problem.x.element_count} elements are not a multiple of {vec}"
        if (problem.n - 1) - (problem.n - 1) // 2 > CHUNK_REACH:
            return f"window {problem.n} reaches past {CHUNK_REACH} channels"
        return None

    def get_program(self, ctx, problem: LRNProblem, config=None) -> Program:
        p = problem
        total = p.x.element_count
        forward = p.direction is Pass.FORWARD
        defines = {"MIOPY_DTYPE": p.dtype.code}
        per_item = 1
        if getattr(ctx, "backend_name", None) == "cuda":
            # the window terms of the work-group's vectors (4-byte floats) within static shared memory
            most = CHUNK_SHARED // (GROUP * 4 * (16 // p.dtype.itemsize))
            per_item = max(1, min(self.VECTORS[p.direction], most))
            defines["LRNC_U"] = per_item
        per_group = GROUP * (16 // p.dtype.itemsize) * per_item
        groups = min(-(-total // per_group), MAX_GROUPS)
        kernel = "lrn_fwd_chunk" if forward else "lrn_bwd_chunk"
        spec = KernelSpec("lrn", kernel, defines, (groups * GROUP,), (GROUP,))
        shape = (np.int64(total), np.int32(p.x.lens[1]), np.int32(p.n))
        if forward:
            args = (*_fwd_buffers(p), *shape, *_fwd_tail(p))
        else:
            args = (*(Tensor(r) for r in BWD_ROLES), *shape, np.float32(p.alpha), np.float32(p.beta))
        return Program((Launch(spec, args),))
