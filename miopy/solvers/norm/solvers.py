"""The norm solvers: for each primitive and pass, a dense one (vectorised rows / columns
reduction and a flat apply) and a strided one (any strides; the fallback)."""

from __future__ import annotations

from miopy.solution import Program
from miopy.solvers.base import Solver
from miopy.solvers.norm.bn_fused import BnBwdFused, BnFwdInferenceFlat, BnFwdTrainingFused
from miopy.solvers.norm.bn_grid import BnBwdGrid, BnBwdGridL2, BnFwdTrainingGrid
from miopy.solvers.norm.bn_program import bn_packed_program
from miopy.solvers.norm.gn_nhwc import GroupNormFwdNhwc
from miopy.solvers.norm.gn_nhwc_bwd import GroupNormBwdNhwc
from miopy.solvers.norm.gn_rows import gn_rows_program, gn_rows_shape
from miopy.solvers.norm.ln_warp import LayerNormBwdWarp, LayerNormFwdWarp
from miopy.solvers.norm.program import ln_rows_program, ln_rows_shape, norm_program, packed_reason


class _Norm(Solver):
    algorithm = "direct"
    dynamic = False
    kind: str  # the problem's norm_kind
    packed: bool

    def is_applicable(self, ctx, problem) -> str | None:
        if getattr(problem, "primitive", None) != self.primitive:
            return f"not a {self.primitive} problem"
        if problem.norm_kind != self.kind:
            return f"pass is {problem.norm_kind}"
        if self.packed:
            return packed_reason(problem)
        return None

    def workspace_size(self, ctx, problem) -> int:
        return self.get_program(ctx, problem).workspace

    def get_program(self, ctx, problem, config=None) -> Program:
        if self.packed and self.primitive == "bnorm":
            return bn_packed_program(ctx, problem)
        return norm_program(ctx, problem, self.packed)


def _make(primitive: str, name: str, ident: int, kind: str, packed: bool) -> _Norm:
    cls = type(
        name, (_Norm,), {"primitive": primitive, "name": name, "id": ident, "kind": kind, "packed": packed}
    )
    return cls()


# the persistent-grid solvers first: they defer to the one-kernel ones where those are faster
# (bn_grid.fused_wins: a single wave of work-groups, dy held), and beat the packed ones everywhere
# they apply (H200, 2026-11-23)
BNORM_SOLVERS = [
    BnFwdTrainingGrid(),
    BnFwdTrainingFused(),
    _make("bnorm", "BnFwdTrainingPacked", 400, "bn_train", True),
    _make("bnorm", "BnFwdTrainingStrided", 401, "bn_train", False),
    BnFwdInferenceFlat(),
    _make("bnorm", "BnFwdInferencePacked", 402, "bn_infer", True),
    _make("bnorm", "BnFwdInferenceStrided", 403, "bn_infer", False),
    BnBwdGrid(),
    BnBwdGridL2(),
    BnBwdFused(),
    _make("bnorm", "BnBwdPacked", 404, "bn_bwd", True),
    _make("bnorm", "BnBwdStrided", 405, "bn_bwd", False),
]


class LayerNormFwdRows(Solver):
    """Layer norm forward in one pass: a work-group per row held in registers (rows up to a few
    thousand elements of a row-major x)."""

    primitive = "layernorm"
    name = "LayerNormFwdRows"
    id = 414
    algorithm = "direct"
    dynamic = False

    kind = "ln_fwd"

    def is_applicable(self, ctx, problem) -> str | None:
        if getattr(problem, "primitive", None) != self.primitive:
            return "not a layernorm problem"
        if problem.norm_kind != self.kind:
            return f"pass is {problem.norm_kind}"
        shape = ln_rows_shape(ctx, problem)
        return shape if isinstance(shape, str) else None

    def workspace_size(self, ctx, problem) -> int:
        return 0

    def get_program(self, ctx, problem, config=None) -> Program:
        return ln_rows_program(ctx, problem)


class LayerNormBwdRows(LayerNormFwdRows):
    """Layer norm backward in one pass over x and dy: rows held in registers, dx from the saved
    mean and rstd and the row's two sums, dweight / dbias from per-work-group partial sums added
    up by a small second kernel (deterministic)."""

    name = "LayerNormBwdRows"
    id = 415
    kind = "ln_bwd"

    def workspace_size(self, ctx, problem) -> int:
        return self.get_program(ctx, problem).workspace


# the team-per-row solvers first (GPU devices): faster than the others wherever they apply (H200,
# BERT rows; backward refuses the rows where LayerNormBwdRows was faster)
LAYERNORM_SOLVERS = [
    LayerNormFwdWarp(),
    _make("layernorm", "LayerNormFwdPacked", 410, "ln_fwd", True),
    LayerNormFwdRows(),
    _make("layernorm", "LayerNormFwdStrided", 411, "ln_fwd", False),
    LayerNormBwdWarp(),
    _make("layernorm", "LayerNormBwdPacked", 412, "ln_bwd", True),
    LayerNormBwdRows(),
    _make("layernorm", "LayerNormBwdStrided", 413, "ln_bwd", False),
]


class GroupNormFwdRows(Solver):
    """Group norm in one pass: a work-group per (n, group) of an NCHW-packed x, the group held in
    registers (see solvers/norm/gn_rows.py)."""

    primitive = "groupnorm"
    name = "GroupNormFwdRows"
    id = 424
    kind = "ln_fwd"
    algorithm = "direct"
    dynamic = False
    variant: dict | None = None  # defines benchmarks/gn_sweep.py's variants add

    def is_applicable(self, ctx, problem) -> str | None:
        if getattr(problem, "primitive", None) != self.primitive:
            return "not a groupnorm problem"
        if problem.norm_kind != self.kind:
            return f"pass is {problem.norm_kind}"
        shape = gn_rows_shape(ctx, problem, (self.variant or {}).get("local"))
        return shape if isinstance(shape, str) else None

    def workspace_size(self, ctx, problem) -> int:
        return self.get_program(ctx, problem).workspace

    def get_program(self, ctx, problem, config=None) -> Program:
        return gn_rows_program(ctx, problem, self.variant)


class GroupNormBwdRows(GroupNormFwdRows):
    """Group norm backward in one pass over x and dy, weight gradients per (n, channel) from the
    same pass, added up over n by a small second kernel."""

    name = "GroupNormBwdRows"
    id = 425
    kind = "ln_bwd"


GROUPNORM_SOLVERS = [
    GroupNormFwdNhwc(),
    _make("groupnorm", "GroupNormFwdPacked", 420, "ln_fwd", True),
    GroupNormFwdRows(),
    _make("groupnorm", "GroupNormFwdStrided", 421, "ln_fwd", False),
    GroupNormBwdNhwc(),
    _make("groupnorm", "GroupNormBwdPacked", 422, "ln_bwd", True),
    GroupNormBwdRows(),
    _make("groupnorm", "GroupNormBwdStrided", 423, "ln_bwd", False),
]

__all__ = ["BNORM_SOLVERS", "GROUPNORM_SOLVERS", "LAYERNORM_SOLVERS"]
