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


@pytest.mark.parametrize("sub", ["softmax", "softmaxfp16"])
def test_softmax_driver_both_directions(drive, sub):
    rc, out, err = drive(sub, "-n", "2", "-c", "5", "-H", "3", "-W", "4", "-i", "1", "-a", "2", "-B", "1")
    assert rc == 0, err
    assert [line.split(" Verifies")[0] for line in out if "Verifies OK" in line] == [
        "Forward Softmax",
        "Backward Softmax",
    ], out


def test_softmax_driver_names_bad_flags(drive):
    rc, out, err = drive("softmax", "-m", "3")
    assert rc != 0 and any("-m/--mode=3" in e for e in err), err


@pytest.mark.parametrize(
    "args",
    [["-D", "4,6,8", "-R", "1", "-O", "3", "-I", "1"], ["-D", "3,5,7,2", "-R", "0,2", "-O", "7", "-B", "1"]],
)
def test_reduce_driver(drive, args):
    rc, out, err = drive("reduce", *args, "-i", "1")
    assert rc == 0, err
    assert any("ReduceTensor()" in line and "Verifies OK" in line for line in out), out


def test_reducefp64_logs_its_command(drive, monkeypatch):
    monkeypatch.setenv("MIOPY_ENABLE_LOGGING_CMD", "1")
    rc, out, err = drive("reducefp64", "-D", "4,6,8,10", "-R", "3", "-O", "2", "-I", "1", "-i", "1")
    assert rc == 0, err
    assert any(
        "[LogCmdReduction] miopy-driver reducefp64 -D 4,6,8,10 -R 3 -O 2 -N 0 -I 1" in e for e in err
    ), err


@pytest.mark.parametrize("mode", ["cross", "within"])
def test_lrn_driver_forward_then_backward(drive, mode):
    rc, out, err = drive("lrn", "-n", "2", "-c", "6", "-H", "5", "-W", "4", "-i", "1", "-m", mode)
    assert rc == 0, err
    ok = [line for line in out if "Verifies OK" in line]
    assert [line.split(" Verifies")[0] for line in ok] == [
        "Forward LRN (y)",
        "Forward LRN (scale)",
        "Backward LRN",
    ]


def test_lrn_driver_names_the_mode(drive):
    rc, out, err = drive("lrn", "-m", "sideways")
    assert rc != 0 and any("-m/--mode='sideways'" in e and "Incorrect LRN Mode" in e for e in err), err
