"""``miopy tune``: the budgeted strategy against exhaustive search, a real tuning run on PoCL, and
a killed run that resumes where it stopped."""

from __future__ import annotations

import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from miopy import config
from miopy.engine.tune import exhaustive
from miopy.solvers import by_name
from miopy.tool import workload
from miopy.tool.tune import budgeted

LINES = [
    "conv -n 1 -c 8 -H 16 -W 16 -k 8 -y 3 -x 3 -p 1 -q 1 -F 1",
    "conv -n 2 -c 16 -H 8 -W 8 -k 16 -y 3 -x 3 -p 1 -q 1 -F 1",
    "conv -n 1 -c 32 -H 28 -W 28 -k 32 -y 3 -x 3 -p 1 -q 1 -F 1",
]


def _landscape(configs: list[dict], seed: int):
    """A smooth cost over a real search space with its optimum at a random config."""
    target = random.Random(seed).choice(configs)

    def cost(cfg: dict) -> float:
        return 1.0 + sum((math.log2(cfg[f]) - math.log2(target[f])) ** 2 for f in cfg)

    return cost


@pytest.mark.parametrize("line", LINES)
def test_budget_finds_what_exhaustive_finds_with_a_quarter_of_the_configs(ocl, line):
    (problem,) = workload.problems_from_line(line)
    solver = by_name("ConvDirectTiledFwd", "conv")
    view = problem.solver_view()
    configs = [c for c in solver.search_space(ocl, view) if solver.is_valid_config(ocl, view, c)]
    assert len(configs) > 20
    for seed in range(3):
        cost = _landscape(configs, seed)
        calls = []

        def measure(cfg: dict, cost=cost, calls=calls) -> float:
            calls.append(cfg)
            return cost(cfg)

        best_all = exhaustive(configs, cost)
        budget = len(configs) // 4
        found = budgeted(count=budget, seed=seed, first=solver.default_config(ocl, view))(configs, measure)
        assert len(calls) <= budget
        assert found[1] <= best_all[1] * 1.05, (found, best_all)


def test_budget_in_seconds_stops():
    configs = [{"a": a, "b": b} for a in (1, 2, 4, 8, 16, 32) for b in (1, 2, 4, 8, 16, 32)]
    calls = []

    def slow(cfg: dict) -> float:
        calls.append(cfg)
        time.sleep(0.02)
        return float(cfg["a"] + cfg["b"])

    found = budgeted(seconds=0.2)(configs, slow)
    assert found is not None and len(calls) < len(configs) // 2


def _records() -> int:
    path = next(config.user_db_dir().glob("*.udb"), None)
    if path is None:
        return 0
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return conn.execute("SELECT count(*) FROM perf_db").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def test_tune_writes_records_and_a_killed_run_resumes(ocl, tmp_path, tool, run_module):
    work = tmp_path / "w.txt"
    work.write_text("\n".join(LINES) + "\n")
    env = {**os.environ, "PYTHONPATH": str(os.getcwd())}
    from pathlib import Path

    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    child = subprocess.Popen(
        [sys.executable, "-m", "miopy", "tune", str(work), "--configs", "3", "--backend", "opencl"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while _records() < 1 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    first = _records()
    assert 1 <= first < len(LINES), "the run was not killed between two records"
    code, out, err = tool("tune", work, "--configs", "3", "--backend", "opencl")
    assert code == 0, err
    assert out.count("already tuned") == first
    assert out.count(" -> ") == len(LINES) - first  # the rest tuned, with default -> best times
    assert _records() == len(LINES)
    code, out, err = tool("db", "check")
    assert code == 0, out
    code, out, err = tool("tune", work, "--budget", "0")
    assert code == 1 and "--budget=0" in err
