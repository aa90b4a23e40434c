"""What every miopy-driver subcommand shares, whatever the primitive: input buffers (random or
from files), choosing a solution (Find API, immediate mode, a named solver, tuning), timing,
verification against the NumPy reference with one tolerance rule, and dumping outputs.

A subcommand family (driver/conv.py, ...) parses its flags, builds its problems and describes each
one as a ``Case`` (labels, reference, tolerance, stats lines); ``run_case`` does the rest and
prints MIOpenDriver's lines. The common flags keep MIOpenDriver's names: ``iter``, ``time``,
``wall``, ``verify``, ``verification_cache``, ``search``, ``solution``, ``dump_output``.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from miopy import log
from miopy.errors import AllocFailed, BadParm
from miopy.problem.base import Problem
from miopy.reference.common import rms_range, store_logical, view
from miopy.solution import Solution
from miopy.solvers.base import ALGORITHM_IDS
from miopy.tensor import TensorDesc, from_storage, to_storage

_log = log.get("miopy.driver")

SEED = 20240229


# ---- flags ---------------------------------------------------------------------------------------
def check_common(values: dict[str, Any], label: Callable[[str], str]) -> None:
    """The shared flags' values; ``label(long)`` names a flag in errors (``-i/--iter``)."""
    if values["iter"] < 1:
        raise BadParm(f"{label('iter')}={values['iter']}: must be positive")
    for long, allowed in (
        ("time", (0, 1)),
        ("wall", (0, 1, 2)),
        ("verify", (0, 1)),
        ("search", (0, 1)),
        ("dump_output", (0, 1)),
    ):
        if long in values and values[long] not in allowed:
            raise BadParm(f"{label(long)}={values[long]}: expected {' or '.join(map(str, allowed))}")


# ---- inputs -------------------------------------------------------------------------------------
def random_buffer(desc: TensorDesc, stream: int) -> np.ndarray:
    """Uniform in [-1, 1), seeded per ``stream`` (one per role), stored in the descriptor's layout."""
    rng = np.random.default_rng([SEED, stream])
    values = rng.random(desc.lens, dtype=np.float32) * 2 - 1
    return store_logical(values, desc, fill=0.0)


def load_buffer(path: str, desc: TensorDesc, label: str) -> np.ndarray:
    """A stored buffer from a file: .npy (logical shape, or a flat stored buffer) or raw bytes of
    the stored dtype (element space of the descriptor, i.e. in its layout). ``label`` is the flag
    named in errors (``-d/--in_data``)."""
    storage = desc.dtype.storage
    try:
        if path.endswith(".npy"):
            array = np.load(path, allow_pickle=False)
        else:
            array = np.fromfile(path, dtype=storage)
    except (OSError, ValueError) as exc:
        raise BadParm(f"{label}={path}: cannot read ({exc})") from None
    if array.shape == tuple(desc.lens):
        values = array if array.dtype == storage else to_storage(array.astype(np.float32), desc.dtype)
        if values.dtype != storage:
            values = values.astype(storage)
        flat = np.zeros(desc.element_space, dtype=storage)
        view(flat, desc)[...] = values
        return flat
    flat = array.reshape(-1)
    if flat.size != desc.element_space:
        raise BadParm(
            f"{label}={path}: holds {flat.size} elements of {storage}; the tensor needs "
            f"{desc.element_space} ({'x'.join(map(str, desc.lens))} {desc.layout})"
        )
    if flat.dtype != storage:
        flat = to_storage(flat.astype(np.float32), desc.dtype)
    return np.ascontiguousarray(flat, dtype=storage)


def inputs(problem: Problem, files: dict[str, tuple[str, str]], streams: dict[str, int]) -> dict:
    """A stored buffer for every tensor of ``problem``: from ``files[role] = (path, flag label)``
    when a path is given, else random with ``streams[role]`` as seed."""
    out = {}
    for role, desc in problem.tensors().items():
        path, label = files.get(role, ("", ""))
        with host_memory(f"tensor {role}", desc.element_count * 4 + desc.nbytes):
            out[role] = load_buffer(path, desc, label) if path else random_buffer(desc, streams[role])
    return out


@contextmanager
def host_memory(what: str, nbytes: int):
    """The host running out of memory becomes one line: AllocFailed with the size asked for."""
    try:
        yield
    except MemoryError:
        raise AllocFailed(f"AllocFailed: {what} needs {nbytes} bytes of host memory, not available") from None


# ---- choosing a solution ------------------------------------------------------------------------
def choose(
    handle,
    problem: Problem,
    selected: str,
    tuning: bool,
    label: str,
    what: str,
    host: dict[str, np.ndarray] | None = None,
) -> Solution:
    """``-S``: a negative number runs the Find API (timing on copies of ``host``), 0 immediate
    mode's first, anything else names a solver (name or id); ``tuning`` (``-s 1``) searches the
    perf-config space first. ``label`` and ``what`` (e.g. "Forward") name the flag and the case in
    errors."""
    from miopy.engine.find import FindOptions, find_solutions, get_solutions, solution_for

    selected = str(selected).strip()
    number = int(selected) if selected.lstrip("+-").isdigit() else None
    if number is not None and number < 0:
        solutions = find_solutions(handle, problem, FindOptions(tuning=tuning), tensors=host)
        if not solutions:
            raise BadParm(f"problem={problem.key()}: find returned no solution")
        return solutions[0]
    if tuning:
        from miopy.engine.tune import tune

        tune(handle, problem)
    if number == 0:
        solutions = get_solutions(handle, problem)
        if not solutions:
            raise BadParm(f"problem={problem.key()}: no applicable solution")
        return solutions[0]
    try:
        return solution_for(handle, problem, number if number is not None else selected)
    except BadParm as exc:  # NotApplicable stays NotApplicable
        raise type(exc)(f"{label}={selected} ({what}): {exc}") from None


# ---- verification -------------------------------------------------------------------------------
def cached_reference(
    problem: Problem,
    buffers: dict[str, np.ndarray],
    cache_dir: str,
    compute: Callable[[Problem, dict[str, np.ndarray]], dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """``compute(problem, inputs)`` (expected outputs by role), through the ``-C`` cache when a
    folder is given (keyed by the problem and the input bytes)."""
    descs = problem.tensors()
    read = {r: buffers[r] for r in problem.inputs}
    paths: dict[str, Path] = {}
    if cache_dir:
        digest = hashlib.sha256(problem.key().encode())
        for role in problem.inputs:
            digest.update(role.encode() + np.ascontiguousarray(buffers[role]).tobytes())
        stem = digest.hexdigest()[:40]
        single = len(problem.outputs) == 1
        for role in problem.outputs:
            name = f"ref-{stem}.npy" if single else f"ref-{stem}-{role}.npy"
            paths[role] = Path(cache_dir).expanduser() / name
        try:
            cached = {role: np.load(path, allow_pickle=False) for role, path in paths.items()}
            if all(cached[r].shape == tuple(descs[r].lens) for r in cached):
                return cached
        except (OSError, ValueError):
            pass
    ref = compute(problem, read)
    for role, path in paths.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, ref[role])
            os.replace(tmp, path)
        except OSError as exc:
            log.warn_once(_log, f"verification cache {cache_dir}: not written ({exc})")
    return ref


# ---- one case -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One problem a command line runs (one direction), as its family describes it.

    ``reference(problem, inputs)`` gives the expected outputs by role (float64, logical shape);
    ``tolerance(problem, solution)`` the largest rms_range error that verifies;
    ``stats(ms)`` the lines printed after the kernel time (``-t 1``)."""

    problem: Problem
    run_name: str  # "Forward Conv."
    verify_name: str  # "Forward Convolution"
    dump_name: str  # "dump_fwd_out_gpu.bin"
    reference: Callable[[Problem, dict[str, np.ndarray]], dict[str, np.ndarray]]
    tolerance: Callable[[Problem, Solution], float]
    stats: Callable[[float], list[str]] | None = None
    solution_flag: str = "-S/--solution"
    what: str = ""
    # A family whose MIOpenDriver prints other lines gives them here: ``time_lines(times in ms of
    # each run, -i)`` replaces the average kernel time and stats, ``wall_line(ms, -i)`` the
    # wall-clock line, and ``check(problem, outputs, reference)`` -> (passed, lines) the rms_range
    # verification (outputs: the stored buffers by role).
    time_lines: Callable[[list[float], int], list[str]] | None = None
    wall_line: Callable[[float, int], str] | None = None
    check: (
        Callable[[Problem, dict[str, np.ndarray], dict[str, np.ndarray]], tuple[bool, list[str]]] | None
    ) = None


def storage(desc: Any) -> np.dtype:
    """The NumPy dtype a descriptor's elements are stored as (a non-float descriptor, such as
    pooling's index, names its own)."""
    return np.dtype(desc.array_dtypes[0]) if hasattr(desc, "array_dtypes") else desc.dtype.storage


def run_case(
    handle,
    case: Case,
    values: dict[str, Any],
    given: dict[str, np.ndarray],
    out: TextIO,
    keep: dict[str, np.ndarray] | None = None,
) -> bool:
    """Choose, run, time, dump and verify one case; False when verification failed. ``keep``
    receives the outputs (e.g. the index a forward pass leaves for the backward one)."""
    from miopy.engine.bench import host_time_us, time_solution

    problem = case.problem
    descs = problem.tensors()
    host = dict(given)
    for role in problem.outputs:
        if role not in problem.inputs:
            with host_memory(f"output {role}", descs[role].nbytes):
                host[role] = np.zeros(descs[role].element_space, dtype=storage(descs[role]))
    solution = choose(
        handle,
        problem,
        values.get("solution", "-1"),
        bool(values.get("search", 0)),
        case.solution_flag,
        case.what or case.run_name,
        host,
    )
    solver_id = solution.solver_id if solution.solver_id is not None else -1
    algo = ALGORITHM_IDS.get(solution.algorithm, -1)
    print(f"MIOpen {case.run_name} Algorithm: {algo}, Solution: {solver_id}/{solution.solver}", file=out)
    out.flush()

    backend = handle.backend
    device = {r: backend.upload(a) for r, a in host.items()}
    workspace = backend.alloc(solution.workspace) if solution.workspace else None
    iters = values.get("iter", 10)
    wall = values.get("wall", 0)
    ran = 0
    if values.get("time", 0):
        times = time_solution(handle, solution, device, iters)
        ran += len(times)
        if case.time_lines is not None:
            for line in case.time_lines(times, iters):
                print(line, file=out)
        else:
            kept = times[1:] if len(times) > 1 else times
            ms = float(sum(kept) / len(kept))
            print(f"GPU Kernel Time {case.run_name} Elapsed: {ms:f} ms (average)", file=out)
            for line in case.stats(ms) if case.stats else ():
                print(line, file=out)
        if not set(problem.outputs) & set(problem.inputs):  # extra runs must not change a result
            us = host_time_us(handle, solution, device, workspace, runs=max(iters, 3))
            print(f"Host time per call {case.run_name}: {us:.1f} us (median of {max(iters, 3)})", file=out)
    if wall:
        if wall == 2:
            solution.run(handle, device, workspace)
        start = time.perf_counter()
        for _ in range(iters):
            solution.run(handle, device, workspace)
        wall_ms = (time.perf_counter() - start) * 1e3 / iters
        ran += iters
        if case.wall_line is not None:
            print(case.wall_line(wall_ms, iters), file=out)
        else:
            print(f"Wall-clock Time {case.run_name} Elapsed: {wall_ms:f} ms", file=out)
    left = iters - ran  # -i runs in all; the last one's output is kept
    if left <= 0 and not wall:
        left = 1  # the timed runs wrote to scratch copies
    for _ in range(left):
        solution.run(handle, device, workspace)
    for role in problem.outputs:
        backend.download(device[role], host[role])
    backend.synchronize()

    if keep is not None:
        keep.update({role: host[role] for role in problem.outputs})
    if values.get("dump_output", 0):
        dump(case, host, out)
    if not values.get("verify", 1):
        return True
    return verify(case, solution, host, values.get("verification_cache", ""), out)


def dump(case: Case, host: dict[str, np.ndarray], out: TextIO) -> None:
    """Each output's raw stored bytes; several outputs get their role in the file name."""
    problem = case.problem
    descs = problem.tensors()
    for role in problem.outputs:
        desc = descs[role]
        name = case.dump_name
        if len(problem.outputs) > 1:
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}_{role}.{ext}" if dot else f"{name}_{role}"
        host[role].tofile(name)
        kind = getattr(desc, "type_name", None) or desc.dtype.value
        print(
            f"Wrote {case.verify_name} output to {os.path.abspath(name)} ({kind} raw, "
            f"{desc.layout} {'x'.join(map(str, desc.lens))})",
            file=out,
        )


def verify(case: Case, solution: Solution, host: dict[str, np.ndarray], cache_dir: str, out: TextIO) -> bool:
    """Each output against the reference: MIOpen's rms_range error under the case's tolerance;
    an integer reference (e.g. pooling's index mask) must match exactly."""
    problem = case.problem
    descs = problem.tensors()
    with host_memory("the CPU reference", 8 * sum(d.element_count for d in descs.values())):
        ref = cached_reference(problem, host, cache_dir, case.reference)
    if case.check is not None:
        ok, lines = case.check(problem, host, ref)
        for line in lines:
            print(line, file=out)
        return ok
    tol = case.tolerance(problem, solution)
    ok = True
    for role, want in ref.items():
        desc = descs[role]
        label = case.verify_name if len(ref) == 1 else f"{case.verify_name} ({role})"
        got = view(host[role], desc)
        if np.issubdtype(np.asarray(want).dtype, np.integer):
            wrong = int(np.count_nonzero(np.asarray(got) != want))
            if wrong == 0:
                print(f"{label} Verifies OK on CPU reference (exact)", file=out)
            else:
                print(f"{label} FAILED: {wrong} of {want.size} elements differ", file=out)
                ok = False
            continue
        err = rms_range(from_storage(got, desc.dtype), want)
        if math.isfinite(err) and err < tol:
            print(f"{label} Verifies OK on CPU reference ({err:g} < {tol:g})", file=out)
        else:
            print(f"{label} FAILED: {err:g} > {tol:g}", file=out)
            ok = False
    return ok


__all__ = ["Case", "cached_reference", "choose", "inputs", "load_buffer", "random_buffer", "run_case"]
