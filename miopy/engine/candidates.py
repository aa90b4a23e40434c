"""Which solvers may run a problem, and with which config: shared by find, immediate mode and tuning."""

from __future__ import annotations

from typing import Any

from miopy import config, log
from miopy.errors import BadParm
from miopy.handle import Handle
from miopy.problem.conv import ConvProblem
from miopy.solution import Solution
from miopy.solvers import CONV_SOLVERS, Solver, by_name

_log = log.get("miopy.engine")


def check_handle(handle: Any) -> Handle:
    if not isinstance(handle, Handle):
        raise BadParm(f"handle={type(handle).__name__}: expected a miopy Handle")
    return handle


def check_problem(problem: Any) -> ConvProblem:
    if not isinstance(problem, ConvProblem):
        raise BadParm(f"problem={type(problem).__name__}: expected a ConvProblem")
    return problem


def applicable(handle, problem: ConvProblem, dynamic_only: bool = False) -> list[Solver]:
    """Registry order, filtered by applicability and MIOPY_DEBUG_FIND_ONLY_SOLVER."""
    only = config.find_only_solvers()
    view = problem.conv_view()
    out = []
    for solver in CONV_SOLVERS:
        if only is not None and solver.name not in only and str(solver.id) not in only:
            continue
        if dynamic_only and not solver.dynamic:
            _log.debug("%s: skipped, not dynamic", solver.name)
            continue
        reason = solver.is_applicable(handle, view)
        if reason is not None:
            _log.debug("%s: not applicable: %s", solver.name, reason)
            continue
        out.append(solver)
    return out


def stored_config(handle, problem: ConvProblem, solver: Solver) -> dict | None:
    """The perf DB's config for this solver, if valid; an invalid one warns and gives None."""
    if not solver.tunable:
        return None
    view = problem.conv_view()
    record = handle.perf_db.load(view.key(), solver.name)
    if record is None:
        return None
    if solver.is_valid_config(handle, view, record):
        return record
    _log.warning(
        "Invalid config loaded from Perf Db: %s for %s: %s. Performance may degrade.",
        solver.name,
        view.key(),
        record,
    )
    return None


def make_solution(handle, problem: ConvProblem, solver: Solver, cfg: dict | None = None) -> Solution:
    """The solver's solution for the user's problem; tunable solvers get ``cfg``, else the perf DB's
    config, else their default."""
    view = problem.conv_view()
    if solver.tunable:
        if cfg is None:
            cfg = stored_config(handle, problem, solver) or solver.default_config(handle, view)
        elif not solver.is_valid_config(handle, view, cfg):
            raise BadParm(f"config={cfg!r}: not a valid config of {solver.name} for this problem")
    else:
        cfg = None
    solution = solver.get_solution(handle, view, cfg)
    solution.problem = problem
    solution.config = cfg
    solution.dynamic = solver.dynamic
    solution.solver = solver.name
    solution.algorithm = solver.algorithm
    return solution


def resolve_solver(handle, problem: ConvProblem, name: str | int) -> Solver:
    solver = by_name(str(name))
    if solver is None:
        raise BadParm(f"solver={name!r}: unknown solver (known: {', '.join(s.name for s in CONV_SOLVERS)})")
    reason = solver.is_applicable(handle, problem.conv_view())
    if reason is not None:
        raise BadParm(f"solver={solver.name!r}: not applicable: {reason}")
    return solver
