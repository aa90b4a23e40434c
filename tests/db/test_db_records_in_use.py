"""Stored state that makes no sense is never used: unknown solvers in the find DB, and a compiler
that dies writing its output under a file-size limit."""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from miopy.db.find_db import FindRecord
from miopy.engine.find import find_solutions
from miopy.handle import Handle
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.tensor import TensorDesc

REPO = Path(__file__).resolve().parents[2]


def small_problem() -> ConvProblem:
    x, w = TensorDesc("fp32", (1, 2, 6, 6)), TensorDesc("fp32", (4, 2, 3, 3))
    return ConvProblem.create(x, w, ConvDesc((1, 1)), "F")


def test_unknown_solver_in_find_db_is_ignored_once(db_env, monkeypatch, warned):
    monkeypatch.setenv("MIOPY_FIND_MODE", "FAST")
    handle = Handle("opencl")
    problem = small_problem()
    handle.find_db.store(
        problem.key(),
        [
            FindRecord("NoSuchSolver", 0.001, 0, "miopenConvolutionFwdAlgoDirect"),
            FindRecord("ConvDirectNaiveFwd", 0.5, 0, "miopenConvolutionFwdAlgoDirect"),
        ],
    )
    for _ in range(2):
        found = find_solutions(handle, problem)
        assert [s.solver for s in found] == ["ConvDirectNaiveFwd"] and found[0].time_ms == 0.5
    said = [w for w in warned() if "NoSuchSolver" in w]
    assert len(said) == 1, warned()


DRIVER = ["-n", "1", "-c", "2", "-H", "6", "-W", "6", "-k", "4", "-y", "3", "-x", "3", "-p", "1", "-q", "1"]


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="no file-size limit on this system")
def test_compiler_under_a_file_size_limit_fails_with_one_line(db_env, tmp_path):
    """PoCL's LLVM exits the process when it cannot write its files (seen at 1 MB); the build
    must stop before that with a MiopyError, and nothing may be cached."""
    env = dict(os.environ, MIOPY_BACKEND="opencl", POCL_CACHE_DIR=str(tmp_path / "pocl"))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    limit = 1 << 20
    done = subprocess.run(
        [sys.executable, "-m", "miopy.driver", "conv", *DRIVER, "-F", "1", "-V", "0", "-i", "1", "-S", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )
    errors = [line for line in done.stderr.splitlines() if "WARNING" not in line]
    assert done.returncode != 0, done.stdout + done.stderr
    assert len(errors) == 1 and "RLIMIT_FSIZE" in errors[0], done.stderr
    assert "LLVM ERROR" not in done.stderr and "Traceback" not in done.stderr
    for path in db_env["cache"].glob("*.ukdb"):  # no binary, broken or not, was cached
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM kern_db").fetchone() == (0,)
        conn.close()
