"""Tensor operations: keys, errors naming the field, the reference, every solver on PoCL on random
shapes, layouts, broadcasts and dtypes, and the driver."""

from __future__ import annotations

import numpy as np
import pytest
from misc_support import run_all

from miopy.errors import BadParm
from miopy.problem.tensorop import TensorOp, TensorOpProblem
from miopy.reference import tensorop as ref
from miopy.reference.tolerance import BASE
from miopy.tensor import DataType, TensorDesc


def test_keys_round_trip():
    for p in ref.samples():
        assert TensorOpProblem.parse(p.key()) == p
        assert TensorOpProblem.parse(p.key()).key() == p.key()


def test_ops_and_driver_codes():
    assert TensorOp.parse(2) is TensorOp.ADD and TensorOp.parse("max") is TensorOp.MAX
    assert TensorOp.parse("miopenTensorOpMul") is TensorOp.MUL
    with pytest.raises(BadParm, match="op=9"):
        TensorOp.parse(9)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(b=TensorDesc("fp32", (2, 2, 4, 5))), "b.lens"),
        (dict(a=TensorDesc("fp32", (2, 3, 4, 6))), "a.lens"),
        (dict(b=TensorDesc("fp16", (1, 3, 1, 1))), "b.dtype"),
        (dict(beta=float("nan")), "beta"),
        (dict(alpha1="x"), "alpha1"),
    ],
)
def test_errors_name_the_field(kwargs, field):
    c = TensorDesc("fp32", (2, 3, 4, 5))
    args = dict(a=c, b=TensorDesc("fp32", (1, 3, 1, 1)), c=c)
    args.update(kwargs)
    with pytest.raises(BadParm, match=field.replace(".", r"\.")):
        TensorOpProblem("add", **args)


def test_reference_broadcasts_like_loops():
    rng = np.random.default_rng(1)
    a, b, c = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(1, 3, 1, 5)), rng.normal(size=(2, 3, 4, 5))
    d = TensorDesc("fp32", (2, 3, 4, 5))
    p = TensorOpProblem("max", d, TensorDesc("fp32", (1, 3, 1, 5)), d, 2.0, -1.0, 0.5)
    got = ref.tensorop_reference(p, {"a": a, "b": b, "c": c})
    for idx in np.ndindex(a.shape):
        want = max(2.0 * a[idx], -1.0 * b[(0, idx[1], 0, idx[3])]) + 0.5 * c[idx]
        assert got[idx] == pytest.approx(want)


def _random_problem(rng) -> TensorOpProblem:
    dtype = rng.choice(["fp32", "fp16", "bf16"])
    rank = int(rng.choice([4, 5]))
    lens = tuple(int(v) for v in rng.integers(1, 7, rank))
    layout = rng.choice(["NCHW", "NHWC"] if rank == 4 else ["NCDHW", "NDHWC"])
    op = rng.choice(["add", "mul", "min", "max", "set", "scale"])
    c = TensorDesc(dtype, lens, layout=layout)
    if op in ("set", "scale"):
        return TensorOpProblem(op, y=c, value=float(rng.uniform(-2, 2)))
    blens = tuple(n if rng.random() < 0.5 else 1 for n in lens)
    b = TensorDesc(dtype, blens, layout=rng.choice(["NCHW", "NHWC"] if rank == 4 else ["NCDHW", "NDHWC"]))
    return TensorOpProblem(
        op, c, b, c, *(float(v) for v in rng.uniform(-2, 2, 2)), float(rng.choice([0, 0.5]))
    )


def test_random_problems_every_solver(ocl):
    rng = np.random.default_rng(2024)
    for _ in range(12):
        p = _random_problem(rng)
        run_all(ocl, p, ref, BASE[p.dtype] * 2, rng=rng)


def test_strided_tensors(ocl):
    c = TensorDesc("fp16", (2, 3, 4, 5), strides=(200, 50, 10, 2))
    b = TensorDesc("fp16", (2, 3, 1, 1), strides=(7, 2, 1, 1))
    assert run_all(ocl, TensorOpProblem("mul", c, b, c, 1, 1, 1), ref, BASE[DataType.FP16]) == [
        "TensorOpStrided"
    ]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_packed_cpu_kernel_every_b_kind(ocl, dtype):
    """PoCL's tensorop_packed_cpu (runs of 64 elements in float8 vectors, scalar tails): b like c,
    b constant over each vector, b's run innermost (an NHWC bias), b gathered; every op, with and
    without beta, lengths that leave vector and scalar tails."""
    from miopy.solvers.tensorop.elementwise import TensorOpPacked

    rng = np.random.default_rng(31)
    cases = [
        ((2, 16, 5, 7), (2, 16, 5, 7), "NCHW"),  # like c; 1120 elements: a run of 32 at the end
        ((3, 5, 7, 9), (3, 5, 7, 9), "NCHW"),  # 945: a scalar tail
        ((2, 16, 8, 8), (2, 16, 1, 1), "NCHW"),  # constant over runs of 64
        ((2, 16, 3, 3), (1, 16, 1, 1), "NHWC"),  # bias innermost, 16 channels
        ((2, 16, 5, 7), (1, 16, 1, 1), "NCHW"),  # runs of 35: gathered
    ]
    for clens, blens, layout in cases:
        c, b = TensorDesc(dtype, clens, layout=layout), TensorDesc(dtype, blens, layout=layout)
        for op, beta in (("add", 0.0), ("mul", 0.5), ("min", 0.0), ("max", 1.0)):
            p = TensorOpProblem(op, c, b, c, 1.5, -0.5, beta)
            prog = TensorOpPacked().get_program(ocl, p.solver_view())
            assert prog.steps[0].spec.name == "tensorop_packed_cpu"
            ran = run_all(ocl, p, ref, BASE[p.dtype] * 2, rng=rng)
            assert "TensorOpPacked" in ran
