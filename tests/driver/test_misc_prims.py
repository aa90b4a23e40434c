"""The tensorop, softmax, lrn and reduce subcommands on the OpenCL backend: they run, print their
lines, verify, log their command, and name bad flags."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("opencl")


def test_driver_runs_and_verifies(drive):
    rc, out, err = drive("tensorop", "-o", "2", "-n", "2", "-G", "1", "-i", "3", "-M", "1,3,1,1", "-t", "1")
    assert rc == 0, err
    assert any(line.startswith("stats: tensor op, ") for line in out)
    assert any("Tensor Op Verifies OK" in line for line in out), out


def test_driver_logs_its_command(drive, monkeypatch):
    monkeypatch.setenv("MIOPY_ENABLE_LOGGING_CMD", "1")
    rc, out, err = drive("tensorop", "-o", "1", "-v", "2", "-n", "2", "-i", "1")
    assert rc == 0
    assert any("[LogCmdTensorOp] miopy-driver tensorop -n 2 -c 3 -H 32 -W 32 -o 1 -v 2" in e for e in err), (
        err
    )
