"""The norm kernels on a CUDA GPU against the NumPy reference: batch norm's vectorised rows /
columns kernels at ResNet-like shapes (several chunks per key), large means, base pointers that
are not 16-byte aligned (which must fall back to scalar access); layer norm at BERT-like rows and
group norm NCHW and NHWC, forward and backward with weight gradients."""

from __future__ import annotations

import numpy as np
import pytest

from miopy import backends
from miopy.engine.candidates import make_solution
from miopy.problem.bnorm import BatchNormProblem
from miopy.reference import bnorm as ref
from miopy.reference.common import rms_range, view
from miopy.solvers import SOLVERS
from miopy.tensor import TensorDesc, from_storage

_WHY = backends.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]
TOL = {"FP32": 2e-6, "FP16": 8.2e-3, "BF16": 6.6e-2}


# A mean is formed in fp32 as shift + sum(x - shift) / n with the shift one element of the data:
# its absolute error is a few ulp of the data's magnitude, not of the mean's own (about zero for
# centred data, where rms_range's relative measure would demand more than fp32 holds). So its
# error is measured against the larger of its range and max |x|.
MEAN_ROLES = ("saved_mean", "running_mean")
# persistent-grid solvers a channels-last problem adds, by pass (solvers/norm/bn_grid.py)
GRID = {"T": 1, "I": 0, "B": 2}


def _mean_err(got, want, bufs, descs) -> float:
    x = np.asarray(from_storage(view(bufs["x"], descs["x"]), descs["x"].dtype), np.float64)
    scale = max(float(np.max(np.abs(x))), float(np.max(np.abs(want))))
    diff = np.asarray(got, np.float64).ravel() - np.asarray(want, np.float64).ravel()
    return float(np.linalg.norm(diff) / (np.sqrt(diff.size) * scale))


@pytest.fixture(scope="module")
def cuda():
    from miopy.handle import Handle

    return Handle("cuda")


def _check(handle, problem, rng, offset=0.0, tol=None, misalign=False):
    ran = 0
    for solver in SOLVERS["bnorm"]:
        if solver.is_applicable(handle, problem) is not None:
            continue
        run_solver(handle, problem, solver, rng, offset, tol, misalign)
        ran += 1
    return ran


def run_solver(handle, problem, solver, rng, offset=0.0, tol=None, misalign=False) -> None:
    """One batch norm solver on random buffers (offset: the data's mean) against the reference;
    ``misalign`` passes CuPy arrays one element past an allocation's start."""
    bufs = ref.random_buffers(problem, rng, offset)
    want = ref.reference(problem, bufs)
    sol = make_solution(handle, problem, solver)
    if misalign:
        import cupy as cp

        dev = {}
        for role, host in bufs.items():
            raw = cp.zeros(host.size + 1, dtype=host.dtype)
            raw[1:] = cp.asarray(host)
            dev[role] = raw[1:]
        sol.run(handle, dev)
        bufs = {r: cp.asnumpy(a) for r, a in dev.items()}
    else:
        sol.run(handle, bufs)
    t = problem.tensors()
    for role, w in want.items():
        got = from_storage(view(bufs[role], t[role]), t[role].dtype)
        limit = tol or TOL[t[role].dtype.value]
        err = _mean_err(got, w, bufs, t) if role in MEAN_ROLES else rms_range(got, w)
        assert err < limit, f"{solver.name} {problem.key()} {role}: {err}"


@pytest.mark.parametrize(
    "dtype, pdtype, layout",
    [("fp16", "fp32", "NHWC"), ("fp32", "fp32", "NCHW"), ("bf16", "fp32", "NHWC"), ("fp16", "fp16", "NCHW")],
)
@pytest.mark.parametrize("direction", ["T", "I", "B"])
def test_resnet_like_shapes(cuda, dtype, pdtype, layout, direction):
    rng = np.random.default_rng(5)
    x = TensorDesc(dtype, (8, 64, 28, 28), layout=layout)
    p = BatchNormProblem(
        "SPATIAL", direction, x, param_dtype=pdtype, save=direction != "I", running=direction == "T"
    )
    # also the one-kernel BnFwdTrainingFused / BnFwdInferenceFlat / BnBwdFused, and channels-last
    # training / backward the persistent-grid BnFwdTrainingGrid / BnBwdGrid / BnBwdGridL2
    assert _check(cuda, p, rng) == 3 + (GRID[direction] if layout == "NHWC" else 0)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_large_mean_and_per_activation(cuda, layout):
    rng = np.random.default_rng(9)
    x = TensorDesc("fp32", (16, 32, 14, 14), layout=layout)
    for d in ("T", "B"):
        p = BatchNormProblem("SPATIAL", d, x, save=d == "T", running=d == "T")
        # packed, strided, fused (and the persistent grid channels-last)
        assert _check(cuda, p, rng, offset=1000.0, tol=1e-5) == 3 + (GRID[d] if layout == "NHWC" else 0)
        q = BatchNormProblem(
            "PER_ACTIVATION", d, TensorDesc("fp16", (64, 16, 7, 9), layout=layout), save=False
        )
        assert _check(cuda, q, rng) == 2


def test_misaligned_views_fall_back(cuda):
    rng = np.random.default_rng(2)
    for layout in ("NCHW", "NHWC"):
        x = TensorDesc("fp16", (4, 32, 8, 8), layout=layout)
        for d in ("T", "I", "B"):
            p = BatchNormProblem("SPATIAL", d, x, save=False, running=False)
            assert _check(cuda, p, rng, misalign=True) == 3 + (GRID[d] if layout == "NHWC" else 0)


# (lens, layout, dtype): one-kernel batch norm plans of every kind: channels-last in clusters of 8
# and of 2 and without one, NCHW rows by teams of 32 and 64 (7x7 planes, scalar access), of the
# whole work-group (16-byte vectors) and by clusters, backward with dy held and read again
FUSED_CASES = [
    ((32, 256, 7, 7), "NHWC", "fp16"),
    ((8, 2048, 7, 7), "NHWC", "bf16"),
    ((4, 40, 5, 5), "NHWC", "fp32"),
    ((32, 512, 7, 7), "NCHW", "fp32"),
    ((8, 96, 14, 14), "NCHW", "fp16"),
    ((16, 8, 56, 56), "NCHW", "fp32"),
    ((24, 32, 28, 28), "NHWC", "fp32"),  # backward reads dy again (x alone fits the registers)
]


@pytest.mark.parametrize("lens, layout, dtype", FUSED_CASES)
def test_bn_fused_one_kernel(cuda, lens, layout, dtype):
    from miopy.solvers.norm.bn_fused import BnBwdFused, BnFwdInferenceFlat, BnFwdTrainingFused, fused_plan

    rng = np.random.default_rng(11)
    x = TensorDesc(dtype, lens, layout=layout)
    for d, solver in (("T", BnFwdTrainingFused()), ("B", BnBwdFused())):
        for save in (True, False):
            p = BatchNormProblem("SPATIAL", d, x, save=save, running=save and d == "T", exp_avg_factor=0.3)
            plan = fused_plan(cuda, p, solver.kind)
            assert not isinstance(plan, str), f"{p.key()}: {plan}"
            assert _check(cuda, p, rng) >= 2
        assert _check(cuda, p, rng, offset=300.0, tol=1e-5 if dtype == "fp32" else None) >= 2
    q = BatchNormProblem("SPATIAL", "I", x)
    assert BnFwdInferenceFlat().is_applicable(cuda, q) is None
    assert _check(cuda, q, rng) == 3


def _check_ln(handle, problem, rng, offset=0.0):
    """Every applicable layer / group norm solver against the reference (rms_range as the
    driver's thresholds; weight gradients also allow their sum's rounding)."""
    from miopy.reference import layernorm as lref

    ran = 0
    for solver in SOLVERS[problem.primitive]:
        if solver.is_applicable(handle, problem) is not None:
            continue
        bufs = lref.random_buffers(problem, rng, offset)
        want = lref.reference(problem, bufs)
        make_solution(handle, problem, solver).run(handle, bufs)
        t = problem.tensors()
        for role, w in want.items():
            got = from_storage(view(bufs[role], t[role]), t[role].dtype)
            terms = problem.x.element_count // problem.weight_desc.element_count
            limit = TOL[t[role].dtype.value]
            if role in ("dweight", "dbias"):
                limit = max(limit, 2 * 2.0**-24 * terms**0.5)
            err = rms_range(got, w)
            assert err < limit, f"{solver.name} {problem.key()} {role}: {err}"
        ran += 1
    return ran


@pytest.mark.parametrize("dtype", ["fp16", "fp32", "bf16"])
@pytest.mark.parametrize("direction", ["F", "B"])
def test_layernorm_bert_rows(cuda, dtype, direction):
    from miopy.problem.layernorm import LayerNormProblem
    from miopy.problem.nd import NdDesc

    rng = np.random.default_rng(3)
    p = LayerNormProblem(NdDesc(dtype, (4, 128, 768)), 2, 1e-5, 1, direction)
    # packed, one-pass rows (LayerNormFwdRows / LayerNormBwdRows), a row a team
    # (LayerNormFwdWarp / LayerNormBwdWarp) and strided
    assert _check_ln(cuda, p, rng) == 4
    # several rows per work-group and many work-groups' weight-gradient partials; 1000 wide
    # (vectors in part of the last slice), far from zero
    for lens in ((2048, 1024), (300, 1000)):
        q = LayerNormProblem(NdDesc(dtype, lens), 1, 1e-5, 1, direction)
        # fp32 backward rows of 1000+ are left to LayerNormBwdRows (ln_warp.BWD_REGS_MOST)
        assert _check_ln(cuda, q, rng, offset=30.0) == (3 if dtype == "fp32" and direction == "B" else 4)
    # without weights; rows of 40 (a team of 8 with masked chunks, fp16) and few rows
    for lens in ((5, 40), (1000, 768)):
        q = LayerNormProblem(NdDesc(dtype, lens), 1, 1e-5, 0, direction)
        assert _check_ln(cuda, q, rng, offset=5.0) >= 3


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("direction", ["F", "B"])
def test_groupnorm_both_layouts(cuda, dtype, layout, direction):
    from miopy.problem.layernorm import GroupNormProblem
    from miopy.problem.nd import NdDesc, channels_last_strides

    rng = np.random.default_rng(4)
    lens = (4, 64, 14, 14)
    strides = channels_last_strides(lens) if layout == "NHWC" else None
    p = GroupNormProblem(NdDesc(dtype, lens, strides), 32, 1e-5, 1, direction)
    # NCHW also takes the one-pass GroupNorm*Rows, NHWC GroupNormFwdNhwc / GroupNormBwdNhwc
    count = 3
    assert _check_ln(cuda, p, rng) == count
    assert _check_ln(cuda, p, rng, offset=100.0) == count


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", ["F", "B"])
def test_groupnorm_resnet_groups(cuda, dtype, direction):
    """Groups of 8 channels of 56x56 (25088 elements per work-group, four 16-byte vectors per
    work item), with and without weights, and weights of an odd channel count per group."""
    from miopy.problem.layernorm import GroupNormProblem
    from miopy.problem.nd import NdDesc

    rng = np.random.default_rng(6)
    for lens, g, mode in (((2, 64, 56, 56), 8, 1), ((3, 24, 56, 56), 8, 0), ((2, 21, 16, 16), 7, 1)):
        p = GroupNormProblem(NdDesc(dtype, lens), g, 1e-5, mode, direction)
        rows = next(s for s in SOLVERS["groupnorm"] if s.name.endswith("Rows") and s.kind == p.norm_kind)
        assert rows.is_applicable(cuda, p) is None, p.key()
        assert _check_ln(cuda, p, rng) >= 2


@pytest.mark.parametrize("dtype", ["fp16", "fp32", "bf16"])
def test_groupnorm_nhwc_one_pass(cuda, dtype):
    """GroupNormFwdNhwc at ResNet-like channels-last shapes (8 channels a group: one or two 16-byte
    vectors a pixel; 3 channels: scalar access), with and without weights, data far from zero."""
    from miopy.problem.layernorm import GroupNormProblem
    from miopy.problem.nd import NdDesc, channels_last_strides

    rng = np.random.default_rng(8)
    one = next(s for s in SOLVERS["groupnorm"] if s.name == "GroupNormFwdNhwc")
    for lens, g, mode in (((2, 256, 56, 56), 32, 1), ((3, 64, 28, 28), 8, 0), ((2, 24, 17, 17), 8, 1)):
        p = GroupNormProblem(NdDesc(dtype, lens, channels_last_strides(lens)), g, 1e-5, mode, "F")
        assert one.is_applicable(cuda, p) is None, p.key()
        assert _check_ln(cuda, p, rng) >= 2
        assert _check_ln(cuda, p, rng, offset=100.0) >= 2


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_groupnorm_nhwc_backward_one_pass(cuda, dtype):
    """GroupNormBwdNhwc: dy reloaded from L2 (ResNet's 8-channel groups of 56x56, two groups a
    work-group for fp16) and held in registers (small groups, 16 groups a work-group), with and
    without weights, data far from zero."""
    from miopy.problem.layernorm import GroupNormProblem
    from miopy.problem.nd import NdDesc, channels_last_strides
    from miopy.solvers.norm.gn_nhwc_bwd import gn_nhwc_bwd_shape

    rng = np.random.default_rng(12)
    for lens, g, mode, reload in (((2, 256, 56, 56), 32, 1, 1), ((3, 64, 14, 14), 32, 0, 0)):
        p = GroupNormProblem(NdDesc(dtype, lens, channels_last_strides(lens)), g, 1e-5, mode, "B")
        shape = gn_nhwc_bwd_shape(cuda, p)
        assert not isinstance(shape, str) and shape[-1] == reload, shape
        assert _check_ln(cuda, p, rng) >= 2
        assert _check_ln(cuda, p, rng, offset=100.0) >= 2
