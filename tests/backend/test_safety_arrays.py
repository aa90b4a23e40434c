"""Issue 6, items 2 and 6 on a device (OpenCL, PoCL in CI): arrays that do not match their
descriptor, read-only outputs, Handle arguments, solvers that are not applicable, allocations
that cannot succeed; and a seeded fuzz of run() with mismatched arrays."""

from __future__ import annotations

import random

import numpy as np
import pytest
from support import output_of, random_buffers

from miopy import Handle, backends, errors
from miopy.engine.find import solution_for
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.reference.conv import conv_reference_buffers, rms_range
from miopy.reference.tolerance import tolerance
from miopy.tensor import TensorDesc

pytestmark = pytest.mark.skipif(backends.unavailable_reason("opencl") is not None, reason="no OpenCL")


def _problem(dtype="fp32", layout="NCHW", direction="F"):
    x = TensorDesc(dtype, (2, 3, 5, 6), layout=layout)
    w = TensorDesc(dtype, (4, 3, 3, 3), layout=layout)
    return ConvProblem.create(x, w, ConvDesc((1, 1)), direction, y_layout=layout)


def test_a_float32_array_for_an_fp16_problem_is_refused(ocl):
    p = _problem("fp16")
    sol = solution_for(ocl, p, "ConvDirectNaiveFwd")
    bufs = random_buffers(p, np.random.default_rng(1))
    bufs["x"] = bufs["x"].astype(np.float32)  # twice the bytes: the size check passed before
    with pytest.raises(errors.BadParm, match=r"^x='float32 array': the tensor is FP16: expected a float16"):
        sol.run(ocl, bufs)


def test_an_nchw_shaped_array_for_an_nhwc_tensor_is_refused(ocl):
    p = _problem(layout="NHWC")
    sol = solution_for(ocl, p, "ConvDirectNaiveFwd")
    rng = np.random.default_rng(2)
    bufs = random_buffers(p, rng)
    nchw = bufs["x"].reshape(p.x.lens)  # same bytes, logical (NCHW) shape
    with pytest.raises(
        errors.BadParm, match=r"^x='array of shape \(2, 3, 5, 6\)'.*\(2, 5, 6, 3\) \(NHWC order\)"
    ):
        sol.run(ocl, {**bufs, "x": nchw})
    # the memory-order shape, and flat buffers, are accepted and compute the right thing
    expected = conv_reference_buffers(p, bufs)
    y = bufs["y"].reshape(p.y.lens)  # (2, 4, 5, 6): logical order, but y is NHWC in memory
    with pytest.raises(errors.BadParm, match="^y="):
        sol.run(ocl, {**bufs, "y": y})
    y = bufs["y"].reshape(2, 5, 6, 4)
    sol.run(ocl, {**bufs, "x": bufs["x"].reshape(2, 5, 6, 3), "y": y})
    assert rms_range(output_of(p, {"y": y.reshape(-1)}), expected) < tolerance(p)


def test_bf16_takes_uint16_bits_and_refuses_float16(ocl):
    p = _problem("bf16")
    sol = solution_for(ocl, p, "ConvDirectNaiveFwd")
    bufs = random_buffers(p, np.random.default_rng(3))
    assert bufs["x"].dtype == np.uint16
    expected = conv_reference_buffers(p, bufs)
    sol.run(ocl, bufs)
    assert rms_range(output_of(p, bufs), expected) < tolerance(p)
    with pytest.raises(errors.BadParm, match="expected a uint16 or bfloat16 array"):
        sol.run(ocl, {**bufs, "w": bufs["w"].view(np.float16)})


def test_a_read_only_output_is_refused_before_any_launch(ocl, monkeypatch):
    p = _problem()
    sol = solution_for(ocl, p, "ConvDirectNaiveFwd")
    bufs = random_buffers(p, np.random.default_rng(4))
    bufs["y"].flags.writeable = False
    launched = []
    monkeypatch.setattr(ocl.backend, "launch", lambda *a: launched.append(a))
    with pytest.raises(errors.BadParm, match="^y='read-only array'"):
        sol.run(ocl, bufs)
    assert not launched
    bufs["x"].flags.writeable = False  # a read-only input is fine
    bufs["y"] = bufs["y"].copy()
    monkeypatch.undo()
    sol.run(ocl, bufs)


@pytest.mark.parametrize("backend", [5, 1.5, b"opencl", ["opencl"]])
def test_handle_refuses_non_string_backends(backend):
    with pytest.raises(errors.BadParm, match="^backend="):
        Handle(backend)


def test_a_solver_that_is_not_applicable_raises_not_applicable(ocl):
    p = _problem(direction="B")
    with pytest.raises(errors.NotApplicable, match="ConvDirectNaiveFwd.*direction is BACKWARD_DATA"):
        solution_for(ocl, p, "ConvDirectNaiveFwd")
    strided = ConvProblem.create(
        TensorDesc("fp32", (1, 2, 5, 5), strides=(100, 40, 6, 1)),
        TensorDesc("fp32", (2, 2, 1, 1)),
        ConvDesc((0, 0)),
        "F",
    )
    with pytest.raises(errors.NotApplicable, match="not packed"):
        solution_for(ocl, strided, "GemmFwd1x1_0_1")
    assert issubclass(errors.NotApplicable, errors.BadParm)


def test_allocations_that_cannot_succeed_are_alloc_failed(ocl):
    limit = int(ocl.backend.device.max_mem_alloc_size)
    with pytest.raises(errors.AllocFailed, match=f"^nbytes={limit + 1}"):
        ocl.backend.alloc(limit + 1)
    with pytest.raises(errors.AllocFailed, match=f"^nbytes={limit + 1}"):
        ocl.backend.upload(np.zeros(limit + 1, np.uint8)) if limit < 2**31 else ocl.backend.alloc(limit + 1)


# ---- fuzz: run() with arrays that may not match ---------------------------------------------------
def test_fuzz_run_with_mismatched_arrays(ocl):
    rng = random.Random(66)
    nrng = np.random.default_rng(66)
    problems = [
        _problem(d, lay, dirn) for d in ("fp32", "fp16", "bf16") for lay in ("NCHW", "NHWC") for dirn in "FBW"
    ]
    solutions = {}
    dtypes = [np.float32, np.float16, np.uint16, np.float64, np.int32, np.uint8]
    counts = {"ok": 0, "refused": 0}
    for _ in range(400):
        p = rng.choice(problems)
        key = p.key()
        if key not in solutions:
            name = {"F": "ConvDirectNaiveFwd", "B": "ConvDirectNaiveBwd", "W": "ConvDirectNaiveWrw"}
            solutions[key] = solution_for(ocl, p, name[p.direction.value])
        bufs = random_buffers(p, nrng)
        role = rng.choice("xwy")
        change = rng.choice(
            ["none", "dtype", "reshape", "shrink", "grow", "readonly", "noncontig", "list", "missing"]
        )
        a = bufs[role]
        if change == "dtype":
            with np.errstate(invalid="ignore"):
                bufs[role] = a.astype(rng.choice(dtypes))
        elif change == "reshape":
            desc = {"x": p.x, "w": p.w, "y": p.y}[role]
            bufs[role] = a.reshape(desc.lens) if rng.random() < 0.5 else a.reshape(1, -1)
        elif change == "shrink":
            bufs[role] = a[: rng.randrange(a.size)]
        elif change == "grow":
            bufs[role] = np.concatenate([a, np.zeros(rng.randint(1, 9), a.dtype)])
        elif change == "readonly":
            a.flags.writeable = False
        elif change == "noncontig":
            bufs[role] = np.repeat(a, 2)[::2]
        elif change == "list":
            bufs[role] = a.tolist()
        elif change == "missing":
            del bufs[role]
        try:
            solutions[key].run(ocl, bufs)
            counts["ok"] += 1
        except errors.MiopyError as exc:
            assert str(exc) and "\n" not in str(exc)
            counts["refused"] += 1
    assert counts["ok"] > 80 and counts["refused"] > 150, counts
