"""Batch norm on OpenCL against the float64 reference: random shapes, layouts and data types,
large means (no catastrophic cancellation), and the problem's keys, errors and driver line."""

from __future__ import annotations

import numpy as np
import pytest

from miopy.driver.bnorm import problem_from_args
from miopy.engine.candidates import make_solution
from miopy.errors import BadParm
from miopy.problem.bnorm import BatchNormProblem
from miopy.reference import bnorm as ref
from miopy.reference.common import rms_range, view
from miopy.solvers import SOLVERS
from miopy.tensor import TensorDesc, from_storage

TOL = {"FP32": 2e-6, "FP16": 8.2e-3, "BF16": 6.6e-2}


def _run_all(handle, problem, rng, offset=0.0, tol=None) -> int:
    """Every applicable solver; returns how many ran."""
    ran = 0
    for solver in SOLVERS["bnorm"]:
        if solver.is_applicable(handle, problem) is not None:
            continue
        bufs = ref.random_buffers(problem, rng, offset)
        want = ref.reference(problem, bufs)
        make_solution(handle, problem, solver).run(handle, bufs)
        t = problem.tensors()
        for role, w in want.items():
            got = from_storage(view(bufs[role], t[role]), t[role].dtype)
            err = rms_range(got, w)
            limit = tol or TOL[t[role].dtype.value if role != "y" and role != "dx" else problem.dtype.value]
            assert err < limit, f"{solver.name} {problem.key()} {role}: {err}"
        ran += 1
    return ran


@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "STRIDED"])
def test_large_mean_does_not_cancel(ocl, layout):
    """x = 1000 + U(-1, 1) in fp32: E[x^2] - E[x]^2 would lose the variance to rounding."""
    lens = (4, 6, 5, 7)
    x = (
        TensorDesc("fp32", lens, strides=(400, 60, 10, 1))
        if layout == "STRIDED"
        else TensorDesc("fp32", lens, layout=layout)
    )
    rng = np.random.default_rng(3)
    for direction in ("T", "B"):
        p = BatchNormProblem("SPATIAL", direction, x, save=direction == "T", running=direction == "T")
        assert _run_all(ocl, p, rng, offset=1000.0, tol=1e-5) >= 1


def test_long_reductions_stay_accurate(ocl):
    """25088 elements per channel (ResNet's 56x56 at batch 8): OpenCL's serial row reduction sums
    blocks with compensation; a plain running sum of the shifted values put the saved mean off by
    1.5e-5 (rms_range), over the fp32 threshold."""
    x = TensorDesc("fp32", (8, 4, 56, 56))
    rng = np.random.default_rng(5)
    for direction in ("T", "B"):
        p = BatchNormProblem("SPATIAL", direction, x, save=direction == "T", running=direction == "T")
        assert _run_all(ocl, p, rng, tol=6e-6) == 2


def test_random_shapes_layouts_dtypes(ocl):
    rng = np.random.default_rng(7)
    pairs = [("fp32", "fp32"), ("fp16", "fp32"), ("bf16", "fp32")]
    for i in range(6):
        dt, pdt = pairs[i % 3]
        three_d = i % 2 == 1
        lens = [int(v) for v in rng.integers(1, 6, 5 if three_d else 4)]
        lens[1] = int(rng.integers(1, 20))
        lens[0] = max(2, lens[0])
        layout = ("NCDHW", "NDHWC")[i % 2 if three_d else 0] if three_d else ("NCHW", "NHWC")[(i // 2) % 2]
        x = TensorDesc(dt, lens, layout=layout)
        mode = ("SPATIAL", "PER_ACTIVATION")[(i // 3) % 2]
        factor = float(rng.uniform(0.1, 1.0))
        for direction in ("T", "I", "B"):
            save = direction != "I" and bool(rng.integers(0, 2))
            p = BatchNormProblem(
                mode,
                direction,
                x,
                param_dtype=pdt,
                save=save,
                running=direction == "T",
                exp_avg_factor=factor,
            )
            assert _run_all(ocl, p, rng) == 2  # packed and strided


def test_key_round_trip_and_driver_line():
    x = TensorDesc("fp16", (2, 8, 3, 4), layout="NHWC")
    p = BatchNormProblem("SPATIAL", "T", x, param_dtype="fp32", save=True, running=True, epsilon=1e-3)
    assert BatchNormProblem.parse(p.key()) == p
    assert problem_from_args(p.driver_args()) == p
    q = BatchNormProblem("PER_ACTIVATION", "B", TensorDesc("fp32", (2, 3, 2, 4, 5)), epsilon=2e-5)
    assert BatchNormProblem.parse(q.key()) == q
    assert problem_from_args(q.driver_args()) == q
    strided = TensorDesc("fp32", (2, 3, 4, 5), strides=(100, 30, 6, 1))
    r = BatchNormProblem("SPATIAL", "I", strided, exp_avg_factor=0.5)
    assert BatchNormProblem.parse(r.key()) == r


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"mode": "bogus"}, "mode"),
        ({"direction": "sideways"}, "direction"),
        ({"param_dtype": "bf16"}, "param_dtype"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"exp_avg_factor": 1.5}, "exp_avg_factor"),
        ({"direction": "I", "running": True}, "running"),
        ({"direction": "I", "save": True}, "save"),
        ({"out": TensorDesc("fp16", (2, 3, 4, 4))}, "y.lens"),
    ],
)
def test_errors_name_the_field(kwargs, field):
    args = {"mode": "SPATIAL", "direction": "T", "x": TensorDesc("fp16", (2, 3, 4, 5)), **kwargs}
    with pytest.raises(BadParm, match=rf"^{field}="):
        BatchNormProblem(**args)


def test_reference_matches_loops():
    """The vectorised reference against a loop over channels (spatial, training)."""
    rng = np.random.default_rng(1)
    x = rng.normal(3.0, 2.0, (3, 4, 2, 5))
    p = BatchNormProblem("SPATIAL", "T", TensorDesc("fp32", x.shape), save=True)
    scale, bias = rng.normal(size=(1, 4, 1, 1)), rng.normal(size=(1, 4, 1, 1))
    out = ref.bnorm_reference(p, {"x": x, "scale": scale, "bias": bias})
    for c in range(4):
        v = x[:, c]
        m, var = v.mean(), v.var()
        want = scale[0, c, 0, 0] * (v - m) / np.sqrt(var + p.epsilon) + bias[0, c, 0, 0]
        np.testing.assert_allclose(out["y"][:, c], want, rtol=1e-12)
        np.testing.assert_allclose(out["saved_inv_var"][0, c, 0, 0], 1 / np.sqrt(var + p.epsilon))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_cpu_kernels(ocl, dtype):
    """PoCL's float8 kernels (bn_reduce_cols_cpu: channels-last sums by tiles of 64 / 32 channels,
    a partial last tile; bn_apply_cpu: rows of a multiple of 8 elements, per-channel or per-row
    coefficients) against the reference, training, inference and backward."""
    from miopy.solvers.norm.bn_program import bn_packed_program

    rng = np.random.default_rng(11)
    cases = [
        ("NHWC", (3, 8, 5, 3)),
        ("NHWC", (2, 72, 3, 5)),
        ("NHWC", (2, 136, 2, 3)),
        ("NCHW", (3, 5, 4, 6)),
    ]
    cases += [("NCHW", (2, 3, 5, 7))]  # rows of 35: the 2-D apply
    for (layout, lens), mode in [(c, "SPATIAL") for c in cases] + [
        (("NCHW", (5, 4, 2, 4)), "PER_ACTIVATION")
    ]:
        x = TensorDesc(dtype, lens, layout=layout)
        for direction in ("T", "I", "B"):
            save = direction != "I" and bool(rng.integers(0, 2))
            p = BatchNormProblem(mode, direction, x, save=save, running=direction == "T")
            names = {launch.spec.name for launch in bn_packed_program(ocl, p).steps}
            if lens[1] % 8 == 0 and layout == "NHWC":
                assert ("bn_reduce_cols_cpu" in names) == (direction != "I"), names
                assert "bn_apply_cpu" in names, names
            assert _run_all(ocl, p, rng) == 2


def test_fused_plans():
    """The one-kernel batch norm (CUDA): channels-last in clusters, NCHW by teams or clusters;
    keys too long for a cluster's registers, OpenCL and per-activation mode are refused, and
    without clusters (sm_80) only plans of single work-groups are made."""
    import support

    from miopy.solvers.norm.bn_fused import fused_plan

    ctx = support.fake_cuda_ctx()

    def plan(lens, layout, dtype="fp16", d="T", mode="SPATIAL", ctx=ctx):
        p = BatchNormProblem(mode, d, TensorDesc(dtype, lens, layout=layout), save=True, running=d == "T")
        return fused_plan(ctx, p, "bn_train" if d == "T" else "bn_bwd")

    cols = plan((32, 256, 14, 14), "NHWC", d="B")
    assert (cols.kernel, cols.vw, cols.cluster) == ("bn_fused_cols", 8, 8)
    assert cols.per * 2 * 4 <= 64 and cols.tx * cols.vw * 2 >= 32  # registers; 32-byte rows
    rows = plan((32, 512, 7, 7), "NCHW", "fp32")
    assert (rows.kernel, rows.vw, rows.cluster) == ("bn_fused_rows", 1, 1) and rows.team < rows.local
    big = plan((32, 64, 56, 56), "NCHW", "fp32")
    assert big.cluster > 1 and big.team == big.local and big.vw == 4
    assert "registers" in plan((32, 64, 112, 112), "NHWC")
    assert not cols.reload and plan((32, 128, 28, 28), "NHWC", d="B").reload  # x alone fits
    assert plan((24, 32, 28, 28), "NHWC", "fp32", d="B").reload
    assert "backend" in plan((32, 256, 14, 14), "NHWC", ctx=support.fake_cuda_ctx("opencl"))
    assert "per-activation" in plan((32, 256, 14, 14), "NHWC", mode="PER_ACTIVATION")
    old = plan((32, 64, 56, 56), "NCHW", "fp32", ctx=support.fake_cuda_ctx(arch="sm_80"))
    assert isinstance(old, str) or old.cluster == 1
