"""Every naive solver in every direction against the NumPy reference on OpenCL (PoCL in CI)."""

from __future__ import annotations

import numpy as np
import pytest
from support import check, random_problem

from miopy.engine.candidates import make_solution
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.solvers import by_name
from miopy.tensor import TensorDesc

NAIVE = {"F": "ConvDirectNaiveFwd", "B": "ConvDirectNaiveBwd", "W": "ConvDirectNaiveWrw"}


def _naive_for(problem):
    return by_name(NAIVE[problem.conv_view().direction.value])


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("dims", [2, 3])
def test_naive_random_problems(ocl, dtype, dims):
    rng = np.random.default_rng(hash((dtype, dims)) % 2**32)
    for _ in range(12 if dims == 2 else 6):
        problem = random_problem(rng, dims=dims, dtype=dtype)
        solver = _naive_for(problem)
        assert solver.is_applicable(ocl, problem.conv_view()) is None
        check(ocl, make_solution(ocl, problem, solver), rng)


def test_naive_strided_tensors(ocl):
    x = TensorDesc("fp32", (2, 3, 6, 7), strides=(200, 60, 9, 1))  # padded rows and channels
    w = TensorDesc("fp32", (4, 3, 3, 3), strides=(40, 12, 3, 1))
    for direction in "FBW":
        p = ConvProblem.create(x, w, ConvDesc((1, 1), (1, 2)), direction, y_strides=(300, 70, 10, 2))
        check(ocl, make_solution(ocl, p, _naive_for(p)))


def test_naive_same_padding_and_depthwise(ocl):
    for direction in "FBW":
        x = TensorDesc("fp16", (2, 6, 8, 7), layout="NHWC")
        w = TensorDesc("fp16", (6, 1, 2, 3), layout="NHWC")
        p = ConvProblem.create(x, w, ConvDesc((0, 0), (2, 2), groups=6, pad_mode="same"), direction)
        assert p.y.lens == (2, 6, 4, 4)
        check(ocl, make_solution(ocl, p, _naive_for(p)))


def test_naive_not_applicable_to_other_directions(ocl):
    p = random_problem(np.random.default_rng(1), direction="F")
    view = p.conv_view()
    others = [by_name(n) for d, n in NAIVE.items() if d != view.direction.value]
    assert all(s.is_applicable(ocl, view) for s in others)
