"""GEMM convolutions, MIOpen's Gemm* solvers: each direction is one or two matrix products per
group, with im2col / col2im around them where the filter is not 1x1 or the stride not 1.

Every tensor (packed NCHW, NHWC, NCDHW or NDHWC) and the column workspace is a strided matrix,
so one plan (``GemmPlan``) describes a product whatever the layouts; it runs on the backend's
vendor GEMM (cuBLAS) where there is one, else on our tiled kernel (kernels/common/gemm.h).

The column matrix of group g is ``col[g][j][n][o]``: j follows the filter's own memory order
(so w is used in place), o is the output position. With n next to o, an NHWC batch folds into
one GEMM per group (see ``GemmPlan.merged``).

Precision: im2col is a copy, so the column matrix keeps the data type; each product accumulates
in fp32 and rounds once when it writes data_t. Backward data keeps its GEMM result in an fp32
workspace until col2im has summed it (with a vendor GEMM, whose output has the input's type, the
workspace holds data_t and fp16/bf16 round twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import Gemm, KernelSpec, Launch, Program, Step, Tensor, Workspace
from miopy.solvers.base import Solver
from miopy.solvers.conv.common import grid_for, shape_args
from miopy.tensor import DataType

GEMM_THREADS = 256  # the work-group of kernels/common/gemm.h
GEMM_MAX_GROUPS = 65535  # the GEMM kernel loops grid-stride past this many work-groups
# Forward and backward data run im2col/col2im over as many images at once as fit in this many
# workspace bytes (at least one): MIOpen's one-image workspace, but fewer launches.
CHUNK_BYTES = 64 << 20


# ---- GEMM plans ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Operand:
    """A batch of strided matrices in one buffer: element (b0, b1, row, col) lies at
    ``offset + b0*s0 + b1*s1 + row*rs + col*cs`` (in elements)."""

    role: str  # "x", "w", "y" or "ws"
    offset: int
    rs: int
    cs: int
    s0: int = 0
    s1: int = 0
    f32: bool = False  # stored as fp32 (a workspace) rather than in the problem's data type

    def t(self) -> Operand:
        return replace(self, rs=self.cs, cs=self.rs)

    def unbatched(self, level: int) -> Operand:
        """The same operand with batch stride ``s<level>`` set to 0."""
        s0, s1 = (0, self.s1) if level == 0 else (self.s0, 0)
        return Operand(self.role, self.offset, self.rs, self.cs, s0, s1, self.f32)


@dataclass(frozen=True)
class GemmPlan:
    """For each (b0, b1) < (batch0, batch1): C[m, n] = A[m, k] @ B[k, n]."""

    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    c: Operand
    batch0: int = 1
    batch1: int = 1

    def merged(self) -> GemmPlan:
        """Fold a batch index into M or N where it continues the rows or columns (an NHWC
        batch of images is one taller matrix): fewer, larger products."""
        p = self
        for level in (1, 0):  # inner first: once folded, the outer one may continue it
            count = p.batch1 if level else p.batch0
            sa, sb, sc = (getattr(o, f"s{level}") for o in (p.a, p.b, p.c))
            if count == 1:
                folded = {}
            elif sa == 0 and sb == p.n * p.b.cs and sc == p.n * p.c.cs:
                folded = {"n": p.n * count}
            elif sb == 0 and sa == p.m * p.a.rs and sc == p.m * p.c.rs:
                folded = {"m": p.m * count}
            else:
                continue
            # built directly, not by dataclasses.replace (several times slower; every GEMM
            # solver's applicability check and program pass here)
            a, b, c = (o.unbatched(level) for o in (p.a, p.b, p.c))
            p = GemmPlan(
                folded.get("m", p.m),
                folded.get("n", p.n),
                p.k,
                a,
                b,
                c,
                1 if level == 0 else p.batch0,
                1 if level == 1 else p.batch1,
            )
        return p

    def transposed(self) -> GemmPlan:
        """The same product as C^T = B^T A^T."""
        return replace(self, m=self.n, n=self.m, a=self.b.t(), b=self.a.t(), c=self.c.t())

    def regions(self, itemsize: int) -> list[tuple[str, int, int]]:
        """(role, end in elements, itemsize) of each operand: what the product touches."""
        out = []
        for o, rows, cols in ((self.a, self.m, self.k), (self.b, self.k, self.n), (self.c, self.m, self.n)):
            end = o.offset + (self.batch0 - 1) * o.s0 + (self.batch1 - 1) * o.s1
            end += (rows - 1) * o.rs + (cols - 1) * o.cs + 1
            out.append((o.role, end, 4 if o.f32 else itemsize))
        return out

    def tiles(self, tm: int, tn: int) -> int:
        return self.batch0 * self.batch1 * math.ceil(self.m / tm) * math.ceil(self.n / tn)


def _blas_layout(op: Operand, rows: int, cols: int) -> tuple[bool, int] | None:
    """(transposed, leading dimension) of a row-major BLAS operand, None when neither fits.
    A dimension of extent 1 has no meaningful stride, so any value is accepted for it."""
    cs = op.cs if cols > 1 else 1
    rs = op.rs if rows > 1 else max(cols, 1)
    if cs == 1 and rs >= cols:
        return False, rs
    rs = op.rs if rows > 1 else 1
    cs = op.cs if cols > 1 else max(rows, 1)
    if rs == 1 and cs >= rows:
        return True, cs
    return None


def _blas_plan(plan: GemmPlan) -> GemmPlan | None:
    """The plan with C row-major, or None when a vendor GEMM cannot express it."""
    p = plan if plan.c.cs == 1 or plan.n == 1 else plan.transposed()
    if (p.c.cs != 1 and p.n > 1) or _blas_layout(p.c, p.m, p.n) is None:
        return None
    if _blas_layout(p.a, p.m, p.k) is None or _blas_layout(p.b, p.k, p.n) is None:
        return None
    return p


def _ref(role: str) -> Tensor | Workspace:
    return Workspace() if role == "ws" else Tensor(role)


def vendor_gemm_steps(dtype: DataType, plan: GemmPlan) -> list[Gemm]:
    """``plan`` as ``Backend.gemm`` calls: the larger batch index is the BLAS batch, the other
    one call each."""
    p = _blas_plan(plan)
    assert p is not None, "checked when the program was made"
    trans_a, lda = _blas_layout(p.a, p.m, p.k)  # type: ignore[misc]
    trans_b, ldb = _blas_layout(p.b, p.k, p.n)  # type: ignore[misc]
    _, ldc = _blas_layout(p.c, p.m, p.n)  # type: ignore[misc]
    inner, outer = (1, 0) if p.batch1 >= p.batch0 else (0, 1)
    count = getattr(p, f"batch{inner}")
    steps = []
    for i in range(getattr(p, f"batch{outer}")):
        off = [o.offset + i * getattr(o, f"s{outer}") for o in (p.a, p.b, p.c)]
        sa, sb, sc = (getattr(o, f"s{inner}") if count > 1 else 0 for o in (p.a, p.b, p.c))
        steps.append(
            Gemm(
                dtype,
                trans_a,
                trans_b,
                p.m,
                p.n,
                p.k,
                _ref(p.a.role),
                off[0],
                lda,
                _ref(p.b.role),
                off[1],
                ldb,
                _ref(p.c.role),
                off[2],
                ldc,
                batch=count,
                stride_a=sa,
                stride_b=sb,
                stride_c=sc,
            )
        )
    return steps


def _tile(extent: int) -> int:
    # a 64-wide tile on a 1..16-wide matrix (depthwise, few channels) would idle 3/4 of the
    # threads; two sizes keep the number of binaries to build and cache small
    return 16 if extent <= 16 else 64


def gemm_spec(dtype: DataType, plans: list[GemmPlan]) -> KernelSpec:
    """Our GEMM kernel for ``plans`` (they share operand types)."""
    first = plans[0]
    return KernelSpec(
        "gemm",
        "gemm_strided",
        {
            "MIOPY_DTYPE": dtype.code,
            "GEMM_TM": _tile(max(p.m for p in plans)),
            "GEMM_TN": _tile(max(p.n for p in plans)),
            "GEMM_A_F32": int(first.a.f32),
            "GEMM_B_F32": int(first.b.f32),
            "GEMM_C_F32": int(first.c.f32),
        },
        (GEMM_THREADS,),
        (GEMM_THREADS,),
    )


def gemm_launch(spec: KernelSpec, plan: GemmPlan) -> Launch:
    """One launch of our GEMM kernel for ``plan``."""
    args: list[Any] = []
    for o in (plan.a, plan.b, plan.c):
        args += [_ref(o.role), *(np.int64(v) for v in (o.offset, o.rs, o.cs, o.s0, o.s1))]
    args += [np.int32(v) for v in (plan.m, plan.n, plan.k, plan.batch0, plan.batch1)]
    defines = dict(spec.defines)
    tiles = plan.tiles(defines["GEMM_TM"], defines["GEMM_TN"])
    groups = min(max(tiles, 1), GEMM_MAX_GROUPS)
    return Launch(spec, tuple(args), (groups * GEMM_THREADS,), (GEMM_THREADS,))


# ---- the steps of a solution -------------------------------------------------------------------
@dataclass(frozen=True)
class Transform:
    """One launch of a data-movement kernel (im2col, col2im, copy); string arguments name
    buffers by role ("ws": the workspace)."""

    spec: KernelSpec
    args: tuple[Any, ...]
    work_items: int
    regions: tuple[tuple[str, int, int], ...] = ()  # workspace regions it touches (miopy.bounds)

    def launch(self) -> Launch:
        global_size, local_size = grid_for(self.work_items)
        args = tuple(_ref(a) if isinstance(a, str) else a for a in self.args)
        return Launch(self.spec, args, global_size, local_size)


@dataclass
class Work:
    """Everything a GEMM solution does, computed once for workspace_size and get_program."""

    workspace: int
    steps: list[Transform | GemmPlan] = field(default_factory=list)
    vendor: bool = False


def _vendor_gemm(ctx) -> bool:
    return bool(getattr(getattr(ctx, "backend", None), "has_vendor_gemm", False))


@dataclass(frozen=True)
class Dims:
    """Sizes and element strides of a conv-view problem. ``*o`` is the stride of the linear
    output/input position, which packed layouts keep row-major (so D, H, W fold into one index)."""

    n: int
    c: int
    k: int
    g: int
    cg: int
    kg: int
    r: int  # filter taps
    j: int  # reduction length of one group: cg * r
    p: int  # output positions of one image
    xn: int
    xc: int
    xo: int
    wk: int
    wc: int
    yn: int
    yk: int
    yo: int

    @classmethod
    def of(cls, p: ConvProblem) -> Dims:
        n, c = p.x.lens[:2]
        k = p.w.lens[0]
        g = p.conv.groups
        r = math.prod(p.w.lens[2:])
        xs, ws, ys = p.x.strides5(), p.w.strides5(), p.y.strides5()
        return cls(
            n,
            c,
            k,
            g,
            c // g,
            k // g,
            r,
            (c // g) * r,
            math.prod(p.y.lens[2:]),
            xs[0],
            xs[1],
            xs[4],
            ws[0],
            ws[1],
            ys[0],
            ys[1],
            ys[4],
        )


def _is_1x1_0_1(p: ConvProblem) -> bool:
    return all(v == 1 for v in p.w.lens[2:]) and all(v == 1 for v in p.conv.strides) and not any(p.pads)


def _col_strides(d: Dims, nb: int) -> tuple[int, int, int, int]:
    """(cs_g, cs_n, cs_j, cs_o) of col[g][j][n][o] holding ``nb`` images."""
    return d.j * nb * d.p, d.p, nb * d.p, 1


def _chunk(d: Dims, itemsize: int) -> int:
    per_image = d.c * d.r * d.p * itemsize
    return max(1, min(d.n, CHUNK_BYTES // max(per_image, 1)))


class _GemmSolver(Solver):
    max_elements: ClassVar[int | None] = 2**31 - 1  # GEMM sizes and offsets are int32
    primitive = "conv"
    algorithm = "gemm"
    dynamic = True  # shapes and strides are kernel arguments: one build serves every problem
    direction: Direction

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        if problem.direction is not self.direction:
            return f"direction is {problem.direction.name}"
        for role in ("x", "w", "y"):
            desc = getattr(problem, role)
            if not desc.packed:
                return f"{role} is not packed (NCHW, NHWC, NCDHW or NDHWC)"
        info = getattr(ctx, "info", None)
        if info is not None and not _vendor_gemm(ctx) and info.max_work_group_size < GEMM_THREADS:
            return f"max work-group size {info.max_work_group_size} < {GEMM_THREADS}"
        return self._applicable(ctx, problem)

    def _applicable(self, ctx, problem: ConvProblem) -> str | None:
        return None

    def _steps(self, problem: ConvProblem, d: Dims, own: bool) -> Work:
        raise NotImplementedError

    def work(self, ctx, problem: ConvProblem) -> Work:
        if _vendor_gemm(ctx):
            work = self._steps(problem, Dims.of(problem), own=False)
            plans = [s for s in work.steps if isinstance(s, GemmPlan)]
            if all(_blas_plan(p) is not None and not (p.a.f32 or p.b.f32 or p.c.f32) for p in plans):
                work.vendor = True
                return work
        return self._steps(problem, Dims.of(problem), own=True)

    def workspace_size(self, ctx, problem: ConvProblem) -> int:
        return self.work(ctx, problem).workspace

    def get_program(self, ctx, problem: ConvProblem, config=None) -> Program:
        work = self.work(ctx, problem)
        plans = [s for s in work.steps if isinstance(s, GemmPlan)]
        gemm = None if work.vendor or not plans else gemm_spec(problem.dtype, plans)
        steps: list[Step] = []
        for step in work.steps:
            if isinstance(step, Transform):
                steps.append(step.launch())
            elif gemm is None:
                steps.extend(vendor_gemm_steps(problem.dtype, step))
            else:
                steps.append(gemm_launch(gemm, step))
        regions = [
            r
            for s in work.steps
            for r in (s.regions(problem.dtype.itemsize) if isinstance(s, GemmPlan) else s.regions)
        ]
        return Program(tuple(steps), work.workspace, {"vendor_gemm": work.vendor, "regions": regions})


def _plan(
    m: int, n: int, k: int, a: Operand, b: Operand, c: Operand, batch0: int = 1, batch1: int = 1
) -> GemmPlan:
    return GemmPlan(m, n, k, a, b, c, batch0, batch1).merged()


def _im2col(problem: ConvProblem, d: Dims, n0: int, count: int, nb: int) -> Transform:
    """im2col of images n0 .. n0+count-1 into a column workspace sized for ``nb`` images."""
    spec = KernelSpec("im2col", "im2col", {"MIOPY_DTYPE": problem.dtype.code})
    col = [np.int64(v) for v in (0, *_col_strides(d, nb))]
    region = ("ws", _col_end(d, count, nb), problem.dtype.itemsize)
    args = ("x", "ws", *col, np.int32(n0), np.int32(count), *shape_args(problem))
    return Transform(spec, args, count * d.c * d.r * d.p, (region,))


def _col_end(d: Dims, count: int, nb: int) -> int:
    """One past the last element of col[g][j][n][o] that ``count`` images touch."""
    cs_g, cs_n, cs_j, cs_o = _col_strides(d, nb)
    return (d.g - 1) * cs_g + (count - 1) * cs_n + (d.j - 1) * cs_j + (d.p - 1) * cs_o + 1


# ---- forward -------------------------------------------------------------------------------------
class GemmFwd1x1_0_1(_GemmSolver):
    """1x1 filter, stride 1, no padding: y = W @ x per image and group, no workspace."""

    name = "GemmFwd1x1_0_1"
    id = 88
    direction = Direction.FORWARD

    def _applicable(self, ctx, problem):
        return None if _is_1x1_0_1(problem) else "not a 1x1 filter with stride 1 and no padding"

    def _steps(self, problem, d, own):
        plan = _plan(
            d.kg,
            d.p,
            d.cg,
            Operand("w", 0, d.wk, d.wc, 0, d.kg * d.wk),
            Operand("x", 0, d.xc, d.xo, d.xn, d.cg * d.xc),
            Operand("y", 0, d.yk, d.yo, d.yn, d.kg * d.yk),
            d.n,
            d.g,
        )
        return Work(0, [plan])


class GemmFwdRest(_GemmSolver):
    """im2col, then y = W @ col per group; any filter, stride, padding and dilation."""

    name = "GemmFwdRest"
    id = 91
    direction = Direction.FORWARD

    def _applicable(self, ctx, problem):
        return "GemmFwd1x1_0_1 handles 1x1 with stride 1 and no padding" if _is_1x1_0_1(problem) else None

    def _steps(self, problem, d, own):
        itemsize = problem.dtype.itemsize
        nb = _chunk(d, itemsize)
        cs_g, cs_n, cs_j, _ = _col_strides(d, nb)
        work = Work(d.c * d.r * d.p * nb * itemsize)
        for n0 in range(0, d.n, nb):
            count = min(nb, d.n - n0)
            work.steps.append(_im2col(problem, d, n0, count, nb))
            work.steps.append(
                _plan(
                    d.kg,
                    d.p,
                    d.j,
                    Operand("w", 0, d.wk, 1, 0, d.kg * d.wk),
                    Operand("ws", 0, cs_j, 1, cs_n, cs_g),
                    Operand("y", n0 * d.yn, d.yk, d.yo, d.yn, d.kg * d.yk),
                    count,
                    d.g,
                )
            )
        return work


# ---- backward data -------------------------------------------------------------------------------
class GemmBwd1x1_stride1(_GemmSolver):
    """1x1 filter, stride 1, no padding: dx = W^T @ dy per image and group, no workspace."""

    name = "GemmBwd1x1_stride1"
    id = 96
    direction = Direction.BACKWARD_DATA

    def _applicable(self, ctx, problem):
        return None if _is_1x1_0_1(problem) else "not a 1x1 filter with stride 1 and no padding"

    def _steps(self, problem, d, own):
        plan = _plan(
            d.cg,
            d.p,
            d.kg,
            Operand("w", 0, d.wc, d.wk, 0, d.kg * d.wk),
            Operand("y", 0, d.yk, d.yo, d.yn, d.kg * d.yk),
            Operand("x", 0, d.xc, d.xo, d.xn, d.cg * d.xc),
            d.n,
            d.g,
        )
        return Work(0, [plan])


class GemmBwdRest(_GemmSolver):
    """col = W^T @ dy per group, then col2im sums each input's contributions."""

    name = "GemmBwdRest"
    id = 97
    direction = Direction.BACKWARD_DATA

    def _applicable(self, ctx, problem):
        if _is_1x1_0_1(problem):
            return "GemmBwd1x1_stride1 handles 1x1 with stride 1 and no padding"
        return None

    def _steps(self, problem, d, own):
        f32 = own and problem.dtype is not DataType.FP32
        itemsize = 4 if own else problem.dtype.itemsize
        nb = _chunk(d, itemsize)
        strides = _col_strides(d, nb)
        cs_g, cs_n, cs_j, _ = strides
        col2im = KernelSpec(
            "im2col", "col2im", {"MIOPY_DTYPE": problem.dtype.code, "IM2COL_COL_F32": int(f32)}
        )
        work = Work(d.c * d.r * d.p * nb * itemsize)
        for n0 in range(0, d.n, nb):
            count = min(nb, d.n - n0)
            work.steps.append(
                _plan(
                    d.j,
                    d.p,
                    d.kg,
                    Operand("w", 0, 1, d.wk, 0, d.kg * d.wk),
                    Operand("y", n0 * d.yn, d.yk, d.yo, d.yn, d.kg * d.yk),
                    Operand("ws", 0, cs_j, 1, cs_n, cs_g, f32=f32),
                    count,
                    d.g,
                )
            )
            args = (
                "ws",
                "x",
                *(np.int64(v) for v in (0, *strides)),
                np.int32(n0),
                np.int32(count),
                *shape_args(problem),
            )
            region = ("ws", _col_end(d, count, nb), itemsize)
            work.steps.append(Transform(col2im, args, count * d.c * math.prod(problem.x.lens[2:]), (region,)))
        return work


# ---- backward weights ----------------------------------------------------------------------------
def _uniform_batch(stride_n: int, stride_o: int, d: Dims) -> bool:
    """Whether (n, o) is one index of stride ``stride_o`` (NHWC), so a sum over images is a GEMM."""
    return d.n == 1 or stride_n == d.p * stride_o


class GemmWrw1x1_stride1(_GemmSolver):
    """1x1 filter, stride 1, no padding: dW = dy @ x^T per group, summing over images and positions
    in one product; needs (n, o) to be one index in both x and dy (NHWC, or a single image)."""

    name = "GemmWrw1x1_stride1"
    id = 101
    direction = Direction.BACKWARD_WEIGHTS

    def _applicable(self, ctx, problem):
        if not _is_1x1_0_1(problem):
            return "not a 1x1 filter with stride 1 and no padding"
        d = Dims.of(problem)
        if not (_uniform_batch(d.xn, d.xo, d) and _uniform_batch(d.yn, d.yo, d)):
            return "N > 1 with channels outside the spatial dims (NCHW): GemmWrwUniversal sums the images"
        return None

    def _steps(self, problem, d, own):
        plan = _plan(
            d.kg,
            d.cg,
            d.n * d.p,
            Operand("y", 0, d.yk, d.yo, 0, d.kg * d.yk),
            Operand("x", 0, d.xo, d.xc, 0, d.cg * d.xc),
            Operand("w", 0, d.wk, d.wc, 0, d.kg * d.wk),
            1,
            d.g,
        )
        return Work(0, [plan])


class GemmWrwUniversal(_GemmSolver):
    """im2col of every image, then dW = dy @ col^T per group, the sum over images and positions
    being the GEMM's reduction. An NCHW dy is first copied to [K][N][positions]."""

    name = "GemmWrwUniversal"
    id = 102
    direction = Direction.BACKWARD_WEIGHTS

    def _applicable(self, ctx, problem):
        if _is_1x1_0_1(problem) and GemmWrw1x1_stride1()._applicable(ctx, problem) is None:
            return "GemmWrw1x1_stride1 handles it"
        return None

    def _steps(self, problem, d, own):
        itemsize = problem.dtype.itemsize
        cs_g, cs_n, cs_j, _ = _col_strides(d, d.n)
        col_elems = d.c * d.r * d.p * d.n
        pack = not _uniform_batch(d.yn, d.yo, d)
        work = Work((col_elems + (d.k * d.n * d.p if pack else 0)) * itemsize)
        work.steps.append(_im2col(problem, d, 0, d.n, d.n))
        if pack:
            spec = KernelSpec("im2col", "copy3d", {"MIOPY_DTYPE": problem.dtype.code})
            args = (
                "y",
                "ws",
                np.int64(col_elems),
                *(np.int32(v) for v in (d.n, d.k, d.p)),
                *(np.int64(v) for v in (d.yn, d.yk, d.yo, d.p, d.n * d.p, 1)),
            )
            region = ("ws", col_elems + d.k * d.n * d.p, itemsize)
            work.steps.append(Transform(spec, args, d.n * d.k * d.p, (region,)))
            dy = Operand("ws", col_elems, d.n * d.p, 1, 0, d.kg * d.n * d.p)
        else:
            dy = Operand("y", 0, d.yk, d.yo, 0, d.kg * d.yk)
        work.steps.append(
            _plan(
                d.kg,
                d.j,
                d.n * d.p,
                dy,
                Operand("ws", 0, 1, cs_j, 0, cs_g),
                Operand("w", 0, d.wk, 1, 0, d.kg * d.wk),
                1,
                d.g,
            )
        )
        return work


GEMM_SOLVERS = [
    GemmFwd1x1_0_1(),
    GemmFwdRest(),
    GemmBwd1x1_stride1(),
    GemmBwdRest(),
    GemmWrw1x1_stride1(),
    GemmWrwUniversal(),
]
