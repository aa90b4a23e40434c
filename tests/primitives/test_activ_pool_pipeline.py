"""Activation and pooling through the same find / immediate / find DB / invoker cache / logging
path as convolution (OpenCL, PoCL in CI)."""

from __future__ import annotations

import numpy as np
import pytest
from primitive_support import assert_close, logical

from miopy.engine.find import FindOptions, find_solutions, get_solutions, solution_for
from miopy.errors import BadParm
from miopy.handle import Handle
from miopy.problem.activation import ActivationDesc, ActivationProblem
from miopy.problem.pooling import PoolingDesc, PoolingProblem
from miopy.reference.common import store_logical
from miopy.reference.pool import pool_forward
from miopy.tensor import TensorDesc


@pytest.fixture
def handle(isolated):
    """A fresh handle with empty DBs and caches."""
    return Handle("opencl")


def _pool_problem() -> PoolingProblem:
    desc = PoolingDesc("max", (3, 3), (2, 2), (1, 1), index_type="u16")
    return PoolingProblem.create(desc, TensorDesc("fp16", (2, 8, 9, 7), layout="NHWC"))


def test_find_ranks_times_and_remembers(handle):
    problem = _pool_problem()
    found = find_solutions(handle, problem)
    assert [s.solver for s in found] and all(s.time_ms is not None for s in found)
    assert {s.solver for s in found} == {"PoolingFwdVec", "PoolingFwdDirect"}
    record = handle.find_db.load(problem.key(), primitive="pool")
    assert record and {r.solver for r in record} == {"PoolingFwdVec", "PoolingFwdDirect"}
    # immediate mode now follows the find DB's ranking
    assert [s.solver for s in get_solutions(handle, problem)] == [s.solver for s in found]
    # the find DB keeps primitives apart: the same key under conv finds nothing
    assert handle.find_db.load(problem.key(), primitive="conv") is None


def test_run_with_numpy_arrays_and_invoker_cache(handle):
    problem = _pool_problem()
    (solution, *_) = get_solutions(handle, problem)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, problem.x.lens)
    bufs = {
        "x": store_logical(x, problem.x),
        "y": store_logical(np.full(problem.y.lens, np.nan), problem.y),
        "index": np.zeros(problem.index.element_count, np.uint16),
    }
    solution.run(handle, bufs)
    y, index = pool_forward(problem, logical(problem, "x", bufs["x"]))
    assert_close(logical(problem, "y", bufs["y"]), y, "FP16", "y")
    assert np.array_equal(logical(problem, "index", bufs["index"]), index)
    first = handle.prepare_invoker(solution)
    assert handle.prepare_invoker(solution_for(handle, problem, solution.solver)) is first


def test_arrays_are_checked_against_the_index_type(handle):
    problem = _pool_problem()
    solution = solution_for(handle, problem, "PoolingFwdDirect")
    bufs = {
        "x": store_logical(np.zeros(problem.x.lens), problem.x),
        "y": store_logical(np.zeros(problem.y.lens), problem.y),
        "index": np.zeros(problem.index.element_count, np.uint32),
    }
    with pytest.raises(BadParm) as info:
        solution.run(handle, bufs)
    assert str(info.value).startswith("index=") and "miopenIndexUint16" in str(info.value)


def test_activation_find_and_named_solver(handle):
    x = TensorDesc("fp32", (2, 3, 4, 5), strides=(60, 20, 5, 1))  # packed NCHW
    problem = ActivationProblem.create(ActivationDesc("LEAKY_RELU", 0.25), x, "B")
    found = find_solutions(handle, problem, FindOptions())
    assert {s.solver for s in found} == {"ActivBwdPacked", "ActivBwdStrided"}
    assert solution_for(handle, problem, 303).solver == "ActivBwdStrided"
    with pytest.raises(BadParm) as info:
        solution_for(handle, problem, "ActivFwdPacked")
    assert "not applicable" in str(info.value)


def test_logging_cmd(handle, monkeypatch, capsys):
    monkeypatch.setenv("MIOPY_ENABLE_LOGGING_CMD", "1")
    get_solutions(handle, _pool_problem())
    problem = ActivationProblem.create(ActivationDesc("ELU", 0.5), TensorDesc("fp16", (2, 3, 4, 5)), "F")
    get_solutions(handle, problem)
    err = capsys.readouterr().err.splitlines()
    assert (
        "miopy: Command [LogCmdPooling] miopy-driver poolfp16 -W 2x8x9x7,NHWC -y 3 -x 3 -v 2 -u 2 -p 1 -q 1 "
        "-m max -z default -M 0 -I miopenIndexUint16 -F 0" in err
    )
    assert (
        "miopy: Command [LogCmdActivation] miopy-driver activfp16 -n 2 -c 3 -H 4 -W 5 -m 9 -A 0.5 -B 1 "
        "-G 1 -F 1" in err
    )
