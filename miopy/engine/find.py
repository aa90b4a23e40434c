"""Find 2.0 and immediate mode: list the applicable solvers, time them (or not), rank, remember.

MIOPY_FIND_MODE: NORMAL always times; FAST uses the find DB, else the immediate fallback; HYBRID
uses the find DB, else a full find; DYNAMIC_HYBRID (default) uses the find DB, else finds among
dynamic solvers only. Any MIOPY_FIND_ENFORCE other than NONE forces NORMAL, as in MIOpen."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from miopy import config, log
from miopy.checks import OFFSET_MAX, int_value
from miopy.db import sqlite
from miopy.db.find_db import FindRecord
from miopy.engine import bench, tune
from miopy.engine.candidates import (
    allowed,
    applicable,
    check_handle,
    check_problem,
    deferred_solution,
    make_solution,
    resolve_solver,
    solution_with,
    stored_config,
)
from miopy.errors import BadParm, InternalError, MiopyError
from miopy.logging_cmd import log_command
from miopy.problem.base import Problem
from miopy.solution import Solution
from miopy.solvers import by_name

_log = log.get("miopy.engine.find")

time_solution = bench.time_solution
RACE_ROUNDS = 4  # samples more for each solver in a close race (bench.close_race)
# Solvers are timed one after another, each on its own samples, so a slow or fast spell of the
# device separates them by more than a search space's near-equals differ (H200, 1x1 layers at
# 11-12 us: classic cuBLAS first timed 5-10 % below the chosen cuBLASLt config in find and then
# tied cuDNN in the benchmark): the fastest four within 10 % are timed again, interleaved.
RACE_MARGIN = 0.10
RACE_MOST = 4


@dataclass(frozen=True)
class FindOptions:
    """MIOpen's miopenFindOptions: ranking, workspace limit, tuning."""

    results_order: str = "time"  # or "workspace"
    workspace_limit: int | None = None
    tuning: bool = False

    def __post_init__(self):
        if not isinstance(self.results_order, str) or self.results_order not in ("time", "workspace"):
            raise BadParm(f"results_order={self.results_order!r}: expected time or workspace")
        if self.workspace_limit is not None:
            object.__setattr__(self, "workspace_limit", _bytes_limit(self.workspace_limit))
        if not isinstance(self.tuning, bool | int) or self.tuning not in (0, 1):
            raise BadParm(f"tuning={self.tuning!r}: expected True or False")


def _bytes_limit(value: Any) -> int:
    """A workspace limit in bytes: an integer, or a finite real number (rounded down), >= 0."""
    if isinstance(value, float | np.floating) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise BadParm(f"workspace_limit={value!r}: expected a finite number of bytes (None: no limit)")
        value = math.floor(value)
    return int_value("workspace_limit", value, 0, OFFSET_MAX)


def _rank(solutions: list[Solution], options: FindOptions) -> list[Solution]:
    if options.workspace_limit is not None:
        solutions = [s for s in solutions if s.workspace <= options.workspace_limit]
    if options.results_order == "workspace":
        return sorted(solutions, key=lambda s: (s.workspace, s.time_ms if s.time_ms is not None else 0))
    return sorted(solutions, key=lambda s: s.time_ms if s.time_ms is not None else float("inf"))


def _from_find_db(handle, problem: Problem) -> list[Solution] | None:
    """Solutions from the find DB record, dropping solvers that are gone or no longer applicable."""
    if config.disable_find_db():
        return None
    records = handle.find_db.load(problem.key(), primitive=problem.primitive)
    if not records:
        return None
    planned = _from_find_plan(handle, problem, records)
    if planned is not None:
        return planned
    view = problem.solver_view()
    out = []
    for rec in records:
        solver = by_name(rec.solver, problem.primitive) or log.warn_once(
            _log, f"find DB: unknown solver {rec.solver!r} ignored"
        )
        if solver is None or not allowed(solver):
            continue
        # the record's config, when there is one, may show applicability more cheaply (cuBLASLt)
        if solver.applicability(handle, view, rec.config) is not None:
            continue
        cfg = rec.config if solver.tunable and solver.is_valid_config(handle, view, rec.config) else None
        try:
            # every solution but the first is made at its first use: a first iteration runs
            # only the first (Solution.deferred; the same solution once built)
            solution = make_solution(handle, problem, solver, cfg, time_ms=rec.time_ms, defer=bool(out))
        except MiopyError as exc:
            _log.warning("find DB record for %s is unusable (%s); ignored", solver.name, exc)
            continue
        out.append(solution)
    return out or None


def _from_package(handle, problem: Problem, key: str, invoker_key: str) -> list[Solution] | None:
    """Immediate mode's answer shipped in the device's kernel package (miopy.db.package_choices):
    its first candidate that applies here, checked and built alone; None when there is no record
    or anything in it no longer holds (then every solver is asked, as without a package)."""
    if config.find_only_solvers() is not None:
        return None  # the record was chosen among every solver
    choices = handle.package_choices
    candidates = choices.get(problem.primitive, key, invoker_key)
    if candidates is None:
        return None
    if len(candidates) == 1:
        planned = _from_plan(handle, problem, key, invoker_key, candidates[0])
        if planned is not None:
            return planned
    view = problem.solver_view()
    for cand in candidates:
        solver = by_name(cand.solver, problem.primitive)
        if solver is None or solver.name != cand.solver:
            _log.info("package choice for %s: unknown solver %r; not used", key, cand.solver)
            return None
        if solver.applicability(handle, view, cand.config) is not None:
            if cand.known:
                _log.info("package choice for %s: %s no longer applies; not used", key, solver.name)
                return None
            continue  # unknown where the package was built, and not applicable here
        cfg = None
        if solver.tunable:
            cfg = stored_config(handle, problem, solver)  # a tuned record wins, as without a package
            if cfg is None and cand.config is not None:
                if not solver.is_valid_config(handle, view, cand.config):
                    _log.info("package choice for %s: config no longer valid; not used", key)
                    return None
                cfg = cand.config
        elif cand.config is not None:
            return None
        try:
            solution = make_solution(handle, problem, solver, cfg)
        except MiopyError as exc:
            _log.info("package choice for %s: %s (%s); not used", key, solver.name, exc)
            return None
        handle.package_choices.used += 1
        return [solution]
    return None


def _from_plan(handle, problem: Problem, key: str, invoker_key: str, cand) -> list[Solution] | None:
    """The package's chosen solution with its program as the package carries it, when the package
    passed its whole-package check (miopy.db.package_choices: this device, miopy version, compiler
    and sources; its records intact): the solver is not asked again. None when there is no such
    program or the user perf DB holds another configuration for the solver (a tuned record wins;
    the checked path then builds it)."""
    choices = handle.package_choices
    program = choices.plan(problem.primitive, key, invoker_key)
    if program is None:
        return None
    solver = by_name(cand.solver, problem.primitive)
    if solver is None or solver.name != cand.solver or solver.tunable != (cand.config is not None):
        return None
    cfg = None
    if solver.tunable:
        stored = handle.perf_db.load(problem.solver_view().key(), solver.name, primitive=problem.primitive)
        if stored is not None and stored != cand.config:
            return None
        cfg = dict(cand.config)
    choices.used += 1
    choices.planned += 1
    return [solution_with(problem, solver, cfg, program)]


def _from_find_plan(handle, problem: Problem, records: list[FindRecord]) -> list[Solution] | None:
    """The find DB's ranked list as the package made it from the same records on the build target
    (a trusted package: miopy.db.package_choices), its first solution's program from the package
    and the others made at their first use, no solver asked now; None without such a row, when
    the find DB answers other records here, or when a listed solver is unknown."""
    choices = getattr(handle, "package_choices", None)  # a stand-in context may have none
    if choices is None or config.find_only_solvers() is not None:
        return None
    found = choices.plan(problem.primitive, problem.key(), problem.invoker_key(), records)
    if found is None:
        return None
    program, listed = found
    solvers = [by_name(name, problem.primitive) for name, _, _ in listed]
    if any(s is None or s.name != name for s, (name, _, _) in zip(solvers, listed)):
        return None
    if any(s.tunable != (cfg is not None) for s, (_, cfg, _) in zip(solvers, listed)):
        return None
    (_, cfg, time_ms), rest = listed[0], listed[1:]
    out = [solution_with(problem, solvers[0], cfg, program, time_ms)]
    out += [deferred_solution(handle, problem, s, c, t) for s, (_, c, t) in zip(solvers[1:], rest)]
    choices.planned += 1
    return out


def _immediate(handle, problem: Problem) -> list[Solution]:
    """Without a find DB record: the package's choice, else every applicable solver in order."""
    found = _from_package(handle, problem, problem.key(), problem.invoker_key())
    return found or _immediate_fallback(handle, problem)


def _store(handle, problem: Problem, ranked: list[Solution]) -> None:
    if config.disable_find_db():
        return
    ordered = sorted(ranked, key=lambda s: s.time_ms)
    handle.find_db.store(
        problem.key(),
        [FindRecord(s.solver, float(s.time_ms), int(s.workspace), s.algorithm, s.config) for s in ordered],
        primitive=problem.primitive,
    )


def _full_find(
    handle, problem: Problem, options: FindOptions, tensors, dynamic_only: bool, search: bool
) -> list[Solution]:
    solvers = applicable(handle, problem, dynamic_only=dynamic_only)
    if not solvers and dynamic_only:
        solvers = applicable(handle, problem)
    if not solvers:
        raise InternalError(f"problem={problem.key()}: no applicable solver")
    if search:
        tune.tune(handle, problem, [s for s in solvers if s.tunable])
    else:  # solvers with few candidates have them all timed unless the user perf DB knows
        quick = _search_in_find(handle, problem, solvers)
        if quick:
            tune.tune(handle, problem, quick, tensors=tensors)
    candidates = []
    for solver in solvers:
        if (
            options.workspace_limit is not None
            and solver.workspace_size(handle, problem.solver_view()) > options.workspace_limit
        ):
            continue
        candidates.append(make_solution(handle, problem, solver))
    candidates = bench.compile_all(handle, candidates)
    if not candidates:
        raise InternalError(f"problem={problem.key()}: every applicable solver failed to build")
    # one set of buffers for every candidate: its workspace is the largest any of them needs
    prepared = bench.device_args(handle, max(candidates, key=lambda s: s.workspace), tensors)
    timed = []
    for solution in bench.progress(candidates, len(candidates), "miopy find: timing", "solution"):
        ms = bench.median_time(handle, solution, prepared)
        _log.info("find: %s %.4f ms (workspace %d)", solution.solver, ms, solution.workspace)
        timed.append((solution, ms))

    def again(solution: Solution) -> float:
        return bench.median_time(handle, solution, prepared, runs=3, count=False)

    # solvers within RACE_MARGIN of the fastest: timed again, interleaved (bench.close_race)
    raced = bench.close_race(timed, again, RACE_ROUNDS, RACE_MARGIN, RACE_MOST)
    candidates = [s.with_time(ms) for s, ms in raced]
    _store(handle, problem, candidates)
    return _rank(candidates, options)


def _search_in_find(handle, problem: Problem, solvers: list) -> list:
    """The solvers whose whole search space a NORMAL find times (``search_in_find``: a few hundred
    library configs, nothing to compile), as no record of the user perf DB names their config.
    A record of the system file does not stop the search: it is one process's close race on
    the device it was made on (for cuBLASLt, between configs within 1-3 % of each other, where a
    sample moves by as much), and this find times on the user's device; what it finds goes into
    the user perf DB, so the search happens once per problem."""
    view_key = problem.solver_view().key()
    return [
        s
        for s in solvers
        if getattr(s, "search_in_find", False)
        and handle.perf_db.load_user(view_key, s.name, problem.primitive) is None
    ]


def find_solutions(
    handle, problem: Problem, options: FindOptions | None = None, tensors: dict[str, Any] | None = None
) -> list[Solution]:
    """Ranked solutions for ``problem`` (Find 2.0). ``tensors`` (optional) are used to time on
    real data; they are copied, never modified."""
    check_handle(handle)
    problem = check_problem(problem)
    options = FindOptions() if options is None else options
    if not isinstance(options, FindOptions):
        raise BadParm(f"options={type(options).__name__}: expected FindOptions")
    log_command(problem)
    mode, enforce = config.find_mode(), config.find_enforce()
    if enforce == "DB_CLEAN":
        tune.clean(handle, problem)
    search = tune.should_search(handle, problem, options.tuning, enforce)
    if enforce != "NONE" or options.tuning:
        mode = "NORMAL"
    if mode != "NORMAL":
        found = _from_find_db(handle, problem)
        if found:
            return _rank(found, options)
        if mode == "FAST":
            return _rank(_immediate(handle, problem), options)
    return _full_find(handle, problem, options, tensors, mode == "DYNAMIC_HYBRID", search)


def _immediate_fallback(handle, problem: Problem) -> list[Solution]:
    """No find DB record: applicable solvers in registry order (those that defer last), untimed."""
    solvers = applicable(handle, problem)
    if not solvers:
        raise InternalError(f"problem={problem.key()}: no applicable solver")
    view = problem.solver_view()
    solvers.sort(key=lambda s: s.defers(handle, view))
    # the first is built now, the others at their first use (Solution.deferred)
    return [make_solution(handle, problem, s, defer=i > 0) for i, s in enumerate(solvers)]


def get_solutions(handle, problem: Problem) -> list[Solution]:
    """Immediate mode: the find DB's ranking when there is one, else the choice shipped in the
    device's kernel package (one solution: the one immediate mode would put first), else every
    applicable solver in registry order; no timing.

    The answer is kept in the handle, by the problem's key and invoker key (every tensor's lens,
    strides and types: what its programs depend on), and reused, the same Solution objects, while no
    find or perf record was written in this process and no MIOPY_* knob that miopy has read
    changed (knobs steer applicability): a network's later iterations then choose in a dict lookup and reuse
    the prepared calls recorded for those solutions (``Handle.run_solution``)."""
    check_handle(handle)
    problem = check_problem(problem)
    log_command(problem)
    key = (problem.primitive, problem.key(), problem.invoker_key())
    written = sqlite.records_written
    kept = handle.immediate_choices.get(key)
    if kept is not None and kept[0] == (written, config.knob_state()):
        return list(kept[1])
    found = (
        _from_find_db(handle, problem)
        or _from_package(handle, problem, key[1], key[2])
        or _immediate_fallback(handle, problem)
    )
    if sqlite.records_written == written:  # else a record changed meanwhile: keep nothing
        # the knobs as read now: the first answers read some for the first time
        handle.immediate_choices[key] = ((written, config.knob_state()), tuple(found))
    return found


def compile_solution(handle, solution: Solution) -> Solution:
    """Build the solution's kernels (through the kernel cache) and its invoker."""
    check_handle(handle)
    handle.prepare_invoker(solution)
    return solution


def solution_for(handle, problem: Problem, solver: str | int, config: dict | None = None) -> Solution:
    """Immediate mode with one named solver (or id); BadParm says why it cannot run."""
    check_handle(handle)
    problem = check_problem(problem)
    found = resolve_solver(handle, problem, solver)
    log_command(problem, found.id)
    return make_solution(handle, problem, found, config)
