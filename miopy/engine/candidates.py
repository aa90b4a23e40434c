"""Which solvers may run a problem, and with which config; building solutions. Shared by find,
immediate mode and tuning, for every primitive: the problem names its primitive, the registry
gives that primitive's ordered solvers."""

from __future__ import annotations

import weakref
from typing import Any

from miopy import config, log
from miopy.errors import BadParm, InternalError, NotApplicable
from miopy.handle import Handle
from miopy.problem.base import Problem
from miopy.solution import Program, Solution
from miopy.solvers import Solver, by_name, solvers_for

_log = log.get("miopy.engine")


def check_handle(handle: Any) -> Handle:
    if not isinstance(handle, Handle):
        raise BadParm(f"handle={type(handle).__name__}: expected a miopy Handle")
    return handle


def check_problem(problem: Any) -> Problem:
    if not isinstance(problem, Problem):
        raise BadParm(f"problem={type(problem).__name__}: expected a problem (ConvProblem, ...)")
    return problem


def allowed(solver: Solver) -> bool:
    """MIOPY_DEBUG_FIND_ONLY_SOLVER."""
    only = config.find_only_solvers()
    return only is None or solver.name in only or str(solver.id) in only


def applicable(handle, problem: Problem, dynamic_only: bool = False) -> list[Solver]:
    """The primitive's registry order, filtered by applicability and MIOPY_DEBUG_FIND_ONLY_SOLVER."""
    view = problem.solver_view()
    out = []
    for solver in solvers_for(problem):
        if not allowed(solver):
            continue
        if dynamic_only and not solver.dynamic:
            _log.debug("%s: skipped, not dynamic", solver.name)
            continue
        reason = solver.applicability(handle, view)
        if reason is not None:
            _log.debug("%s: not applicable: %s", solver.name, reason)
            continue
        out.append(solver)
    return out


def stored_config(handle, problem: Problem, solver: Solver) -> dict | None:
    """The perf DB's config for this solver, if valid; an invalid one warns and gives None."""
    if not solver.tunable:
        return None
    view = problem.solver_view()
    record = handle.perf_db.load(view.key(), solver.name, primitive=problem.primitive)
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


def make_solution(
    handle,
    problem: Problem,
    solver: Solver,
    cfg: dict | None = None,
    time_ms: float | None = None,
    defer: bool = False,
) -> Solution:
    """The solver's solution for the user's problem, built once; tunable solvers get ``cfg``,
    else the perf DB's config, else their default. With ``defer`` the config is settled now and
    the program is made at its first use (``Solution.deferred``): the same solution, built only
    if it is ever used."""
    view = problem.solver_view()
    if solver.tunable:
        if cfg is None:
            cfg = stored_config(handle, problem, solver) or solver.default_config(handle, view)
        elif not solver.is_valid_config(handle, view, cfg):
            raise BadParm(f"config={cfg!r}: not a valid config of {solver.name} for this problem")
        cfg = dict(cfg)
    else:
        cfg = None
    if defer:
        return deferred_solution(handle, problem, solver, cfg, time_ms)
    program = solver.get_program(handle, view, cfg).with_roles(problem.view_roles())
    return solution_with(problem, solver, cfg, program, time_ms)


def solution_with(
    problem: Problem, solver: Solver, cfg: dict | None, program: Program, time_ms: float | None = None
) -> Solution:
    """The solver's solution for the user's problem with ``cfg``, running ``program`` (the
    solver's, with the user's roles), nothing checked."""
    return Solution(program=program, extra=dict(program.notes), **_fields(problem, solver, cfg, time_ms))


def deferred_solution(
    handle, problem: Problem, solver: Solver, cfg: dict | None, time_ms: float | None = None
) -> Solution:
    """``make_solution(..., defer=True)`` with ``cfg`` settled by the caller: the program is made
    at its first use (``Solution.deferred``)."""
    view = problem.solver_view()
    try:
        owner = weakref.ref(handle)  # no cycle through the handle's cache of answers
    except TypeError:  # a context that takes no weak reference (a stand-in): held as is
        owner = lambda: handle  # noqa: E731

    def build() -> Program:
        made = owner()
        if made is None:
            raise InternalError(f"solver={solver.name}: its handle is gone; the solution cannot be built")
        return solver.get_program(made, view, cfg).with_roles(problem.view_roles())

    return Solution.deferred(build, **_fields(problem, solver, cfg, time_ms))


def _fields(problem: Problem, solver: Solver, cfg: dict | None, time_ms: float | None) -> dict[str, Any]:
    return {
        "solver": solver.name,
        "solver_id": solver.id,
        "algorithm": solver.algorithm,
        "problem": problem,
        "config": cfg,
        "dynamic": solver.dynamic,
        "time_ms": time_ms,
    }


def resolve_solver(handle, problem: Problem, name: str | int) -> Solver:
    solver = by_name(str(name), problem.primitive)
    if solver is None:
        known = ", ".join(s.name for s in solvers_for(problem))
        raise BadParm(f"solver={name!r}: unknown solver (known: {known})")
    reason = solver.applicability(handle, problem.solver_view())
    if reason is not None:
        raise NotApplicable(f"solver={solver.name!r}: not applicable: {reason}")
    return solver
