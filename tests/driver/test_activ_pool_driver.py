"""``activ*`` and ``pool*`` subcommands on the OpenCL backend: directions, MIOpenDriver's printed
lines, verification (the max-pool index included), tensor strings, and bad input as one line
naming the flag with a non-zero exit."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from miopy.driver import activ, pool
from miopy.driver.cli import EXIT_VERIFY_FAILED, parse_flags
from miopy.problem.activation import ActivationDesc, ActivationProblem
from miopy.problem.pooling import IndexMode, PoolingDesc, PoolingProblem
from miopy.tensor import TensorDesc

pytestmark = pytest.mark.usefixtures("opencl")

ACTIV = ["-n", "2", "-c", "3", "-H", "5", "-W", "7"]
POOL = ["-W", "2x8x9x10,NHWC", "-y", "3", "-x", "2", "-v", "2", "-u", "1", "-p", "1", "-q", "0"]


# ---- activ ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "forw, expected", [(0, ["Forward", "Backward"]), (1, ["Forward"]), (2, ["Backward"])]
)
def test_activ_directions_verify(drive, forw, expected):
    rc, out, err = drive("activ", *ACTIV, "-m", "9", "-A", "0.5", "-F", forw, "-i", "1")
    assert rc == 0, err
    assert out[0] == f"miopy-driver activ {' '.join(ACTIV)} -m 9 -A 0.5 -F {forw} -i 1"
    assert [
        line.split()[0] for line in out if line.endswith("Activation Verifies on CPU and GPU")
    ] == expected


@pytest.mark.parametrize("mode", ["0", "LOGISTIC", "2", "4", "5", "POWER", "7", "8"])
def test_activ_every_mode_fp16(drive, mode):
    rc, out, err = drive("activfp16", *ACTIV, "-m", mode, "-A", "1.5", "-B", "0.5", "-G", "2", "-i", "1")
    assert rc == 0, (out, err)
    assert sum(line.endswith("Activation Verifies on CPU and GPU") for line in out) == 2


def test_activ_time_lines(drive):
    rc, out, _ = drive("activ", *ACTIV, "-F", "1", "-t", "1", "-i", "3", "-w", "1")
    assert rc == 0
    i = next(i for i, line in enumerate(out) if line.startswith("GPU Kernel Min Time Forward Activation"))
    assert re.fullmatch(r"GPU Kernel Min Time Forward Activation Elapsed: \d+\.\d{6} ms", out[i])
    assert re.fullmatch(
        r"GPU Kernel Avg Time Forward Activation Elapsed: \d+\.\d{6} ms, for 3 iterations\.", out[i + 1]
    )
    assert out[i + 2] == "stats: name, bytesRead, bytesWritten, GB/s, timeMs"
    fields = out[i + 3].removeprefix("stats: ").split(", ")
    assert fields[:3] == ["fwd-activ", str(2 * 3 * 5 * 7 * 4), str(2 * 3 * 5 * 7 * 4)]
    assert any(
        re.fullmatch(r"Wall-clock Time Forward GPU Activation Elapsed: \S+ ms, for 3 iterations\.", x)
        for x in out
    )


def test_activ_5d_layout_and_named_solver(drive):
    rc, out, err = drive(
        "activbfp16", *ACTIV, "-D", "3", "-L", "NDHWC", "-S", "ActivFwdStrided", "-F", "1", "-i", "1"
    )
    assert rc == 0, err
    assert "MIOpen Forward Activation Algorithm: 1, Solution: 301/ActivFwdStrided" in out


def test_activ_failed_verification_exits_non_zero(drive, monkeypatch):
    def wrong(problem, buffers):
        return {r: v + 1.0 for r, v in activ.reference(problem, buffers).items()}

    monkeypatch.setattr(activ, "case", _with_reference(activ.case, wrong))
    rc, out, _ = drive("activ", *ACTIV, "-F", "1", "-i", "1")
    assert rc == EXIT_VERIFY_FAILED
    assert out[-2].startswith("Difference in neuron layer: 1 too large at 0 x = ")
    assert out[-1] == "Forward Activation verification FAILED"


def _with_reference(make_case, reference):
    import dataclasses

    return lambda problem: dataclasses.replace(make_case(problem), reference=reference)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["-m", "11"], "-m/--mode"),
        (["-m", "swish"], "-m/--mode"),
        (["-A", "nan"], "-A/--alpha"),
        (["-F", "3"], "-F/--forw"),
        (["-n", "0"], "-n/--batchsize"),
        (["-L", "NCDHW"], "-L/--layout"),
        (["-i", "0"], "-i/--iter"),
        (["-Q", "1"], "-Q"),
    ],
)
def test_activ_bad_input_is_one_line(drive, argv, flag):
    rc, out, err = drive("activ", *ACTIV, *argv)
    assert rc == 1 and len(err) == 1 and flag in err[0], err


def test_activ_logged_command_parses_back():
    for problem in (
        ActivationProblem.create(
            ActivationDesc("TANH", 0.5, 2), TensorDesc("fp16", (2, 3, 4, 5), layout="NHWC"), "B"
        ),
        ActivationProblem.create(ActivationDesc("CLIPPED_RELU", 6), TensorDesc("fp32", (1, 2, 3, 4, 5)), "F"),
    ):
        sub, *argv = problem.driver_args()
        values = parse_flags(argv, activ.FLAGS)
        (direction,) = activ.passes(values)
        dtype = next(d for d, name in activ.SUBCOMMAND.items() if name == sub)
        assert activ.build_problem(values, dtype, direction) == problem


# ---- pool -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["max", "avg", "avg_in"])
def test_pool_forward_backward_verify(drive, mode):
    rc, out, err = drive("poolfp16", *POOL, "-m", mode, "-i", "1")
    assert rc == 0, (out, err)
    assert any(re.fullmatch(r"Forward Pooling Verifies on CPU and GPU \(\S+, \d+\)", x) for x in out)
    assert any(re.fullmatch(r"Backward Pooling Verifies on CPU and GPU \(\S+, \d+\)", x) for x in out)


def test_pool_stride_flags_are_swapped_against_conv():
    values = parse_flags(["-W", "1x1x9x9", "-v", "3", "-u", "1", "-y", "3", "-x", "3"], pool.FLAGS)
    (fwd, _) = pool.build_problems(values, "fp32")
    assert fwd.desc.strides == (3, 1) and fwd.y.lens == (1, 1, 3, 7)


def test_pool_tensor_strings():
    assert pool.parse_tensor("2x3x4x5", "input", "fp32").layout == "NCHW"
    assert pool.parse_tensor("2x3x4x5,nhwc", "input", "fp32").layout == "NHWC"
    strided = pool.parse_tensor("2x3x4x5,100x30x6x1", "input", "fp16")
    assert strided.strides == (100, 30, 6, 1) and not strided.packed
    assert pool.parse_tensor("2x3x4x5,100,30,6,1", "input", "fp16") == strided
    assert pool.parse_tensor("1x2x3x4x5,NDHWC", "input", "fp32").layout == "NDHWC"


def test_pool_3d_forces_image_index_and_backward_alone(drive):
    argv = [
        "-W",
        "1x3x4x6x6",
        "-Z",
        "2",
        "-s",
        "2",
        "-o",
        "0",
        "-y",
        "3",
        "-x",
        "3",
        "-I",
        "miopenIndexUint16",
    ]
    values = parse_flags(argv, pool.FLAGS)
    (fwd, _) = pool.build_problems(values, "fp32")
    assert fwd.desc.index_mode is IndexMode.IMAGE
    for forw in ("0", "2"):
        rc, out, err = drive("pool", *argv, "-F", forw, "-i", "1")
        assert rc == 0, (out, err)
        assert any(x.startswith("Backward Pooling Verifies on CPU and GPU") for x in out)


def test_pool_time_wall_and_dump(drive, tmp_path):
    rc, out, err = drive("pool", *POOL, "-t", "1", "-w", "1", "-i", "2", "-l", str(tmp_path / "dumps"))
    assert rc == 0, err
    assert any(re.fullmatch(r"GPU Kernel Time Forward Pooling Elapsed: \d+\.\d{6} ms", x) for x in out)
    assert any(re.fullmatch(r"Wall-clock Time Backward Pooling Elapsed: \d+\.\d{6} ms", x) for x in out)
    names = sorted(os.listdir(tmp_path / "dumps"))
    assert names == ["dump_bwd_din_gpu.bin", "dump_fwd_out_gpu_index.bin", "dump_fwd_out_gpu_y.bin"]
    y = np.fromfile(tmp_path / "dumps" / "dump_fwd_out_gpu_y.bin", np.float32)
    assert y.size == 2 * 8 * 5 * 9 and np.all((y >= 0) & (y < 1))


def test_pool_mask_mismatch_fails(drive, monkeypatch):
    def wrong_index(problem, buffers):
        out = pool.reference(problem, buffers)
        if "index" in out:
            out["index"] = out["index"] + 1
        return out

    monkeypatch.setattr(pool, "case", _with_reference(pool.case, wrong_index))
    rc, out, _ = drive("pool", *POOL, "-i", "1")
    assert rc == EXIT_VERIFY_FAILED
    assert any(x.startswith("Mask mismatch, gpu ") for x in out)
    assert "Forward Pooling verification FAILED" in out


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["-v", "0"], "-v/--pool_stride_h"),
        (["-u", "0"], "-u/--pool_stride_w"),
        (["-y", "15"], "-y/--win_h"),
        (["-p", "3"], "-p/--pad_h"),
        (["-m", "median"], "-m/--mode"),
        (["-z", "full"], "-z/--pad_mode"),
        (["-y", "16", "-x", "16", "-p", "4", "-W", "1x1x20x20"], "-I/--index_type"),
        (["-M", "1", "-W", "1x1x20x20"], "-I/--index_type"),
        (["-I", "miopenIndexInt8"], "-I/--index_type"),
        (["-D", "2x8x9x11,NHWC"], "-D/--dinput"),
        (["-H", "2x8x5x10"], "-H/--doutput"),
        (["-W", "2x8x9"], "-W/--input"),
        (["-W", "2x8x9x10,NWHC"], "-W/--input"),
        (["-F", "5"], "-F/--forw"),
        (["--bogus", "1"], "--bogus"),
    ],
)
def test_pool_bad_input_is_one_line(drive, argv, flag):
    rc, out, err = drive("pool", *POOL, *argv)
    assert rc == 1 and len(err) == 1 and flag in err[0], err


def test_pool_logged_command_parses_back():
    problems = [
        PoolingProblem.create(
            PoolingDesc("max", (3, 2), (2, 1), (1, 0), index_type="u16"),
            TensorDesc("fp16", (2, 8, 9, 10), layout="NHWC"),
        ),
        PoolingProblem.create(
            PoolingDesc("avg", (2, 3, 3), (1, 2, 2), (0, 1, 1)), TensorDesc("fp32", (1, 2, 4, 5, 6)), "B"
        ),
        PoolingProblem.create(
            PoolingDesc("max", (3, 3), (2, 2), pad_mode="same", index_mode="image", index_type="u32"),
            TensorDesc("bf16", (1, 3, 7, 8), strides=(300, 80, 10, 1)),
            "B",
        ),
    ]
    for problem in problems:
        sub, *argv = problem.driver_args()
        values = parse_flags(argv, pool.FLAGS)
        dtype = next(d for d, name in pool.SUBCOMMAND.items() if name == sub)
        built = pool.build_problems(values, dtype)
        same = [p for p in built if p.direction is problem.direction]
        assert same and same[0].key() == problem.key(), (argv, same[0].key(), problem.key())
        if problem.desc.mode.value == "max":  # (average pooling ignores the index settings)
            assert same[0] == problem
