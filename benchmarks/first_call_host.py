"""The backend-independent host cost of a first iteration with a kernel package, on a CPU: the
Python that choosing each problem's solution (``get_solutions``) and its first run
(``run_solution``: checks, invoker, recording its prepared calls) spend, without any device work.

A stand-in backend: the OpenCL backend (PoCL) whose kernels are never loaded nor launched (``load``
hands out a placeholder, ``launch`` does nothing) and whose buffers have a ``fast_key`` as CUDA's
device arrays do, so that a first run records its prepared calls as on CUDA (with the base
backend's ``prepare_launch``: no CUDA argument packing). The package is one built for PoCL by
``miopy kernels build <set> --backend opencl``; the workload must be the one it was built for.

Each run is a fresh process with empty user cache and DB folders: its first iteration, then
``--rounds`` first iterations of new handles on new problem objects (module-level caches warm, as
a handle's set-up thread warms them); the figures are the thread's CPU time (``time.thread_time``:
on a shared host the wall clock counts the time other processes hold the core), per problem, for
choosing and for the first run. ``--trust-code`` lets a package
built from other miopy sources be trusted (the package's ``code_sha256`` stands in for this
tree's): for A/B runs of two trees against one package, never for anything else.

    python benchmarks/first_call_host.py --kdb /tmp/pkg --workload resnet50@64 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, sys, time
spec, batch, trust, profile, rounds = sys.argv[1:6]
import numpy as np
import miopy
from miopy.backends import opencl
from miopy.engine import find
from miopy.tool import workload

class _Kernel:  # a loaded kernel's placeholder
    pass

opencl.Backend.load = lambda self, binary, name: _Kernel()
opencl.Backend.launch = lambda self, *a, **k: None
def _fast_key(self, obj):
    return (obj.int_ptr, obj.size) if isinstance(obj, opencl.cl.Buffer) else None

opencl.Backend.fast_key = _fast_key
if trust != "-":
    from miopy.db import package_plans
    package_plans.code_digest = lambda: trust
problems = workload.load(spec, [int(batch)]).problems
h = miopy.Handle("opencl")
buffers = [{r: h.backend.alloc(d.nbytes) for r, d in p.tensors().items()} for p in problems]
if h._prefetch_thread is not None:
    h._prefetch_thread.join()
workspaces = {}
clock, cpu = time.perf_counter, time.thread_time

def iteration(per):
    for p, bufs in zip(problems, buffers):
        t1 = cpu()
        s = find.get_solutions(h, p)[0]
        t2 = cpu()
        ws = None
        if s.workspace:
            ws = workspaces.get(s.workspace)
            if ws is None:
                ws = workspaces[s.workspace] = h.backend.alloc(s.workspace)
        t3 = cpu()
        h.run_solution(s, dict(bufs), ws)
        t4 = cpu()
        if per is not None:
            per.append((t2 - t1, t4 - t3))

collections = [0]
gc.callbacks.append(lambda phase, info: collections.__setitem__(0, collections[0] + (phase == "start")))
per = []
t, c = clock(), cpu(); iteration(per); first, first_cpu = clock() - t, cpu() - c
gc.callbacks.clear()
warm = []
for _ in range(3):
    t = cpu(); iteration(None); warm.append(cpu() - t)
result = {"tree": miopy.__file__, "problems": len(problems), "first_s": first, "first_cpu_s": first_cpu,
          "warm_cpu_s": min(warm),
          "choose_s": sum(c for c, _ in per), "run_s": sum(r for _, r in per),
          "chosen": h.package_choices.used, "planned": h.package_choices.planned,
          "compiled": h.kernel_cache.misses, "gc": collections[0]}
# more first iterations, each of a new handle on new problem objects (module-level caches warm, as
# a handle's set-up thread warms them): thread CPU time of choosing and of the first runs
if profile != "-":
    import cProfile, io, pstats
    prof = cProfile.Profile(time.thread_time)  # CPU time: a shared host preempts this thread
handles = []
for _ in range(int(rounds)):
    problems = workload.load(spec, [int(batch)]).problems
    h = miopy.Handle("opencl")
    if h._prefetch_thread is not None:
        h._prefetch_thread.join()
    gc.collect()
    gc.freeze()  # as the first iteration of a process finds it (MIOPY_GC_FREEZE)
    gc.set_threshold(100_000, *gc.get_threshold()[1:])
    per = []
    if profile != "-":
        prof.enable()
    iteration(per)
    if profile != "-":
        prof.disable()
    handles.append((sum(c for c, _ in per), sum(r for _, r in per)))
result["handles"] = handles
if profile != "-":
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumulative").print_stats(80)
    open(profile, "w").write(text.getvalue())
print(json.dumps(result))
"""


def _env(tmp: Path, kdb: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIOPY_")}
    env |= {"PYTHONPATH": str(ROOT), "MIOPY_BACKEND": "opencl", "MIOPY_KERNEL_PREFETCH": "1"}
    for name, sub in (
        ("MIOPY_CUSTOM_CACHE_DIR", "cache"),
        ("MIOPY_USER_DB_PATH", "db"),
        ("POCL_CACHE_DIR", "pocl"),
    ):
        (tmp / sub).mkdir(mode=0o700, exist_ok=True)
        env[name] = str(tmp / sub)
    system = tmp / "system"
    system.mkdir(mode=0o700, exist_ok=True)
    for db in (ROOT / "miopy" / "data").glob("*.db"):
        shutil.copyfile(db, system / db.name)
    env["MIOPY_SYSTEM_DB_PATH"] = str(system)
    env["MIOPY_KDB_PATH"] = str(kdb)
    return env


def _code_sha(kdb: Path) -> str:
    import sqlite3

    (path,) = [p for p in kdb.glob("*.kdb")]
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (text,) = conn.execute("SELECT value FROM kdb_manifest WHERE name = 'manifest'").fetchone()
    finally:
        conn.close()
    return json.loads(text)["code_sha256"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--kdb", type=Path, required=True, help="folder holding the PoCL package (<arch>_<cu>.kdb)"
    )
    ap.add_argument("--workload", default="resnet50@64", help="the set the package was built for")
    ap.add_argument("--batch", default="1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trust-code", action="store_true", help="trust a package built from other sources")
    ap.add_argument("--rounds", type=int, default=10, help="new handles per process after the first")
    ap.add_argument(
        "--profile", type=Path, help="one more process, its new handles' iterations under cProfile"
    )
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    trust = _code_sha(args.kdb) if args.trust_code else "-"
    runs = []
    with tempfile.TemporaryDirectory(prefix="miopy-first-host-") as tmp:
        for i in range(args.repeat + (args.profile is not None)):
            profile = str(args.profile.resolve()) if args.profile is not None and i == args.repeat else "-"
            run_dir = Path(tmp) / f"run-{i}"
            run_dir.mkdir()
            rounds = str(args.rounds)
            done = subprocess.run(
                [sys.executable, "-c", CHILD, args.workload, args.batch, trust, profile, rounds],
                env=_env(run_dir, args.kdb.resolve()),
                cwd=ROOT,  # ``-c`` puts the working folder first on the path: this tree's miopy
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            if profile == "-":
                runs.append(json.loads(done.stdout.splitlines()[-1]))
    n = runs[0]["problems"]
    us = 1e6 / n
    for r in runs:
        print(
            f"fresh process: first {r['first_s'] * 1e3:6.2f} ms (CPU {r['first_cpu_s'] * 1e3:6.2f}), "
            f"warm CPU {r['warm_cpu_s'] * 1e3:5.2f} ms; CPU us a problem: choose {r['choose_s'] * us:5.1f}, "
            f"run {r['run_s'] * us:5.1f}; planned {r['planned']}/{n}, compiled {r['compiled']}, gc {r['gc']}"
        )
    fresh = [(r["choose_s"] * us, r["run_s"] * us) for r in runs]
    handles = [(c * us, x * us) for r in runs for c, x in r["handles"]]
    for name, rows in (("fresh processes", fresh), ("new handles", handles)):
        if rows:
            choose = statistics.median(c for c, _ in rows)
            run = statistics.median(x for _, x in rows)
            total = statistics.median(c + x for c, x in rows)
            print(
                f"{name} ({len(rows)}): median CPU us a problem: choose {choose:.1f}, run {run:.1f}, ", end=""
            )
            print(f"both {total:.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
