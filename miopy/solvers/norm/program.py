"""The Program of any normalisation (batch, layer, group norm): reduce, finalise, apply, and for
layer / group norm backward the weight gradients. See kernels/common/norm.h.

A problem gives the program what it needs through a few attributes (``NormProblem`` below); the
solvers differ only in whether the dense kernels (``packed=True``) or the strided ones run.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from miopy.problem.nd import Dim, PgradGeometry
from miopy.solution import KernelSpec, Launch, Program, Scalar, Tensor, Workspace
from miopy.solvers.launch import LOCAL, MAX_GROUPS, cpu_grid, cpu_kernels, grid_1d
from miopy.solvers.norm.view import PackedGeometry, packed_geometry, view8, with_key_index

OP = {"bn_train": 0, "bn_infer": 1, "bn_bwd": 2, "ln_fwd": 3, "ln_bwd": 4}
F_DY, F_WEIGHTED, F_SAVE, F_RUNNING, F_SAVED = 1, 2, 4, 8, 16
KERNEL_IDS = {
    "norm_reduce_generic": 1,
    "norm_reduce_rows": 2,
    "norm_reduce_cols": 3,
    "norm_finalize": 4,
    "norm_fwd_generic": 5,
    "norm_bwd_generic": 6,
    "norm_pgrad_generic": 7,
    "norm_fwd_packed": 8,
    "norm_bwd_packed": 9,
    "norm_pgrad_cols": 10,
    "norm_pgrad_rows": 11,
    "norm_pgrad_finish": 12,
    "norm_apply_2d": 13,
    "norm_reduce_rows_serial": 14,
    "norm_pgrad_cols_serial": 15,
    "ln_rows_fwd": 16,
    "norm_pgrad_rows_serial": 17,
    "ln_rows_bwd": 18,
    "ln_pgrad_finish": 19,
    "gn_rows_fwd": 20,
    "gn_rows_bwd": 21,
    "norm_coef_expand": 22,
    "norm_reduce_split_cpu": 23,
    "norm_apply_cyc_cpu": 24,
    "norm_pgrad_cyc_cpu": 25,
    "ln_rows_fwd_cpu": 26,
    "ln_rows_bwd_cpu": 27,
}
VEC_BYTES = 16
CX, CY = 32, 8  # NORM_CX, NORM_CY


class NormProblem(Protocol):
    norm_kind: str  # a key of OP
    norm_flags: int
    affine: bool  # per-element weight (and bias forward): layer and group norm with weights
    epsilon: float

    def norm_dims(self) -> list[Dim]: ...
    def finalize_roles(self) -> dict[str, str | None]: ...
    def param_map(self) -> tuple[int, int, int, int, int] | None: ...
    def tensors(self) -> dict[str, Any]: ...


def _vw(ctx, dtype, ok: bool) -> int:
    """16-byte vectors on CUDA when the geometry allows; OpenCL compilers vectorise work items."""
    if not ok or getattr(ctx, "backend_name", None) != "cuda":
        return 1
    return VEC_BYTES // dtype.itemsize


def _spec(name: str, problem, vw: int, global_size, local_size) -> KernelSpec:
    t = problem.tensors()
    data = t["x"].dtype
    defines = {
        "MIOPY_DTYPE": data.code,
        "NORM_PTYPE": problem.param_dtype.code,
        "NORM_VW": vw,
        "NORM_ONLY": KERNEL_IDS[name],
    }
    return KernelSpec("norm", name, defines, global_size, local_size)


APPLY_2D_LOCAL = 16  # rows per work-group of the row-wise apply
APPLY_2D_LEAST = 8  # shorter inner runs keep the 1-D kernels


def uses_2d_apply(ctx) -> bool:
    """The 2-D apply (norm_apply_2d, bn_apply_2d) serves OpenCL, whose CPU compilers vectorise
    over work items only when no index arithmetic varies per element; CUDA keeps the 1-D kernels
    with 16-byte vectors."""
    return getattr(ctx, "backend_name", None) != "cuda"


def apply_2d_layout(n: int, kd: int, km: int, kd2: int, kmul2: int, pd: int, pm: int, affine: bool):
    """(d0, kq, kq2, kmode, pq, pmode) for a 2-D apply of n elements whose key is
    (i // kd) % km + (i // kd2) * kmul2 and weight index (i // pd) % pm, or None when no inner
    length d0 keeps them division-free along dim 0. The longest such d0 wins."""
    kd2 = kd2 or n
    best = None
    for d0 in sorted({kd, km, pd, pm}, reverse=True):
        if d0 < APPLY_2D_LEAST or n % d0 or kd2 % d0:
            continue
        if kd % d0 == 0:
            kmode, kq = 0, kd // d0
        elif kd == 1 and d0 == km:
            kmode, kq = 1, 1
        else:
            continue
        if not affine or pd % d0 == 0:
            pmode, pq = 0, max(pd // d0, 1)
        elif pd == 1 and d0 == pm:
            pmode, pq = 1, 1
        else:
            continue
        best = (d0, kq, kd2 // d0, kmode, pq, pmode)
        break
    return best


def cycling_keys(n, kd, km, kd2, kmul2, K, pd, pm, affine) -> tuple[int, int] | None:
    """(d0, K2) when the key cycles inside rows of d0 = kd * km elements (key = (i // kd) % km +
    (i // kd2) * kmul2 with kmul2 = km: channels-last group norm, d0 = C) and the weight index is
    the position in the row, or None. K2 = K * kd expanded keys, one per (outer key, element)."""
    d0, kd2 = kd * km, kd2 or n
    if kd < 2 or d0 < APPLY_2D_LEAST or (kd2 != n and kmul2 != km) or kd2 % d0 or n % kd2:
        return None
    if K != (n // kd2) * km or (affine and (pd != 1 or pm != d0)):
        return None
    return d0, K * kd


def _cycling_apply(problem, geo, cyc, backward: bool, coef: int, coef2: int, weight, ws) -> list[Launch]:
    """CPU OpenCL apply of cycling keys: norm_coef_expand (the coefficients per (outer key, row
    element)), then norm_apply_cyc_cpu over rows of d0 elements, weights by element."""
    d0, K2 = cyc
    gs, ls = grid_1d(K2)
    expand = _spec("norm_coef_expand", problem, 1, gs, ls)
    eargs = (ws, np.int64(coef), np.int64(geo.K), np.int64(coef2), np.int64(K2), np.int64(geo.kd))
    eargs += (np.int32(6 if backward else 4),)
    affine = problem.affine
    spec = _spec("norm_apply_cyc_cpu", problem, 1, *apply_2d_grid(geo.n, d0))
    args = (Tensor("x"), Tensor("dy") if backward else Tensor("x"), Tensor("dx" if backward else "y"))
    args += (ws, weight, Tensor("bias") if affine and not backward else ws, np.int64(coef2))
    args += tuple(np.int64(v) for v in (K2, geo.n // d0, d0, (geo.kd2 or geo.n) // d0))
    args += (np.int32(1 if affine else 0), np.int32(backward))
    return [Launch(expand, eargs), Launch(spec, args)]


SPLIT_CHUNK_BYTES = 32 << 10  # norm_reduce_split_cpu: a chunk's segments span about this much


def split_keys(geo: PackedGeometry, pmap, weighted: bool) -> bool:
    """Whether norm_reduce_split_cpu serves this rows geometry: several keys whose segments
    interleave (segments shorter than their distance, at least a vector long) and, for a
    weighted dy, a weight per segment element."""
    klo = geo.klo or geo.K
    if klo < 2 or geo.S < 2 or geo.L < 8 or geo.sstride <= geo.L or geo.K % klo:
        return False
    return not weighted or (pmap is not None and pmap[4] == 1)


def split_chunks(ctx, outer: int, S: int, seg_bytes: int) -> tuple[int, int]:
    """(nchunks, segments per chunk) of norm_reduce_split_cpu: a chunk spans at most
    SPLIT_CHUNK_BYTES, and there are several units per compute unit."""
    cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
    nchunks = max(-(-cus * 8 // outer), -(-S * seg_bytes // SPLIT_CHUNK_BYTES), 1)
    spc = -(-S // min(nchunks, S))
    return -(-S // spc), spc


def cyc_pgrad(geo: PackedGeometry | None, cyc, g: PgradGeometry | None) -> bool:
    """Whether norm_pgrad_cyc_cpu serves the weight gradients after a cycling-keys apply: columns
    of P = d0 weights per packed row, rows grouped by the outer key as the apply's."""
    if geo is None or cyc is None or g is None or g.kind != "cols":
        return False
    d0 = cyc[0]
    return g.P == d0 and g.rstride == d0 and g.cdiv == geo.kd and g.rdiv * d0 == (geo.kd2 or geo.n)


def serial_chunks(ctx, K: int, R: int) -> int:
    """Chunks per key of the serial row reduction: enough units for every compute unit to take
    several, each at least a few thousand elements."""
    cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
    return int(max(1, min(-(-cus * 8 // K), R // 4096, 1024)))


def serial_grid(units: int) -> tuple[tuple[int], tuple[int]]:
    local = min(APPLY_2D_LOCAL, 1 << max(0, (units - 1).bit_length()))
    return (-(-units // local) * local,), (local,)


def apply_2d_grid(n: int, d0: int) -> tuple[tuple[int], tuple[int]]:
    """One work item per row of d0 elements."""
    rows = n // d0
    local = min(APPLY_2D_LOCAL, 1 << max(0, (rows - 1).bit_length()))
    return (-(-rows // local) * local,), (local,)


def norm_spec(name: str, problem, vw: int, global_size, local_size) -> KernelSpec:
    """The KernelSpec of norm.h kernel ``name`` for ``problem`` (batch norm's program borrows
    some)."""
    return _spec(name, problem, vw, global_size, local_size)


def _groups(units: int) -> tuple[tuple[int], tuple[int]]:
    g = max(1, min(units, MAX_GROUPS))
    return (g * LOCAL,), (LOCAL,)


def _chunks(ctx, K: int, R: int, per_item: int) -> int:
    """How many chunks to split each key's reduction into: enough work-groups to fill the device,
    each with at least a few elements per work item."""
    cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
    target = cus * 8
    most = max(1, R // (LOCAL * per_item * 4))
    return int(max(1, min(most, -(-target // K), 1024)))


def norm_program(ctx, problem: NormProblem, packed: bool) -> Program:
    kind = problem.norm_kind
    op = OP[kind]
    backward = kind in ("bn_bwd", "ln_bwd")
    data_roles = ("x", "dy", "dx") if backward else ("x", "y")
    dims = with_key_index(problem.norm_dims())
    dtype = problem.tensors()["x"].dtype
    view = view8(dims, ("x", "y", "dy", "dx", "stat", "param", "k"))
    K, R = view.K, view.R
    n = math.prod(d.length for d in dims if not d.key)
    geo: PackedGeometry | None = None
    if packed:
        g = packed_geometry(dims, data_roles)
        assert isinstance(g, PackedGeometry), g
        geo = g
    pmap = problem.param_map() if problem.affine else None
    steps: list[Launch] = []
    ws = Workspace()

    def t(role: str | None):
        return Tensor(role) if role else ws

    weight = t("weight" if problem.affine else None)
    flags = problem.norm_flags
    if backward:
        flags |= F_DY
        if problem.affine:
            flags |= F_WEIGHTED
    nchunks = 1
    split = geo is not None and uses_2d_apply(ctx) and dtype.itemsize < 8
    split = split and split_keys(geo, pmap, problem.affine and backward)
    if op != OP["bn_infer"]:
        if geo is not None and geo.kind == "cols":
            vw = _vw(
                ctx,
                dtype,
                geo.K % (VEC_BYTES // dtype.itemsize) == 0
                and geo.rstride % (VEC_BYTES // dtype.itemsize) == 0,
            )
            cols = -(-geo.K // (CX * vw))
            cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
            nchunks = int(max(1, min(-(-cus * 4 // cols), geo.rows // (CY * 8), 1024)))
            rpc = -(-geo.rows // nchunks)
            nchunks = -(-geo.rows // rpc)
            spec = _spec("norm_reduce_cols", problem, vw, (cols * CX, nchunks * CY), (CX, CY))
            args = (Tensor("x"), t("dy" if backward else None), ws, np.int64(0), np.int64(geo.K))
            args += (np.int64(geo.rows), np.int64(geo.rstride), np.int64(rpc), np.int32(flags))
            steps.append(Launch(spec, args))
        elif geo is not None and split:
            klo = geo.klo or geo.K
            nchunks, spc = split_chunks(ctx, geo.K // klo, geo.S, geo.sstride * dtype.itemsize)
            spec = _spec("norm_reduce_split_cpu", problem, 1, *cpu_grid(geo.K // klo * nchunks))
            pkm, pkmul = (pmap[2], pmap[3]) if pmap else (1, 0)
            args = (Tensor("x"), t("dy" if backward else None), weight, ws, np.int64(0))
            nums = (geo.K, geo.S, geo.L, geo.kstride, geo.sstride, spc, nchunks)
            args += (*(np.int64(v) for v in nums), np.int32(flags), np.int64(pkm), np.int64(pkmul))
            args += (np.int64(klo), np.int64(geo.khi))
            steps.append(Launch(spec, args))
        elif geo is not None:
            step = VEC_BYTES // dtype.itemsize
            ok = geo.L % step == 0 and geo.kstride % step == 0 and geo.sstride % step == 0
            ok = ok and geo.khi % step == 0
            vw = _vw(ctx, dtype, ok)
            nchunks = _chunks(ctx, geo.K, geo.S * geo.L, vw)
            chunk = -(-(geo.S * geo.L) // nchunks)
            chunk = -(-chunk // vw) * vw
            nchunks = -(-(geo.S * geo.L) // chunk)
            pkm, pkmul, pjd = (pmap[2], pmap[3], pmap[4]) if pmap else (1, 0, 1)
            if uses_2d_apply(ctx):
                nchunks = serial_chunks(ctx, geo.K, geo.S * geo.L)
                chunk = -(-(geo.S * geo.L) // nchunks)
                nchunks = -(-(geo.S * geo.L) // chunk)
                spec = _spec("norm_reduce_rows_serial", problem, 1, *serial_grid(geo.K * nchunks))
            else:
                spec = _spec("norm_reduce_rows", problem, vw, *_groups(geo.K * nchunks))
            args = (Tensor("x"), t("dy" if backward else None), weight, ws, np.int64(0), np.int64(geo.K))
            args += tuple(np.int64(v) for v in (geo.S, geo.L, geo.kstride, geo.sstride, chunk, nchunks))
            args += (np.int32(flags), np.int64(pkm), np.int64(pkmul), np.int64(pjd))
            args += (np.int64(geo.klo or geo.K), np.int64(geo.khi))
            steps.append(Launch(spec, args))
        else:
            nchunks = _chunks(ctx, K, R, 1)
            chunk = -(-R // nchunks)
            nchunks = -(-R // chunk)
            spec = _spec("norm_reduce_generic", problem, 1, *_groups(K * nchunks))
            args = (Tensor("x"), t("dy" if backward else None), weight, ws, np.int64(0), np.int64(K))
            args += (np.int64(R), np.int64(chunk), np.int64(nchunks), np.int32(flags), *view.lens_args())
            args += (*view.stride_args("x"), *view.stride_args("dy"), *view.stride_args("param"))
            steps.append(Launch(spec, args))
    part_floats = 4 * K * nchunks if op != OP["bn_infer"] else 0
    coef = part_floats
    workspace = (part_floats + 6 * K) * 4

    roles = problem.finalize_roles()
    gs, ls = grid_1d(K)
    spec = _spec("norm_finalize", problem, 1, gs, ls)
    args = (Tensor("x"), ws, *(t(roles.get(r)) for r in ("scale", "bias", "s_a", "s_b", "s_c", "s_d")))
    args += (np.int64(0), np.int64(coef), np.int64(K), np.int64(nchunks), np.float32(n), np.int32(op))
    args += (np.int32(flags), Scalar("epsilon", "float32", problem.epsilon))
    args += (Scalar("exp_avg_factor", "float32", getattr(problem, "exp_avg_factor", 1.0)),)
    args += (*view.lens_args(), *view.stride_args("x"), *view.stride_args("stat"))
    steps.append(Launch(spec, args))

    affine = np.int32(1 if problem.affine else 0)
    coef2: int | None = None  # the expanded coefficients of cycling keys (CPU OpenCL)
    cyc = None
    if geo is not None:
        if problem.affine and pmap is None:
            raise AssertionError("packed apply with per-element weights needs param_map()")
        pd, pm = (pmap[0], pmap[1]) if pmap else (1, 1)
        vw = _vw(ctx, dtype, True)
        gs, ls = grid_1d(-(-geo.n // vw))
        tail = tuple(np.int64(v) for v in (coef, K, geo.n, geo.kd, geo.km, pd, pm)) + (affine,)
        tail += (np.int64(geo.kd2 or geo.n), np.int64(geo.kmul2))
        flat = apply_2d_layout(geo.n, geo.kd, geo.km, geo.kd2, geo.kmul2, pd, pm, problem.affine)
        cyc = cycling_keys(geo.n, geo.kd, geo.km, geo.kd2, geo.kmul2, K, pd, pm, problem.affine)
        if uses_2d_apply(ctx) and flat is None and cyc is not None and dtype.itemsize < 8:
            coef2 = workspace // 4
            steps += _cycling_apply(problem, geo, cyc, backward, coef, coef2, weight, ws)
            workspace += 6 * cyc[1] * 4
        elif uses_2d_apply(ctx) and flat is not None:
            d0, kq, kq2, kmode, pq, pmode = flat
            spec = _spec("norm_apply_2d", problem, 1, *apply_2d_grid(geo.n, d0))
            args = (Tensor("x"), Tensor("dy") if backward else Tensor("x"), Tensor("dx" if backward else "y"))
            args += (ws, weight, t("bias" if problem.affine and not backward else None), np.int64(coef))
            args += tuple(np.int64(v) for v in (K, geo.n // d0, d0, kq, geo.km, kq2, geo.kmul2))
            args += (np.int32(kmode),)
            args += (np.int64(pq), np.int64(pm), np.int32(pmode), affine, np.int32(backward))
            steps.append(Launch(spec, args))
        elif backward:
            spec = _spec("norm_bwd_packed", problem, vw, gs, ls)
            steps.append(Launch(spec, (Tensor("x"), Tensor("dy"), Tensor("dx"), ws, weight, *tail)))
        else:
            spec = _spec("norm_fwd_packed", problem, vw, gs, ls)
            bias = t("bias" if problem.affine else None)
            steps.append(Launch(spec, (Tensor("x"), Tensor("y"), ws, weight, bias, *tail)))
    else:
        gs, ls = grid_1d(K * R)
        head = (np.int64(coef), np.int64(K), np.int64(R), affine, *view.lens_args(), *view.stride_args("x"))
        if backward:
            spec = _spec("norm_bwd_generic", problem, 1, gs, ls)
            args = (Tensor("x"), Tensor("dy"), Tensor("dx"), ws, weight, *head)
            args += (*view.stride_args("dy"), *view.stride_args("dx"), *view.stride_args("param"))
        else:
            spec = _spec("norm_fwd_generic", problem, 1, gs, ls)
            args = (Tensor("x"), Tensor("y"), ws, weight, t("bias" if problem.affine else None), *head)
            args += (*view.stride_args("y"), *view.stride_args("param"))
        steps.append(Launch(spec, args))

    pgrad = getattr(problem, "packed_pgrad", lambda: None)() if packed else None
    if kind == "ln_bwd" and problem.affine and coef2 is not None and cyc_pgrad(geo, cyc, pgrad):
        part = workspace // 4
        nchunks = _pgrad_chunks(ctx, pgrad)
        rpc = -(-pgrad.rows // nchunks)
        nchunks = -(-pgrad.rows // rpc)
        spec = _spec("norm_pgrad_cyc_cpu", problem, 1, *cpu_grid(nchunks))
        nums = (part, coef2, cyc[1], pgrad.P, pgrad.rows, rpc, nchunks, pgrad.rdiv)
        steps.append(Launch(spec, (Tensor("x"), Tensor("dy"), ws, *(np.int64(v) for v in nums))))
        gs, ls = grid_1d(pgrad.P)
        finish = _spec("norm_pgrad_finish", problem, 1, gs, ls)
        fargs = (ws, Tensor("dweight"), Tensor("dbias"), np.int64(part), np.int64(pgrad.P), np.int64(nchunks))
        steps.append(Launch(finish, fargs))
        workspace += 2 * pgrad.P * nchunks * 4
    elif kind == "ln_bwd" and problem.affine and pgrad is not None:
        part = workspace // 4
        steps += _packed_pgrad(ctx, problem, pgrad, part, coef, K)
        workspace += 2 * pgrad.P * _pgrad_chunks(ctx, pgrad) * 4
    elif kind == "ln_bwd" and problem.affine and "dweight" in problem.tensors():
        pdims = [Dim(d.length, d.stride("param") != 0, d.strides) for d in dims]
        pview = view8(pdims, ("x", "dy", "k", "param"), "weight.lens")
        P, PR = pview.K, pview.R
        spec = _spec("norm_pgrad_generic", problem, 1, *_groups(P))
        args = (Tensor("x"), Tensor("dy"), ws, Tensor("dweight"), Tensor("dbias"), np.int64(coef))
        args += (np.int64(K), np.int64(P), np.int64(PR), *pview.lens_args(), *pview.stride_args("x"))
        args += (*pview.stride_args("dy"), *pview.stride_args("k"), *pview.stride_args("param"))
        steps.append(Launch(spec, args))
    return Program(tuple(steps), workspace)


def _pgrad_chunks(ctx, g: PgradGeometry) -> int:
    """Chunks of the packed weight-gradient reduction: enough work-groups to fill the device."""
    cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
    if g.kind == "cols" and uses_2d_apply(ctx):
        return int(max(1, min(cus * 4, g.rows)))
    if g.kind == "cols":
        groups = -(-g.P // CX)
        return int(max(1, min(-(-cus * 4 // groups), g.rows // (CY * 8), 1024)))
    return _chunks(ctx, g.P, g.S * g.L, 1)


def _packed_pgrad(ctx, problem, g: PgradGeometry, part: int, coef: int, K: int) -> list[Launch]:
    """dweight, dbias of a packed layer / group norm: partial sums per chunk, then their sum."""
    nchunks = _pgrad_chunks(ctx, g)
    common = (Tensor("x"), Tensor("dy"), Workspace(), np.int64(part), np.int64(coef), np.int64(K))
    if g.kind == "cols" and uses_2d_apply(ctx):
        rpc = -(-g.rows // nchunks)
        nchunks = -(-g.rows // rpc)
        spec = _spec("norm_pgrad_cols_serial", problem, 1, *serial_grid(nchunks))
        nums = (g.P, g.rows, g.rstride, rpc, nchunks, g.rdiv, g.rmul, g.cdiv)
        args = (*common, *(np.int64(v) for v in nums))
    elif g.kind == "cols":
        rpc = -(-g.rows // nchunks)
        nchunks = -(-g.rows // rpc)
        spec = _spec("norm_pgrad_cols", problem, 1, (-(-g.P // CX) * CX, nchunks * CY), (CX, CY))
        args = (*common, *(np.int64(v) for v in (g.P, g.rows, g.rstride, rpc, g.rdiv, g.rmul, g.cdiv)))
    else:
        chunk = -(-(g.S * g.L) // nchunks)
        nchunks = -(-(g.S * g.L) // chunk)
        if uses_2d_apply(ctx):  # CPU OpenCL: the serial kernel, same arguments
            spec = _spec("norm_pgrad_rows_serial", problem, 1, *serial_grid(g.P * nchunks))
        else:
            spec = _spec("norm_pgrad_rows", problem, 1, *_groups(g.P * nchunks))
        args = (*common, *(np.int64(v) for v in (g.P, g.S, g.L, g.pstride, g.sstride, chunk, nchunks)))
        args += (np.int64(g.smul), np.int64(g.pdiv))
    gs, ls = grid_1d(g.P)
    finish = _spec("norm_pgrad_finish", problem, 1, gs, ls)
    fargs = (Workspace(), Tensor("dweight"), Tensor("dbias"), np.int64(part), np.int64(g.P))
    fargs += (np.int64(nchunks),)
    return [Launch(spec, args), Launch(finish, fargs)]


def packed_reason(problem: NormProblem) -> str | None:
    """Why the dense kernels do not apply, or None."""
    backward = problem.norm_kind in ("bn_bwd", "ln_bwd")
    g = packed_geometry(problem.norm_dims(), ("x", "dy", "dx") if backward else ("x", "y"))
    if isinstance(g, str):
        return g
    if problem.affine and problem.param_map() is None:
        return "the weights are not laid out along the data"
    if g.kind == "cols" and problem.affine:
        return "per-element weights with a contiguous key"
    return None


LN_ROWS_PER_MOST = 8  # vectors per work item of ln_rows_fwd


def ln_rows_shape(ctx, problem) -> tuple[int, int, int, int] | str:
    """(L, vw, local, per) of the one-pass layer norm kernels, or why they do not apply: x
    row-major (rows of L normalised elements), y (dy, dx) and the statistics packed, a row in
    registers."""
    if getattr(problem, "primitive", None) != "layernorm":
        return "not a layer norm"
    if not problem.x.packed:
        return "x is not row-major"
    t = problem.tensors()
    roles = ("y", "mean", "rstd") if problem.norm_kind == "ln_fwd" else ("dy", "dx", "mean", "rstd")
    if any(not t[r].packed for r in roles):
        return "the data or the statistics are not packed"
    L = problem.weight_desc.element_count
    dtype = problem.x.dtype
    vw = _vw(ctx, dtype, L % (VEC_BYTES // dtype.itemsize) == 0)
    vectors = -(-L // vw)
    local = min(LOCAL, max(32, 1 << max(0, (vectors - 1).bit_length())))
    per = -(-vectors // local)
    if per > LN_ROWS_PER_MOST:
        return f"rows of {L} elements do not fit the registers"
    return L, vw, local, 1 << max(0, (per - 1).bit_length())


def ln_rows_program(ctx, problem) -> Program:
    """ln_rows_fwd: one work-group per row, one pass over x."""
    shape = ln_rows_shape(ctx, problem)
    assert not isinstance(shape, str), shape
    L, vw, local, per = shape
    rows = problem.x.element_count // L
    if cpu_kernels(ctx) and problem.x.dtype.itemsize < 8:
        return _ln_rows_cpu_program(ctx, problem, L, rows)
    if problem.norm_kind == "ln_bwd":
        return _ln_rows_bwd_program(ctx, problem, L, vw, local, per, rows)
    spec = _spec("ln_rows_fwd", problem, vw, (min(rows, MAX_GROUPS) * local,), (local,))
    spec = KernelSpec(spec.file, spec.name, {**dict(spec.defines), "LN_LOCAL": local, "LN_PER": per},
                      spec.global_size, spec.local_size)  # fmt: skip
    w = Tensor("weight") if problem.affine else Tensor("x")
    b = Tensor("bias") if problem.affine else Tensor("x")
    args = (Tensor("x"), Tensor("y"), w, b, Tensor("mean"), Tensor("rstd"), np.int64(rows), np.int32(L))
    args += (Scalar("epsilon", "float32", problem.epsilon), np.int32(1 if problem.affine else 0))
    return Program((Launch(spec, args),))


def _ln_rows_cpu_program(ctx, problem, L: int, rows: int) -> Program:
    """ln_rows_fwd_cpu (a work item per row) or ln_rows_bwd_cpu (a work item per chunk of rows,
    then ln_pgrad_finish over the chunks' weight-gradient rows when there are weights)."""
    affine = problem.affine
    w = Tensor("weight") if affine else Tensor("x")
    if problem.norm_kind != "ln_bwd":
        spec = _spec("ln_rows_fwd_cpu", problem, 1, *cpu_grid(rows))
        b = Tensor("bias") if affine else Tensor("x")
        args = (Tensor("x"), Tensor("y"), w, b, Tensor("mean"), Tensor("rstd"), np.int64(rows), np.int32(L))
        args += (Scalar("epsilon", "float32", problem.epsilon), np.int32(1 if affine else 0))
        return Program((Launch(spec, args),))
    cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
    nchunks = max(1, min(rows, cus * 4))
    rpc = -(-rows // nchunks)
    nchunks = -(-rows // rpc)
    spec = _spec("ln_rows_bwd_cpu", problem, 1, *cpu_grid(nchunks))
    ws = Workspace()
    flag = np.int32(1 if affine else 0)
    args = (Tensor("x"), Tensor("dy"), w, Tensor("mean"), Tensor("rstd"), Tensor("dx"), ws)
    args += (np.int64(rows), np.int32(L), flag, flag, np.int64(rpc), np.int64(nchunks))
    steps = [Launch(spec, args)]
    if not affine:
        return Program(tuple(steps), 0)
    finish = _spec("ln_pgrad_finish", problem, 1, (-(-L // LN_FX) * LN_FX, LN_FY), (LN_FX, LN_FY))
    steps.append(Launch(finish, (ws, Tensor("dweight"), Tensor("dbias"), np.int64(L), np.int64(nchunks))))
    return Program(tuple(steps), 2 * nchunks * L * 4)


LN_BWD_THREADS = 512  # work items per work-group of ln_rows_bwd on CUDA (several rows)
LN_BWD_GROUPS_PER_CU = 4  # resident work-groups per compute unit (each writes a partial row pair)
LN_FX, LN_FY = 32, 16  # ln_pgrad_finish's work-group


def _ln_rows_bwd_program(ctx, problem, L: int, vw: int, local: int, per: int, rows: int) -> Program:
    """ln_rows_bwd (dx, and per work-group partial sums of dweight / dbias), then
    ln_pgrad_finish when there are weights."""
    cuda = getattr(ctx, "backend_name", None) == "cuda"
    nrows = max(1, LN_BWD_THREADS // local) if cuda else 1
    cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
    groups = max(1, min(-(-rows // nrows), cus * (LN_BWD_GROUPS_PER_CU if cuda else 2), MAX_GROUPS))
    spec = _spec("ln_rows_bwd", problem, vw, (groups * local, nrows), (local, nrows))
    defines = {**dict(spec.defines), "LN_LOCAL": local, "LN_PER": per, "LN_ROWS": nrows}
    spec = KernelSpec(spec.file, spec.name, defines, spec.global_size, spec.local_size)
    affine = problem.affine
    w = Tensor("weight") if affine else Tensor("x")
    ws = Workspace()
    args = (Tensor("x"), Tensor("dy"), w, Tensor("mean"), Tensor("rstd"), Tensor("dx"), ws)
    args += (np.int64(rows), np.int32(L), np.int32(1 if affine else 0), np.int32(1 if affine else 0))
    steps = [Launch(spec, args)]
    if not affine:
        return Program(tuple(steps), 0)
    finish = _spec("ln_pgrad_finish", problem, 1, (-(-L // LN_FX) * LN_FX, LN_FY), (LN_FX, LN_FY))
    fargs = (ws, Tensor("dweight"), Tensor("dbias"), np.int64(L), np.int64(groups))
    steps.append(Launch(finish, fargs))
    return Program(tuple(steps), 2 * groups * L * 4)


__all__ = ["OP", "NormProblem", "ln_rows_program", "ln_rows_shape", "norm_program", "packed_reason"]
