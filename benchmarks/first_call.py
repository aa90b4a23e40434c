"""The first result of a fresh process with an empty user cache, (a) without a kernel package,
(b) with one built by ``miopy kernels build`` for the same problems: for one convolution and for
every problem of a ResNet-50 forward+backward iteration (each convolution in all three
directions, batch norm training forward and backward, ReLU forward and backward, max and average
pooling forward and backward: 121 problems). Each case runs in ``--repeat`` new processes with
empty cache and DB folders, and reports (figures of the process with the fastest first
iteration, with the minimum and median over the processes):

- ``first``: the first iteration (every problem solved once, by immediate mode or find, then run
  on device buffers, then a device sync), timed from the moment the handle exists and the
  device buffers are filled; nothing is printed while it runs (a process stopped by
  ``--time-cap`` says how far it got when it is stopped); ``host``: the part before the final
  sync (choosing and enqueueing), so that first - host is what the device still had to do;
- ``warm``: the best of the next iterations in the same process: the same API calls as the
  first (``get_solutions`` or ``find_solutions`` then ``run_solution`` for every problem, then a
  device sync), with everything already in memory (immediate mode's kept answers, the loaded
  kernels, the prepared calls recorded by the first run, the workspaces);
- where the clock starts: after the handle is made and every device buffer is allocated and
  filled (a framework's first training step, after its model and data are set up). Work a handle
  starts in the background as it is made (CUDA: cuBLAS/cuBLASLt handles and cuBLASLt's one-time
  initialization, the package's recorded cuBLASLt algorithms checked, the package's binaries
  read into memory) overlaps that set-up; each case says whether it was still running when the
  clock started, and the two figures below include it;
- ``fresh process to first result``: from the parent starting the process to the end of the
  first iteration (interpreter start, imports, the handle, filling the buffers included), and
  ``handle made to first result``: from just before ``miopy.Handle()`` to the end of the first
  iteration; work a handle starts in the background (the BLAS set-up, the library warm-up)
  overlaps the buffer filling, and these two figures show what that hides;
- ``compiled``: kernels compiled (kernel cache misses, a count, not a time), ``loaded`` (hits,
  from the package or the cache), ``chosen`` (problems whose solution came from the package's
  immediate-mode choices) and ``warmed`` (library calls the handle ran ahead).

Variants (``--variants``): ``none`` (no package), ``kdb`` (the package), ``kdb-warm-up``
(MIOPY_LIBRARY_WARM_UP=1), ``kdb-no-load-ahead`` (MIOPY_KERNEL_LOAD_AHEAD=0: the package's binaries
read ahead but each kernel loaded at its first use, as before the set-up thread loaded them),
``kdb-no-gc-freeze`` (MIOPY_GC_FREEZE=0: Python's collector not frozen after the handle's set-up),
``kdb-no-stream-warm-up`` (MIOPY_LIBRARY_STREAM_WARM_UP=0: no cuBLASLt call per recorded algorithm
on the handle's stream ahead of the first iteration, which a package gives by default),
``kdb-no-choices`` (a copy of the package without its choices and library calls, as packages were
before them), ``kdb-no-programs`` (a copy of the
package without the programs of its chosen solutions: each choice checked against its solver and its
program made by the solver, as before packages carried programs), ``again`` (OpenCL: the package in
a new process that keeps PoCL's cache from the run before it; PoCL finishes a package's binaries on
first launch and caches that), ``kdb-eager`` (CUDA_MODULE_LOADING=EAGER: CUDA loads every kernel of
cuBLAS and cuBLASLt when they are loaded, in the handle's set-up, instead of each at its first call
in the first iteration; that set-up shows in the time from process start to first result). On OpenCL
each run gets an empty PoCL cache (``POCL_CACHE_DIR``) unless it is ``again``, so PoCL's own cache
does not hide the compiles of the case without a package.

    python benchmarks/first_call.py --workload resnet50-iter --batch 32 --repeat 3     # CUDA
    python benchmarks/first_call.py --backend opencl --workload resnet50-iter --image 64 --batch 1

Goal (issue 11): with the package, zero kernels compiled and the first iteration within 1.2x of
the warm one. Building the package is timed too (in its own process) but is part of no figure;
``--kdb FILE`` uses a package built elsewhere (``miopy kernels build ... --arch sm_90 --cu 132``
on a CPU machine) instead. ``--time-cap S`` stops a process after S seconds and reports how far
its first iteration got (problems done, kernels compiled) rather than nothing."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = {"resnet50-iter": "resnet50", "resnet50-small-iter": "resnet50-small"}

CHILD = r"""
import json, os, signal, sys, time
t0 = time.perf_counter()
import numpy as np
import miopy
from miopy.engine import find
from miopy.tool import workload
spec, batch, mode, count, warm_runs, spawned, profile = sys.argv[1:8]
problems = workload.load(spec, [int(batch)]).problems
if count != "all":
    problems = [p for p in problems if p.primitive == "conv"][: int(count)]
t_handle = time.perf_counter()
h = miopy.Handle()
handle_s = time.perf_counter() - t_handle
descs = [d for p in problems for d in p.tensors().values()]
# One block of random numbers, sliced for every tensor (generating each would take longer than
# the iteration at batch 32).
pool = np.random.default_rng(0).standard_normal(max(d.nbytes for d in descs) // 4 + 1).astype(np.float32)

def fill(d):
    dtype = getattr(d, "dtype", None)  # an index workspace (pooling) has none: zeros
    if dtype is not None and str(dtype.value).upper() == "FP32" and d.nbytes % 4 == 0:
        host = pool[: d.nbytes // 4]
    else:
        host = np.zeros(d.nbytes, np.uint8)
    return h.backend.upload(host)  # device buffers: each call runs in place, no copies

buffers = [{r: fill(d) for r, d in p.tensors().items()} for p in problems]
h.backend.synchronize()
startup = time.perf_counter() - t0
workspaces = {}
# Where the first iteration goes: choosing solutions, building or loading kernels, the rest.
spent = {"choose_s": 0.0, "build_s": 0.0, "load_s": 0.0, "library_s": 0.0, "unprepared_s": 0.0}

def timed(fn, key):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t
    return wrapper

h.backend.build = timed(h.backend.build, "build_s")
h.backend.load = timed(h.backend.load, "load_s")
for name in ("gemm", "lt_matmul", "prepare_lt_matmul"):  # vendor library calls (cuBLAS set-up)
    if hasattr(h.backend, name):
        setattr(h.backend, name, timed(getattr(h.backend, name), "library_s"))
# A run that is no replay of prepared calls: its checks, invoker, recording (compiling and loading
# kernels and vendor library set-up included).
h._run_unprepared = timed(h._run_unprepared, "unprepared_s")
choose = timed(find.find_solutions if mode == "find" else find.get_solutions, "choose_s")

# How far the first iteration got, printed only when the parent stops the process (--time-cap):
# nothing is written while an iteration is timed.
progress = [0, None]

def stopped(*_):
    print(json.dumps({"done": progress[0], "of": len(problems), "s": progress[1],
                      "compiled": h.kernel_cache.misses}), flush=True)
    os._exit(3)

signal.signal(signal.SIGTERM, stopped)
host = {}

per_problem = []  # the first iteration: [primitive, solver, choosing, workspace, run] (host s)

def iteration(report):
    clock = time.perf_counter
    for i, (p, bufs) in enumerate(zip(problems, buffers)):
        t1 = clock()
        s = choose(h, p)[0]
        t2 = clock()
        ws = None
        if s.workspace:
            ws = workspaces.get(s.workspace)
            if ws is None:
                ws = workspaces[s.workspace] = h.backend.alloc(s.workspace)
        t3 = clock()
        h.run_solution(s, dict(bufs), ws)
        if report:
            t4 = clock()
            times = (round(t2 - t1, 6), round(t3 - t2, 6), round(t4 - t3, 6))
            per_problem.append([p.primitive, s.solver, *times])
            progress[0], progress[1] = i + 1, t4 - t
    # host: choosing and enqueueing every problem; sync: what the device still had to do then
    # (near 0: the device waited for the host)
    host["host_s"] = time.perf_counter() - t
    h.backend.synchronize()

if profile != "-":  # the first iteration under cProfile (slower: figures of such a run are no measure)
    import cProfile, io, pstats
    profiler = cProfile.Profile()
    profiler.enable()
# The background BLAS set-up (CUDA: cuBLAS, cuBLASLt and its one-time initialization) still
# running when the clock starts: then the first iteration waits for part of it.
set_up = [getattr(h.backend, n, None) for n in ("_blas_thread", "_precheck_thread", "_warm_thread")]
set_up.append(getattr(h, "_prefetch_thread", None))
set_up_busy = any(t is not None and t.is_alive() for t in set_up)
# Python's garbage collections during the first iteration: how many walked every generation, and
# the time all of them took (MIOPY_GC_FREEZE: a handle with a package freezes what exists).
import gc
collections = {"full": 0, "s": 0.0, "started": 0.0}

def on_gc(phase, info):
    if phase == "start":
        collections["started"] = time.perf_counter()
    else:
        collections["s"] += time.perf_counter() - collections["started"]
        collections["full"] += info["generation"] == 2

gc.callbacks.append(on_gc)
t = time.perf_counter(); iteration(True); first = time.perf_counter() - t
gc.callbacks.remove(on_gc)
first_host = host["host_s"]
if profile != "-":
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(70)
    open(profile, "w").write(text.getvalue())
    profiler.dump_stats(profile + ".prof")  # for pstats: callers, callees
to_first = time.time() - float(spawned)  # the parent's clock: interpreter start included
handle_to_first = time.perf_counter() - t_handle
compiled, loaded = h.kernel_cache.misses, h.kernel_cache.hits
chosen = h.package_choices.used
planned = getattr(h.package_choices, "planned", None)
warmed = getattr(h.backend, "library_warmed", None)
stream_warmed = getattr(h.backend, "library_stream_warmed", None)
heuristics = None
if getattr(h.backend, "name", "") == "cuda":
    from miopy.backends import cuda_libs

    heuristics = cuda_libs.heuristic_calls  # cuBLASLt heuristics queries up to here
first_spent = {k: round(v, 4) for k, v in spent.items()}
warm, warm_host = [], []
for _ in range(int(warm_runs)):
    t = time.perf_counter(); iteration(False); warm.append(time.perf_counter() - t)
    warm_host.append(host["host_s"])
print(json.dumps({"problems": len(problems), "startup_s": startup, "first_s": first,
                  "warm_s": min(warm), "compiled": compiled, "loaded": loaded,
                  "to_first_s": to_first, "handle_to_first_s": handle_to_first, "handle_s": handle_s,
                  "chosen": chosen, "planned": planned, "warmed": warmed, "first_host_s": first_host,
                  "set_up_busy": set_up_busy, "lt_init_s": getattr(h.backend, "lt_initialized_s", None),
                  "prechecked": getattr(h.backend, "library_prechecked", None),
                  "stream_warmed": stream_warmed, "lt_heuristics": heuristics,
                  "prefetched": getattr(h.kernel_cache, "prefetched", None),
                  "loaded_ahead": getattr(h, "kernels_loaded_ahead", None),
                  "gc_full": collections["full"], "gc_s": collections["s"],
                  "gc_frozen": gc.get_freeze_count(),
                  "ahead_used": getattr(h, "kernels_ahead_used", None),
                  "warm_host_s": warm_host[warm.index(min(warm))],
                  "per_problem": per_problem,
                  "packages": [str(p) for p in h.kernel_cache.package_paths()]} | first_spent), flush=True)
"""


def _env(
    tmp: Path, kdb: Path | None, backend: str, pocl: Path | None = None, warm_up: bool = False
) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MIOPY_BACKEND": backend, "PYTHONUNBUFFERED": "1"}
    for name in (
        "MIOPY_DISABLE_CACHE",
        "MIOPY_FIND_MODE",
        "MIOPY_FIND_ENFORCE",
        "MIOPY_LIBRARY_WARM_UP",
        "CUDA_MODULE_LOADING",
        "MIOPY_KERNEL_LOAD_AHEAD",
        "MIOPY_GC_FREEZE",
        "MIOPY_LIBRARY_STREAM_WARM_UP",
    ):
        env.pop(name, None)
    if warm_up:
        env["MIOPY_LIBRARY_WARM_UP"] = "1"
    for name, sub in (
        ("MIOPY_CUSTOM_CACHE_DIR", "cache"),
        ("MIOPY_USER_DB_PATH", "db"),
        ("MIOPY_KDB_PATH", "kdb"),
    ):
        (tmp / sub).mkdir(mode=0o700, exist_ok=True)
        env[name] = str(tmp / sub)
    # PoCL keeps its own cache of compiled programs: a fresh one per case, as on a fresh machine.
    pocl = pocl or tmp / "pocl"
    pocl.mkdir(mode=0o700, exist_ok=True)
    env["POCL_CACHE_DIR"] = str(pocl)
    # The shipped perf and find DBs (what the package was built from), without any shipped .kdb.
    system = tmp / "system"
    system.mkdir(mode=0o700, exist_ok=True)
    for db in (ROOT / "miopy" / "data").glob("*.db"):
        shutil.copyfile(db, system / db.name)
    env["MIOPY_SYSTEM_DB_PATH"] = str(system)
    if kdb is not None:
        env["MIOPY_KDB_PATH"] = str(kdb.parent)
    return env


def _probe(tmp: Path) -> tuple[str, str]:
    """The arch and SM count of the CUDA device here (in a process of its own)."""
    (tmp / "probe").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", "import miopy; i = miopy.Handle('cuda').info; print(i.arch, i.compute_units)"],
        env=_env(tmp / "probe", None, "cuda"),
        capture_output=True,
        text=True,
        check=True,
    )
    arch, cus = done.stdout.split()
    return arch, cus


def _build(args, spec: str, tmp: Path) -> tuple[Path, dict] | None:
    build = [sys.executable, "-m", "miopy", "kernels", "build", spec, "--batch", args.batch]
    build += ["--backend", args.backend, "-o", str(tmp / "package"), "--json"]
    if args.backend == "cuda":
        arch, cus = _probe(tmp)
        build += ["--arch", arch, "--cu", cus]
    (tmp / "b").mkdir()
    t = time.perf_counter()
    done = subprocess.run(build, env=_env(tmp / "b", None, args.backend), capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return None
    manifest = json.loads(done.stdout)
    manifest["wall_s"] = round(time.perf_counter() - t, 1)
    return Path(manifest["path"]), manifest


def _manifest(kdb: Path, tmp: Path, backend: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "miopy", "kernels", "show", str(kdb), "--json"],
        env=_env(tmp, None, backend),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"--kdb={kdb}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def _without_choices(kdb: Path, folder: Path, tables=("kdb_choice", "kdb_library", "kdb_plan")) -> Path:
    """A copy of the package without its immediate-mode choices, library calls and programs
    (what a package held before they were shipped): the same kernels, every solver asked again.
    With ``tables=("kdb_plan",)``: without its programs only (before them: each choice checked
    against its solver and its program made by the solver)."""
    folder.mkdir(mode=0o700, exist_ok=True)
    copy = folder / kdb.name
    shutil.copyfile(kdb, copy)
    conn = sqlite3.connect(copy)
    try:
        for table in tables:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.commit()
    finally:
        conn.close()
    return copy


# Variants of a case: (package, library warm-up, PoCL cache of the previous run). "again" is
# OpenCL only: PoCL's cache as the case before it left it (any later run on the machine).
# The last field: more environment. kdb-eager: CUDA loads every module of a library (cuBLAS,
# cuBLASLt: thousands of kernels) when the library is loaded, instead of each kernel at its first
# use (CUDA_MODULE_LOADING=LAZY, the default): the time moves to the handle's set-up.
VARIANTS = {
    "none": ("no package", False, False, False, {}),
    "kdb": ("package", True, False, False, {}),
    "kdb-warm-up": ("package, library warm-up", True, True, False, {}),
    "kdb-no-choices": ("package without choices", "bare", False, False, {}),
    "kdb-no-programs": ("package without programs", "checked", False, False, {}),
    "again": ("package, PoCL cache warm", True, False, True, {}),
    "kdb-eager": ("package, CUDA_MODULE_LOADING=EAGER", True, False, False, {"CUDA_MODULE_LOADING": "EAGER"}),
    "kdb-no-load-ahead": ("package, no load ahead", True, False, False, {"MIOPY_KERNEL_LOAD_AHEAD": "0"}),
    "kdb-no-gc-freeze": ("package, no gc.freeze", True, False, False, {"MIOPY_GC_FREEZE": "0"}),
    "kdb-no-stream-warm-up": (
        "package, no cuBLASLt calls on the stream ahead",
        True,
        False,
        False,
        {"MIOPY_LIBRARY_STREAM_WARM_UP": "0"},
    ),
}


def _once(
    args, spec: str, count: str, mode: str, kdb: Path | None, run_dir: Path, variant: tuple, profile="-"
) -> dict:
    _, _, warm_up, again, extra = variant
    pocl = run_dir.parent / "last-pocl" if again else None
    cmd = [sys.executable, "-c", CHILD, spec, args.batch, mode, count, str(args.warm)]
    timed_out = False
    env = _env(run_dir, kdb, args.backend, pocl, warm_up) | extra
    t = time.perf_counter()
    pipe = subprocess.PIPE
    proc = subprocess.Popen([*cmd, repr(time.time()), profile], env=env, stdout=pipe, stderr=pipe, text=True)
    try:
        out, err = proc.communicate(timeout=args.time_cap)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        timed_out, code = True, None
        proc.terminate()  # the child prints how far it got, then exits
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # stuck in a compiler call: no progress line
            proc.kill()
            out, err = proc.communicate()
    wall = time.perf_counter() - t
    if args.backend == "opencl" and not again:  # an "again" run starts from the PoCL cache left here
        last = run_dir.parent / "last-pocl"
        shutil.rmtree(last, ignore_errors=True)
        if (run_dir / "pocl").is_dir():
            shutil.copytree(run_dir / "pocl", last)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    final = next((r for r in lines if "first_s" in r), None)
    if final is not None:
        return final | {"process_s": wall, "status": "ok"}
    progress = [r for r in lines if "done" in r]
    last_line = progress[-1] if progress else {"done": 0, "of": "?", "s": None, "compiled": None}
    why = f"stopped by --time-cap {args.time_cap} s" if timed_out else f"failed (exit {code})"
    if not timed_out:
        print(err[-3000:], file=sys.stderr)
    return {
        "status": why,
        "problems": last_line["of"],
        "done": last_line["done"],
        "first_s": None,
        "partial_s": last_line["s"],
        "compiled": last_line["compiled"],
        "process_s": wall,
    }


def _case(args, spec: str, count: str, mode: str, kdb: Path | None, tmp: Path, variant: tuple) -> dict:
    """``--repeat`` fresh processes of one case: each run's figures, and the minimum and median
    of the first iteration, the warm one and the time from process start to the first result."""
    runs = []
    for _ in range(args.repeat):
        run_dir = tmp / f"run-{next(_RUN)}"
        run_dir.mkdir()
        r = _once(args, spec, count, mode, kdb, run_dir, variant)
        runs.append(r)
        if r["status"] != "ok":
            break
    return _summary(runs)


def _summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["status"] == "ok"]
    if len(ok) < len(runs):
        return runs[-1] | {"runs": runs}
    out = dict(min(ok, key=lambda r: r["first_s"]))
    for field in ("first_s", "warm_s", "to_first_s", "handle_to_first_s", "process_s"):
        values = [r[field] for r in ok]
        out[f"{field}_min"], out[f"{field}_median"] = min(values), statistics.median(values)
    out["ratio_min"] = out["first_s_min"] / max(out["warm_s_min"], 1e-9)
    out["ratios"] = [r["first_s"] / max(r["warm_s"], 1e-9) for r in ok]
    out["ratio_median"] = statistics.median(out["ratios"])
    out["runs"] = runs
    return out


_RUN = itertools.count()


def _line(r: dict) -> str:
    head = f"{r['case']:24s} {r['mode']:9s} {r['variant']:28s}"
    if r["status"] != "ok":
        return (
            f"{head} {r['status']}: {r['done']}/{r['problems']} problems in "
            f"{r['partial_s'] or 0:.2f} s, {r['compiled']} kernels compiled so far"
        )
    n = len(r["runs"])
    spread = f" (median {r['first_s_median']:.3f} / {r['warm_s_median']:.3f} s)" if n > 1 else ""
    ratios = ", ".join(f"{x:.2f}" for x in r["ratios"]) + f" (median {r['ratio_median']:.2f})"
    return (
        f"{head} problems {r['problems']:4d}  first {r['first_s_min']:8.3f} s  "
        f"warm {r['warm_s_min']:8.3f} s  ratio {r['ratio_min']:6.2f}x  "
        f"compiled {r['compiled']:4d}  loaded {r['loaded']:4d}  "
        f"chosen {r['chosen']:4d}  with program {r.get('planned') if r.get('planned') is not None else '-'}  "
        f"warmed {r['warmed'] if r['warmed'] is not None else '-'}  "
        f"on the stream {r.get('stream_warmed', '-')}  cuBLASLt heuristics {r.get('lt_heuristics', '-')}\n"
        f"{'':24s} best of {n} processes{spread}; ratio of each run {ratios}\n"
        f"{'':24s} fresh process to first result {r['to_first_s_min']:.3f} s (median "
        f"{r['to_first_s_median']:.3f}; interpreter, imports, handle {r['handle_s']:.3f} s, buffers), "
        f"handle made to first result {r['handle_to_first_s_min']:.3f} s, "
        f"process {r['process_s_min']:.2f} s\n"
        f"{'':24s} host (choosing and enqueueing, before the final sync): first {r['first_host_s']:.3f} s, "
        f"warm {r['warm_host_s']:.3f} s; the device's remaining work after it: first "
        f"{r['first_s'] - r['first_host_s']:.3f} s, warm {r['warm_s'] - r['warm_host_s']:.3f} s\n"
        f"{'':24s} first iteration: choosing {r['choose_s']:.3f} s (find: timing, compiling included), "
        f"compiling {r['build_s']:.3f} s (summed over threads), loading kernels {r['load_s']:.3f} s, "
        f"vendor library calls {r['library_s']:.3f} s; runs that were no replay (the three before "
        f"included) {r.get('unprepared_s', 0):.3f} s; garbage collections {r.get('gc_s', 0):.3f} s "
        f"({r.get('gc_full')} full; {r.get('gc_frozen')} objects frozen)" + _set_up_note(r)
    )


def _set_up_note(r: dict) -> str:
    """The handle's background set-up: package binaries read ahead; CUDA: the BLAS set-up
    (cuBLASLt's initialization and the package's recorded cuBLASLt checks)."""
    if r.get("lt_init_s") is None:
        busy = "still running" if r.get("set_up_busy") else "done"
        return (
            f"\n{'':24s} package binaries read ahead {r.get('prefetched')}, kernels loaded ahead "
            f"{r.get('loaded_ahead')} (used {r.get('ahead_used')}); {busy} when the clock started"
        )
    init = f"{r['lt_init_s']:.3f} s" if r.get("lt_init_s") is not None else "not run"
    busy = "still running" if r.get("set_up_busy") else "done"
    return (
        f"\n{'':24s} cuBLASLt initialization on the set-up thread {init}, recorded cuBLASLt "
        f"algorithms pre-checked {r.get('prechecked')}, package binaries read ahead "
        f"{r.get('prefetched')}, kernels loaded ahead {r.get('loaded_ahead')} (used "
        f"{r.get('ahead_used')}); that set-up {busy} when the clock started"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cuda", choices=["cuda", "opencl"])
    ap.add_argument(
        "--workload",
        "--set",
        default="resnet50-iter",
        help="resnet50-iter (ResNet-50's forward+backward problems), resnet50-small-iter, or any "
        "workload of `miopy kernels build` (a built-in set or a file of driver lines)",
    )
    ap.add_argument("--image", type=int, default=224, help="input image size of the built-in sets")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--modes", default="immediate,find", help="immediate, find or both (comma)")
    ap.add_argument("--cases", default="conv,iter", help="conv (one convolution), iter (all problems)")
    ap.add_argument(
        "--variants",
        help=f"comma-separated, of {', '.join(VARIANTS)} (default: none,kdb, and again on OpenCL)",
    )
    ap.add_argument("--warm", type=int, default=3, help="warm iterations after the first (best is kept)")
    ap.add_argument("--repeat", type=int, default=1, help="fresh processes per case (minima and medians)")
    ap.add_argument(
        "--interleave",
        action="store_true",
        help="run the variants round after round (one process of each per round) instead of each "
        "variant's --repeat processes in a row: on a shared host, load then spreads over all of them",
    )
    ap.add_argument("--kdb", type=Path, help="use this package instead of building one")
    ap.add_argument("--time-cap", type=float, help="seconds per process; a case stopped reports its progress")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument(
        "--profile",
        type=Path,
        help="also run the whole set once more with the package under cProfile and write the "
        "first iteration's profile here (that run is part of no figure)",
    )
    args = ap.parse_args()
    spec = WORKLOADS.get(args.workload, args.workload)
    if args.image != 224:
        spec = f"{spec}@{args.image}"
    default = "none,kdb,again" if args.backend == "opencl" else "none,kdb"
    variants = [v.strip() for v in (args.variants or default).split(",")]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="miopy-first-call-") as tmp:
        tmp = Path(tmp)
        if args.kdb is not None:
            kdb = args.kdb.resolve()
            manifest = _manifest(kdb, tmp, args.backend)
            print(f"package {kdb}: {manifest['kernels']} kernels, workload {manifest['workload']}")
        else:
            built = _build(args, spec, tmp)
            if built is None:
                return 1
            kdb, manifest = built
            print(
                f"package: {manifest['kernels']} kernels, {manifest['size'] / 2**20:.1f} MiB, "
                f"built in {manifest['wall_s']:.1f} s (not part of any figure)"
            )
        print(
            f"choices for {manifest.get('choices', 0)} problems, {manifest.get('library_calls', 0)} "
            "library calls to warm up"
        )
        bare = _without_choices(kdb, tmp / "bare") if "kdb-no-choices" in variants else None
        checked = None
        if "kdb-no-programs" in variants:
            checked = _without_choices(kdb, tmp / "checked", ("kdb_plan",))
        print(
            f"workload {spec} batch {args.batch}, backend {args.backend}; first = first iteration of "
            f"a fresh process, warm = best of {args.warm} more; each case in {args.repeat} fresh "
            "process(es), figures of the one with the fastest first iteration",
            flush=True,
        )
        names = {"conv": ("one conv", "1"), "iter": (f"{args.workload} x{args.batch}", "all")}
        packages = {False: None, True: kdb, "bare": bare, "checked": checked}
        for case in args.cases.split(","):
            label, count = names[case.strip()]
            for mode in [m.strip() for m in args.modes.split(",")]:
                if args.interleave:  # round after round, each variant once per round
                    runs: dict[str, list[dict]] = {name: [] for name in variants}
                    for _ in range(args.repeat):
                        for name in variants:
                            if runs[name] and runs[name][-1]["status"] != "ok":
                                continue
                            run_dir = tmp / f"run-{next(_RUN)}"
                            run_dir.mkdir()
                            variant = VARIANTS[name]
                            runs[name].append(
                                _once(args, spec, count, mode, packages[variant[1]], run_dir, variant)
                            )
                    done = {name: _summary(runs[name]) for name in variants}
                for name in variants:
                    variant = VARIANTS[name]
                    if args.interleave:
                        r = done[name]
                    else:
                        r = _case(args, spec, count, mode, packages[variant[1]], tmp, variant)
                    r |= {"case": label, "mode": mode, "variant": variant[0], "kdb": variant[1] is not False}
                    results.append(r)
                    print(_line(r), flush=True)
        if args.profile is not None:
            run_dir = tmp / "profiled"
            run_dir.mkdir()
            out = str(args.profile.resolve())
            r = _once(args, spec, "all", "immediate", kdb, run_dir, VARIANTS["kdb"], out)
            print(f"profile of a first iteration with the package ({r['status']}): {args.profile}")
    if args.json:
        args.json.write_text(json.dumps({"spec": spec, "manifest": manifest, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
