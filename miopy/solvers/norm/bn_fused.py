"""Batch norm training forward and backward in one kernel (kernels/common/bn_fused.h, CUDA):
each key's data held in registers by a team of work items or by a thread-block cluster, so x
(and dy) are read once and y (dx) written once, no workspace, one launch. For the small and
medium ResNet shapes, where the three launches of the packed solvers (reduce, finalise, apply)
cost more than the data; find keeps the packed ones where they are faster.

The plan (``fused_plan``) picks the work-group size, the cluster size and the vectors a work item
holds so that the key fits the registers (RAW_WORDS 32-bit words of held data a work item; backward
holds x alone and reads dy again where x and dy do not fit), then
the grid that fills the device best: at least ``FILL`` of the SMs busy (two work-groups an SM for
the rows kernel), rows of 32 bytes at least and 64 preferred (channels-last), the smallest
cluster, the smallest work-group.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from miopy.solution import KernelSpec, Launch, Program, Scalar, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.launch import LOCAL
from miopy.solvers.norm.program import F_DY, VEC_BYTES
from miopy.solvers.norm.view import PackedGeometry, packed_geometry

RAW_WORDS = 64  # registers of held data a work item (x, and dy backward)
CLUSTERS = (1, 2, 4, 8)  # portable thread-block cluster sizes (sm_90 and later)
CLUSTER_ARCH = 90
LOCALS = (256, 512)  # work items per work-group (__launch_bounds__: at most 128 registers each)
MOST_CHANNELS = 128  # bn_fused_cols: channels per cluster (its shared memory)
SECTOR = 32  # bn_fused_cols: the least contiguous bytes of a row a cluster reads (a DRAM sector)
ROW_BYTES = 64  # bn_fused_cols: contiguous bytes of a row worth reading at once
MIN_PER = 2  # vectors a work item should have before the work is split finer
FILL = 0.9  # share of the SMs a grid should keep busy before other preferences count
KERNEL_IDS = {"bn_fused_rows": 1, "bn_fused_cols": 2, "bn_infer_flat": 3}
INFER_THREADS_PER_CU = 2048  # bn_infer_flat: work items per SM (full occupancy)
INFER_VECTORS = 4  # BNF_AU: 16-byte vectors in flight per work item
MOST_PERIOD = 1 << 24


@dataclass(frozen=True)
class FusedPlan:
    kernel: str
    vw: int  # elements a held vector (16 bytes, or 1)
    local: int  # work items a work-group
    cluster: int  # work-groups a cluster
    per: int  # vectors held a work item
    team: int  # rows: work items a key (a power of two, >= 32)
    tx: int  # cols: work items across the channels
    blocks: int
    geo: PackedGeometry
    reload: bool = False  # backward: dy read again for dx instead of held


def _arch(ctx) -> int:
    info = getattr(ctx, "info", None)
    match = re.fullmatch(r"sm_(\d+)a?", getattr(info, "arch", "") or "")
    return int(match.group(1)) if match else 0


def _sms(ctx) -> int:
    return int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)


def _score(per: int, blocks: int, sms: int, *rest) -> tuple:
    """Plans that give a work item at least MIN_PER vectors first, then the fuller grid."""
    return (per < MIN_PER, -min(blocks, int(FILL * sms)), *rest)


ROWS_WAVES = 2  # bn_fused_rows: work-groups per SM to aim for (short work-groups, one key each)


def _cap(vw: int, bwd: bool, reload: bool) -> int:
    """Vectors a work item may hold: RAW_WORDS of x, and of dy backward unless it is reloaded."""
    return (RAW_WORDS // (4 if vw > 1 else 1)) // (2 if bwd and not reload else 1)


def _rows_plan(
    geo: PackedGeometry, item: int, bwd: bool, clusters, sms: int, reload: bool = False
) -> FusedPlan | None:
    step = VEC_BYTES // item
    vec = geo.L % step == 0 and geo.kstride % step == 0 and geo.sstride % step == 0
    vw = step if vec else 1
    nv = geo.S * geo.L // vw
    cap = _cap(vw, bwd, reload)
    best = None
    for cl in clusters:
        for local in LOCALS:
            team = 32
            while team <= local:
                if cl == 1 or team == local:
                    per = -(-nv // (team * cl))
                    if per <= cap:
                        blocks = -(-geo.K // (local // team)) * cl
                        plan = FusedPlan("bn_fused_rows", vw, local, cl, per, team, 0, blocks, geo, reload)
                        key = _score(per, blocks, ROWS_WAVES * sms, cl, local, team)
                        if best is None or key < best[0]:
                            best = (key, plan)
                team *= 2
    return None if best is None else best[1]


def _cols_plan(
    geo: PackedGeometry, item: int, bwd: bool, clusters, sms: int, reload: bool = False
) -> FusedPlan | None:
    step = VEC_BYTES // item
    vw = step if geo.K % step == 0 and geo.rstride % step == 0 else 1
    cap = _cap(vw, bwd, reload)
    widest = max(vw, 1 << (geo.K - 1).bit_length())
    best = None
    for cl in clusters:
        for local in LOCALS:
            tx = 1
            while tx <= 32 and tx * vw <= min(MOST_CHANNELS, widest):
                if tx * vw * item < SECTOR and tx * vw < widest:
                    tx *= 2
                    continue
                per = -(-geo.rows // ((local // tx) * cl))
                if per <= cap:
                    blocks = -(-geo.K // (tx * vw)) * cl
                    plan = FusedPlan("bn_fused_cols", vw, local, cl, per, 0, tx, blocks, geo, reload)
                    key = _score(per, blocks, sms, -min(tx * vw * item, ROW_BYTES), cl, local)
                    if best is None or key < best[0]:
                        best = (key, plan)
                tx *= 2
    return None if best is None else best[1]


def spatial_geometry(ctx, problem, kind: str) -> PackedGeometry | str:
    """What the one-launch CUDA batch norms (this module's and bn_grid's) share: a spatial
    ``kind`` pass ("bn_train" / "bn_bwd") on CUDA with contiguous scale and statistics, over
    packed data; its geometry, or why it does not apply."""
    if getattr(ctx, "backend_name", None) != "cuda":
        return "backend is not CUDA"
    if getattr(problem, "primitive", None) != "bnorm":
        return "not a batch norm"
    if problem.norm_kind != kind:
        return f"pass is {problem.norm_kind}"
    if problem.mode.name != "SPATIAL":
        return "per-activation mode"
    p = problem.param
    if p.lens[1] > 1 and p.strides[1] != 1:
        return "scale and statistics are not contiguous"
    roles = ("x", "dy", "dx") if kind == "bn_bwd" else ("x", "y")
    return packed_geometry(problem.norm_dims(), roles)


def fused_plan(ctx, problem, kind: str) -> FusedPlan | str:
    """The one-kernel batch norm's plan for ``problem``, or why it does not apply."""
    geo = spatial_geometry(ctx, problem, kind)
    if isinstance(geo, str):
        return geo
    bwd = kind == "bn_bwd"
    if geo.kind == "rows" and geo.klo:
        return "a key of two dims"
    if geo.kind == "cols" and geo.rstride != geo.K:
        return "rows are not packed"
    clusters = CLUSTERS if _arch(ctx) >= CLUSTER_ARCH else (1,)
    item = problem.tensors()["x"].dtype.itemsize
    make = _rows_plan if geo.kind == "rows" else _cols_plan
    plan = make(geo, item, bwd, clusters, _sms(ctx))
    if plan is None and bwd:  # x alone in registers, dy read again from L2
        plan = make(geo, item, bwd, clusters, _sms(ctx), reload=True)
        if plan is not None and plan.blocks > _sms(ctx):
            # measured on the H200: one wave wins (32x128x28x28 fp16: 26.9 us against the packed
            # solver's 31.1), two lose (32x512x28x28: 89.8 against 72.8)
            return "x does not fit the registers of one wave of clusters"
    if plan is None:
        return "a key's data do not fit the registers of a cluster"
    return plan


def fused_program(problem, plan: FusedPlan) -> Program:
    bwd = problem.norm_kind == "bn_bwd"
    geo = plan.geo
    defines = {
        "MIOPY_DTYPE": problem.tensors()["x"].dtype.code,
        "NORM_PTYPE": problem.param_dtype.code,
        "NORM_VW": plan.vw,
        "BN_BWD": int(bwd),
        "BNF_ONLY": KERNEL_IDS[plan.kernel],
        "BNF_BT": plan.local,
        "BNF_CL": plan.cluster,
        "BNF_FR": plan.per,
        "BNF_RELOAD": int(plan.reload),
    }
    if plan.kernel == "bn_fused_rows":
        defines["BNF_TEAM"] = plan.team
    else:
        defines["BNF_TX"] = plan.tx
    spec = KernelSpec("bn_fused", plan.kernel, defines, (plan.blocks * plan.local,), (plan.local,))
    roles = problem.finalize_roles()

    def t(role: str) -> Tensor:
        name = roles.get(role)
        return Tensor(name) if name else Tensor("x")  # unused: the flags keep the kernel off it

    args = (Tensor("x"), Tensor("dy") if bwd else Tensor("x"), Tensor("dx" if bwd else "y"))
    args += tuple(t(r) for r in ("scale", "bias", "s_a", "s_b", "s_c", "s_d"))
    if plan.kernel == "bn_fused_rows":
        shape = (geo.K, geo.S, geo.L, geo.kstride, geo.sstride)
    else:
        shape = (geo.K, geo.rows, geo.rstride)
    flags = problem.norm_flags | (F_DY if bwd else 0)
    args += (*(np.int32(v) for v in shape), np.int32(flags), Scalar("epsilon", "float32", problem.epsilon))
    args += (Scalar("exp_avg_factor", "float32", getattr(problem, "exp_avg_factor", 1.0)),)
    return Program((Launch(spec, args),))


def infer_flat_launch(ctx, problem) -> Launch | str:
    """bn_infer_flat's launch for an inference problem, or why it does not apply."""
    if getattr(ctx, "backend_name", None) != "cuda":
        return "backend is not CUDA"
    if getattr(problem, "primitive", None) != "bnorm":
        return "not a batch norm"
    if problem.norm_kind != "bn_infer":
        return f"pass is {problem.norm_kind}"
    if problem.mode.name != "SPATIAL":
        return "per-activation mode"
    p = problem.param
    if p.lens[1] > 1 and p.strides[1] != 1:
        return "scale and statistics are not contiguous"
    geo = packed_geometry(problem.norm_dims(), ("x", "y"))
    if isinstance(geo, str):
        return geo
    if geo.klo or (geo.kind == "cols" and geo.rstride != geo.K) or geo.km != geo.K:
        return "keys are not one dim of x"
    item = problem.tensors()["x"].dtype.itemsize
    step = VEC_BYTES // item
    ok = geo.n % step == 0 and (geo.kd % step == 0 or (geo.kd == 1 and geo.K % step == 0))
    vw = step if ok else 1
    nv = geo.n // vw
    groups = max(1, min(-(-nv // (LOCAL * INFER_VECTORS)), _sms(ctx) * INFER_THREADS_PER_CU // LOCAL))
    if geo.kd == 1 and vw > 1:  # channels-last: a grid stride that keeps each work item's channels
        period = math.lcm(LOCAL, geo.K // vw)
        if period > MOST_PERIOD:
            return "too many channels for a fixed-channel grid"
        groups = -(-groups * LOCAL // period) * period // LOCAL
    defines = {
        "MIOPY_DTYPE": problem.tensors()["x"].dtype.code,
        "NORM_PTYPE": problem.param_dtype.code,
        "NORM_VW": vw,
        "BNF_ONLY": KERNEL_IDS["bn_infer_flat"],
        "BNF_AU": INFER_VECTORS,
    }
    spec = KernelSpec("bn_fused", "bn_infer_flat", defines, (groups * LOCAL,), (LOCAL,))
    stats = (Tensor("scale"), Tensor("bias"), Tensor("estimated_mean"), Tensor("estimated_var"))
    args = (Tensor("x"), Tensor("y"), *stats, np.int32(geo.K), np.int32(geo.n), np.int32(geo.kd))
    return Launch(spec, (*args, Scalar("epsilon", "float32", problem.epsilon)))


class BnFwdTrainingFused(Solver):
    """Batch norm training forward in one kernel: x read once, y written once (see the module)."""

    primitive = "bnorm"
    name = "BnFwdTrainingFused"
    id = 406
    algorithm = "direct"
    dynamic = False
    kind = "bn_train"

    def is_applicable(self, ctx, problem) -> str | None:
        plan = fused_plan(ctx, problem, self.kind)
        return plan if isinstance(plan, str) else None

    def workspace_size(self, ctx, problem) -> int:
        return 0

    def get_program(self, ctx, problem, config=None) -> Program:
        plan = fused_plan(ctx, problem, self.kind)
        assert not isinstance(plan, str), plan
        return fused_program(problem, plan)


class BnBwdFused(BnFwdTrainingFused):
    """Batch norm backward in one kernel: x and dy read once, dx written once."""

    name = "BnBwdFused"
    id = 407
    kind = "bn_bwd"


class BnFwdInferenceFlat(BnFwdTrainingFused):
    """Batch norm inference forward in one streaming kernel, the coefficients computed in it (no
    finalise launch)."""

    name = "BnFwdInferenceFlat"
    id = 408
    kind = "bn_infer"

    def is_applicable(self, ctx, problem) -> str | None:
        launch = infer_flat_launch(ctx, problem)
        return launch if isinstance(launch, str) else None

    def get_program(self, ctx, problem, config=None) -> Program:
        launch = infer_flat_launch(ctx, problem)
        assert not isinstance(launch, str), launch
        return Program((launch,))


__all__ = [
    "BnBwdFused",
    "BnFwdInferenceFlat",
    "BnFwdTrainingFused",
    "FusedPlan",
    "fused_plan",
    "infer_flat_launch",
]
