"""``layernorm*`` and ``groupnorm*`` subcommands on OpenCL: passes, MIOpenDriver's lines,
verification against the reference, bad flags, and the logged command round trip."""

from __future__ import annotations

import shlex

import numpy as np
import pytest

from miopy.driver import groupnorm, layernorm
from miopy.driver.layernorm import _layernorm_check, inputs
from miopy.logging_cmd import command
from miopy.problem.layernorm import GroupNormProblem, LayerNormProblem
from miopy.problem.nd import NdDesc, channels_last_strides
from miopy.reference.layernorm import reference


def _ok(drive, *argv):
    rc, out, err = drive(*argv)
    assert rc == 0, (out, err)
    assert out[0] == shlex.join(["miopy-driver", *argv])
    return out


@pytest.mark.usefixtures("opencl")
def test_layernorm_forward_then_backward_lines(drive):
    out = _ok(drive, "layernorm", "-X", "4x3x6x5", "-o", "2", "-m", "1", "-F", "0", "-t", "1", "-i", "2")
    verdicts = [line.split(" Verifies")[0] for line in out if " Verifies OK on CPU reference (" in line]
    assert verdicts == [
        "Forward LayerNorm",
        "Forward LayerNorm mean",
        "Forward LayerNorm rstd",
        "Backward LayerNorm",
        "Backward LayerNorm dweight",
        "Backward LayerNorm dbias",
    ]
    assert any(line.startswith("GPU Kernel Time Forward LayerNorm Elapsed: ") for line in out)
    assert any(line.startswith("GPU Kernel Time Backward LayerNorm Elapsed: ") for line in out)
    assert any(line.startswith("MIOpen Backward LayerNorm Algorithm: ") for line in out)


@pytest.mark.usefixtures("opencl")
@pytest.mark.parametrize(
    "argv",
    [
        ["layernormfp16", "-X", "6x40", "-o", "1"],
        ["layernormbfp16", "-X", "3x16", "-o", "0", "-m", "1", "-F", "2"],
        ["layernorm", "-X", "3x4x5,40x10x2", "-o", "1", "-m", "1", "-F", "2", "-e", "1e-3"],
    ],
)
def test_layernorm_types_and_strides_verify(drive, argv):
    out = _ok(drive, *argv)
    assert "FAILED" not in " ".join(out)
    assert out[-1].startswith(("Forward LayerNorm rstd Verifies OK", "Backward LayerNorm d"))


@pytest.mark.usefixtures("opencl")
@pytest.mark.parametrize(
    "argv, shape",
    [
        (["groupnorm", "-n", "2", "-c", "8", "-D", "2", "-H", "3", "-W", "4", "-g", "4", "-m", "1"], 5),
        (
            ["groupnormfp16", "-n", "2", "-c", "6", "-D", "0", "-H", "5", "-W", "4", "-g", "3", "-L", "NHWC"],
            4,
        ),
        (["groupnormbfp16", "-n", "3", "-c", "4", "-D", "0", "-H", "0", "-W", "9", "-g", "2", "-F", "2"], 3),
    ],
)
def test_groupnorm_verifies(drive, argv, shape):
    out = _ok(drive, *argv)
    problem = groupnorm.problem_from_args(argv)
    assert len(problem.x.lens) == shape
    backward = "-F" in argv
    title = "Backward GroupNorm" if backward else "Forward GroupNorm"
    lines = [line for line in out if "Verifies on CPU and GPU (err=" in line]
    assert lines[0].startswith(f"{title} Verifies on CPU and GPU (err=")
    assert len(lines) == (1 if backward else 3)


@pytest.mark.usefixtures("opencl")
def test_groupnorm_forward_backward_with_timing(drive):
    out = _ok(drive, "groupnorm", "-n", "2", "-c", "4", "-D", "0", "-H", "3", "-W", "3", "-g", "2", "-m", "1",
              "-F", "0", "-t", "1", "-w", "1", "-i", "2")  # fmt: skip
    assert any(line.startswith("GPU Kernel Time Forward GroupNorm Elapsed: ") for line in out)
    assert any(line.startswith("Wall-clock Time Backward GroupNorm Elapsed: ") for line in out)
    assert out[-1].startswith("Backward GroupNorm dbias Verifies on CPU and GPU (err=")


def test_wrong_output_fails_and_stops_at_the_first_failure():
    p = LayerNormProblem(NdDesc("fp32", (4, 6)), 1, 1e-5, 1, "F")
    host = inputs(p)
    ref = reference(p, host)
    t = p.tensors()
    for role in p.outputs:
        host[role] = np.asarray(ref[role], np.float32).reshape(-1).copy()
    ok, lines = _layernorm_check(p, host, ref)
    assert ok and len(lines) == 3
    host["mean"][1] += 0.5
    ok, lines = _layernorm_check(p, host, ref)
    assert not ok
    assert lines[-1].startswith("Forward Layernorm mean FAILED: ") and len(lines) == 2
    assert t["mean"].lens == (4,)


@pytest.mark.usefixtures("opencl")
def test_failed_verification_exits_3(drive, monkeypatch):
    import miopy.driver.layernorm as mod

    real = mod.reference

    def off(problem, buffers):
        out = real(problem, buffers)
        out["y"] = out["y"] + 1.0
        return out

    monkeypatch.setattr(mod, "reference", off)
    rc, out, _ = drive("layernorm", "-X", "4x8", "-o", "1", "-i", "1")
    assert rc == 3
    assert out[-1].startswith("Forward LayerNorm FAILED: ")


@pytest.mark.parametrize(
    "argv, named",
    [
        (["layernorm", "-X", "4x8", "-o", "2"], "-o/--normalized_dim"),
        (["layernorm", "-X", "4xa"], "-X/--input"),
        (["layernorm", "-X", "4x0", "-o", "1"], "-X/--input"),
        (["layernorm", "-X", "4x8", "-o", "1", "-e", "0"], "-e/--eps"),
        (["layernorm", "-X", "4x8", "-o", "1", "-m", "2"], "-m/--mode"),
        (["layernorm", "-X", "4x8", "-o", "1", "-F", "3"], "-F/--forw"),
        (["groupnorm", "-c", "6", "-g", "4"], "-g/--num_groups"),
        (["groupnorm", "-D", "0", "-L", "NDHWC"], "-L/--layout"),
        (["groupnorm", "-n", "0"], "-n/--batchsize"),
        (["groupnorm", "-D", "2", "-H", "0"], "-H/--in_h"),
        (["groupnormfp16", "-i", "0"], "-i/--iter"),
    ],
)
def test_bad_flags_name_the_flag(drive, argv, named):
    rc, out, err = drive(*argv)
    assert rc == 1
    assert err and err[0].startswith(f"miopy-driver: {named}="), err


def test_logged_commands_round_trip():
    problems = [
        LayerNormProblem(NdDesc("fp16", (4, 3, 5)), 1, 1e-5, 1, "B"),
        LayerNormProblem(NdDesc("fp32", (3, 4, 5), (40, 10, 2)), 2, 2e-6, 0, "F"),
        LayerNormProblem(NdDesc("bf16", (7,)), 0, 1e-5, 0, "F"),
        GroupNormProblem(NdDesc("bf16", (2, 8, 3, 3, 3)), 4, 1e-5, 1, "F"),
        GroupNormProblem(NdDesc("fp32", (2, 8, 5, 6), channels_last_strides((2, 8, 5, 6))), 2, 1e-5, 0, "B"),
        GroupNormProblem(NdDesc("fp16", (2, 4, 7), (60, 14, 2)), 2, 1e-4, 1, "F"),
        GroupNormProblem(NdDesc("fp32", (2, 4, 7)), 4, 1e-5, 0, "B"),
    ]
    for p in problems:
        argv = shlex.split(command(p, 412))[1:]
        module = layernorm if isinstance(p, LayerNormProblem) else groupnorm
        assert module.problem_from_args(argv).key() == p.key(), argv
        assert argv[-2:] == ["-S", "412"]


@pytest.mark.usefixtures("opencl")
def test_logged_command_runs_as_printed(drive, monkeypatch):
    monkeypatch.setenv("MIOPY_ENABLE_LOGGING_CMD", "1")
    rc, _, err = drive("groupnormfp16", "-n", "2", "-c", "4", "-D", "0", "-H", "2", "-W", "3", "-g", "2",
                       "-L", "NHWC", "-m", "1", "-i", "1")  # fmt: skip
    assert rc == 0
    prefix = "miopy: Command [LogCmdGroupNorm] "
    logged = [line.removeprefix(prefix) for line in err if line.startswith(prefix)]
    assert logged, err
    monkeypatch.delenv("MIOPY_ENABLE_LOGGING_CMD")
    argv = shlex.split(logged[0])
    assert argv[:2] == ["miopy-driver", "groupnormfp16"] and "NHWC" in argv
    rc, out, err = drive(*argv[1:], "-i", "1")
    assert rc == 0, err
    assert out[-1].startswith("Forward GroupNorm rstd Verifies on CPU and GPU")
