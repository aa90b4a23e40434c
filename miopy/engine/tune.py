"""Tuning: search a tunable solver's config space on the device and keep the best in the user
perf DB. The search strategy is pluggable; exhaustive is the default (MIOpen's)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from miopy import log
from miopy.engine import bench
from miopy.engine.candidates import applicable, make_solution
from miopy.errors import MiopyError
from miopy.problem.base import Problem
from miopy.solution import Solution
from miopy.solvers import Solver

_log = log.get("miopy.engine.tune")


class SearchStrategy(Protocol):
    def __call__(
        self, configs: list[dict], measure: Callable[[dict], float | None]
    ) -> tuple[dict, float] | None:
        """Pick the best of ``configs`` using ``measure`` (ms, or None when a config fails)."""


RACE_ROUNDS = 6  # samples more for each config in a close race (bench.close_race)
# A search space has many near-equals (cuBLASLt: a few hundred configs, the best dozen within 3 %
# of each other, one sample moving by 1-2 %): its race takes more of them than find's race between
# solvers does (H200, fp16 512x7x7->2048 forward: the config whose first sample ranked third was
# 3 % faster than the first over five interleaved rounds; fp16 1024x14x14->512 forward: a race
# of six within 5 % over four rounds kept a config 1.00x cuDNN's time where the best of the
# search space took 0.97x in seven rounds).
RACE_MARGIN = 0.06
RACE_MOST = 10


def exhaustive(configs: list[dict], measure: Callable[[dict], float | None]) -> tuple[dict, float] | None:
    """Every config measured; those within RACE_MARGIN of the fastest (RACE_MOST at most)
    measured again in RACE_ROUNDS interleaved rounds, the best median wins."""
    timed = []
    for cfg in _progress(configs):
        t = measure(cfg)
        if t is not None:
            timed.append((cfg, t))
    if not timed:
        return None
    return bench.close_race(timed, measure, RACE_ROUNDS, RACE_MARGIN, RACE_MOST)[0]


def _progress(items: list) -> Iterable:
    """A progress bar on a terminal, info-level log lines otherwise."""
    return bench.progress(items, len(items), "miopy tuning", "config")


STRATEGIES: dict[str, SearchStrategy] = {"exhaustive": exhaustive}


def should_search(handle, problem: Problem, requested: bool, enforce: str) -> bool:
    """MIOpen's FindEnforce: SEARCH / SEARCH_DB_UPDATE tune even unasked; DB_UPDATE and
    SEARCH_DB_UPDATE tune even when the perf DB already has a record."""
    if enforce == "DB_CLEAN":
        return False
    if not (requested or enforce in ("SEARCH", "SEARCH_DB_UPDATE")):
        return False
    if enforce in ("DB_UPDATE", "SEARCH_DB_UPDATE"):
        return True
    view_key = problem.solver_view().key()
    tunables = [s for s in applicable(handle, problem) if s.tunable]
    return any(handle.perf_db.load(view_key, s.name, primitive=problem.primitive) is None for s in tunables)


def clean(handle, problem: Problem) -> None:
    """DB_CLEAN: forget the user perf DB's records for this problem."""
    handle.perf_db.remove(problem.solver_view().key(), primitive=problem.primitive)


def tune(
    handle,
    problem: Problem,
    solvers: list[Solver] | None = None,
    strategy: str | SearchStrategy = "exhaustive",
    tensors: dict[str, Any] | None = None,
) -> dict[str, tuple[dict, float]]:
    """Search each tunable solver's space for ``problem``; store the winners in the user perf DB.
    Returns {solver name: (best config, ms)}."""
    pick = STRATEGIES[strategy] if isinstance(strategy, str) else strategy
    view = problem.solver_view()
    if solvers is None:
        solvers = [s for s in applicable(handle, problem) if s.tunable]
    results = {}
    prepared = None
    for solver in solvers:
        configs = [c for c in solver.search_space(handle, view) if solver.is_valid_config(handle, view, c)]
        if not configs:
            continue
        _log.info("tuning %s over %d configs", solver.name, len(configs))
        built: dict[str, Solution] = {}
        if pick is exhaustive:  # it visits every config: build them all at once, in parallel
            for solution in bench.compile_all(
                handle, [make_solution(handle, problem, solver, c) for c in configs]
            ):
                built[solution.config_key()] = solution
            configs = [c for c in configs if json.dumps(c, sort_keys=True) in built]

        def measure(cfg: dict, solver=solver, built=built) -> float | None:
            nonlocal prepared
            try:
                solution = built.get(json.dumps(cfg, sort_keys=True)) or make_solution(
                    handle, problem, solver, cfg
                )
                if prepared is None:
                    prepared = bench.device_args(handle, solution, tensors)
                return bench.median_time(handle, solution, prepared, runs=3, budget_ms=500.0)
            except MiopyError as exc:
                _log.warning("%s config %s failed: %s", solver.name, cfg, exc)
                return None

        best = pick(configs, measure)
        if best is None:
            continue
        results[solver.name] = best
        handle.perf_db.store(view.key(), solver.name, best[0], primitive=problem.primitive)
        _log.info("tuned %s: %s %.4f ms", solver.name, best[0], best[1])
    if results:
        _update_find_record(handle, problem, solvers, results)
    return results


def _update_find_record(handle, problem: Problem, solvers: list[Solver], results: dict) -> None:
    """The find record ranked the old configs: give each tuned solver its new config and time
    (device medians, as find's), so that find in any mode answers with what tuning found."""
    from miopy.db.find_db import FindRecord

    records = handle.find_db.load(problem.key(), primitive=problem.primitive)
    if not records:
        return
    by_name = {s.name: s for s in solvers}
    kept = [r for r in records if r.solver not in results]
    for name, (cfg, ms) in results.items():
        try:
            solution = make_solution(handle, problem, by_name[name], cfg)
        except MiopyError:
            continue
        kept.append(FindRecord(name, float(ms), int(solution.workspace), solution.algorithm, dict(cfg)))
    kept.sort(key=lambda r: r.time_ms)
    handle.find_db.store(problem.key(), kept, primitive=problem.primitive)
