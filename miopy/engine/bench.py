"""Timing solutions as the device sees them.

Every time here is device time: ``Backend.device_time_ms`` enqueues the runs back to back behind a
kernel that holds the stream until the host has enqueued them all, so the host's cost of a call
(Python, argument conversion) is never in it. MIOPY_BENCH_FLUSH_L2 evicts the L2 cache before each
run. The host's own cost per call is measured separately (``host_time_us``)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from miopy import config, log
from miopy.backends.prepared import Recorder
from miopy.errors import MiopyError
from miopy.invoker import ProgramInvoker
from miopy.solution import InvokeArgs, Solution
from miopy.tensor import DataType, to_storage

_log = log.get("miopy.engine.bench")

# Counted so tests can tell how many solutions were benchmarked (find modes) without wall time.
counters = {"benchmarks": 0}


def _filler(desc) -> np.ndarray:
    """Data to time on when the caller gives none: values in [-1, 1) of the tensor's type, a
    random block repeated (zeros would hide work: a GEMM runs faster on them)."""
    dtype = getattr(desc, "dtype", None)
    if not isinstance(dtype, DataType):  # not a data tensor (e.g. pooling indices): zeros
        return np.zeros(desc.nbytes, dtype=np.uint8)
    count = max(1, desc.nbytes // dtype.itemsize)
    block = np.random.default_rng(20240229).random(min(count, 1 << 16), dtype=np.float32) * 2 - 1
    return np.resize(to_storage(block, dtype), count)


def device_args(handle, solution: Solution, tensors: dict[str, Any] | None) -> InvokeArgs:
    """Device buffers for a timing run, by role, and a workspace.

    The caller's device arrays of the roles the problem only reads are used in place, as
    MIOpen's find uses them: the candidates are timed on the buffers they will run on, and no
    copy of the inputs is allocated (on the H200 the 1x1 cuBLASLt configs of ResNet-50 timed
    within -2.3/+1.6 % of each other on copies and in place, 0.3 % apart in the median, and the
    fastest of 14 races was the same or 0.1-0.4 % behind; MIOPY_FIND_COPY_INPUTS=1 copies them
    as before). Outputs (roles written, read or not) are always private copies: find leaves the
    caller's tensors as they were."""
    problem = solution.problem
    descs = problem.tensors()
    read_only = set(problem.inputs) - set(problem.outputs)
    bufs = {}
    for role, desc in descs.items():
        given = None if tensors is None else tensors.get(role)
        if given is None:
            bufs[role] = handle.backend.upload(_filler(desc))
            continue
        src, host = handle.buffer(given, desc.nbytes, role, desc)
        if host is not None:
            bufs[role] = src  # already a private copy
        elif role in read_only and not config.find_copy_inputs():
            bufs[role] = src  # read, never written: timed in place
        else:
            bufs[role] = handle.backend.alloc(desc.nbytes)
            handle.backend.copy(bufs[role], src, desc.nbytes)
    workspace = handle.backend.alloc(solution.workspace) if solution.workspace else None
    return InvokeArgs(bufs, workspace)


def _with_workspace(handle, solution: Solution, args: InvokeArgs) -> InvokeArgs:
    """The shared timing buffers, with a larger workspace when this solution needs more."""
    need = solution.workspace
    if need and (args.workspace is None or handle.backend.nbytes(args.workspace) < need):
        return dataclasses.replace(args, workspace=handle.backend.alloc(need))
    return args


def _run_fn(handle, solution: Solution, invoker: Any, args: InvokeArgs):
    """One run of ``solution`` on ``args`` as ``Solution.run`` enqueues it on device arrays: the
    launches recorded once and replayed (on CUDA, one CUDA graph), so find ranks what runs. A
    program that cannot be recorded runs through its invoker."""
    check = getattr(invoker, "check", None)
    if check is not None:
        check(args)  # the buffers the recorded calls are bound to
    backend = handle.backend
    recorder = Recorder(backend)
    kernels = {spec: handle.compile(spec) for spec in solution.program.kernels}
    ProgramInvoker(recorder, solution.program, kernels)(args)
    if not recorder.ok or not recorder.calls:
        return lambda: invoker(args)
    calls = backend.finish_prepared(recorder.calls, eager=True)  # no capture inside a timed run
    return lambda: backend.run_prepared(calls)


def _runs_for(estimate_ms: float, target_ms: float = 1.0, cap: int = 100) -> int:
    """Back-to-back runs that make one sample last about ``target_ms`` on the device."""
    return max(1, min(cap, int(target_ms / max(estimate_ms, 1e-4))))


def time_solution(
    handle,
    solution: Solution,
    tensors: dict[str, Any] | None = None,
    runs: int = 5,
    prepared: InvokeArgs | None = None,
) -> list[float]:
    """``runs`` samples of the device time (ms) of one run of ``solution``."""
    invoker = handle.prepare_invoker(solution)
    args = _with_workspace(handle, solution, prepared or device_args(handle, solution, tensors))
    counters["benchmarks"] += 1
    backend, flush = handle.backend, config.bench_flush_l2()
    run = _run_fn(handle, solution, invoker, args)
    (estimate,) = backend.time_ms(run, 1)
    per = _runs_for(estimate)
    return [backend.device_time_ms(run, per, flush) for _ in range(max(1, runs))]


def average_time(handle, solution: Solution, tensors: dict[str, Any] | None, runs: int) -> float:
    """Device time (ms) of one run of ``solution``, averaged over ``runs`` back-to-back runs
    (the driver's ``GPU Kernel Time``). ``tensors`` are copied, never written."""
    invoker = handle.prepare_invoker(solution)
    args = device_args(handle, solution, tensors)
    counters["benchmarks"] += 1
    run = _run_fn(handle, solution, invoker, args)
    return handle.backend.device_time_ms(run, runs, config.bench_flush_l2())


def median_time(
    handle,
    solution: Solution,
    prepared: InvokeArgs,
    runs: int = 5,
    budget_ms: float = 2000.0,
    count: bool = True,
) -> float:
    """Median of up to ``runs`` device-time samples after one warm-up, fewer when a run is slow
    (MIOpen likewise caps find's runs by time). ``count``: a solution benchmarked for the first
    time (``counters``), not one timed again."""
    invoker = handle.prepare_invoker(solution)
    args = _with_workspace(handle, solution, prepared)
    if count:
        counters["benchmarks"] += 1
    backend, flush = handle.backend, config.bench_flush_l2()
    run = _run_fn(handle, solution, invoker, args)
    (warm,) = backend.time_ms(run, 1)  # an upper bound: it includes enqueueing
    per = _runs_for(warm)
    samples = max(1, min(runs, int(budget_ms / max(warm * per, 1e-3))))
    return float(statistics.median(backend.device_time_ms(run, per, flush) for _ in range(samples)))


# Close races: candidates whose first times lie within RACE_MARGIN of the fastest (at most
# RACE_MOST of them) are timed again in interleaved rounds and ranked by the median of their
# samples. One sample each is a lottery between equals (on an H200 two runs of one cuBLASLt
# kernel differ by 1-3 %): the fastest first sample is the luckiest more often than the best.
RACE_MARGIN = 0.03
RACE_MOST = 4


def close_race(
    timed: list[tuple[Any, float]],
    measure: Any,
    rounds: int,
    margin: float = RACE_MARGIN,
    most: int = RACE_MOST,
) -> list[tuple[Any, float]]:
    """``timed``: (candidate, ms) pairs; ``measure(candidate)`` another sample (ms, or None when
    it failed). The candidates within ``margin`` of the fastest (``most`` of them at most) are
    measured ``rounds`` more times, one sample each a round, in turn; each then carries the
    median of its samples, the first included, and they come back ordered by it, then the others
    in their order, each with at least the slowest raced time: a single first sample is not
    compared with raced medians. (On the H200 the race's samples of the ResNet-50 1x1 cuBLASLt
    configs ran 3-5 % slower than the same configs' first samples, so the fastest candidate left
    out of the race, alone with its first sample, won 11 of 14 searches, by 1-3 % of the time
    of the race's best on the caller's tensors.)"""
    ordered = sorted(timed, key=lambda p: p[1])
    if len(ordered) < 2 or rounds < 1:
        return ordered
    limit = ordered[0][1] * (1.0 + margin)
    close = [p for p in ordered[:most] if p[1] <= limit]
    if len(close) < 2:
        return ordered
    samples = [[t] for _, t in close]
    for _ in range(rounds):
        for (candidate, _), got in zip(close, samples):
            t = measure(candidate)
            if t is not None:
                got.append(t)
    raced = sorted(
        ((c, float(statistics.median(got))) for (c, _), got in zip(close, samples)), key=lambda p: p[1]
    )
    slowest = raced[-1][1]
    return raced + [(c, max(t, slowest)) for c, t in ordered[len(close) :]]


def host_time_us(
    handle, solution: Solution, tensors: dict[str, Any], workspace: Any = None, runs: int = 200
) -> float:
    """Host time (µs) of one ``solution.run`` on ``tensors`` (device arrays: the call only
    enqueues), the median of ``runs`` calls after a warm-up; the device is drained every 50
    calls so a full launch queue never blocks the host."""
    solution.run(handle, tensors, workspace)
    handle.backend.synchronize()
    times = []
    for i in range(runs):
        begin = time.perf_counter()
        solution.run(handle, tensors, workspace)
        times.append(time.perf_counter() - begin)
        if i % 50 == 49:
            handle.backend.synchronize()
    handle.backend.synchronize()
    return float(statistics.median(times)) * 1e6


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
