"""Issue 6: solvers whose kernels index with 32-bit integers are not applicable to a problem
whose tensors or workspace span more elements than that (they would wrap an index and write
outside a buffer); the naive solvers, which index with 64 bits, still are."""

from __future__ import annotations

import pytest

from miopy.engine.candidates import applicable
from miopy.engine.find import solution_for
from miopy.errors import NotApplicable
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.tensor import TensorDesc


def _problem(width: int) -> ConvProblem:
    x = TensorDesc("fp16", (8, 64, 2048, width))
    w = TensorDesc("fp16", (64, 64, 3, 3))
    return ConvProblem.create(x, w, ConvDesc(pads=(1, 1)), "forward")


def test_32bit_solvers_refuse_a_problem_past_their_index_range(ocl):
    big = _problem(2048)  # x and y span 2**31 elements: one past int32
    names = [s.name for s in applicable(ocl, big)]
    assert "ConvDirectTiledFwd" not in names and "GemmFwdRest" not in names
    assert "ConvDirectNaiveFwd" in names
    with pytest.raises(NotApplicable, match="32-bit"):
        solution_for(ocl, big, "ConvDirectTiledFwd")


def test_one_column_less_fits_the_tiled_solver(ocl):
    names = [s.name for s in applicable(ocl, _problem(2047))]
    assert "ConvDirectTiledFwd" in names
    assert "GemmFwdRest" not in names  # its im2col workspace still spans more than int32
