"""The first result of a fresh process with an empty user cache, (a) without a kernel package,
(b) with one built by ``miopy kernels build`` for the same problems: for one convolution and for
every problem of a ResNet-50 forward+backward iteration. Each case runs in a new process with
empty cache and DB folders; it reports the first iteration (every problem solved once: find or
immediate mode, then run), a second, warm iteration in the same process, and how many kernels
were compiled (kernel cache misses: a count, not a time).

    python benchmarks/first_call.py                               # CUDA, ResNet-50 at batch 32
    python benchmarks/first_call.py --backend opencl --set resnet50-small --batch 1   # PoCL

Goal (issue 11): with the package, zero kernels compiled and the first iteration within 1.2x of
the warm one. Building the package (step 0) is timed too but is not part of either figure."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import miopy
from miopy.engine import find
from miopy.reference import common
from miopy.tool import workload
spec, batch, mode = sys.argv[1], sys.argv[2], sys.argv[3]
problems = workload.load(spec, [int(batch)] if batch != "-" else None).problems
if sys.argv[4] != "all":
    problems = problems[: int(sys.argv[4])]
h = miopy.Handle()
t_import = time.perf_counter() - t0
rng = np.random.default_rng(0)
def fill(d):
    dtype = getattr(d, "dtype", None)  # an index workspace (pooling) has none: zeros
    if dtype is not None and str(dtype.value).upper() == "FP32" and d.nbytes % 4 == 0:
        return rng.standard_normal(d.nbytes // 4).astype(np.float32)
    return np.zeros(d.nbytes, np.uint8)

buffers = [{r: fill(d) for r, d in p.tensors().items()} for p in problems]

def iteration():
    for p, bufs in zip(problems, buffers):
        if mode == "find":
            s = find.find_solutions(h, p)[0]
        else:
            s = find.get_solutions(h, p)[0]
        ws = h.backend.alloc(s.workspace) if s.workspace else None
        h.run_solution(s, dict(bufs), ws)
    h.backend.synchronize()

t = time.perf_counter(); iteration(); first = time.perf_counter() - t
misses = h.kernel_cache.misses
t = time.perf_counter(); iteration(); warm = time.perf_counter() - t
print(json.dumps({"problems": len(problems), "import_s": t_import, "first_s": first, "warm_s": warm,
                  "compiled": misses, "cache_hits": h.kernel_cache.hits}))
"""


def _env(tmp: Path, kdb: Path | None, backend: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MIOPY_BACKEND": backend}
    for name, sub in (
        ("MIOPY_CUSTOM_CACHE_DIR", "cache"),
        ("MIOPY_USER_DB_PATH", "db"),
        ("MIOPY_SYSTEM_DB_PATH", "system"),
        ("MIOPY_KDB_PATH", "kdb"),
    ):
        (tmp / sub).mkdir(mode=0o700, exist_ok=True)
        env[name] = str(tmp / sub)
    if kdb is not None:
        env["MIOPY_KDB_PATH"] = str(kdb.parent)
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cuda", choices=["cuda", "opencl"])
    ap.add_argument("--set", default="resnet50", help="built-in workload (resnet50, resnet50-small, vgg16)")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--mode", default="find", choices=["find", "immediate"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="miopy-first-call-") as tmp:
        tmp = Path(tmp)
        build = [
            sys.executable,
            "-m",
            "miopy",
            "kernels",
            "build",
            args.set,
            "--batch",
            args.batch,
            "--backend",
            args.backend,
            "-o",
            str(tmp / "package"),
            "--json",
        ]
        if args.backend == "cuda":
            (tmp / "probe").mkdir()
            probe = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import miopy; i = miopy.Handle('cuda').info; print(i.arch, i.compute_units)",
                ],
                env=_env(tmp / "probe", None, "cuda"),
                capture_output=True,
                text=True,
                check=True,
            )
            arch, cus = probe.stdout.split()
            build += ["--arch", arch, "--cu", cus]
        (tmp / "b").mkdir()
        t = time.perf_counter()
        done = subprocess.run(build, env=_env(tmp / "b", None, args.backend), capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        manifest = json.loads(done.stdout)
        print(
            f"package: {manifest['kernels']} kernels, {manifest['size'] / 2**20:.1f} MiB, "
            f"built in {time.perf_counter() - t:.1f} s"
        )
        kdb = Path(manifest["path"])
        for case, count in (("one conv", "1"), (f"{args.set} iteration", "all")):
            for with_kdb in (False, True):
                run_dir = tmp / f"run-{len(results)}"
                run_dir.mkdir()
                t = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, args.set, args.batch, args.mode, count],
                    env=_env(run_dir, kdb if with_kdb else None, args.backend),
                    capture_output=True,
                    text=True,
                )
                wall = time.perf_counter() - t
                if done.returncode != 0:
                    print(done.stderr, file=sys.stderr)
                    return 1
                r = json.loads(done.stdout.splitlines()[-1]) | {
                    "case": case,
                    "kdb": with_kdb,
                    "process_s": wall,
                }
                results.append(r)
                print(
                    f"{case:28s} kdb={'yes' if with_kdb else 'no ':3s} problems {r['problems']:4d}  "
                    f"first {r['first_s']:8.3f} s  warm {r['warm_s']:8.3f} s  "
                    f"ratio {r['first_s'] / max(r['warm_s'], 1e-9):6.2f}x  compiled {r['compiled']:4d}  "
                    f"process {wall:7.2f} s",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps({"manifest": manifest, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
