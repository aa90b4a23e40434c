"""Timing solutions on the device with events."""

from __future__ import annotations

import os
import statistics
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from miopy import log
from miopy.errors import MiopyError
from miopy.solution import InvokeArgs, Solution

_log = log.get("miopy.engine.bench")

# Counted so tests can tell how many solutions were benchmarked (find modes) without wall time.
counters = {"benchmarks": 0}


def device_args(handle, solution: Solution, tensors: dict[str, Any] | None) -> InvokeArgs:
    """Scratch device buffers for a timing run, by role, and a workspace.

    The caller's tensors are copied (never written): find must leave them as they were."""
    descs = solution.problem.tensors()
    bufs = {}
    for role, desc in descs.items():
        given = None if tensors is None else tensors.get(role)
        if given is None:
            bufs[role] = handle.backend.upload(np.zeros(desc.nbytes, dtype=np.uint8))
            continue
        src, host = handle.buffer(given, desc.nbytes, role, desc)
        if host is not None:
            bufs[role] = src  # already a private copy
        else:
            bufs[role] = handle.backend.alloc(desc.nbytes)
            handle.backend.copy(bufs[role], src, desc.nbytes)
    workspace = handle.backend.alloc(solution.workspace) if solution.workspace else None
    return InvokeArgs(bufs, workspace)


def time_solution(
    handle,
    solution: Solution,
    tensors: dict[str, Any] | None = None,
    runs: int = 5,
    prepared: InvokeArgs | None = None,
) -> list[float]:
    """Device-event time (ms) of each of ``runs`` runs of ``solution``."""
    invoker = handle.prepare_invoker(solution)
    args = prepared or device_args(handle, solution, tensors)
    counters["benchmarks"] += 1
    return handle.backend.time_ms(lambda: invoker(args), runs)


def median_time(
    handle, solution: Solution, prepared: InvokeArgs, runs: int = 5, budget_ms: float = 2000.0
) -> float:
    """Median of up to ``runs`` timed runs after one warm-up, fewer when a run is slow (MIOpen
    likewise caps find's runs by time)."""
    invoker = handle.prepare_invoker(solution)
    counters["benchmarks"] += 1
    (warm,) = handle.backend.time_ms(lambda: invoker(prepared), 1)
    runs = max(1, min(runs, int(budget_ms / max(warm, 1e-3))))
    return float(statistics.median(handle.backend.time_ms(lambda: invoker(prepared), runs)))


def compile_all(handle, solutions: list[Solution]) -> list[Solution]:
    """Build every solution's kernels in parallel threads (the compilers release the GIL); a
    solution that fails to build is dropped with a warning."""

    def build(solution: Solution) -> Solution | None:
        try:
            handle.prepare_invoker(solution)
            return solution
        except MiopyError as exc:
            _log.warning(
                "%s %s failed to build and is skipped: %s", solution.solver, solution.config or "", exc
            )
            return None

    workers = max(1, min(os.cpu_count() or 1, 16, len(solutions)))
    with ThreadPoolExecutor(workers) as pool:
        built = list(progress(pool.map(build, solutions), len(solutions), "miopy compiling", "solution"))
    return [s for s in built if s is not None]


def progress(items, total: int, desc: str, unit: str):
    """A progress bar on a terminal for long steps (compiling, timing), the items unchanged
    otherwise; also logged at info level every 10%."""
    import sys

    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None and sys.stderr.isatty() and total > 1:
        yield from tqdm(items, total=total, desc=desc, unit=unit, leave=False)
        return
    step = max(1, total // 10)
    for i, item in enumerate(items, 1):
        if total > 1 and (i % step == 0 or i == total):
            _log.info("%s: %d/%d %ss", desc, i, total, unit)
        yield item
