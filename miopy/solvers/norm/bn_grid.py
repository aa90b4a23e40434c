"""Batch norm training forward and backward over a channels-last x as one persistent grid
(kernels/common/bn_grid.h, CUDA): x (and dy) read once by the whole GPU, the sums met through a
grid-wide barrier, the outputs written from registers, shared memory and L2. For the large ResNet
shapes (32x64x112x112, 32x256x56x56 ...) whose channels are too long for a cluster's registers
(bn_fused.py) and where the packed solvers' three launches read x twice from DRAM.

Every work-group must be resident at once: the grid is the SMs times the work-groups per SM that
``__launch_bounds__`` guarantees (BNG_MINB), each work-group's shared memory within its share of
the SM's, and the kernel is launched cooperatively, so the driver co-schedules the whole grid (or
refuses it with an error) even on a GPU that other work shares. The barriers use the word of the
grid workspace that the driver gives a cooperative launch, as CUDA's cooperative groups do, in a
way that needs no zeroing (BNG_DRV; with BNG_DRV=0 a first one-block launch zeroes a counter in
our workspace instead: about 1.7 us more a call on the H200).

H200 profile (benchmarks/bn_grid_profile.py, per-phase timestamps, 2026-11-23): every work item
loading its channels' shifts and coefficients itself made a hot spot of those few L2 lines
(phase 2 of 32x512x7x7, one 16-byte store a work item, took 9-12 us; L2 moved 10x the tensor's
bytes); they now go through shared memory, one load per channel and work-group. The per-channel
sums after the first barrier take a work-group per channel where there are few channels
(BNG_GS; a warp's chain of loads per channel took 2-3 us), and forward's phase 1 copies its
shared-memory steps with cp.async, all in flight at once (BNG_ASYNC, sm_80 and later). Backward
loads them through registers, BNG_U at a time: H200, fp16 NHWC batch 32
(benchmarks/bn_grid_sweep.py), the six backward shapes that take the grid were as fast or faster
(64x56x56 19.3 us against 20.0, 512x28x28 38.2 / 39.0, 1024x14x14 23.1 / 23.5, 64x112x112 69.3 /
69.7, 256x56x56 70.7 / 70.7); forward stays mixed (64x112x112 40.2 / 41.0, 64x56x56 15.5 / 15.4,
512x28x28 25.1 / 24.9) and keeps cp.async.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miopy.solution import KernelSpec, Launch, Program, Scalar, Tensor, Workspace
from miopy.solvers.base import Solver
from miopy.solvers.norm.bn_fused import _arch, _sms, fused_plan, spatial_geometry
from miopy.solvers.norm.program import F_DY, VEC_BYTES
from miopy.solvers.norm.view import PackedGeometry

MIN_ARCH = 70  # ld.acquire and __nanosleep
ASYNC_ARCH = 80  # cp.async (the shared-memory steps of phase 1 all in flight at once)
MOST_CHANNELS = 512  # channels a work-group takes (its reduction table in static shared memory)
# (work items, work-groups per SM, steps in registers, streamed steps in flight, steps held in
# shared memory at most) per pass
# (forward: 64 registers a work item, so one register step; two spill a few bytes)
SHAPE = {"bn_train": (512, 2, 1, 4, 64), "bn_bwd": (512, 1, 2, 4, 64)}
SM_RESERVED = 1024  # shared memory the hardware keeps per work-group
# static + dynamic shared memory a launch gets without opting in (the backend opts in only for
# more than this much dynamic shared memory)
DEFAULT_SHARED = 48 * 1024
MOST_INDEX = 2**31


@dataclass(frozen=True)
class GridPlan:
    vw: int  # elements a held vector (16 bytes, or 1)
    local: int  # work items a work-group
    minb: int  # work-groups per SM (all resident)
    tx: int  # work items across a tile's channels
    hold: int  # steps held in registers
    unroll: int  # streamed steps in flight
    tiles: int  # channel tiles
    slices: int  # row slices (R)
    rps: int  # rows a slice (a multiple of local // tx)
    hs: int  # steps held in shared memory
    shared: int  # dynamic shared memory bytes a work-group
    geo: PackedGeometry
    gs: int = 32  # work items per channel adding up the partial sums (BNG_GS)
    async_copy: bool = False  # shared-memory steps copied by cp.async (BNG_ASYNC)

    @property
    def blocks(self) -> int:
        return self.tiles * self.slices


def _reduction_table(local: int, tx: int, vw: int) -> int:
    """Static shared memory of a work-group: the reduction table, the tile's shifts and
    coefficients and the per-channel sums' table."""
    rows = local // 32 if tx < 32 else local // tx
    return (rows + 4) * tx * vw * 4 + 4 * (local // 32) * 4


def grid_plan(ctx, problem, kind: str, shape: tuple[int, ...] | None = None) -> GridPlan | str:
    """The persistent-grid batch norm's plan for ``problem`` (``shape`` as SHAPE's, by default
    SHAPE[kind]), or why it does not apply."""
    geo = spatial_geometry(ctx, problem, kind)
    if isinstance(geo, str):
        return geo
    if _arch(ctx) < MIN_ARCH:
        return f"needs sm_{MIN_ARCH} or later"
    bwd = kind == "bn_bwd"
    if geo.kind != "cols" or geo.rstride != geo.K:
        return "x is not channels-last packed"
    if geo.rows * geo.K >= MOST_INDEX:
        return "tensor too large for 32-bit row indices"
    item = problem.tensors()["x"].dtype.itemsize
    step = VEC_BYTES // item
    vw = step if geo.K % step == 0 else 1
    local, minb, hold, unroll, most_hs = shape or SHAPE[kind]
    kv = geo.K // vw
    tx = min(1 << (kv - 1).bit_length(), MOST_CHANNELS // vw, local)
    ty = local // tx
    tiles = -(-kv // tx)
    resident = _sms(ctx) * minb
    if tiles > resident:
        return "more channel tiles than resident work-groups"
    slices = max(1, min(resident // tiles, -(-geo.rows // ty)))
    rps = -(-geo.rows // slices)
    rps = -(-rps // ty) * ty
    slices = -(-geo.rows // rps)
    per_sm = int(getattr(ctx.info, "max_dynamic_shared", 0) or 0) + SM_RESERVED
    room = per_sm // minb - SM_RESERVED - _reduction_table(local, tx, vw)
    step_bytes = local * (VEC_BYTES if vw > 1 else 4) * (2 if bwd else 1)
    hs = max(0, min(room // step_bytes, rps // ty - hold, most_hs))
    table = _reduction_table(local, tx, vw)
    if hs * step_bytes <= DEFAULT_SHARED < hs * step_bytes + table:
        hs = (DEFAULT_SHARED - table) // step_bytes  # within the default limit (no opt-in asked)
    gs = sum_lanes(local, tiles * slices, geo.K, slices)
    async_copy = _arch(ctx) >= ASYNC_ARCH and vw > 1 and not bwd
    return GridPlan(
        vw, local, minb, tx, hold, unroll, tiles, slices, rps, hs, hs * step_bytes, geo, gs, async_copy
    )


def sum_lanes(local: int, blocks: int, channels: int, partials: int) -> int:
    """Work items per channel that add up its ``partials`` sums after the first barrier: the most
    (a power of two from 32 to ``local``) that still give every channel its own group in one
    round of the grid's ``blocks`` work-groups, and no more than the partials need (one load
    each instead of a warp's chain of loads)."""
    gs = 32
    while gs < local and (local // (2 * gs)) * blocks >= channels and gs < partials:
        gs *= 2
    return gs


def grid_workspace(problem, plan: GridPlan) -> tuple[int, int]:
    """(bytes, offset in 32-bit words of the barrier counter)."""
    ns = 4 if problem.norm_kind == "bn_bwd" else 2
    words = ns * plan.geo.K * plan.slices + 3 * plan.geo.K
    return (words + 2) * 4, words


FUSED_PER_SM = {256: 2, 512: 1}  # work-groups of bn_fused_cols resident per SM (its registers)


def fused_wins(ctx, problem, kind: str) -> bool:
    """Whether the one-kernel solver (bn_fused.py) should come first: it applies, its work-groups
    run in one wave, and backward holds dy (no BNF_RELOAD). Measured crossover (H200, fp16 NHWC
    batch 32, fp32 statistics, 2026-11-23, benchmarks/norms.py): one wave, the fused kernel wins
    or ties (train 128x28x28 11.8 against 12.1 us, 1024x14x14 18.8 / 19.1, 512x7x7 6.1 / 12.2;
    backward 256x14x14 11.0 / 12.4, 2048x7x7 11.8 / 17.7); two waves or dy read again, the grid
    wins (train 512x28x28 24.6 against 36.1, backward 1024x14x14 23.6 / 27.2, 128x28x28 14.3 /
    25.4)."""
    plan = fused_plan(ctx, problem, kind)
    if isinstance(plan, str) or plan.reload:
        return False
    return plan.blocks <= _sms(ctx) * FUSED_PER_SM.get(plan.local, 1)


PROF_WORDS = 16  # BNG_PROF: 32-bit words of timestamps a work-group (8 of 64 bits)


def grid_program(problem, plan: GridPlan, extra: dict | None = None) -> Program:
    """``extra``: defines added to the kernel's (benchmark variants: BNG_PROF, BNG_DRV, ...)."""
    extra = extra or {}
    bwd = problem.norm_kind == "bn_bwd"
    geo = plan.geo
    nbytes, counter = grid_workspace(problem, plan)
    if extra.get("BNG_PROF"):
        nbytes += (PROF_WORDS * plan.blocks + 2) * 4
    defines = {
        "MIOPY_DTYPE": problem.tensors()["x"].dtype.code,
        "NORM_PTYPE": problem.param_dtype.code,
        "NORM_VW": plan.vw,
        "BN_BWD": int(bwd),
        "BNG_BT": plan.local,
        "BNG_MINB": plan.minb,
        "BNG_TX": plan.tx,
        "BNG_HOLD": plan.hold,
        "BNG_U": plan.unroll,
        "BNG_GS": plan.gs,
        "BNG_ASYNC": int(plan.async_copy),
        "BNG_DRV": 1,  # the barriers on the driver's grid workspace (no zeroing launch)
        "BNG_SLEEP": 0,  # polled without sleeping
        "VEC_ST_HINT": 1,
        **extra,
    }
    reset = KernelSpec("bn_grid", "bn_grid_reset", defines, (32,), (32,))
    spec = KernelSpec("bn_grid", "bn_grid_cols", defines, (plan.blocks * plan.local,), (plan.local,))
    roles = problem.finalize_roles()

    def t(role: str) -> Tensor:
        name = roles.get(role)
        return Tensor(name) if name else Tensor("x")  # unused: the flags keep the kernel off it

    args = (Tensor("x"), Tensor("dy") if bwd else Tensor("x"), Tensor("dx" if bwd else "y"))
    args += tuple(t(r) for r in ("scale", "bias", "s_a", "s_b", "s_c", "s_d"))
    args += (Workspace(),)
    shape = (geo.K, geo.rows, plan.slices, plan.rps, plan.hs)
    flags = problem.norm_flags | (F_DY if bwd else 0)
    args += (*(np.int32(v) for v in shape), np.int32(flags), Scalar("epsilon", "float32", problem.epsilon))
    args += (Scalar("exp_avg_factor", "float32", getattr(problem, "exp_avg_factor", 1.0)),)
    main = Launch(spec, args, shared_mem=plan.shared, cooperative=True)
    if defines["BNG_DRV"]:  # the driver's barrier word: nothing to zero
        return Program((main,), nbytes)
    return Program((Launch(reset, (Workspace(), np.int32(counter))), main), nbytes)


class BnFwdTrainingGrid(Solver):
    """Batch norm training forward over a channels-last x as one persistent grid (see the module)."""

    primitive = "bnorm"
    name = "BnFwdTrainingGrid"
    id = 416
    algorithm = "direct"
    dynamic = False
    kind = "bn_train"
    shape: tuple[int, ...] | None = None  # SHAPE[kind] unless set (benchmark variants)
    defines: dict | None = None  # defines added to the kernel's (benchmark variants)

    def is_applicable(self, ctx, problem) -> str | None:
        plan = grid_plan(ctx, problem, self.kind, self.shape)
        return plan if isinstance(plan, str) else None

    def defers(self, ctx, problem) -> bool:
        """Immediate mode lists this solver after the one-kernel one (bn_fused.py) where that
        one's grid is a single wave and keeps dy in registers (fused_wins)."""
        return fused_wins(ctx, problem, self.kind)

    def workspace_size(self, ctx, problem) -> int:
        plan = grid_plan(ctx, problem, self.kind, self.shape)
        assert not isinstance(plan, str), plan
        return self.get_program(ctx, problem).workspace

    def get_program(self, ctx, problem, config=None) -> Program:
        plan = grid_plan(ctx, problem, self.kind, self.shape)
        assert not isinstance(plan, str), plan
        return grid_program(problem, plan, self.defines)


class BnBwdGrid(BnFwdTrainingGrid):
    """Batch norm backward over a channels-last x as one persistent grid: x and dy read once."""

    name = "BnBwdGrid"
    id = 417
    kind = "bn_bwd"


class BnBwdGridL2(BnBwdGrid):
    """BnBwdGrid holding nothing in shared memory: phase 2 reads x and dy again, newest first,
    from L2 where they still are (H200, fp16: 32x256x56x56 87.8 us against 93.9 holding 13 steps,
    32x512x28x28 51.4 against 51.7). Find picks between the two."""

    name = "BnBwdGridL2"
    id = 418
    shape = (512, 1, 2, 4, 0)


__all__ = ["BnBwdGrid", "BnBwdGridL2", "BnFwdTrainingGrid", "GridPlan", "grid_plan"]
