"""Activation solvers against the NumPy reference on OpenCL (PoCL in CI): every mode, forward and
backward, packed (vectorised, with a scalar tail) and strided tensors, every data type."""

from __future__ import annotations

import numpy as np
import pytest
from primitive_support import check_activ

from miopy.engine.candidates import make_solution
from miopy.problem.activation import ActivationDesc, ActivationMode, ActivationProblem
from miopy.solvers.activ import ActivBwdPacked, ActivBwdStrided, ActivFwdPacked, ActivFwdStrided
from miopy.tensor import TensorDesc

# alpha, beta, gamma per mode: POWER keeps alpha + beta*x > 0 on x in (-2, 2) but for the last one
PARAMS = {
    ActivationMode.TANH: (0.75, 1.5, 1.0),
    ActivationMode.POWER: (3.0, 0.5, 1.7),
    ActivationMode.CLIPPED_RELU: (1.25, 1.0, 1.0),
    ActivationMode.LEAKY_RELU: (0.125, 1.0, 1.0),
    ActivationMode.ELU: (0.5, 1.0, 1.0),
}
FWD = {"packed": ActivFwdPacked(), "strided": ActivFwdStrided()}
BWD = {"packed": ActivBwdPacked(), "strided": ActivBwdStrided()}


def _desc(mode: ActivationMode) -> ActivationDesc:
    return ActivationDesc(mode, *PARAMS.get(mode, (1.0, 1.0, 1.0)))


@pytest.mark.parametrize("direction", ["F", "B"])
@pytest.mark.parametrize("mode", list(ActivationMode), ids=[m.name for m in ActivationMode])
def test_every_mode_fp32(ocl, mode, direction):
    rng = np.random.default_rng(int(mode) * 2 + (direction == "B"))
    x = TensorDesc("fp32", (2, 3, 5, 7))  # 210 elements: 52 vectors and a tail of 2
    problem = ActivationProblem.create(_desc(mode), x, direction)
    solvers = FWD if direction == "F" else BWD
    for name, solver in solvers.items():
        assert solver.is_applicable(ocl, problem) is None
        solution = make_solution(ocl, problem, solver)
        if name == "packed":  # a CPU device: float8 runs with a scalar tail (kernels/common/activ.h)
            assert solution.kernels[0].name.endswith("_cpu")
        check_activ(ocl, solution, rng)


def test_power_below_zero_is_zero(ocl):
    desc = ActivationDesc("POWER", 0.5, 1.0, 2.5)  # alpha + beta*x <= 0 for x <= -0.5
    for direction in "FB":
        problem = ActivationProblem.create(desc, TensorDesc("fp32", (1, 4, 8, 9)), direction)
        solver = (FWD if direction == "F" else BWD)["packed"]
        check_activ(ocl, make_solution(ocl, problem, solver), np.random.default_rng(5))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", ["F", "B"])
def test_half_types(ocl, dtype, direction):
    rng = np.random.default_rng(11)
    solvers = FWD if direction == "F" else BWD
    for mode in (ActivationMode.LOGISTIC, ActivationMode.RELU, ActivationMode.ELU):
        x = TensorDesc(dtype, (3, 8, 5, 9), layout="NHWC")
        problem = ActivationProblem.create(_desc(mode), x, direction)
        check_activ(ocl, make_solution(ocl, problem, solvers["packed"]), rng)
    x = TensorDesc(dtype, (2, 3, 4, 5), strides=(100, 30, 6, 1))
    problem = ActivationProblem.create(_desc(ActivationMode.TANH), x, direction)
    check_activ(ocl, make_solution(ocl, problem, solvers["strided"]), rng)


@pytest.mark.parametrize("direction", ["F", "B"])
def test_mixed_strides_and_3d(ocl, direction):
    """Each tensor its own layout: only the strided solver applies."""
    rng = np.random.default_rng(3)
    lens = (2, 3, 4, 5, 6)
    descs = {
        "x": TensorDesc("fp32", lens, layout="NDHWC"),
        "y": TensorDesc("fp32", lens, layout="NCDHW"),
        "dy": TensorDesc("fp32", lens, strides=(800, 200, 40, 8, 1)),
        "dx": TensorDesc("fp32", lens, layout="NDHWC"),
    }
    if direction == "F":
        descs = {r: descs[r] for r in ("x", "y")}
    problem = ActivationProblem(_desc(ActivationMode.ELU), direction, **descs)
    solvers = FWD if direction == "F" else BWD
    assert solvers["packed"].is_applicable(ocl, problem) == "tensors have different strides"
    check_activ(ocl, make_solution(ocl, problem, solvers["strided"]), rng)


def test_compiled_in_mode(ocl):
    """The kernels GPUs get (mode compiled in) agree too."""

    class CudaLike:
        backend_name = "cuda"

    rng = np.random.default_rng(8)
    for mode, direction in ((ActivationMode.SOFTRELU, "F"), (ActivationMode.LOGISTIC, "B")):
        problem = ActivationProblem.create(_desc(mode), TensorDesc("fp16", (2, 8, 4, 4)), direction)
        solver = (FWD if direction == "F" else BWD)["packed"]
        solution = make_solution(CudaLike(), problem, solver, cfg=solver.default_config(None, problem))
        assert ("ACTIV_MODE", int(mode)) in solution.kernels[0].defines
        check_activ(ocl, solution, rng)


@pytest.mark.parametrize("direction", ["F", "B"])
def test_packed_configs(ocl, direction):
    """The GPU-shaped packed kernels (what a CPU device does not get, so built here as for CUDA)
    in every work-group size and vectors per work item: full groups, a partial last group, a
    group of only the scalar tail, and a bad config refused."""

    class CudaLike:
        backend_name = "cuda"

    rng = np.random.default_rng(13)
    solver = (FWD if direction == "F" else BWD)["packed"]
    space = list(solver.search_space(ocl, None))
    assert solver.default_config(ocl, None) in space
    configs = [{"local": 64, "unroll": 4, "stream": 0}, {"local": 512, "unroll": 2, "stream": 0}]
    assert all(c in space for c in configs)
    assert all(c["stream"] == 0 for c in space)  # cache hints are CUDA's
    assert solver.is_valid_config(ocl, None, {"local": 64, "unroll": 4})  # a record from before "stream"
    # 4 * 7 * 11 * 13 = 4004 fp32: 1001 vectors, the last group partial; 3 elements: a tail only;
    # 2 * 4 * 32 * 32 = 8192: 2048 vectors, whole groups in both configs (ACTIV_EXACT)
    for lens in ((4, 7, 11, 13), (1, 3, 1, 1), (2, 4, 32, 32)):
        problem = ActivationProblem.create(_desc(ActivationMode.ELU), TensorDesc("fp32", lens), direction)
        for cfg in configs:
            solution = make_solution(CudaLike(), problem, solver, cfg=cfg)
            exact = ("ACTIV_EXACT", 1) in solution.kernels[0].defines
            assert exact == (lens == (2, 4, 32, 32))
            check_activ(ocl, solution, rng)
    assert not solver.is_valid_config(ocl, None, {"local": 96, "unroll": 1})
    assert not solver.is_valid_config(ocl, None, {"local": 128, "unroll": True})
    assert not solver.is_valid_config(ocl, None, {"local": 128, "unroll": 1, "stream": 7})
    assert not solver.is_valid_config(ocl, None, {"local": 128, "unroll": 1, "stream": True})
    assert not solver.is_valid_config(ocl, None, {"local": 128, "unroll": 1, "hint": 1})


def test_solvers_refuse_other_problems(ocl):
    fwd = ActivationProblem.create(_desc(ActivationMode.RELU), TensorDesc("fp32", (1, 2, 3, 4)), "F")
    assert BWD["packed"].is_applicable(ocl, fwd) == "direction is FORWARD"
    assert FWD["strided"].is_applicable(ocl, object()) == "not an activation"


def test_cache_hint_configs():
    """On CUDA find searches the cache-hint settings TUNED_STREAMS; every setting of STREAM_HINTS
    is a valid config that compiles its load and store hints in; OpenCL gets none. The defaults:
    hints for backward up to 24 MiB and forward above 4 Mi elements up to 80 MB."""
    from miopy.solvers.activ.elementwise import STREAM_HINTS, TUNED_STREAMS

    class CudaLike:
        backend_name = "cuda"

    cuda = CudaLike()
    relu = ActivationDesc(ActivationMode.RELU)
    small = ActivationProblem.create(relu, TensorDesc("fp16", (2, 8, 4, 4)), "B")
    assert {c["stream"] for c in BWD["packed"].search_space(cuda, small)} == set(TUNED_STREAMS)
    for st, (ld, sth) in STREAM_HINTS.items():
        cfg = {"local": 128, "unroll": 1, "stream": st}
        assert BWD["packed"].is_valid_config(cuda, small, cfg)
        defines = dict(make_solution(cuda, small, BWD["packed"], cfg=cfg).kernels[0].defines)
        assert (defines.get("VEC_LD_HINT", 0), defines.get("VEC_ST_HINT", 0)) == (ld, sth), st
    defaults = {}
    for dtype, lens, direction in (
        ("fp16", (32, 128, 28, 28), "B"),  # 19.3 MB
        ("fp16", (32, 64, 56, 56), "B"),  # 38.5 MB
        ("fp16", (32, 128, 28, 28), "F"),  # 3.2 Mi elements
        ("fp32", (32, 64, 56, 56), "F"),  # 6.4 Mi elements, 51 MB
        ("fp32", (32, 128, 56, 56), "F"),  # 103 MB
    ):
        problem = ActivationProblem.create(relu, TensorDesc(dtype, lens), direction)
        solver = (FWD if direction == "F" else BWD)["packed"]
        defaults[(dtype, lens[1], lens[2], direction)] = solver.default_config(cuda, problem)["stream"]
        assert solver.default_config(None, problem)["stream"] == 0  # no backend: no hints
    assert defaults == {
        ("fp16", 128, 28, "B"): 1,
        ("fp16", 64, 56, "B"): 0,
        ("fp16", 128, 28, "F"): 0,
        ("fp32", 64, 56, "F"): 1,
        ("fp32", 128, 56, "F"): 0,
    }
