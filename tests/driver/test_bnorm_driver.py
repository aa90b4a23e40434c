"""``bnorm*`` subcommands on OpenCL: passes, MIOpenDriver's lines, verification, bad flags."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("opencl")

SHAPE = ["-n", "3", "-c", "8", "-H", "4", "-W", "5"]


@pytest.mark.parametrize(
    "sub, flags, last",
    [
        (
            "bnorm",
            ["-F", "1", "-s", "1", "-r", "1", "-m", "1"],
            "Forward Batch Norm Verifies on CPU and GPU.",
        ),
        (
            "bnormfp16fp32",
            ["-F", "2", "-r", "1", "-m", "1", "-L", "NHWC"],
            "Forward Batch Norm Verifies on CPU and GPU.",
        ),
        (
            "bnormbfp16fp32",
            ["-F", "0", "-b", "1", "-m", "0"],
            "Backwards Prop Batch Norm Verifies on CPU and GPU.",
        ),
        (
            "bnorm",
            ["-F", "0", "-b", "1", "-s", "1", "-m", "1", "-D", "2"],
            "Backwards Prop Batch Norm Verifies on CPU and GPU.",
        ),
    ],
)
def test_passes_verify(drive, sub, flags, last):
    rc, out, err = drive(sub, *SHAPE, *flags)
    assert rc == 0, err
    assert out[0] == " ".join(["miopy-driver", sub, *SHAPE, *flags])
    assert out[-1] == last


def test_training_lines_and_timing(drive):
    rc, out, err = drive("bnorm", *SHAPE, "-F", "1", "-s", "1", "-r", "1", "-m", "1", "-t", "1", "-i", "2")
    assert rc == 0, err
    whats = [
        line.split(" on ")[1].split(" (")[0] for line in out if line.startswith("Forward train batch norm")
    ]
    assert whats == ["running mean", "running variance", "saved mean", "saved inverse variance"]
    assert any(line.startswith("GPU Kernel Min Time Forward Batch Normalization Elapsed:") for line in out)
    assert any(line.startswith("stats: bnormf, 0, ") for line in out)


def test_backward_with_forward_warns_and_runs_forward(drive):
    rc, out, err = drive("bnorm", *SHAPE, "-F", "1", "-b", "1", "-m", "1")
    assert rc == 0, err
    assert "Warning: Deactivate forward to run backward on Batch Norm." in out
    assert "Running forward only." in out
    assert out[-1] == "Forward Batch Norm Verifies on CPU and GPU."


@pytest.mark.parametrize(
    "flags, named",
    [
        (["-L", "NCDHW"], "-L/--layout"),
        (["-F", "3"], "-F/--forw"),
        (["-m", "2"], "-m/--mode"),
        (["-n", "0"], "-n/--batchsize"),
    ],
)
def test_bad_flags_name_the_flag(drive, flags, named):
    rc, out, err = drive("bnorm", *SHAPE, *flags)
    assert rc == 1
    assert err and err[0].startswith(f"miopy-driver: {named}=")
