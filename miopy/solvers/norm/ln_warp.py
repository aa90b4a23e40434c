"""Layer norm over contiguous rows, a row a team of up to a warp (kernels ln_warp_fwd /
ln_warp_bwd of kernels/common/ln_warp.h): the row held in registers as loaded (16-byte chunks),
its sums by shuffles within the team, no barrier between rows; x (and dy) read once, y (dx)
written once, in one launch forward. Backward keeps the weight gradients' column sums in
registers over a persistent grid's rows and writes one partial row pair a work-group, which
ln_pgrad_finish adds up. GPU devices (CPU OpenCL keeps LayerNormFwdRows' CPU kernels)."""

from __future__ import annotations

import math

import numpy as np

from miopy.solution import KernelSpec, Launch, Program, Scalar, Tensor, Workspace
from miopy.solvers.base import Solver
from miopy.solvers.launch import MAX_GROUPS, cpu_kernels
from miopy.solvers.norm.program import LN_FX, LN_FY, VEC_BYTES, norm_spec

TEAM_MOST = 32  # a warp
FWD_PER_MOST = 8  # 16-byte chunks a work item holds forward (32 registers)
# backward: registers a work item spends on its rows (x and dy raw, 4 each a chunk) and on the
# weight gradients' column sums (2 a column). H200, BERT rows: fp32 rows of 768 (96) 52.3 us
# against LayerNormBwdRows' 62.8; of 1024 (128: spills) 55.0 against 41.8, so those are left to it
BWD_REGS_MOST = 96
FWD_GROUP = 256  # work items a work-group (teams of one row each)
# evict-first 16-byte loads and stores forward (VEC_LD_HINT / VEC_ST_HINT 1): H200, BERT rows,
# 2-7 % faster than plain ones in 3 of 4 cases, 1 % slower in the fourth (fp16 8192x1024)
FWD_DEFINES = {"VEC_LD_HINT": 1, "VEC_ST_HINT": 1}
# backward's persistent grid by the data's item size: (work items a work-group, work-groups an SM
# that __launch_bounds__ guarantees: at most 128 registers a work item either way). H200: fp16
# 16384x768 40.0 us with (128, 4) against 42.2 with (256, 2), 8192x1024 36.1 against 38.2; fp32
# 16384x768 52.3 with (256, 2) against 55.5
BWD_SHAPE = {2: (128, 4), 4: (256, 2)}


def lnw_shape(length: int, vec: int, team_most: int = TEAM_MOST) -> tuple[int, int]:
    """(team, per): the smallest team of 4-32 (``team_most``) work items that holds a row of
    ``length`` elements in chunks of ``vec`` two chunks each, more chunks each past 64 chunks."""
    chunks = -(-length // vec)
    team = min(team_most, max(4, 1 << max(0, math.ceil(math.log2(max(1, -(-chunks // 2)))))))
    return team, -(-chunks // team)


STATIC_SHARED_MOST = 48 << 10  # bytes of static shared memory a CUDA work-group


def lnw_reason(ctx, problem, kind: str, variant: dict | None = None) -> str | None:
    """Why the team kernels do not apply (as ``variant`` would run them), or None."""
    v = variant or {}
    if cpu_kernels(ctx):
        return "backend on a CPU device (LayerNormFwdRows / LayerNormBwdRows have its kernels)"
    if getattr(problem, "primitive", None) != "layernorm":
        return "not a layer norm"
    if problem.norm_kind != kind:
        return f"pass is {problem.norm_kind}"
    if not problem.x.packed:
        return "x is not row-major"
    t = problem.tensors()
    roles = ("y", "mean", "rstd") if kind == "ln_fwd" else ("dy", "dx", "mean", "rstd")
    if any(not t[r].packed for r in roles):
        return "the data or the statistics are not packed"
    length = problem.weight_desc.element_count
    vec = VEC_BYTES // problem.x.dtype.itemsize
    if length % vec:
        return f"rows of {length} elements: not a multiple of {vec}"
    team, per = lnw_shape(length, vec, v.get("team_most", TEAM_MOST))
    if kind == "ln_fwd" and per > FWD_PER_MOST:
        return f"rows of {length} elements do not fit a warp's registers"
    acc_shared = v.get("defines", {}).get("LNW_ACC_SHARED", 0)  # column sums in shared memory
    if kind == "ln_bwd" and per * (8 + (0 if acc_shared else 2 * vec)) > BWD_REGS_MOST:
        return f"rows of {length} elements and their column sums do not fit a warp's registers"
    if kind == "ln_bwd":
        # OpenCL (and LNW_ACC_SHARED) add the teams' column sums from a slice of local memory each
        group = v.get("group", BWD_SHAPE[problem.x.dtype.itemsize][0])
        cuda = getattr(ctx, "backend_name", None) == "cuda"
        sliced = not cuda or acc_shared
        local = (2 * group * per * vec * 4 if sliced else 2 * team * per * vec * 4) + group * 4
        most = (
            STATIC_SHARED_MOST if cuda else int(getattr(getattr(ctx, "info", None), "local_mem_size", 0) or 0)
        )
        if local > most:
            return f"the teams' column sums need {local} bytes of local memory ({most})"
    return None


def _defines(problem, team: int, per: int, group: int, min_blocks: int, extra: dict | None) -> dict:
    return {
        **(extra or {}),
        "MIOPY_DTYPE": problem.x.dtype.code,
        "NORM_PTYPE": problem.param_dtype.code,
        "LNW_TEAM": team,
        "LNW_PER": per,
        "LNW_GROUP": group,
        "LNW_MIN_BLOCKS": min_blocks,
    }


def lnw_program(ctx, problem, variant: dict | None = None) -> Program:
    """The program; ``variant`` (benchmarks/ln_warp_sweep.py) may set group, min_blocks,
    team_most and defines."""
    v = variant or {}
    length = problem.weight_desc.element_count
    rows = problem.x.element_count // length
    team, per = lnw_shape(length, VEC_BYTES // problem.x.dtype.itemsize, v.get("team_most", TEAM_MOST))
    affine = problem.affine
    w = Tensor("weight") if affine else Tensor("x")
    if problem.norm_kind == "ln_fwd":
        group = v.get("group", FWD_GROUP)
        defines = _defines(problem, team, per, group, v.get("min_blocks", 1), v.get("defines", FWD_DEFINES))
        groups = max(1, min(-(-rows // (group // team)), MAX_GROUPS))
        spec = KernelSpec("ln_warp", "ln_warp_fwd", defines, (groups * group,), (group,))
        b = Tensor("bias") if affine else Tensor("x")
        args = (Tensor("x"), Tensor("y"), w, b, Tensor("mean"), Tensor("rstd"), np.int64(rows))
        args += (
            np.int32(length),
            Scalar("epsilon", "float32", problem.epsilon),
            np.int32(1 if affine else 0),
        )
        return Program((Launch(spec, args),))
    group, min_blocks = BWD_SHAPE[problem.x.dtype.itemsize]
    group, min_blocks = v.get("group", group), v.get("min_blocks", min_blocks)
    cus = int(getattr(getattr(ctx, "info", None), "compute_units", 1) or 1)
    groups = max(1, min(-(-rows // (group // team)), cus * min_blocks, MAX_GROUPS))
    defines = _defines(problem, team, per, group, min_blocks, v.get("defines"))
    spec = KernelSpec("ln_warp", "ln_warp_bwd", defines, (groups * group,), (group,))
    ws = Workspace() if affine else Tensor("dx")  # partial sums only with weights
    args = (Tensor("x"), Tensor("dy"), w, Tensor("mean"), Tensor("rstd"), Tensor("dx"), ws)
    args += (np.int64(rows), np.int32(length), np.int32(1 if affine else 0))
    steps = [Launch(spec, args)]
    if not affine:
        return Program(tuple(steps), 0)
    finish = norm_spec("ln_pgrad_finish", problem, 1, (-(-length // LN_FX) * LN_FX, LN_FY), (LN_FX, LN_FY))
    steps.append(
        Launch(finish, (Workspace(), Tensor("dweight"), Tensor("dbias"), np.int64(length), np.int64(groups)))
    )
    return Program(tuple(steps), 2 * groups * length * 4)


class LayerNormFwdWarp(Solver):
    """Layer norm forward, a row a team of up to a warp (see the module's text)."""

    primitive = "layernorm"
    name = "LayerNormFwdWarp"
    id = 428
    algorithm = "direct"
    dynamic = False
    kind = "ln_fwd"
    variant: dict | None = None  # benchmarks/ln_warp_sweep.py's variants set it

    def is_applicable(self, ctx, problem) -> str | None:
        return lnw_reason(ctx, problem, self.kind, self.variant)

    def workspace_size(self, ctx, problem) -> int:
        return self.get_program(ctx, problem).workspace

    def get_program(self, ctx, problem, config=None) -> Program:
        return lnw_program(ctx, problem, self.variant)


class LayerNormBwdWarp(LayerNormFwdWarp):
    """Layer norm backward, a row a team of up to a warp, weight gradients' column sums in
    registers over a persistent grid (see the module's text)."""

    name = "LayerNormBwdWarp"
    id = 429
    kind = "ln_bwd"


__all__ = ["LayerNormBwdWarp", "LayerNormFwdWarp", "lnw_program", "lnw_reason", "lnw_shape"]
