"""Pooling with one work item per tile of outputs (forward) or cell of input positions (backward)
(kernels/common/pool.h); on GPUs the whole shape is compiled in, elsewhere it is run-time arguments.

Vec: channels-last tensors with C a multiple of the vector width: each work item takes 16 bytes of
channels (4 fp32 or 8 fp16/bf16), neighbours take neighbouring channels, so every window tap is one
coalesced vector load. Direct: any layout or strides; work items follow the output's memory order
(channels innermost when its channel stride is 1) so that accesses stay coalesced.

Both are tunable in their work-item tile. Forward: {"th", "tw"}, the outputs along H and W each
work item computes, loading the inputs their windows share once (GPUs: fewer loads and less index
arithmetic per output). Backward: {"ch", "cw"}, the cell of input positions each work item owns
(the stride: each dy and index element is then read by one or two work items instead of one per
input position it covers), 1 x 1 for one position. Defaults from an H200 sweep of ResNet-50's max
pool 3x3/s2 at batch 32: forward fp16 NHWC Vec 1 x 1 in half2 arithmetic 23.3 us (fp32 arithmetic
26.3), fp32 NCHW Direct 1 x 4 36.6 us (1 x 1: 38.1); backward Vec 2 x 2 cells 37.1 us (1 x 1:
68.7), Direct 2 x 4 cells 82.7 us (1 x 1: 199)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from miopy.problem.passes import Pass
from miopy.problem.pooling import IndexMode, IndexType, PoolingMode, PoolingProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import TunableSolver
from miopy.solvers.launch import LOCAL, MAX_GROUPS, cpu_grid, cpu_kernels, grid_1d, specialize

VEC_BYTES = 16
GPU_ITEMS_PER_UNIT = 1024  # below this many vector work items per compute unit, Vec defers
MAX_WORK_ITEMS = MAX_GROUPS * LOCAL  # the grid-stride step: i + step must not wrap


def _channels_last(desc) -> bool:
    return desc.strides[1] == 1 and desc.lens[1] > 1


def _vec_width(problem: PoolingProblem) -> int:
    return VEC_BYTES // problem.dtype.itemsize


def _vec_reason(problem: PoolingProblem) -> str | None:
    vec = _vec_width(problem)
    if problem.x.lens[1] % vec:
        return f"C={problem.x.lens[1]} is not a multiple of {vec}"
    for name, desc in (("x", problem.x), ("y", problem.y)):
        if desc.strides[1] != 1:
            return f"{name} is not channels-last"
        if any(s % vec for s in desc.strides[:1] + desc.strides[2:]):
            return f"{name} strides are not multiples of {vec}"
    return None


def _too_few_items(ctx, problem: PoolingProblem) -> bool:
    """On a GPU, vectors of channels leave too few work items to fill it when the positions are
    few (global pooling: 32 x 2048 / 8 = 8192 work items for 132 SMs); Direct, one channel per
    work item, then has VEC times more (on the H200 it was the faster of the two there)."""
    if getattr(ctx, "backend_name", None) != "cuda":
        return False
    space = problem.y if problem.direction is Pass.FORWARD else problem.x
    items = space.element_count // _vec_width(problem)
    units = getattr(getattr(ctx, "info", None), "compute_units", 0) or 0
    return items < units * GPU_ITEMS_PER_UNIT


def cpu_defines(p) -> dict[str, int]:
    """The defines of a pooling program that launches pool.h's PoCL CPU kernels."""
    defs = {"MIOPY_DTYPE": p.dtype.code, "POOL_MODE": p.desc.mode.code, "POOL_CPU_KERNELS": 1}
    if p.uses_index:
        defs.update(
            POOL_SAVE_INDEX=1,
            POOL_INDEX_TYPE=p.desc.index_type.code,
            POOL_INDEX_IMAGE=int(p.desc.index_mode is IndexMode.IMAGE),
        )
    return defs


def shape_args(p: PoolingProblem) -> list:
    """The POOL_SHAPE_ARGS of kernels/common/pool.h."""
    n, c, di, hi, wi = p.x.lens5()
    _, _, do, ho, wo = p.y.lens5()
    two = p.spatial_dims == 2
    strides = (1, *p.desc.strides) if two else p.desc.strides
    pads = (0, *p.pads) if two else p.pads
    index = p.index.strides5() if p.uses_index else (0,) * 5
    window = (1, *p.desc.window) if two else p.desc.window
    ints = [n, c, di, hi, wi, do, ho, wo, *window, *strides, *pads]
    longs = [*p.x.strides5(), *p.y.strides5(), *index]
    return [np.int32(v) for v in ints] + [np.int64(v) for v in longs]


def defines(p: PoolingProblem, vec: bool, channels_last: bool, fixed: bool, work_items: int) -> dict:
    """Compile-time choices; ``fixed`` compiles the whole shape in (see kernels/common/pool.h)."""
    d = p.desc
    out = {
        "MIOPY_DTYPE": p.dtype.code,
        "POOL_MODE": d.mode.code,
        "POOL_NHWC": int(channels_last),
        "POOL_VEC": int(vec),
        "POOL_IDX32": int(work_items + MAX_WORK_ITEMS < 2**31),
        "POOL_OFF32": int(all(t.element_space < 2**31 for t in (p.x, p.y, p.index) if t is not None)),
    }
    if fixed:
        n, c, di, hi, wi = p.x.lens5()
        _, _, do, ho, wo = p.y.lens5()
        two = p.spatial_dims == 2
        window = (1, *d.window) if two else d.window
        strides = (1, *d.strides) if two else d.strides
        pads = (0, *p.pads) if two else p.pads
        out["POOL_FIXED"] = 1
        for name, value in zip(
            ("N", "C", "DI", "HI", "WI", "DO", "HO", "WO"), (n, c, di, hi, wi, do, ho, wo)
        ):
            out[f"POOL_{name}"] = value
        for axis, k, s, q in zip("DHW", window, strides, pads):
            out.update({f"POOL_K{axis}": k, f"POOL_S{axis}": s, f"POOL_P{axis}": q})
        index = p.index.strides5() if p.uses_index else (0,) * 5
        for t, values in (("X", p.x.strides5()), ("Y", p.y.strides5()), ("I", index)):
            out.update({f"POOL_{t}S_{axis}": v for axis, v in zip("NCDHW", values)})
    if p.uses_index:
        out["POOL_SAVE_INDEX"] = 1
        out["POOL_INDEX_TYPE"] = d.index_type.code
        out["POOL_INDEX_IMAGE"] = int(d.index_mode is IndexMode.IMAGE)
    return out


ROW_BUF = 2112  # POOL_ROW_BUF: floats of pool_fwd_rows_cpu's padded input row
FWD_ROWS_PER_ITEM = 8  # POOL_FWD_RH: output rows of a pool_fwd_rows_cpu work item


def cpu_fwd_program(ctx, p: PoolingProblem) -> Program | None:
    """Forward pooling on CPU OpenCL devices (pool_fwd_{rows,channels}_cpu, kernels/common/pool.h):
    x and y channels contiguous, or their rows contiguous with a padded row fitting the kernel's
    buffer; else None (the tiled kernel)."""
    if not cpu_kernels(ctx) or p.direction is not Pass.FORWARD or p.dtype.itemsize == 8:
        return None
    n, c, d, h, w = p.y.lens5()
    kw, sw, pw = p.desc.window[-1], p.desc.strides[-1], p.pads[-1]
    wo8 = -(-w // 8) * 8
    wi8 = -(-p.x.lens[-1] // 8) * 8
    if p.x.strides[1] == 1 and p.y.strides[1] == 1:
        kind, work = "channels", n * d * h
    elif p.x.strides[-1] == 1 and p.y.strides[-1] == 1 and max((wo8 - 1) * sw + kw + 16, pw + wi8) <= ROW_BUF:
        kind, work = "rows", n * c * d * -(-h // FWD_ROWS_PER_ITEM)
    else:
        return None
    spec = KernelSpec("pool", f"pool_fwd_{kind}_cpu", cpu_defines(p), *cpu_grid(work))
    buffers = (Tensor("x"), Tensor("y"), Tensor("index" if p.uses_index else "y"))
    return Program((Launch(spec, (*buffers, *shape_args(p))),))


FWD_TILES = ((1, 1), (1, 2), (1, 4), (2, 1), (2, 2))  # (th, tw)
H2_TILES = ((1, 1), (1, 2), (2, 1))  # tiles also tried in half2 arithmetic where it applies
MAX_CELL = 4  # strides above this: one position per backward work item
MAX_CELL_VALUES = 32  # accumulators per backward work item (cell positions x channels)


def _cells(problem: PoolingProblem, per_item: int) -> list[tuple[int, int]]:
    """Backward cells (ch, cw) worth trying: one position, one stride along W, the whole stride,
    two strides along W."""
    sh, sw = problem.desc.strides[-2:]
    out = [(1, 1)]
    for ch, cw in ((1, sw), (sh, sw), (sh, 2 * sw)):
        small = ch <= MAX_CELL and cw <= MAX_CELL and ch * cw * per_item <= MAX_CELL_VALUES
        if small and (ch, cw) not in out:
            out.append((ch, cw))
    return out


class _Pool(TunableSolver):
    primitive = "pool"
    algorithm = "direct"
    direction: Pass
    vec: bool

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, PoolingProblem):
            return "not a pooling"
        if problem.direction is not self.direction:
            return f"direction is {problem.direction.name}"
        if self.vec:
            return _vec_reason(problem)
        return None

    def defers(self, ctx, problem) -> bool:
        return self.vec and _too_few_items(ctx, problem)

    def _per_item(self, problem: PoolingProblem) -> int:
        return _vec_width(problem) if self.vec else 1

    def _half2(self, ctx, problem: PoolingProblem) -> bool:
        """fp16 channel vectors max-pooled in half2 arithmetic (kernels/common/pool.h, POOL_H2):
        CUDA, max pooling, no index or a u8 index inside the window."""
        if not (self.vec and specialize(ctx) and problem.dtype.value == "FP16"):
            return False
        if problem.desc.mode is not PoolingMode.MAX:
            return False
        d = problem.desc
        return not problem.uses_index or (d.index_type is IndexType.UINT8 and d.index_mode is IndexMode.MASK)

    def search_space(self, ctx, problem) -> Iterable[dict[str, Any]]:
        if problem is not None and cpu_fwd_program(ctx, problem) is not None:  # no tiles to tune
            return [{"th": 1, "tw": 1 if self.vec else 4, "h2": 0}]
        if self.direction is Pass.FORWARD:
            out = [{"th": th, "tw": tw, "h2": 0} for th, tw in FWD_TILES]
            if self._half2(ctx, problem):
                out += [{"th": th, "tw": tw, "h2": 1} for th, tw in H2_TILES]
            return out
        return [{"ch": ch, "cw": cw} for ch, cw in _cells(problem, self._per_item(problem))]

    def default_config(self, ctx, problem) -> dict[str, Any]:
        if self.direction is Pass.FORWARD:
            if self._half2(ctx, problem):
                return {"th": 1, "tw": 1, "h2": 1}
            return {"th": 1, "tw": 1 if self.vec else 4, "h2": 0}
        cells = self.search_space(ctx, problem)
        sh, sw = problem.desc.strides[-2:]
        want = {"ch": sh, "cw": sw} if self.vec else {"ch": sh, "cw": 2 * sw}  # the H200's best
        return want if want in cells else cells[-1]

    def is_valid_config(self, ctx, problem, config: Any) -> bool:
        if not isinstance(config, dict):
            return False
        return config in list(self.search_space(ctx, problem))

    def _row_vectors(self, ctx, problem: PoolingProblem, tw: int) -> bool:
        """Forward tile rows as 16-byte vectors (kernels/common/pool.h, POOL_ROWVEC): GPUs, one
        channel per work item, W stride 1, a tile's stride-aligned columns whole vectors."""
        if self.vec or not specialize(ctx) or problem.x.strides[-1] != 1:
            return False
        kw, sw, pw = problem.desc.window[-1], problem.desc.strides[-1], problem.pads[-1]
        return (tw * sw) % (VEC_BYTES // problem.dtype.itemsize) == 0 and kw - sw >= pw

    def get_program(self, ctx, problem: PoolingProblem, config=None) -> Program:
        program = cpu_fwd_program(ctx, problem)
        if program is not None:
            return program
        cfg = config or self.default_config(ctx, problem)
        forward = self.direction is Pass.FORWARD
        space = problem.y if forward else problem.x  # the positions work items own
        channels_last = self.vec or _channels_last(space)
        per_item = self._per_item(problem)
        th, tw = (cfg["th"], cfg["tw"]) if forward else (cfg["ch"], cfg["cw"])
        n, c, d, h, w = space.lens5()
        work = n * (c // per_item) * d * -(-h // th) * -(-w // tw)
        global_size, local_size = grid_1d(work)
        defs = defines(problem, self.vec, channels_last, specialize(ctx), work)
        defs.update({"POOL_TH": th, "POOL_TW": tw} if forward else {"POOL_CH": th, "POOL_CW": tw})
        if forward and self._row_vectors(ctx, problem, tw):
            defs["POOL_ROWVEC"] = 1
        if forward and cfg["h2"]:
            defs["POOL_H2"] = 1
        spec = KernelSpec("pool", "pool_fwd" if forward else "pool_bwd", defs, global_size, local_size)
        # without an index the kernel takes the output in its place (and never touches it)
        if forward:
            buffers = (Tensor("x"), Tensor("y"), Tensor("index" if problem.uses_index else "y"))
        else:
            buffers = (Tensor("dx"), Tensor("dy"), Tensor("index" if problem.uses_index else "dy"))
        return Program((Launch(spec, (*buffers, *shape_args(problem))),))


class PoolingFwdVec(_Pool):
    name = "PoolingFwdVec"
    id = 310
    direction = Pass.FORWARD
    vec = True


class PoolingFwdDirect(_Pool):
    name = "PoolingFwdDirect"
    id = 311
    direction = Pass.FORWARD
    vec = False


class PoolingBwdVec(_Pool):
    name = "PoolingBwdVec"
    id = 312
    direction = Pass.BACKWARD
    vec = True


class PoolingBwdDirect(_Pool):
    name = "PoolingBwdDirect"
    id = 313
    direction = Pass.BACKWARD
    vec = False
