"""Many processes finding and tuning at once on one user DB and one kernel cache."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.tensor import TensorDesc

# Each process tunes (perf DB) and finds (find DB). Tuning samples 2 configs per solver, not the
# whole space: every problem's kernels are its own, so an exhaustive search (find with
# SEARCH_DB_UPDATE) made each process compile the tiled solver's 10 configs on PoCL, 140 s of CPU
# for the test, without testing the DBs any harder.
WORKER = r"""
import sys
from miopy.handle import Handle
from miopy.engine.find import find_solutions
from miopy.engine.tune import tune
from miopy.problem.conv import ConvProblem
from miopy.tool.tune import budgeted
h = Handle("opencl")
for key in sys.argv[1:]:
    problem = ConvProblem.parse(key)
    assert tune(h, problem, strategy=budgeted(count=2))
    found = find_solutions(h, problem)
    assert found and found[0].time_ms > 0
print("ok")
"""


def _problem(n: int) -> ConvProblem:
    return ConvProblem.create(
        TensorDesc("fp32", (n, 2, 6, 6)), TensorDesc("fp32", (4, 2, 3, 3)), ConvDesc((1, 1)), "F"
    )


def test_eight_processes_find_and_tune_on_one_user_db(isolated):
    from miopy import backends
    from miopy.db.find_db import FindDb
    from miopy.db.perf_db import PerfDb
    from miopy.engine.find import find_solutions
    from miopy.engine.tune import tune
    from miopy.handle import Handle
    from miopy.tool.tune import budgeted

    if backends.unavailable_reason("opencl"):
        pytest.skip("opencl unavailable")
    shared = _problem(1)
    # Warm the kernel cache once, so the eight processes spend their time on the DBs, not PoCL.
    handle = Handle("opencl")
    tune(handle, shared, strategy=budgeted(count=2))
    find_solutions(handle, shared)
    # PoCL's own cache stays on in the workers: with POCL_KERNEL_CACHE=0 each process links in a
    # shared "uncached" folder that another process's exit deletes, and PoCL aborts.
    env = dict(
        os.environ,
        MIOPY_FIND_MODE="NORMAL",
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH")])
        ),
        POCL_KERNEL_CACHE="1",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, shared.key(), _problem(2 + i).key()],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "ok", err
        assert "Traceback" not in err
    db_files = list((isolated / "db").glob("*.udb"))
    assert len(db_files) == 1
    for path in [*db_files, *(isolated / "cache").glob("*.ukdb")]:
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        con.close()
    # every process's find record and perf record is there: nothing lost
    base = db_files[0].name.split(".")[0]
    find_db, perf_db = FindDb(base, "opencl"), PerfDb(base, "opencl")
    for n in range(1, 10):
        p = _problem(n)
        assert find_db.load(p.key()), p.key()
        assert perf_db.load(p.conv_view().key(), "ConvDirectTiledFwd") is not None
