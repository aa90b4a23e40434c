"""``miopy tune --configs N`` (budgeted: random sampling, then refinement around the best) against
exhaustive search, on real problems of the device here (PoCL by default). For each problem line:
an exhaustive run and a budgeted run with a quarter of the configurations, each in a fresh
process with empty kernel caches (PoCL's too) and DBs; then both winners are timed again side by
side in one process, so that a busy machine's noise does not decide the comparison.

    python benchmarks/tune_budget.py                      # the default problems, PoCL
    python benchmarks/tune_budget.py --lines my-lines.txt --fraction 0.25
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINES = [
    "conv -n 1 -c 4 -H 8 -W 8 -k 4 -y 3 -x 3 -p 1 -q 1 -F 1",
    "conv -n 1 -c 16 -H 4 -W 4 -k 16 -y 1 -x 1 -F 1",
    "activ -n 4 -c 64 -H 28 -W 28 -m 3 -F 1",
]

RETIME = r"""
import json, sys
import miopy
from miopy.engine import bench
from miopy.engine.candidates import make_solution
from miopy.solvers import by_name
from miopy.tool import workload
line, solver_name, configs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
h = miopy.Handle()
problem = workload.problems_from_line(line)[0]
solver = by_name(solver_name, problem.primitive)
out = []
for cfg in configs:
    s = make_solution(h, problem, solver, cfg)
    prepared = bench.device_args(h, s, None)
    out.append(min(bench.median_time(h, s, prepared, runs=10) for _ in range(3)))
print(json.dumps(out))
"""


def _env(tmp: Path, backend: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MIOPY_BACKEND": backend}
    for name, sub in (
        ("MIOPY_CUSTOM_CACHE_DIR", "cache"),
        ("MIOPY_USER_DB_PATH", "db"),
        ("MIOPY_KDB_PATH", "kdb"),
        ("POCL_CACHE_DIR", "pocl"),
    ):
        (tmp / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        env[name] = str(tmp / sub)
    return env


def _configs(line: str, backend: str) -> dict[str, int]:
    """The number of valid configurations of each tunable solver that takes the line's problem."""
    code = (
        "import json, sys, miopy\n"
        "from miopy.engine.candidates import applicable\n"
        "from miopy.tool import workload\n"
        "h = miopy.Handle(); p = workload.problems_from_line(sys.argv[1])[0]; v = p.solver_view()\n"
        "print(json.dumps({s.name: sum(1 for c in s.search_space(h, v) if s.is_valid_config(h, v, c))"
        " for s in applicable(h, p) if s.tunable}))"
    )
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-c", code, line],
            env=_env(Path(tmp), backend),
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(done.stdout)


def _tune(line: str, backend: str, extra: list[str]) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "w.txt").write_text(line + "\n")
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "miopy", "tune", str(tmp / "w.txt"), "--json", *extra],
            env=_env(tmp, backend),
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout), wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--lines", type=Path, help="a file of driver lines (default: three small problems)")
    ap.add_argument("--fraction", type=float, default=0.25, help="budget: this share of the configs")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    lines = LINES if args.lines is None else [s for s in args.lines.read_text().splitlines() if s.strip()]
    rows = []
    for line in lines:
        for solver, total in _configs(line, args.backend).items():
            budget = max(1, math.ceil(total * args.fraction))
            full, full_s = _tune(line, args.backend, ["--strategy", "exhaustive"])
            quick, quick_s = _tune(line, args.backend, ["--configs", str(budget)])
            a = next(r for r in full["results"] if r["solver"] == solver)
            b = next(r for r in quick["results"] if r["solver"] == solver)
            with tempfile.TemporaryDirectory() as tmp:
                done = subprocess.run(
                    [sys.executable, "-c", RETIME, line, solver, json.dumps([a["config"], b["config"]])],
                    env=_env(Path(tmp), args.backend),
                    capture_output=True,
                    text=True,
                    check=True,
                )
            again = json.loads(done.stdout)
            row = {
                "line": line,
                "solver": solver,
                "configs": total,
                "budget": budget,
                "exhaustive_s": round(full_s, 1),
                "budget_s": round(quick_s, 1),
                "same_config": a["config"] == b["config"],
                "exhaustive_best_ms": round(again[0], 4),
                "budget_best_ms": round(again[1], 4),
                "default_ms": a.get("default_ms"),
            }
            rows.append(row)
            print(
                f"{line:55s} {solver:20s} configs {total:3d} budget {budget:3d} | exhaustive "
                f"{full_s:6.1f} s, budget {quick_s:6.1f} s | same config: {row['same_config']} | "
                f"winners timed again: exhaustive {again[0]:.4f} ms, budget {again[1]:.4f} ms "
                f"({again[1] / again[0]:.2f}x)",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
