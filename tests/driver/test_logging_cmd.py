"""MIOPY_ENABLE_LOGGING_CMD: the logged miopy-driver command reproduces the problem."""

from __future__ import annotations

import itertools
import random
import shlex

import pytest

from miopy.driver import conv
from miopy.errors import BadParm
from miopy.logging_cmd import command, driver_args, log_conv_command
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.tensor import TensorDesc

PREFIX = "miopy: Command [LogCmdConvolution] "


def _problems(per_case: int = 4, seed: int = 3):
    """Random problems, ``per_case`` for every (dims, dtype, mode, pad mode, direction)."""
    rng = random.Random(seed)
    cases = itertools.product(
        (2, 3), ("FP32", "FP16", "BF16"), ("conv", "trans"), ("default", "same", "valid"), list(Direction)
    )
    for dims, dtype, mode, pad_mode, direction in cases:
        made = 0
        while made < per_case:
            g = rng.choice((1, 1, 2, 3))
            c, k = g * rng.randint(1, 3), g * rng.randint(1, 3)
            n = rng.randint(1, 3)
            sizes = [rng.randint(1, 9) for _ in range(dims)]
            fil = [rng.randint(1, 4) for _ in range(dims)]
            pads = [rng.randint(0, 2) for _ in range(dims)]
            strides = [rng.randint(1, 3) for _ in range(dims)]
            dils = [rng.randint(1, 2) for _ in range(dims)]
            opads = None
            if mode == "trans":
                opads = [rng.randint(0, max(s, d) - 1) for s, d in zip(strides, dils)]
            layouts = ("NCDHW", "NDHWC") if dims == 3 else ("NCHW", "NHWC")
            xl, wl, yl = (rng.choice(layouts) for _ in range(3))
            wlens = (k, c // g, *fil) if mode == "conv" else (c, k // g, *fil)
            try:
                x = TensorDesc(dtype, (n, c, *sizes), layout=xl)
                w = TensorDesc(dtype, wlens, layout=wl)
                cd = ConvDesc(pads, strides, dils, g, mode, opads, pad_mode)
                problem = ConvProblem.create(x, w, cd, direction, y_layout=yl)
            except BadParm:
                continue
            made += 1
            yield problem


def test_round_trip_many_problems():
    count = 0
    for problem in _problems():
        args = driver_args(problem)
        again = conv.problem_from_args(args)
        assert again.key() == problem.key(), (args, problem.key(), again.key())
        assert shlex.split(command(problem))[1:] == args
        count += 1
    assert count == 4 * 2 * 3 * 2 * 3 * 3


@pytest.mark.parametrize(
    "dims, dtype, mode, direction",
    list(itertools.product((2, 3), ("FP32", "FP16", "BF16"), ("conv", "trans"), list(Direction))),
)
def test_round_trip_grid(dims, dtype, mode, direction):
    lay = "NDHWC" if dims == 3 else "NHWC"
    x = TensorDesc(dtype, (2, 6, *(7,) * dims), layout=lay)
    w = TensorDesc(dtype, (6, 2, *(3,) * dims))
    cd = ConvDesc((1,) * dims, (2,) * dims, (1,) * dims, 3, mode, (1,) * dims if mode == "trans" else None)
    problem = ConvProblem.create(x, w, cd, direction)
    args = driver_args(problem, solver_id=85)
    assert args[0] == {"FP32": "conv", "FP16": "convfp16", "BF16": "convbfp16"}[dtype]
    assert args[args.index("-S") + 1] == "85" and args[args.index("-t") + 1] == "1"
    assert ("--spatial_dim" in args) == (dims == 3)
    assert conv.problem_from_args(args).key() == problem.key()


def test_log_only_when_enabled(capsys, monkeypatch):
    problem = conv.problem_from_args(
        ["convfp16", "-n", "2", "-c", "4", "-H", "8", "-W", "8", "-k", "4", "-F", "2", "-I", "NHWC"]
    )
    log_conv_command(problem)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("MIOPY_ENABLE_LOGGING_CMD", "1")
    log_conv_command(problem, 86)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(PREFIX + "miopy-driver convfp16 -n 2 -c 4 -H 8 -W 8 -k 4 ")
    argv = shlex.split(err[0].removeprefix(PREFIX))
    assert conv.problem_from_args(argv[1:]).key() == problem.key()
    assert argv[-2:] == ["-S", "86"] and "--in_layout" in argv


@pytest.mark.usefixtures("opencl")
def test_logged_command_runs_as_printed(drive, monkeypatch):
    monkeypatch.setenv("MIOPY_ENABLE_LOGGING_CMD", "1")
    rc, _, err = drive(
        "conv",
        "-n",
        "2",
        "-c",
        "4",
        "-H",
        "8",
        "-W",
        "8",
        "-k",
        "4",
        "-m",
        "trans",
        "-g",
        "2",
        "-u",
        "2",
        "-Y",
        "1",
        "-F",
        "1",
        "-i",
        "1",
    )
    assert rc == 0
    logged = [line.removeprefix(PREFIX) for line in err if line.startswith(PREFIX)]
    assert logged, err
    monkeypatch.delenv("MIOPY_ENABLE_LOGGING_CMD")
    argv = shlex.split(logged[0])
    assert argv[0] == "miopy-driver"
    rc, out, err = drive(*argv[1:], "-i", "1")
    assert rc == 0, err
    assert any(line.startswith("GPU Kernel Time Forward Conv. Elapsed:") for line in out)
    assert any(line.startswith("Forward Convolution Verifies OK") for line in out)
