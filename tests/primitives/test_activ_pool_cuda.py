"""Activation and pooling solvers on a CUDA GPU against the NumPy references: modes and windows
compiled in (what the GPU gets), the vector paths, and base pointers that are not 16-byte aligned
(zero-copy views), which must fall back to scalar access."""

from __future__ import annotations

import numpy as np
import pytest
from primitive_support import activ_inputs, assert_close, check_activ, check_pool, logical, run

from miopy import backends
from miopy.engine.candidates import make_solution
from miopy.problem.activation import ActivationDesc, ActivationMode, ActivationProblem
from miopy.problem.pooling import PoolingDesc, PoolingProblem
from miopy.reference.activ import activ_reference
from miopy.reference.common import store_logical
from miopy.solvers.activ import ActivBwdPacked, ActivBwdStrided, ActivFwdPacked, ActivFwdStrided
from miopy.solvers.pool import PoolingBwdDirect, PoolingBwdVec, PoolingFwdDirect, PoolingFwdVec
from miopy.tensor import TensorDesc

_WHY = backends.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]

PARAMS = {
    ActivationMode.TANH: (0.75, 1.5, 1.0),
    ActivationMode.POWER: (3.0, 0.5, 1.7),
    ActivationMode.CLIPPED_RELU: (1.25, 1.0, 1.0),
    ActivationMode.LEAKY_RELU: (0.125, 1.0, 1.0),
    ActivationMode.ELU: (0.5, 1.0, 1.0),
}
ACTIV = {"F": (ActivFwdPacked(), ActivFwdStrided()), "B": (ActivBwdPacked(), ActivBwdStrided())}
POOL = {"F": (PoolingFwdVec(), PoolingFwdDirect()), "B": (PoolingBwdVec(), PoolingBwdDirect())}


@pytest.fixture(scope="module")
def cuda():
    from miopy.handle import Handle

    return Handle("cuda")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("direction", ["F", "B"])
def test_activation_every_mode(cuda, dtype, direction):
    rng = np.random.default_rng(1)
    for mode in ActivationMode:
        desc = ActivationDesc(mode, *PARAMS.get(mode, (1.0, 1.0, 1.0)))
        packed = ActivationProblem.create(desc, TensorDesc(dtype, (3, 16, 9, 11), layout="NHWC"), direction)
        strided = ActivationProblem.create(
            desc, TensorDesc(dtype, (2, 3, 5, 6), strides=(120, 40, 7, 1)), direction
        )
        for solver, problem in zip(ACTIV[direction], (packed, strided)):
            solution = make_solution(cuda, problem, solver)
            assert ("ACTIV_MODE", int(mode)) in solution.kernels[0].defines
            check_activ(cuda, solution, rng)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_activation_unaligned_views(cuda, dtype):
    """x and y one element past a 16-byte boundary: the packed kernel takes its scalar path."""
    import cupy as cp

    from miopy.reference.common import store_logical

    rng = np.random.default_rng(2)
    desc = ActivationDesc("ELU", 0.5)
    problem = ActivationProblem.create(desc, TensorDesc(dtype, (2, 8, 7, 9)), "F")
    host = activ_inputs(problem, rng)
    want = activ_reference(problem, {"x": logical(problem, "x", host["x"])})
    x = cp.asarray(np.concatenate([host["x"][:1], host["x"]]))[1:]
    y = cp.asarray(np.concatenate([host["y"][:1], store_logical(np.full(problem.lens, np.nan), problem.y)]))[
        1:
    ]
    solution = make_solution(cuda, problem, ActivFwdPacked())
    solution.run(cuda, {"x": x, "y": y})
    got = logical(problem, "y", cp.asnumpy(y))
    assert_close(got, want, problem.dtype.value, "unaligned views")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("direction", ["F", "B"])
def test_pooling(cuda, dtype, direction):
    rng = np.random.default_rng(3)
    cases = [
        ((2, 16, 13, 12), "NHWC", PoolingDesc("max", (3, 3), (2, 2), (1, 1))),
        (
            (2, 16, 13, 12),
            "NHWC",
            PoolingDesc("max", (2, 3), (1, 2), (1, 0), index_mode="image", index_type="u16"),
        ),
        ((2, 16, 9, 9), "NHWC", PoolingDesc("avg", (3, 3), (2, 2), (1, 1))),
        ((2, 16, 7, 7), "NHWC", PoolingDesc("avg_in", (7, 7), (1, 1))),
        ((2, 3, 13, 12), "NCHW", PoolingDesc("max", (3, 3), (2, 2), (1, 1), index_type="u64")),
        ((2, 5, 9, 10), "NCHW", PoolingDesc("avg", (3, 2), (2, 2), pad_mode="same")),
        (
            (2, 3, 5, 6, 7),
            "NCDHW",
            PoolingDesc("max", (2, 3, 3), (2, 2, 1), (1, 1, 0), index_mode="image", index_type="u32"),
        ),
        ((2, 16, 5, 6, 7), "NDHWC", PoolingDesc("avg_in", (2, 3, 3), (2, 2, 1), (1, 1, 0))),
    ]
    for lens, layout, desc in cases:
        problem = PoolingProblem.create(desc, TensorDesc(dtype, lens, layout=layout), direction)
        ran = 0
        for solver in POOL[direction]:
            if solver.is_applicable(cuda, problem) is None:
                solution = make_solution(cuda, problem, solver)
                assert ("POOL_KW", desc.window[-1]) in solution.kernels[0].defines
                check_pool(cuda, solution, rng)
                ran += 1
        assert ran == (2 if layout in ("NHWC", "NDHWC") else 1)


@pytest.mark.parametrize("direction", ["F", "B"])
def test_pooling_every_tile(cuda, direction):
    """Every forward tile and backward cell of both solvers' search spaces (row vectors for
    channels-first forward tiles, vector row stores for backward cells), odd and even sizes."""
    rng = np.random.default_rng(8)
    cases = [
        ("fp32", (2, 3, 13, 16), "NCHW", PoolingDesc("max", (3, 3), (2, 2), (1, 1))),
        ("fp16", (2, 3, 11, 17), "NCHW", PoolingDesc("avg", (3, 3), (2, 2), (1, 1))),
        ("fp16", (2, 16, 13, 11), "NHWC", PoolingDesc("max", (3, 3), (2, 2), (1, 1))),
        ("bf16", (2, 16, 9, 12), "NHWC", PoolingDesc("avg_in", (3, 3), (2, 2), (1, 1))),
    ]
    for dtype, lens, layout, desc in cases:
        problem = PoolingProblem.create(desc, TensorDesc(dtype, lens, layout=layout), direction)
        for solver in POOL[direction]:
            if solver.is_applicable(cuda, problem) is not None:
                continue
            for cfg in solver.search_space(cuda, problem.solver_view()):
                check_pool(cuda, make_solution(cuda, problem, solver, cfg), rng)


def with_defines(solution, extra: dict):
    """``solution`` with ``extra`` compile-time defines on its one kernel."""
    import dataclasses

    from miopy.solution import KernelSpec

    (launch,) = solution.program.steps
    s = launch.spec
    spec = KernelSpec(s.file, s.name, {**dict(s.defines), **extra}, s.global_size, s.local_size)
    program = dataclasses.replace(solution.program, steps=(dataclasses.replace(launch, spec=spec),))
    # a config of its own: the handle caches invokers by (problem, solver, config)
    return dataclasses.replace(solution, program=program, config={**(solution.config or {}), **extra})


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("direction", ["F", "B"])
def test_relu_on_bits_and_cache_hints(cuda, dtype, direction):
    """The packed ReLU kernels in every compile-time variant (ReLU on the bits of 16-bit data,
    every load and store cache hint) give exactly relu(x) and x > 0 ? dy : 0 on special values
    (NaN, infinities, signed zeros, subnormals, the largest finite values), with and without a
    tail of n % VEC elements (ACTIV_RAW 1 compares packed halves, 2 works on the integer bits)."""
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-7, -1e-7, 60000.0, -60000.0, 1.0, -1.0])
    rng = np.random.default_rng(7)
    for lens in ((2, 16, 8, 8), (3, 5, 7, 9)):
        problem = ActivationProblem.create(ActivationDesc("RELU"), TensorDesc(dtype, lens), direction)
        descs = problem.tensors()
        x = rng.uniform(-2, 2, lens)
        x.flat[: special.size * 3] = np.tile(special, 3)
        dy = rng.uniform(-0.5, 0.5, lens)
        base = make_solution(cuda, problem, ACTIV[direction][0])
        defines = dict(base.kernels[0].defines)
        assert defines.get("ACTIV_RAW") == (1 if dtype != "fp32" else None)  # the default: on the bits
        assert base.config["stream"] == (1 if direction == "B" else 0)  # small: streaming hints
        assert defines.get("VEC_LD_HINT") == (1 if direction == "B" else None)
        for raw in (0, 1, 2):
            for ld, st in ((0, 0), (1, 1), (2, 0), (3, 2), (4, 1), (1, 0), (3, 0)):
                extra = {"ACTIV_RAW": raw, "VEC_LD_HINT": ld, "VEC_ST_HINT": st}
                host = {r: store_logical(np.full(lens, np.nan), d) for r, d in descs.items()}
                host["x"] = store_logical(x, descs["x"])
                xs = logical(problem, "x", host["x"])
                if direction == "F":
                    want = np.where(xs > 0, xs, 0.0)
                else:
                    host["y"] = store_logical(np.where(xs > 0, xs, 0.0), descs["y"])
                    host["dy"] = store_logical(dy, descs["dy"])
                    want = np.where(xs > 0, logical(problem, "dy", host["dy"]), 0.0)
                run(cuda, with_defines(base, extra), host)
                (out,) = problem.outputs
                got = logical(problem, out, host[out])
                np.testing.assert_array_equal(got, want, err_msg=f"{lens} {extra}")
