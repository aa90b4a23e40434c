"""``python -m miopy.driver`` as a real process: exit status and streams."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "miopy.driver", *argv], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.usefixtures("opencl")
def test_module_runs_and_verifies():
    proc = _run("conv", "-n", "2", "-c", "4", "-H", "8", "-W", "8", "-k", "4", "-t", "1", "-i", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("miopy-driver conv -n 2")
    assert sum(line.startswith("GPU Kernel Time ") for line in lines) == 3
    assert sum("Verifies OK on CPU reference" in line for line in lines) == 3
    assert "Traceback" not in proc.stderr


def test_bad_flag_exits_1_with_one_line():
    proc = _run("conv", "-n", "2", "--in_hh", "8")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["miopy-driver: --in_hh: unknown flag (--help lists them)"]
