"""Convolution alpha / beta (out = alpha * conv + beta * out) in every direction against the NumPy
reference on OpenCL (PoCL in CI): Solution.run's scalars and the functional API's keywords."""

from __future__ import annotations

import numpy as np
import pytest
from support import conv_problem, fused_ran, output_of, path_configs, random_buffers

from miopy import backends
from miopy.engine.candidates import applicable, make_solution
from miopy.engine.find import get_solutions
from miopy.errors import BadParm
from miopy.reference.conv import conv_reference_buffers, rms_range, store_logical
from miopy.reference.tolerance import tolerance

SCALINGS = [(1.0, 0.0), (2.0, 0.0), (0.5, 1.5)]


def _check_scaled(handle, solution, alpha: float, beta: float, seed: int = 0, nan_out: bool = False) -> None:
    """``nan_out``: the old output is NaN (beta must be 0: it is never read, as in MIOpen)."""
    problem = solution.problem
    rng = np.random.default_rng(seed)
    bufs = random_buffers(problem, rng)
    role = problem.output_role
    desc = problem.tensors()[role]
    before = rng.uniform(-1, 1, desc.lens).astype(np.float32)
    if nan_out:
        before[...] = np.nan
    bufs[role] = store_logical(before, desc)
    prior = output_of(problem, bufs).astype(np.float64)  # the stored (rounded) old output
    expected = alpha * conv_reference_buffers(problem, bufs) + (beta * prior if beta else 0.0)
    scalars = None if (alpha, beta) == (1.0, 0.0) else {"alpha": alpha, "beta": beta}
    solution.run(handle, bufs, scalars=scalars)
    got = output_of(problem, bufs)
    err = rms_range(got, expected)
    assert err < tolerance(problem), f"{solution.solver} alpha={alpha} beta={beta}: error {err}"


@pytest.mark.parametrize("alpha,beta", SCALINGS)
@pytest.mark.parametrize("direction", "FBW")
@pytest.mark.parametrize(
    "dtype,layout", [("fp32", "NCHW"), ("fp32", "NHWC"), ("fp16", "NCHW"), ("fp16", "NHWC")]
)
def test_alpha_beta_every_direction(ocl, dtype, layout, direction, alpha, beta):
    p = conv_problem(dtype, (2, 3, 5, 6), (4, 3, 3, 3), direction, (layout,) * 3, pads=(1, 1), strides=(1, 2))
    _check_scaled(ocl, get_solutions(ocl, p)[0], alpha, beta)


def test_alpha_beta_on_every_applicable_solver(ocl):
    """The blend wraps whatever the solver writes: each solver that takes a small forward problem."""
    p = conv_problem("fp32", (1, 4, 5, 5), (4, 4, 1, 1), "F", ("NCHW",) * 3)
    solvers = applicable(ocl, p)
    assert solvers
    for solver in solvers:
        _check_scaled(ocl, make_solution(ocl, p, solver), 0.5, 1.5, seed=3)


def test_bad_alpha_beta_name_the_field(ocl):
    p = conv_problem("fp32", (1, 2, 4, 4), (2, 2, 3, 3), "F", ("NCHW",) * 3, pads=(1, 1))
    solution = get_solutions(ocl, p)[0]
    bufs = random_buffers(p, np.random.default_rng(0))
    for scalars, field in (({"alpha": float("nan")}, "alpha"), ({"beta": float("inf")}, "beta")):
        with pytest.raises(BadParm, match=field):
            solution.run(ocl, bufs, scalars=scalars)
    with pytest.raises(BadParm, match="alpha"):
        solution.run(ocl, bufs, scalars={"alpha": "two"})


def test_an_infinite_result_stays_infinite():
    """The blend adds b = 0 * 0, never 0 * result: an output of +inf stays +inf (0 * inf is NaN)."""
    from miopy import functional as F

    x = np.ones((1, 2, 4, 4), np.float32)
    x[0, 0, 1, 1] = np.inf
    w = np.ones((3, 2, 3, 3), np.float32)
    y = F.conv2d(x, w, padding=1)
    assert np.isposinf(y).sum() == 27 and np.isfinite(y).sum() == 3 * 16 - 27
    out = np.full(y.shape, 2.0, np.float32)
    F.conv2d(x, w, padding=1, alpha=0.5, beta=1.5, out=out)
    np.testing.assert_array_equal(np.isposinf(out), np.isposinf(y))
    np.testing.assert_allclose(out[np.isfinite(y)], 0.5 * y[np.isfinite(y)] + 3.0, rtol=1e-6)


def test_functional_alpha_beta_and_out():
    from miopy import functional as F

    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (2, 3, 5, 5)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    y = F.conv2d(x, w, padding=1)
    old = rng.uniform(-1, 1, y.shape).astype(np.float32)
    out = old.copy()
    got = F.conv2d(x, w, padding=1, alpha=0.5, beta=1.5, out=out)
    assert got is out
    np.testing.assert_allclose(out, 0.5 * y + 1.5 * old, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(F.conv2d(x, w, padding=1, alpha=2.0), 2 * y, rtol=1e-5, atol=1e-5)
    dy = rng.uniform(-1, 1, y.shape).astype(np.float32)
    dx = F.conv_input_grad(x.shape, w, dy, padding=1)
    dx_old = rng.uniform(-1, 1, x.shape).astype(np.float32)
    dx_out = dx_old.copy()
    F.conv_input_grad(x.shape, w, dy, padding=1, alpha=2.0, beta=-1.0, out=dx_out)
    np.testing.assert_allclose(dx_out, 2 * dx - dx_old, rtol=1e-5, atol=1e-5)
    dw = F.conv_weight_grad(x, w.shape, dy, padding=1)
    dw_out = np.ones_like(w)
    F.conv_weight_grad(x, w.shape, dy, padding=1, beta=1.0, out=dw_out)  # gradient accumulation
    np.testing.assert_allclose(dw_out, dw + 1, rtol=1e-5, atol=1e-5)
    with pytest.raises(BadParm, match="out"):
        F.conv2d(x, w, padding=1, beta=1.0)  # beta reads out: it must be given
    with pytest.raises(BadParm, match="out"):
        F.conv2d(x, w, padding=1, out=np.zeros((2, 4, 4, 4), np.float32))
    with pytest.raises(BadParm, match="beta"):
        F.conv2d(x, w, padding=1, beta=float("nan"), out=out)


def test_functional_torch_channels_last_out():
    torch = pytest.importorskip("torch")
    from miopy import functional as F

    gen = torch.Generator().manual_seed(3)
    x = torch.rand((2, 3, 6, 6), generator=gen).to(memory_format=torch.channels_last)
    w = torch.rand((4, 3, 3, 3), generator=gen)
    b = torch.rand(4, generator=gen)
    want = torch.nn.functional.conv2d(x, w, b, stride=2, padding=1)
    out = torch.rand(want.shape, generator=gen).to(memory_format=torch.channels_last)
    old = out.clone()
    got = F.conv2d(x, w, b, stride=2, padding=1, alpha=-1.0, beta=0.25, out=out)
    assert got is out
    torch.testing.assert_close(out, -(want - b.reshape(1, -1, 1, 1)) + 0.25 * old + b.reshape(1, -1, 1, 1))


_CUDA_WHY = backends.unavailable_reason("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(_CUDA_WHY is not None, reason=f"cuda unavailable: {_CUDA_WHY}")
@pytest.mark.parametrize(
    "dtype,layout", [("fp32", "NCHW"), ("fp16", "NHWC"), ("bf16", "NHWC"), ("fp16", "NCHW"), ("bf16", "NCHW")]
)
def test_alpha_beta_on_cuda(dtype, layout):
    """The scale and the blend on CUDA (device buffers, the handle's stream), every direction, on
    find's first solution and on every solver that takes a small forward problem."""
    from miopy.handle import Handle

    cuda = Handle("cuda")
    for direction in "FBW":
        p = conv_problem(dtype, (2, 8, 6, 6), (8, 8, 3, 3), direction, (layout,) * 3, pads=(1, 1))
        for alpha, beta in SCALINGS:
            _check_scaled(cuda, get_solutions(cuda, p)[0], alpha, beta, seed=11)
    p = conv_problem(dtype, (1, 8, 5, 5), (8, 8, 1, 1), "F", (layout,) * 3)
    for solver in applicable(cuda, p):
        solution = make_solution(cuda, p, solver)
        _check_scaled(cuda, solution, 0.5, 1.5, seed=12)
        assert fused_ran(cuda, solution) == bool(solver.epilogue_files), (
            f"{solver.name}: fused or not as declared"
        )


@pytest.mark.gpu
@pytest.mark.skipif(_CUDA_WHY is not None, reason=f"cuda unavailable: {_CUDA_WHY}")
@pytest.mark.parametrize(
    "dtype,layout,direction",
    [
        *((d, ly, dr) for d in ("fp16", "bf16") for ly in ("NHWC", "NCHW") for dr in "FBW"),
        *(("fp32", ly, dr) for ly in ("NCHW", "NHWC") for dr in "FB"),
    ],
)
def test_fused_alpha_beta_on_cuda(dtype, layout, direction):
    """Each solver with a fused epilogue (epilogue_files) that takes the problem, on each of its
    ways of writing the output (support.path_configs; bf16 the default config alone): the scale
    over a NaN output (never read) and the blend, computed by the kernels (the fused path)."""
    from miopy.handle import Handle

    cuda = Handle("cuda")
    shapes = {
        "F": ((2, 128, 8, 8), (64, 128, 3, 3)),
        "B": ((2, 64, 8, 8), (128, 64, 3, 3)),
        "W": ((4, 64, 16, 16), (64, 64, 3, 3)),
    }
    p = conv_problem(dtype, *shapes[direction], direction, (layout,) * 3, pads=(1, 1))
    solvers = [s for s in applicable(cuda, p) if s.epilogue_files]
    # fp16 / bf16: the mma.sync and the wgmma kernels (NCHW: the transposing solver); fp32: the 3xTF32 one
    assert len(solvers) >= (1 if dtype == "fp32" or layout == "NCHW" else 2), [s.name for s in solvers]
    for solver in solvers:
        for cfg in path_configs(solver, cuda, p, 1 if dtype == "bf16" else 4):
            solution = make_solution(cuda, p, solver, cfg)
            _check_scaled(cuda, solution, 2.0, 0.0, seed=21, nan_out=True)
            _check_scaled(cuda, solution, 0.5, 1.5, seed=22)
            assert fused_ran(cuda, solution), f"{solver.name} {cfg}: not the fused path"
