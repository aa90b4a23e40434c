"""The Program of the packed batch-norm solvers (kernels/common/bnorm.h): reduce, finalise, apply.

Sizes are chosen to fill the device: the reduction gets about ``BLOCKS_PER_CU`` work-groups per
compute unit at every shape (columns: channel blocks x row slabs; rows: key x chunk units), the
apply enough work items for full occupancy, its grid a multiple of the keys' period so that a
work item keeps its channels' coefficients in registers.
"""

from __future__ import annotations

import math

import numpy as np

from miopy.solution import KernelSpec, Launch, Program, Scalar, Tensor, Workspace
from miopy.solvers.launch import LOCAL, MAX_GROUPS, cpu_grid, cpu_kernels
from miopy.solvers.norm.program import (
    F_DY,
    OP,
    NormProblem,
    apply_2d_grid,
    apply_2d_layout,
    norm_spec,
    serial_chunks,
    serial_grid,
    uses_2d_apply,
)
from miopy.solvers.norm.view import PackedGeometry, packed_geometry, view8, with_key_index

BN_IDS = {
    "bn_reduce_cols": 1,
    "bn_reduce_rows": 2,
    "bn_finalize": 3,
    "bn_apply": 4,
    "bn_apply_2d": 5,
    "bn_reduce_cols_cpu": 6,
    "bn_apply_cpu": 7,
}
VEC_BYTES = 16
BLOCKS_PER_CU = 4  # reduction work-groups per compute unit
THREADS_PER_CU = 2048  # apply: work items per compute unit (full occupancy on NVIDIA)
FINALIZE_KEYS = 32  # bn_finalize: at most this many keys per work-group (the rest: lanes)
CPU_FINALIZE_KEYS = 16  # bn_finalize on CPU OpenCL: keys (work items) per work-group, one lane
MAX_CHUNKS = 1024
MAX_APPLY_PERIOD = 1 << 24
APPLY_VECTORS = 4  # bn_apply_cl: 16-byte vectors in flight per work item (BN_AU)


def _cus(ctx) -> int:
    return int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)


def _vw(ctx, itemsize: int, ok: bool) -> int:
    """16-byte vectors on CUDA when the geometry allows; OpenCL compilers vectorise work items."""
    if not ok or getattr(ctx, "backend_name", None) != "cuda":
        return 1
    return VEC_BYTES // itemsize


def _spec(name: str, problem, vw: int, bwd: bool, gs, ls, tx: int = 32, unr: int = 2) -> KernelSpec:
    defines = {
        "MIOPY_DTYPE": problem.tensors()["x"].dtype.code,
        "NORM_PTYPE": problem.param_dtype.code,
        "NORM_VW": vw,
        "BN_ONLY": BN_IDS[name],
        "BN_BWD": int(bwd),
    }
    if name == "bn_reduce_cols":
        defines["BN_TX"] = tx
        defines["BN_UNR"] = unr
    if name == "bn_finalize":
        defines["BN_FK"] = tx
    return KernelSpec("bnorm", name, defines, gs, ls)


CPU_TILE = {False: 64, True: 32}  # bn_reduce_cols_cpu: channels per work item (BN_CB * 8)
CPU_UNITS_PER_CU = 8  # bn_reduce_cols_cpu: work items per compute unit


def _reduce_cols_cpu(ctx, problem, geo: PackedGeometry, bwd: bool, ws) -> tuple[Launch, int]:
    """bn_reduce_cols_cpu: a work item per (chunk of rows, tile of channels)."""
    tiles = -(-geo.K // CPU_TILE[bwd])
    nchunks = int(max(1, min(-(-_cus(ctx) * CPU_UNITS_PER_CU // tiles), geo.rows // 8, MAX_CHUNKS)))
    rpc = -(-geo.rows // nchunks)
    nchunks = -(-geo.rows // rpc)
    spec = _spec("bn_reduce_cols_cpu", problem, 1, bwd, *cpu_grid(tiles * nchunks, 4))
    args = (Tensor("x"), Tensor("dy") if bwd else ws, ws, np.int32(geo.K), np.int32(geo.rows))
    args += (np.int32(geo.rstride), np.int32(rpc), np.int32(nchunks))
    return Launch(spec, args), nchunks


def _reduce_cols(ctx, problem, geo: PackedGeometry, bwd: bool, ws, flags: int) -> tuple[Launch, int]:
    item = problem.tensors()["x"].dtype.itemsize
    if cpu_kernels(ctx) and item < 8 and geo.K % 8 == 0:
        return _reduce_cols_cpu(ctx, problem, geo, bwd, ws)
    vw = _vw(ctx, item, geo.K % (VEC_BYTES // item) == 0 and geo.rstride % (VEC_BYTES // item) == 0)
    kv = -(-geo.K // vw)  # vector columns
    tx = min(32, 1 << (kv - 1).bit_length())  # work items across columns (a power of two)
    ty = LOCAL // tx
    cols = -(-kv // tx)
    want = max(1, -(-_cus(ctx) * BLOCKS_PER_CU // cols))
    nchunks = int(max(1, min(want, geo.rows // (2 * ty), MAX_CHUNKS)))
    rpc = -(-geo.rows // nchunks)
    nchunks = -(-geo.rows // rpc)
    unr = 2 if bwd else 4  # rows per step: loads in flight, within the registers
    spec = _spec("bn_reduce_cols", problem, vw, bwd, (cols * tx, nchunks * ty), (tx, ty), tx, unr)
    args = (Tensor("x"), Tensor("dy") if bwd else ws, ws, np.int32(geo.K), np.int32(geo.rows))
    args += (np.int32(geo.rstride), np.int32(rpc), np.int32(flags))
    return Launch(spec, args), nchunks


def _reduce_rows(ctx, problem, geo: PackedGeometry, bwd: bool, ws, flags: int) -> tuple[Launch, int]:
    if uses_2d_apply(ctx):  # CPU OpenCL: norm.h's serial row reduction (same partial sums)
        total = geo.S * geo.L
        nchunks = serial_chunks(ctx, geo.K, total)
        chunk = -(-total // nchunks)
        nchunks = -(-total // chunk)
        spec = norm_spec("norm_reduce_rows_serial", problem, 1, *serial_grid(geo.K * nchunks))
        args = (Tensor("x"), Tensor("dy") if bwd else ws, ws, ws, np.int64(0), np.int64(geo.K))
        args += tuple(np.int64(v) for v in (geo.S, geo.L, geo.kstride, geo.sstride, chunk, nchunks))
        args += (np.int32(flags), np.int64(1), np.int64(0), np.int64(1))
        args += (np.int64(geo.klo or geo.K), np.int64(geo.khi))
        return Launch(spec, args), nchunks
    item = problem.tensors()["x"].dtype.itemsize
    step = VEC_BYTES // item
    vw = _vw(ctx, item, geo.L % step == 0 and geo.kstride % step == 0 and geo.sstride % step == 0)
    total = geo.S * geo.L
    want = max(1, -(-_cus(ctx) * BLOCKS_PER_CU * 2 // geo.K))
    most = max(1, total // (LOCAL * vw * 4))
    nchunks = int(max(1, min(want, most, MAX_CHUNKS)))
    chunk = -(-total // nchunks)
    chunk = -(-chunk // vw) * vw
    nchunks = -(-total // chunk)
    groups = max(1, min(geo.K * nchunks, MAX_GROUPS))
    spec = _spec("bn_reduce_rows", problem, vw, bwd, (groups * LOCAL,), (LOCAL,))
    args = (Tensor("x"), Tensor("dy") if bwd else ws, ws, np.int32(geo.K))
    args += tuple(np.int32(v) for v in (geo.S, geo.L, geo.kstride, geo.sstride, chunk, nchunks))
    args += (np.int32(flags),)
    return Launch(spec, args), nchunks


def _apply(ctx, problem, geo: PackedGeometry, bwd: bool, ws, coef: int) -> Launch:
    head = (Tensor("x"), Tensor("dy") if bwd else Tensor("x"), Tensor("dx" if bwd else "y"), ws)
    flat = apply_2d_layout(geo.n, geo.kd, geo.km, geo.kd2, geo.kmul2, 1, 1, False)
    if uses_2d_apply(ctx) and flat is not None and geo.n < 2**31:
        d0, kq, _, kmode, _, _ = flat
        item = problem.tensors()["x"].dtype.itemsize
        name = "bn_apply_cpu" if cpu_kernels(ctx) and item < 8 and d0 % 8 == 0 else "bn_apply_2d"
        spec = _spec(name, problem, 1, bwd, *apply_2d_grid(geo.n, d0))
        tail = (np.int64(coef), *(np.int32(v) for v in (geo.K, geo.n // d0, d0, kq, geo.km, kmode)))
        return Launch(spec, (*head, *tail))
    item = problem.tensors()["x"].dtype.itemsize
    vw = _vw(ctx, item, True)
    nv = -(-geo.n // vw)
    groups = max(1, min(-(-nv // LOCAL), -(-_cus(ctx) * THREADS_PER_CU // LOCAL)))
    kmode = 0
    if geo.kd == 1 and geo.K % vw == 0:
        period = math.lcm(LOCAL, geo.K // vw)  # work items whose stride keeps the channels
        if period <= MAX_APPLY_PERIOD:
            kmode = 2
            groups = -(-groups * LOCAL // period) * period // LOCAL
    elif geo.kd % vw == 0:
        kmode = 1
    if kmode == 2 and vw > 1 and geo.n % vw == 0:
        # channels-last on CUDA: bn_apply_cl, APPLY_VECTORS 16-byte loads in flight a work item
        spec = _spec("bn_apply", problem, vw, bwd, (groups * LOCAL,), (LOCAL,))
        defines = {**dict(spec.defines), "BN_AU": APPLY_VECTORS}
        spec = KernelSpec(spec.file, "bn_apply_cl", defines, spec.global_size, spec.local_size)
        return Launch(spec, (*head, np.int64(coef), np.int32(geo.K), np.int32(geo.n)))
    spec = _spec("bn_apply", problem, vw, bwd, (groups * LOCAL,), (LOCAL,))
    tail = (np.int64(coef), np.int32(geo.K), np.int32(geo.n), np.int32(geo.kd), np.int32(geo.km))
    return Launch(spec, (*head, *tail, np.int32(kmode)))


def bn_packed_program(ctx, problem: NormProblem) -> Program:
    kind = problem.norm_kind
    op = OP[kind]
    bwd = kind == "bn_bwd"
    dims = with_key_index(problem.norm_dims())
    view = view8(dims, ("x", "y", "dy", "dx", "stat", "param", "k"))
    K = view.K
    n = math.prod(d.length for d in dims if not d.key)
    geo = packed_geometry(dims, ("x", "dy", "dx") if bwd else ("x", "y"))
    assert isinstance(geo, PackedGeometry), geo
    ws = Workspace()
    flags = problem.norm_flags | (F_DY if bwd else 0)
    steps: list[Launch] = []
    nchunks = 0
    if op != OP["bn_infer"]:
        make = _reduce_cols if geo.kind == "cols" else _reduce_rows
        launch, nchunks = make(ctx, problem, geo, bwd, ws, flags)
        steps.append(launch)
    coef = 4 * K * nchunks
    workspace = (coef + 6 * K) * 4

    roles = problem.finalize_roles()

    def t(role: str | None):
        return Tensor(role) if role else ws

    # keys per work-group: few where there are few keys, so that the chunks' sums spread over
    # many work items (a work-group's lanes split a key's chunks)
    fk = FINALIZE_KEYS
    while fk > 1 and -(-K // fk) < _cus(ctx):
        fk //= 2
    fgroups = -(-K // fk)
    if cpu_kernels(ctx):
        # a key per work item, its chunks summed serially: PoCL ran the work-groups of 256 items
        # and their barriers' tree sums in 30-50 us for a few hundred keys
        fk = CPU_FINALIZE_KEYS
        fgroups = -(-K // fk)
        spec = _spec("bn_finalize", problem, 1, bwd, (fgroups * fk, 1), (fk, 1), fk)
        defines = {**dict(spec.defines), "BN_FL": 1}
        spec = KernelSpec(spec.file, spec.name, defines, spec.global_size, spec.local_size)
    else:
        spec = _spec("bn_finalize", problem, 1, bwd, (fgroups * fk, LOCAL // fk), (fk, LOCAL // fk), fk)
    args = (Tensor("x"), ws, *(t(roles.get(r)) for r in ("scale", "bias", "s_a", "s_b", "s_c", "s_d")))
    args += (np.int64(0), np.int64(coef), np.int64(K), np.int64(nchunks), np.float32(n), np.int32(op))
    args += (np.int32(flags), Scalar("epsilon", "float32", problem.epsilon))
    args += (Scalar("exp_avg_factor", "float32", getattr(problem, "exp_avg_factor", 1.0)),)
    args += (*view.lens_args(), *view.stride_args("x"), *view.stride_args("stat"))
    steps.append(Launch(spec, args))
    steps.append(_apply(ctx, problem, geo, bwd, ws, coef))
    return Program(tuple(steps), workspace)


__all__ = ["bn_packed_program"]
