"""The fused conv epilogue (miopy.solvers.conv.epilogue, kernels/common/conv_epilogue.h):
out = act(alpha * conv + bias[k]) + beta * out in the implicit-GEMM kernels' own writes, and
``functional.conv_bias_activation_forward``.

On the CPU: the fused programs the solvers build (defines, appended arguments, notes, which
solvers offer a bias), and conv_bias_activation_forward's unfused steps on OpenCL (PoCL) against
the NumPy reference (the kernels' epilogue variants compile in test_cuda_compile.py). On a GPU
(``-m gpu``): every fusing solver's kernels against the reference, with the fused path asserted.
"""

from __future__ import annotations

import numpy as np
import pytest
import support
from support import conv_problem

from miopy import backends
from miopy import functional as F
from miopy.errors import BadParm
from miopy.functional import conv_fused
from miopy.problem.activation import ActivationDesc, ActivationMode
from miopy.reference.conv_fused import conv_bias_activation_reference
from miopy.solution import Launch, Scalar, Tensor
from miopy.solvers import by_name
from miopy.solvers.conv.epilogue import Epilogue, fused_program, supports

CTX = support.fake_cuda_ctx()
FUSING = {
    "F": ("ConvIgemmFwdNhwc", "ConvWgmmaFwdNhwc"),
    "B": ("ConvIgemmBwdNhwc", "ConvWgmmaBwdNhwc"),
    "W": ("ConvIgemmWrwNhwc", "ConvWgmmaWrwNhwc"),
}
MODES = [("relu", 1.0), ("leaky_relu", 0.1), ("clipped_relu", 0.75)]


def _problem(direction: str, dtype: str = "fp16"):
    return conv_problem(dtype, (2, 16, 6, 6), (16, 16, 3, 3), direction, pads=(1, 1))


@pytest.mark.parametrize("direction", "FBW")
def test_fused_program_has_the_epilogue(direction):
    """Every launch of the solver's kernel file gets the defines and the arguments (bias or null,
    then alpha, beta, the activation's alpha); the notes name the epilogue and the bias bytes."""
    for name in FUSING[direction]:
        solver = by_name(name, "conv")
        view = _problem(direction).solver_view()
        cfg = solver.default_config(CTX, view)
        bias = direction == "F"
        epilogue = Epilogue(bias=bias, activation=ActivationMode.RELU if bias else ActivationMode.PASTHRU)
        assert supports(solver, epilogue)
        plain = solver.get_program(CTX, view, cfg)
        fused = fused_program(solver, CTX, view, cfg, epilogue)
        assert len(fused.steps) == len(plain.steps) and fused.workspace == plain.workspace
        for a, b in zip(plain.steps, fused.steps):
            assert isinstance(b, Launch) and b.spec.name == a.spec.name
            defines = dict(b.spec.defines)
            assert defines["MIOPY_EPI"] == 1 and defines["MIOPY_EPI_BIAS"] == int(bias)
            assert defines["MIOPY_EPI_ACT"] == (3 if bias else 0)
            assert b.args[: len(a.args)] == a.args
            extra = b.args[len(a.args) :]
            assert extra[0] == (Tensor("bias") if bias else None)
            assert [s.name for s in extra[1:] if isinstance(s, Scalar)] == [
                "epi_alpha",
                "epi_beta",
                "epi_act_alpha",
            ]
        assert fused.notes["epilogue"] == ("bias+relu" if bias else "scale")
        if bias:
            assert fused.notes["extra_tensors"] == {"bias": 16 * 2}
        else:
            assert "extra_tensors" not in fused.notes


def test_tf32x3_fused_program():
    """The fp32 3xTF32 solvers: the GEMM kernel and its split's sum take the epilogue, the layout
    kernels before them (NCHW input, filter repack) do not."""
    for name, direction in (("ConvIgemmFwdTf32x3", "F"), ("ConvIgemmBwdTf32x3", "B")):
        solver = by_name(name, "conv")
        view = conv_problem("fp32", (2, 16, 6, 6), (16, 16, 3, 3), direction, ("NCHW",) * 3, pads=(1, 1))
        view = view.solver_view()
        cfg = {**solver.default_config(CTX, view), "split_k": 2}
        bias = direction == "F"
        assert supports(solver, Epilogue()) and supports(solver, Epilogue(bias=True)) == bias
        fused = fused_program(solver, CTX, view, cfg, Epilogue(bias=bias))
        files = [(s.spec.file, dict(s.spec.defines).get("MIOPY_EPI")) for s in fused.steps]
        assert files.count(("igemm_fwd_tf32x3", 1)) == 2  # the GEMM and the split's sum
        assert all(epi is None for f, epi in files if f != "igemm_fwd_tf32x3")
        assert len(files) > 2  # the NCHW input's transpose (and the filter's repack) before them


def test_which_solvers_fuse():
    bias_relu = Epilogue(bias=True, activation=ActivationMode.RELU)
    for name in FUSING["F"]:
        assert supports(by_name(name, "conv"), bias_relu)
        assert not supports(by_name(name, "conv"), Epilogue(activation=ActivationMode.LOGISTIC))
    for name in FUSING["B"] + FUSING["W"]:
        assert supports(by_name(name, "conv"), Epilogue())
        assert not supports(by_name(name, "conv"), bias_relu)  # dx and dw have no bias
    for name in ("ConvDirectNaiveConvFwd", "GemmFwd1x1_0_1"):
        solver = by_name(name, "conv")
        assert solver is None or not supports(solver, Epilogue())


def _run_and_check(x, w, b, mode, act_alpha, alpha, beta, pads, tol, old=None, stride=1):
    from miopy.problem.conv import ConvDesc, ConvProblem
    from miopy.tensor import TensorDesc

    dtype = {np.float32: "fp32", np.float16: "fp16"}[x.dtype.type]
    conv = ConvDesc(pads=pads, strides=(stride, stride))
    problem = ConvProblem.create(TensorDesc(dtype, x.shape), TensorDesc(dtype, w.shape), conv, "F")
    out = None if old is None else old.copy()
    got = F.conv_bias_activation_forward(
        x, w, b, stride, pads, activation=mode, activ_alpha=act_alpha, alpha=alpha, beta=beta, out=out
    )
    if out is not None:
        assert got is out
    want = conv_bias_activation_reference(
        problem, x, w, b, ActivationDesc(mode, act_alpha), alpha, beta, None if old is None else old
    )
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("mode,act_alpha", [*MODES, ("logistic", 1.0)])
def test_conv_bias_activation_unfused_on_opencl(mode, act_alpha):
    """OpenCL has no fused epilogue: conv, bias, activation (and blend) as separate steps."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (2, 3, 6, 5)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    b = rng.uniform(-1, 1, 4).astype(np.float32)
    _run_and_check(x, w, b, mode, act_alpha, 0.5, 0.0, (1, 1), 1e-5)
    assert conv_fused.last_path["path"] == "unfused"
    old = rng.uniform(-1, 1, (2, 4, 3, 3)).astype(np.float32)
    _run_and_check(x, w, b, mode, act_alpha, 2.0, -0.5, (1, 1), 1e-5, old=old, stride=2)


def test_conv_bias_activation_arguments_named():
    x = np.ones((1, 2, 4, 4), np.float32)
    w = np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(BadParm, match="bias"):
        F.conv_bias_activation_forward(x, w, np.ones(4, np.float32))
    with pytest.raises(BadParm, match="bias"):
        F.conv_bias_activation_forward(x, w, np.ones(3, np.float16))
    with pytest.raises(BadParm, match="out"):
        F.conv_bias_activation_forward(x, w, np.ones(3, np.float32), beta=1.0)
    with pytest.raises(BadParm, match="mode"):
        F.conv_bias_activation_forward(x, w, np.ones(3, np.float32), activation="nope")


# ---- on a GPU -----------------------------------------------------------------------------------
_CUDA_WHY = backends.unavailable_reason("cuda")
needs_cuda = pytest.mark.skipif(_CUDA_WHY is not None, reason=f"cuda unavailable: {_CUDA_WHY}")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(
    "solver_name,dtype,layout",
    [
        *((name, dtype, "NHWC") for name in FUSING["F"] for dtype in ("fp16", "bf16")),
        ("ConvIgemmFwdTf32x3", "fp32", "NHWC"),
        ("ConvIgemmFwdTf32x3", "fp32", "NCHW"),
        ("ConvIgemmNchwFwd", "fp16", "NCHW"),
        ("ConvIgemmNchwFwd", "bf16", "NCHW"),
    ],
)
def test_bias_activation_fused_on_cuda(solver_name, dtype, layout):
    """y = act(alpha * conv + bias) + beta * y in the kernels' epilogue: each forward fusing
    solver on each of its write paths (support.path_configs), relu with beta 0 over a NaN y
    (never read), leaky and clipped relu with a blend."""
    from miopy.engine.candidates import make_solution
    from miopy.handle import Handle
    from miopy.reference.conv import rms_range, store_logical
    from miopy.reference.tolerance import tolerance
    from miopy.solvers.conv.epilogue import scalars
    from miopy.solvers.conv.scaled import fused_solution
    from miopy.tensor import TensorDesc

    cuda = Handle("cuda")
    p = conv_problem(dtype, (2, 128, 8, 8), (64, 128, 3, 3), "F", (layout,) * 3, pads=(1, 1))
    solver = by_name(solver_name, "conv")
    assert solver.is_applicable(cuda, p.solver_view()) is None
    rng = np.random.default_rng(31)
    configs = support.path_configs(solver, cuda, p, 1 if dtype == "bf16" else 4)
    cases = [("relu", 1.0, 1.0, 0.0), ("leaky_relu", 0.1, 0.5, 1.5), ("clipped_relu", 0.75, 2.0, -1.0)]
    for cfg in configs:
        solution = make_solution(cuda, p, solver, cfg)
        for mode, act_alpha, alpha, beta in cases:
            desc = ActivationDesc(mode, act_alpha)
            fused = fused_solution(cuda, solution, Epilogue(bias=True, activation=desc.mode))
            assert fused is not None
            bufs = support.random_buffers(p, rng)
            old = rng.uniform(-1, 1, p.y.lens).astype(np.float32)
            if beta == 0.0:
                old[...] = np.nan
            bufs["y"] = store_logical(old, p.y)
            prior = support.output_of(p, bufs).astype(np.float64)
            bias_desc = TensorDesc(dtype, (1, p.y.lens[1], 1, 1))
            bias = store_logical(rng.uniform(-1, 1, bias_desc.lens).astype(np.float32), bias_desc)
            logical = {
                r: support.from_storage(support.view(bufs[r], d), p.dtype)
                for r, d in (("x", p.x), ("w", p.w))
            }
            bias_values = support.from_storage(support.view(bias, bias_desc), p.dtype).reshape(-1)
            fused.run(cuda, {**bufs, "bias": bias}, scalars=scalars(alpha, beta, act_alpha))
            want = conv_bias_activation_reference(
                p, logical["x"], logical["w"], bias_values, desc, alpha, beta, prior
            )
            got = support.output_of(p, bufs)
            assert not np.isnan(got).any(), f"{solver_name} {cfg} {mode}: NaN in the output"
            err = rms_range(got, want)
            assert err < tolerance(p), f"{solver_name} {cfg} {mode} alpha={alpha} beta={beta}: error {err}"
            assert support.fused_ran(cuda, solution, fused.extra["epilogue"])


@pytest.mark.gpu
@needs_cuda
def test_conv_bias_activation_functional_on_cuda(monkeypatch):
    """The functional call on CuPy arrays: fp16 NHWC through a fusing solver (find limited to
    ConvIgemmFwdNhwc: fused), fp32 NCHW through whatever find picks (fused where that solver
    fuses, else the separate steps); both against the reference."""
    import cupy as cp

    from miopy.problem.conv import ConvDesc, ConvProblem
    from miopy.tensor import TensorDesc

    rng = np.random.default_rng(41)
    x = rng.uniform(-1, 1, (2, 32, 8, 8)).astype(np.float32)
    w = rng.uniform(-1, 1, (64, 32, 3, 3)).astype(np.float32)
    b = rng.uniform(-1, 1, 64).astype(np.float32)
    for dtype, npt, layout in (("fp16", np.float16, "NHWC"), ("fp32", np.float32, "NCHW")):
        xs, ws, bs = (a.astype(npt) for a in (x, w, b))
        if layout == "NHWC":
            monkeypatch.setenv("MIOPY_DEBUG_FIND_ONLY_SOLVER", "ConvIgemmFwdNhwc")
        else:
            monkeypatch.delenv("MIOPY_DEBUG_FIND_ONLY_SOLVER", raising=False)
        xd = (
            cp.asarray(xs.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) if layout == "NHWC" else cp.asarray(xs)
        )
        wd = (
            cp.asarray(ws.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) if layout == "NHWC" else cp.asarray(ws)
        )
        y = F.conv_bias_activation_forward(xd, wd, cp.asarray(bs), padding=1, activation="relu", alpha=0.5)
        solver = by_name(conv_fused.last_path["solver"], "conv")
        fuses = supports(solver, Epilogue(bias=True, activation=ActivationMode.RELU))
        assert conv_fused.last_path["path"] == ("fused" if fuses else "unfused")
        assert fuses or layout == "NCHW"
        problem = ConvProblem.create(
            TensorDesc(dtype, x.shape), TensorDesc(dtype, w.shape), ConvDesc(pads=(1, 1)), "F"
        )
        want = conv_bias_activation_reference(
            problem, xs.astype(np.float64), ws.astype(np.float64), bs, ActivationDesc("relu"), 0.5
        )
        got = cp.asnumpy(y).astype(np.float64)
        tol = 2e-2 if dtype == "fp16" else 1e-4
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
