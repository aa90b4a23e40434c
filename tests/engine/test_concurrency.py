"""Many processes finding and tuning at once on one user DB and one kernel cache."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = r"""
import os, sys
from miopy.handle import Handle
from miopy.engine.find import FindOptions, find_solutions
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.tensor import TensorDesc
i = int(sys.argv[1])
h = Handle("opencl")
for j in range(2):
    x = TensorDesc("fp32", (1, 2 + j, 6 + i, 6))
    w = TensorDesc("fp32", (4, 2 + j, 3, 3))
    p = ConvProblem.create(x, w, ConvDesc((1, 1)), "F")
    found = find_solutions(h, p, FindOptions(tuning=True))
    assert found and found[0].time_ms > 0
print("ok", i)
"""


def test_eight_processes_find_and_tune_on_one_user_db(isolated):
    from miopy import backends

    if backends.unavailable_reason("opencl"):
        pytest.skip("opencl unavailable")
    env = dict(
        os.environ, MIOPY_FIND_MODE="NORMAL", PYTHONPATH=str(Path(__file__).parents[2]), POCL_KERNEL_CACHE="0"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "Traceback" not in err
    db_files = list((isolated / "db").glob("*.udb"))
    assert len(db_files) == 1
    con = sqlite3.connect(db_files[0])
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    # every problem's find record and perf record is there: nothing lost
    from miopy.db.find_db import FindDb
    from miopy.db.perf_db import PerfDb
    from miopy.problem.conv import ConvDesc, ConvProblem
    from miopy.tensor import TensorDesc

    base = db_files[0].name.split(".")[0]
    find_db, perf_db = FindDb(base, "opencl"), PerfDb(base, "opencl")
    for i in range(8):
        for j in range(2):
            p = ConvProblem.create(
                TensorDesc("fp32", (1, 2 + j, 6 + i, 6)),
                TensorDesc("fp32", (4, 2 + j, 3, 3)),
                ConvDesc((1, 1)),
                "F",
            )
            assert find_db.load(p.key()), p.key()
            assert perf_db.load(p.conv_view().key(), "ConvDirectTiledFwd") is not None
    kernel_files = list((isolated / "cache").glob("*.ukdb"))
    assert len(kernel_files) == 1
    con = sqlite3.connect(kernel_files[0])
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
