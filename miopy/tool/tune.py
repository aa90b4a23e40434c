"""``miopy tune WORKLOAD``: tune every tunable solver of every problem of a workload on the device
here, writing each winner to the user perf DB as soon as it is found (a killed run resumes where
it stopped), and say what tuning gained over the default configs.

Strategies: ``exhaustive`` (every config, MIOpen's) and ``budget`` (random sampling, then local
refinement around the best, within ``--budget`` seconds or ``--configs`` configs per solver)."""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from miopy import log
from miopy.engine import bench
from miopy.engine import tune as engine_tune
from miopy.engine.candidates import applicable, make_solution
from miopy.errors import MiopyError
from miopy.tool.common import ToolError, progress
from miopy.tool.workload import Workload

_log = log.get("miopy.tool.tune")

Measure = Callable[[dict], "float | None"]


def _key(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


def _distance(a: dict, b: dict) -> tuple[int, float]:
    """(fields that differ, how far numeric ones are apart in powers of two)."""
    fields = set(a) | set(b)
    differ = [f for f in fields if a.get(f) != b.get(f)]
    spread = 0.0
    for f in differ:
        x, y = a.get(f), b.get(f)
        if isinstance(x, int | float) and isinstance(y, int | float) and x > 0 and y > 0:
            import math

            spread += abs(math.log2(x / y))
        else:
            spread += 1.0
    return len(differ), spread


def budgeted(
    seconds: float | None = None, count: int | None = None, seed: int = 0, first: dict | None = None
) -> Callable[[list[dict], Measure], tuple[dict, float] | None]:
    """A search strategy for ``engine.tune.tune``: half the budget on random configs (``first``,
    the default config, among them), the rest on the unmeasured configs nearest the best so far
    (one field changed first, then two...), moving whenever a better one turns up."""
    if seconds is None and count is None:
        raise ToolError("the budget strategy needs --budget SECONDS or --configs N")
    if seconds is not None and seconds <= 0:
        raise ToolError(f"--budget={seconds}: expected a positive number of seconds")
    if count is not None and count < 1:
        raise ToolError(f"--configs={count}: expected at least 1")

    def search(configs: list[dict], measure: Measure) -> tuple[dict, float] | None:
        start = time.monotonic()
        limit = len(configs) if count is None else min(count, len(configs))
        measured: dict[str, float | None] = {}

        def spent() -> bool:
            return len(measured) >= limit or (seconds is not None and time.monotonic() - start >= seconds)

        def take(cfg: dict) -> None:
            measured[_key(cfg)] = measure(cfg)

        def best() -> tuple[dict, float] | None:
            done = [(c, measured[_key(c)]) for c in configs if measured.get(_key(c)) is not None]
            return min(done, key=lambda p: p[1]) if done else None

        order = list(configs)
        random.Random(seed).shuffle(order)
        if first is not None and _key(first) in {_key(c) for c in configs}:
            order.insert(0, first)
        sample_until = max(1, limit // 2)
        for cfg in order:
            if len(measured) >= sample_until or spent():
                break
            if seconds is not None and time.monotonic() - start >= seconds / 2:
                break
            if _key(cfg) not in measured:
                take(cfg)
        while not spent():
            current = best()
            rest = [c for c in configs if _key(c) not in measured]
            if not rest:
                break
            if current is None:
                take(rest[0])
                continue
            take(min(rest, key=lambda c: _distance(c, current[0])))
        return best()

    return search


def _default_time(handle, problem, solver) -> float | None:
    try:
        solution = make_solution(
            handle, problem, solver, solver.default_config(handle, problem.solver_view())
        )
        prepared = bench.device_args(handle, solution, None)
        return bench.median_time(handle, solution, prepared, runs=3, budget_ms=500.0)
    except MiopyError as exc:
        _log.warning("%s: the default config did not run (%s)", solver.name, exc)
        return None


def run(
    handle,
    workload: Workload,
    strategy: str = "exhaustive",
    seconds: float | None = None,
    count: int | None = None,
    retune: bool = False,
    seed: int = 0,
    err: TextIO | None = None,
) -> dict[str, Any]:
    """Tune the workload; returns one entry per (problem, solver) with its default and best times."""
    err = err or sys.stderr
    if strategy not in ("exhaustive", "budget"):
        raise ToolError(f"--strategy={strategy!r}: expected exhaustive or budget")
    if strategy == "budget":
        budgeted(seconds, count, seed)  # refuses a bad budget before anything runs
    pairs = []
    for problem in workload.problems:
        try:
            pairs += [(problem, s) for s in applicable(handle, problem) if s.tunable]
        except MiopyError as exc:
            print(f"skipped {problem.primitive} {problem.key()}: {exc}", file=err)
    if not pairs:
        print("no tunable solver applies to the workload's problems on this device", file=err)
    results = []
    for problem, solver in progress(pairs, len(pairs), "miopy tune", "solver"):
        view = problem.solver_view()
        entry: dict[str, Any] = {"primitive": problem.primitive, "problem": view.key(), "solver": solver.name}
        results.append(entry)
        stored = handle.perf_db.load_user(view.key(), solver.name, primitive=problem.primitive)
        if stored is not None and not retune:
            entry.update(status="already tuned", config=stored)
            continue
        default = solver.default_config(handle, view)
        if strategy == "exhaustive":
            pick: Any = engine_tune.exhaustive
        else:
            pick = budgeted(seconds, count, seed, first=default)
        started = time.monotonic()
        try:
            found = engine_tune.tune(handle, problem, [solver], strategy=pick)
        except MiopyError as exc:
            entry.update(status=f"failed: {str(exc).splitlines()[0]}")
            continue
        entry["seconds"] = round(time.monotonic() - started, 2)
        if solver.name not in found:
            entry.update(status="no config ran")
            continue
        cfg, ms = found[solver.name]
        entry.update(status="tuned", config=cfg, best_ms=ms, default_config=default)
        entry["default_ms"] = ms if _key(cfg) == _key(default) else _default_time(handle, problem, solver)
        if entry["default_ms"]:
            entry["gain"] = entry["default_ms"] / ms if ms > 0 else None
    return {"strategy": strategy, "budget_seconds": seconds, "budget_configs": count, "results": results}


def summary(report: dict[str, Any]) -> list[str]:
    lines = []
    tuned = [r for r in report["results"] if r.get("status") == "tuned"]
    for r in report["results"]:
        head = f"{r['primitive']} {r['problem']} {r['solver']}"
        if r.get("status") == "tuned":
            default = "?" if r.get("default_ms") is None else f"{r['default_ms']:.4f}"
            gain = "" if not r.get("gain") else f" ({r['gain']:.2f}x)"
            lines.append(
                f"{head}: {default} -> {r['best_ms']:.4f} ms{gain} {json.dumps(r['config'], sort_keys=True)}"
            )
        else:
            lines.append(f"{head}: {r.get('status')}")
    gains = [r["gain"] for r in tuned if r.get("gain")]
    if gains:
        import statistics

        lines.append(
            f"{len(tuned)} tuned, {len(report['results']) - len(tuned)} not; gain over the default config: "
            f"median {statistics.median(gains):.2f}x, best {max(gains):.2f}x"
        )
    else:
        lines.append(f"{len(tuned)} tuned, {len(report['results']) - len(tuned)} not")
    return lines
