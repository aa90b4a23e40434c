"""Reduction kernels (kernels/common/reduce.h) as solvers."""

from __future__ import annotations

import math

import numpy as np

from miopy.problem.keys import memory_order
from miopy.problem.reduce import ReduceOp, ReduceProblem
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import Solver
from miopy.solvers.launch import MAX_GROUPS, cpu_grid, cpu_kernels, grid_1d
from miopy.tensor import DataType

GROUP = 256  # RED_GROUP


def rows_length(problem: ReduceProblem) -> int | None:
    """The run length when the reduced dimensions are innermost in x's memory and packed (and, with
    indices, in logical order there), else None."""
    x = problem.x
    order = [a for a in memory_order(x) if x.lens[a] > 1]
    reduced = [a for a in order if a in problem.dims]
    if order[len(order) - len(reduced) :] != reduced:
        return None
    expected = 1
    for a in reversed(reduced):
        if x.strides[a] != expected:
            return None
        expected *= x.lens[a]
    if problem.indices and reduced != sorted(reduced):
        return None
    return problem.reduce_length()


def _kept(problem: ReduceProblem) -> list:
    """Kept dims (logical order, padded in front to 5): lens, x strides, y strides."""
    keep = [a for a in range(len(problem.x.lens)) if a not in problem.dims]
    pad = 5 - len(keep)
    lens = [1] * pad + [problem.x.lens[a] for a in keep]
    xs = [0] * pad + [problem.x.strides[a] for a in keep]
    ys = [0] * pad + [problem.y.strides[a] for a in keep]
    return [np.int32(v) for v in lens] + [np.int64(v) for v in xs] + [np.int64(v) for v in ys]


def _tail(problem: ReduceProblem) -> list:
    acc = np.float64 if problem.dtype is DataType.FP64 else np.float32
    return [
        np.int32(int(problem.op)),
        np.int32(problem.nan_propagation),
        np.int32(problem.indices),
        acc(problem.alpha),
        acc(problem.beta),
        np.int32(problem.beta != 0),
    ]


def _buffers(problem: ReduceProblem) -> tuple:
    return (Tensor("x"), Tensor("y"), Tensor("indices" if problem.indices else "y"))


class _Reduce(Solver):
    primitive = "reduce"
    algorithm = "direct"

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, ReduceProblem):
            return "not a reduction"
        if problem.dtype is DataType.FP64 and not getattr(getattr(ctx, "info", None), "fp64", True):
            return "the device has no fp64"
        return None


class ReduceRows(_Reduce):
    name = "ReduceRows"
    id = 600
    dynamic = False

    def is_applicable(self, ctx, problem) -> str | None:
        why = super().is_applicable(ctx, problem)
        if why:
            return why
        if rows_length(problem) is None:
            return "the reduced dimensions are not innermost and packed"
        return None

    def get_program(self, ctx, problem: ReduceProblem, config=None) -> Program:
        length = rows_length(problem)
        nout = problem.y.element_count
        args = (*_buffers(problem), np.int64(nout), np.int64(length), *_kept(problem), *_tail(problem))
        if cpu_kernels(ctx) and problem.dtype is not DataType.FP64:
            defines = {"MIOPY_DTYPE": problem.dtype.code}
            spec = KernelSpec("reduce", "reduce_rows_cpu", defines, *cpu_grid(nout))
            return Program((Launch(spec, args),))
        team = min(GROUP, max(4, 1 << max(0, math.ceil(math.log2(max(1, -(-length // 8)))))))
        groups = min(-(-nout // (GROUP // team)), MAX_GROUPS)
        spec = KernelSpec(
            "reduce",
            "reduce_rows",
            {"MIOPY_DTYPE": problem.dtype.code, "RED_TEAM": team},
            (groups * GROUP,),
            (GROUP,),
        )
        return Program((Launch(spec, args),))


class ReduceGeneric(_Reduce):
    name = "ReduceGeneric"
    id = 601
    dynamic = True

    def get_program(self, ctx, problem: ReduceProblem, config=None) -> Program:
        nout = problem.y.element_count
        dims = list(problem.dims)
        pad = 5 - len(dims)
        rlens = [1] * pad + [problem.x.lens[a] for a in dims]
        rstrides = [0] * pad + [problem.x.strides[a] for a in dims]
        global_size, local_size = grid_1d(nout, 64)
        spec = KernelSpec(
            "reduce", "reduce_generic", {"MIOPY_DTYPE": problem.dtype.code}, global_size, local_size
        )
        args = (
            *_buffers(problem),
            np.int64(nout),
            *_kept(problem),
            *(np.int32(v) for v in rlens),
            *(np.int64(v) for v in rstrides),
            *_tail(problem),
        )
        return Program((Launch(spec, args),))


def cols_shape(problem: ReduceProblem) -> tuple[int, int] | None:
    """(R, K) when x is dense with its kept dimensions innermost (K contiguous elements) under the
    reduced ones (R rows), y and indices then lying like the columns; with indices the reduced
    dimensions must also be in logical order in memory. Else None."""
    x = problem.x
    if x.element_space != x.element_count:
        return None
    order = [a for a in memory_order(x) if x.lens[a] > 1]
    kept = [a for a in order if a not in problem.dims]
    if not kept or order[len(order) - len(kept) :] != kept:
        return None
    reduced = [a for a in order if a in problem.dims]
    if problem.indices and reduced != sorted(reduced):
        return None
    if problem.y.layout != x.layout:
        return None
    k = math.prod(x.lens[a] for a in kept)
    return problem.reduce_length(), k


class ReduceColumns(_Reduce):
    """Reduced dimensions outermost (per-channel statistics in NHWC, a sum over the batch): a
    partial pass over row chunks into the workspace, then one work item per column merges."""

    name = "ReduceColumns"
    id = 602
    dynamic = True
    TARGET_ITEMS = 1 << 18  # partial work items to aim for (enough to fill a large GPU)

    def is_applicable(self, ctx, problem) -> str | None:
        why = super().is_applicable(ctx, problem)
        if why:
            return why
        if cols_shape(problem) is None:
            return "the kept dimensions are not innermost in a dense x"
        return None

    def _cpu(self, ctx, problem: ReduceProblem) -> bool:
        """reduce_cols_partial_cpu: CPU OpenCL, a multiple of 8 columns, not fp64."""
        return cpu_kernels(ctx) and problem.dtype is not DataType.FP64 and cols_shape(problem)[1] % 8 == 0

    def _split(self, ctx, problem: ReduceProblem) -> tuple[int, int, int, int]:
        rows, cols = cols_shape(problem)
        if self._cpu(ctx, problem):  # a few row chunks per core, each at least 64 rows
            cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
            chunks = max(1, min(cus * 4, rows // 64))
        else:
            chunks = max(1, min(rows, self.TARGET_ITEMS // max(cols, 1)))
        chunk = -(-rows // chunks)
        chunks = -(-rows // chunk)
        acc = 8 if problem.dtype is DataType.FP64 else 4
        return rows, cols, chunk, chunks * cols * acc

    def workspace_size(self, ctx, problem) -> int:
        rows, cols, chunk, values = self._split(ctx, problem)
        return values + -(-rows // chunk) * cols * 4

    def get_program(self, ctx, problem: ReduceProblem, config=None) -> Program:
        rows, cols, chunk, values = self._split(ctx, problem)
        chunks = -(-rows // chunk)
        pi_off = np.int64(values // 4)
        defines = {"MIOPY_DTYPE": problem.dtype.code}
        if self._cpu(ctx, problem):
            partial = KernelSpec("reduce", "reduce_cols_partial_cpu", defines, *cpu_grid(chunks, 1))
        else:
            partial = KernelSpec("reduce", "reduce_cols_partial", defines, *grid_1d(chunks * cols))
        g2, l2 = grid_1d(cols)
        final = KernelSpec("reduce", "reduce_cols_final", defines, g2, l2)
        op = [np.int32(int(problem.op)), np.int32(problem.nan_propagation)]
        tail = _tail(problem)
        steps = (
            Launch(
                partial,
                (
                    Tensor("x"),
                    Workspace(),
                    Workspace(),
                    pi_off,
                    np.int64(rows),
                    np.int64(cols),
                    np.int64(chunk),
                    *op,
                ),
            ),
            Launch(
                final,
                (
                    Workspace(),
                    Workspace(),
                    pi_off,
                    Tensor("y"),
                    Tensor("indices" if problem.indices else "y"),
                    np.int64(rows),
                    np.int64(cols),
                    np.int64(chunks),
                    *op,
                    *tail[2:],
                ),
            ),
        )
        return Program(steps, workspace=self.workspace_size(ctx, problem))


def _fp64_reason(problem: ReduceProblem) -> str | None:
    """Why the vector kernels cannot take ``problem``'s data type (None when they can)."""
    return "fp64 data" if problem.dtype is DataType.FP64 else None


def _vec(problem: ReduceProblem) -> int:
    """Elements per 16-byte vector, or 0 for fp64 data (the vector kernels take fp32 / fp16 /
    bf16)."""
    if problem.dtype is DataType.FP64:
        return 0
    return 16 // problem.dtype.itemsize


class ReduceRowsVec(ReduceRows):
    """ReduceRows with 16-byte loads: runs and kept strides multiples of the vector."""

    name = "ReduceRowsVec"
    id = 603
    VECTORS_PER_ITEM = 8

    def is_applicable(self, ctx, problem) -> str | None:
        why = super().is_applicable(ctx, problem) or _fp64_reason(problem)
        if why:
            return why
        vec = _vec(problem)
        keep = [a for a in range(len(problem.x.lens)) if a not in problem.dims]
        if rows_length(problem) % vec or any(
            problem.x.strides[a] % vec for a in keep if problem.x.lens[a] > 1
        ):
            return f"the runs or the kept strides are not multiples of {vec} elements"
        return None

    def get_program(self, ctx, problem: ReduceProblem, config=None) -> Program:
        length = rows_length(problem)
        vec = _vec(problem)
        nout = problem.y.element_count
        # about VECTORS_PER_ITEM vectors per work item (small teams finish in a warp, no barrier)
        per = -(-length // (vec * self.VECTORS_PER_ITEM))
        team = min(GROUP, max(4, 1 << max(0, math.ceil(math.log2(max(1, per))))))
        groups = min(-(-nout // (GROUP // team)), MAX_GROUPS)
        defines = {"MIOPY_DTYPE": problem.dtype.code, "RED_TEAM": team, "RED_VEC": vec}
        spec = KernelSpec("reduce", "reduce_rows_vec", defines, (groups * GROUP,), (GROUP,))
        args = (*_buffers(problem), np.int64(nout), np.int64(length), *_kept(problem), *_tail(problem))
        return Program((Launch(spec, args),))


class ReduceRowsWarp(ReduceRowsVec):
    """The additive reductions (add, avg, norm1, norm2) of contiguous runs on GPU devices, a run
    per team of up to a warp with eight 16-byte loads in flight per work item and a partial sum per
    load (kernels/common/reduce_warp.h): for many runs of up to 256k elements."""

    name = "ReduceRowsWarp"
    id = 605
    LOADS = 8  # RW_U
    LD_HINT = 1  # VEC_LD_HINT (common/vec.h): 1 ld.global.cs (evict first; H200: 2-6 % faster than __ldg)
    MOST_LENGTH = 1 << 18

    def is_applicable(self, ctx, problem) -> str | None:
        if cpu_kernels(ctx):
            return "backend on a CPU device (ReduceRows has its kernels)"
        why = super().is_applicable(ctx, problem)
        if why:
            return why
        if problem.op not in (ReduceOp.ADD, ReduceOp.AVG, ReduceOp.NORM1, ReduceOp.NORM2):
            return f"{problem.op.name.lower()} is not an additive reduction"
        length = rows_length(problem)
        if length > self.MOST_LENGTH:
            return f"runs of {length} > {self.MOST_LENGTH} elements (ReduceRowsVec splits them wider)"
        # few runs are fine when a team reads each in one batch of loads (a wider team gains
        # nothing); long runs need enough of them to give every compute unit a warp
        team = self._team(problem)
        cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
        one_batch = length <= team * self.LOADS * _vec(problem)
        if not one_batch and problem.y.element_count * team < 32 * cus:
            return "fewer runs than warps to fill the device"
        return None

    def _team(self, problem: ReduceProblem) -> int:
        per = -(-rows_length(problem) // (_vec(problem) * self.LOADS))
        return min(32, max(4, 1 << max(0, math.ceil(math.log2(max(1, per))))))

    def _loads(self, problem: ReduceProblem) -> int:
        return self.LOADS

    def get_program(self, ctx, problem: ReduceProblem, config=None) -> Program:
        length = rows_length(problem)
        nout = problem.y.element_count
        team = self._team(problem)
        groups = min(-(-nout // (GROUP // team)), MAX_GROUPS)
        defines = {"MIOPY_DTYPE": problem.dtype.code, "RW_TEAM": team, "RW_U": self._loads(problem)}
        if self.LD_HINT:
            defines["VEC_LD_HINT"] = self.LD_HINT
        defines["RW_OP"] = int(problem.op)
        spec = KernelSpec("reduce", "reduce_rows_warp", defines, (groups * GROUP,), (GROUP,))
        args = (*_buffers(problem), np.int64(nout), np.int64(length), *_kept(problem), *_tail(problem))
        return Program((Launch(spec, args),))


class ReduceRowsWarpBatch(ReduceRowsWarp):
    """ReduceRowsWarp with as many loads in flight per work item as its share of a run needs, up
    to MOST_LOADS, split into even batches (a run of 392 16-byte vectors, 56x56 fp16, is one batch
    of 13 loads per lane of a warp instead of a batch of 8 and one of 4 or 5), the loads not kept
    in L1 and prefetching 256 bytes into L2."""

    name = "ReduceRowsWarpBatch"
    id = 606
    MOST_LOADS = 16
    LD_HINT = 2  # ld.global.nc.L1::no_allocate.L2::256B (H200, 56x56 fp16 runs: 17.2 us, 19.0 without)

    def is_applicable(self, ctx, problem) -> str | None:
        why = super().is_applicable(ctx, problem)
        if why:
            return why
        if self._loads(problem) == self.LOADS:
            return f"{self.LOADS} loads a work item already (ReduceRowsWarp)"
        return None

    def _loads(self, problem: ReduceProblem) -> int:
        per = -(-rows_length(problem) // (_vec(problem) * self._team(problem)))  # vectors a work item
        batches = -(-per // self.MOST_LOADS)
        return max(1, -(-per // batches))


class ReduceRowsWarpL2(ReduceRowsWarp):
    """ReduceRowsWarp with loads that skip L1 and prefetch 256 bytes into L2
    (ld.global.nc.L1::no_allocate.L2::256B): the fastest on the H200 for the sum over the channels
    of NHWC 32x256x56x56 (fp16 16.9 us against 18.8 evicting first, fp32 28.7 against 29.0)."""

    name = "ReduceRowsWarpL2"
    id = 607
    LD_HINT = 2


class ReduceColumnsVec(ReduceColumns):
    """ReduceColumns with 16-byte loads of several columns per work item, rows loaded ahead, and
    the partials merged by a work-group per 8 columns (a local tree over 128 partial rows at once)
    instead of a work item per column."""

    name = "ReduceColumnsVec"
    id = 604
    FX, FY = 8, 128  # RED_FX, RED_FY
    ITEMS_PER_CU = 512  # partial work items per compute unit (each loads 32 values ahead)

    def is_applicable(self, ctx, problem) -> str | None:
        why = super().is_applicable(ctx, problem) or _fp64_reason(problem)
        if why:
            return why
        vec = _vec(problem)
        if cols_shape(problem)[1] % vec:
            return f"the kept elements are not a multiple of {vec}"
        return None

    def _split(self, ctx, problem: ReduceProblem) -> tuple[int, int, int, int]:
        rows, cols = cols_shape(problem)
        cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
        chunks = max(1, min(rows, -(-cus * self.ITEMS_PER_CU // (cols // _vec(problem)))))
        chunk = -(-rows // chunks)
        chunks = -(-rows // chunk)
        return rows, cols, chunk, chunks * cols * 4

    def get_program(self, ctx, problem: ReduceProblem, config=None) -> Program:
        rows, cols, chunk, values = self._split(ctx, problem)
        chunks = -(-rows // chunk)
        vec = _vec(problem)
        pi_off = np.int64(values // 4)
        defines = {"MIOPY_DTYPE": problem.dtype.code, "RED_VEC": vec}
        if getattr(ctx, "backend_name", None) == "cuda" and problem.op.has_indices and not problem.indices:
            # the values alone (fminf / fmaxf an element): no positions, no run-time op
            defines["RED_VALUES_OP"] = int(problem.op)
        g1, l1 = grid_1d(chunks * cols // vec)
        partial = KernelSpec("reduce", "reduce_cols_vec_partial", defines, g1, l1)
        final = KernelSpec(
            "reduce",
            "reduce_cols_tree_final",
            defines,
            (-(-cols // self.FX) * self.FX, self.FY),
            (self.FX, self.FY),
        )
        op = [np.int32(int(problem.op)), np.int32(problem.nan_propagation)]
        ws = Workspace()
        pargs = (Tensor("x"), ws, ws, pi_off, np.int64(rows), np.int64(cols), np.int64(chunk), *op)
        fargs = (ws, ws, pi_off, Tensor("y"), Tensor("indices" if problem.indices else "y"))
        fargs += (np.int64(rows), np.int64(cols), np.int64(chunks), *op, *_tail(problem)[2:])
        steps = (Launch(partial, pargs), Launch(final, fargs))
        return Program(steps, workspace=self.workspace_size(ctx, problem))
