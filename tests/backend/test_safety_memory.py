"""Issue 6, item 1: a packed and a strided problem never share kernels; no kernel writes outside
its tensor (guard regions past each output and the gaps of a strided one stay untouched); every
launch is checked against the sizes its kernels were built for (OpenCL, PoCL in CI)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from miopy import backends, bounds, errors
from miopy.engine.candidates import make_solution
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.reference.conv import conv_reference_buffers, rms_range, store_logical, view
from miopy.reference.tolerance import tolerance
from miopy.solution import InvokeArgs
from miopy.solvers import by_name
from miopy.tensor import TensorDesc, from_storage

pytestmark = pytest.mark.skipif(backends.unavailable_reason("opencl") is not None, reason="no OpenCL")

GUARD = 4096  # elements past the end of every output
SENTINEL = np.float32(12345.0)

X = TensorDesc("fp32", (1, 4, 8, 8))
W = TensorDesc("fp32", (4, 4, 3, 3))
CONV = ConvDesc((1, 1))
# the example: labelled NCHW, strides of a tensor with gaps (every other column, 4x rows)
Y_STRIDED = TensorDesc("fp32", (1, 4, 8, 8), strides=(1024, 256, 16, 2), layout="NCHW")


def _problems() -> tuple[ConvProblem, ConvProblem]:
    strided = ConvProblem(X, W, Y_STRIDED, CONV, "F")
    packed = ConvProblem.create(X, W, CONV, "F")
    return strided, packed


def _run_guarded(handle, solution, rng) -> None:
    """Run with the output in a buffer GUARD elements longer than needed, filled with SENTINEL;
    check the result, that the guard is intact and that the gaps between a strided output's
    elements kept SENTINEL."""
    p = solution.problem
    x = store_logical(rng.uniform(-1, 1, p.x.lens).astype(np.float32), p.x)
    w = store_logical(rng.uniform(-1, 1, p.w.lens).astype(np.float32), p.w)
    y = np.full(p.y.element_space + GUARD, SENTINEL, dtype=np.float32)
    expected = conv_reference_buffers(p, {"x": x, "w": w})
    solution.run(handle, {"x": x, "w": w, "y": y})
    got = from_storage(view(y, p.y), p.dtype)
    assert rms_range(got, expected) < tolerance(p), f"{solution.solver} {p.y.key()}: wrong result"
    assert np.all(y[p.y.element_space :] == SENTINEL), f"{solution.solver} wrote past the end of y"
    touched = np.zeros(p.y.element_space, dtype=bool)
    view(touched, p.y)[...] = True
    assert np.all(y[: p.y.element_space][~touched] == SENTINEL), f"{solution.solver} wrote into y's gaps"


def test_mislabelled_or_garbage_layouts_are_refused():
    with pytest.raises(errors.BadParm, match="^layout="):
        TensorDesc("fp32", (1, 4, 8, 8), layout="garbage")
    with pytest.raises(errors.BadParm, match="^layout="):
        TensorDesc("fp32", (1, 4, 8, 8), strides=(1024, 256, 16, 2), layout="garbage")
    # NCHW-ordered strides labelled NHWC; packed NHWC strides labelled NCHW
    with pytest.raises(errors.BadParm, match="^layout='NHWC'"):
        TensorDesc("fp32", (1, 4, 8, 8), strides=(1024, 256, 16, 2), layout="NHWC")
    with pytest.raises(errors.BadParm, match="^layout='NCHW'.*packed NHWC"):
        TensorDesc("fp32", (2, 3, 4, 5), strides=(60, 1, 15, 3), layout="NCHW")
    assert Y_STRIDED.layout == "STRIDED" and not Y_STRIDED.packed
    assert TensorDesc("fp32", (2, 3, 4, 5), strides=(60, 1, 15, 3), layout="nhwc").layout == "NHWC"


def test_every_key_tells_packed_from_strided():
    strided, packed = _problems()
    assert strided.network_config() != packed.network_config()
    assert strided.invoker_key() != packed.invoker_key()
    assert strided.key() != packed.key()  # find DB
    assert strided.conv_view().key() != packed.conv_view().key()  # perf DB
    assert "1024,256,16,2" in strided.network_config()
    assert ConvProblem.parse(strided.key()) == strided


@pytest.mark.parametrize("solver", ["ConvDirectNaiveFwd", "ConvDirectTiledFwd"])
def test_packed_and_strided_alternate_in_one_handle(ocl, solver):
    rng = np.random.default_rng(6)
    strided, packed = _problems()
    s = by_name(solver)
    for problem in (strided, packed, strided, packed):
        assert s.is_applicable(ocl, problem.conv_view()) is None
        _run_guarded(ocl, make_solution(ocl, problem, s), rng)


def test_gemm_and_naive_alternate_with_guards(ocl):
    """GEMM solvers (offsets, batch strides, a column workspace) next to the same problem's naive
    run, in each direction, each output guarded."""
    rng = np.random.default_rng(7)
    x = TensorDesc("fp32", (3, 4, 7, 6), layout="NHWC")
    w = TensorDesc("fp32", (6, 2, 3, 2))
    for direction in "FBW":
        p = ConvProblem.create(x, w, ConvDesc((1, 0), (2, 1), groups=2), direction, y_layout="NCHW")
        view_dir = p.conv_view().direction.value
        names = {"F": ["GemmFwdRest"], "B": ["GemmBwdRest"], "W": ["GemmWrwUniversal"]}[view_dir]
        naive = {"F": "ConvDirectNaiveFwd", "B": "ConvDirectNaiveBwd", "W": "ConvDirectNaiveWrw"}[view_dir]
        for name in [*names, naive, *names]:
            sol = make_solution(ocl, p, by_name(name))
            out = {"x": p.x, "w": p.w, "y": p.y}[p.output_role]
            xb = store_logical(rng.uniform(-1, 1, p.x.lens).astype(np.float32), p.x)
            wb = store_logical(rng.uniform(-1, 1, p.w.lens).astype(np.float32), p.w)
            yb = store_logical(rng.uniform(-1, 1, p.y.lens).astype(np.float32), p.y)
            bufs = {"x": xb, "w": wb, "y": yb}
            guarded = np.full(out.element_space + GUARD, SENTINEL, dtype=np.float32)
            bufs[p.output_role] = guarded
            expected = conv_reference_buffers(p, bufs)
            sol.run(ocl, bufs)
            got = from_storage(view(guarded, out), p.dtype)
            assert rms_range(got, expected) < tolerance(p), f"{name} {direction}"
            assert np.all(guarded[out.element_space :] == SENTINEL), f"{name} {direction} overran"


def test_invoker_refuses_buffers_smaller_than_it_was_built_for(ocl):
    strided, _ = _problems()
    sol = make_solution(ocl, strided, by_name("ConvDirectNaiveFwd"))
    invoker = ocl.prepare_invoker(sol)
    assert isinstance(invoker, bounds.CheckedInvoker)
    be = ocl.backend
    small = {"x": be.alloc(X.nbytes), "w": be.alloc(W.nbytes), "y": be.alloc(1024)}  # y needs 3840
    with pytest.raises(errors.BadParm, match=f"^y=buffer of 1024 bytes.*{Y_STRIDED.nbytes}"):
        invoker(InvokeArgs(small))


def test_a_region_outside_its_tensor_is_refused_before_building(ocl):
    _, packed = _problems()
    sol = make_solution(ocl, packed, by_name("ConvDirectNaiveFwd"))
    sol = dataclasses.replace(sol, extra={"regions": [("y", packed.y.element_space + 1, 4)]})
    with pytest.raises(errors.InternalError, match="touch"):
        bounds.required_bytes(sol)


def test_gemm_regions_lie_inside_every_buffer(ocl):
    """Each GEMM operand and column region, offsets and strides included, fits its buffer."""
    from support import random_problem

    rng = np.random.default_rng(8)
    checked = 0
    for _ in range(60):
        p = random_problem(rng, dims=int(rng.choice([2, 3])))
        for solver in by_name("GemmFwdRest"), by_name("GemmBwdRest"), by_name("GemmWrwUniversal"):
            if solver.is_applicable(ocl, p.conv_view()) is None:
                sol = make_solution(ocl, p, solver)
                assert sol.extra["regions"]
                bounds.required_bytes(sol)
                checked += 1
    assert checked > 20
