"""Layer norm and group norm: keys, errors naming the field, large means on OpenCL (the
registry test runs every solver on the samples)."""

from __future__ import annotations

import numpy as np
import pytest

from miopy.engine.candidates import make_solution
from miopy.errors import BadParm
from miopy.problem.layernorm import GroupNormProblem, LayerNormProblem
from miopy.problem.nd import NdDesc
from miopy.reference import layernorm as ref
from miopy.reference.common import rms_range, view
from miopy.solvers import SOLVERS
from miopy.tensor import from_storage


def errors_against_reference(ocl, problem, solver, rng, offset: float) -> dict[str, float]:
    """Runs ``solver`` on OpenCL on random buffers of ``problem`` (data around ``offset``) and
    returns each output role's error against the NumPy reference (rms over the range)."""
    bufs = ref.random_buffers(problem, rng, offset=offset)
    want = ref.reference(problem, bufs)
    make_solution(ocl, problem, solver).run(ocl, bufs)
    t = problem.tensors()
    got = {role: from_storage(view(bufs[role], t[role]), t[role].dtype) for role in want}
    return {role: rms_range(got[role], w) for role, w in want.items()}


def test_keys_round_trip():
    for p in (
        LayerNormProblem(NdDesc("fp16", (4, 3, 5)), 1, 1e-5, 1, "B"),
        LayerNormProblem(NdDesc("fp32", (3, 4, 5), (40, 10, 2)), 2, 2e-6, 0, "F"),
        GroupNormProblem(NdDesc("bf16", (2, 8, 3, 3, 3)), 4, 1e-5, 1, "F"),
    ):
        assert type(p).parse(p.key()) == p


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: LayerNormProblem(NdDesc("fp32", (2, 3)), 2), "normalized_dim"),
        (lambda: LayerNormProblem(NdDesc("fp32", (2, 3)), 1, -1.0), "epsilon"),
        (lambda: LayerNormProblem(NdDesc("fp32", (2, 3)), 1, 1e-5, 2), "mode"),
        (lambda: GroupNormProblem(NdDesc("fp32", (2, 6, 3)), 4), "num_groups"),
        (lambda: GroupNormProblem(NdDesc("fp32", (2, 6)), 3), "x.lens"),
        (lambda: LayerNormProblem("x", 1), "x"),
        (lambda: LayerNormProblem(NdDesc("fp64", (2, 3)), 1), "dtype"),
        (lambda: GroupNormProblem(NdDesc("int32", (2, 4, 3)), 2), "dtype"),
    ],
)
def test_errors_name_the_field(make, field):
    with pytest.raises(BadParm, match=rf"^{field}="):
        make()


@pytest.mark.parametrize("primitive", ["layernorm", "groupnorm"])
def test_large_mean(ocl, primitive):
    x = NdDesc("fp32", (4, 8, 6, 5))
    rng = np.random.default_rng(4)
    for d in "FB":
        p = (
            LayerNormProblem(x, 2, 1e-5, 1, d)
            if primitive == "layernorm"
            else GroupNormProblem(x, 4, 1e-5, 1, d)
        )
        for solver in SOLVERS[primitive]:
            if solver.is_applicable(ocl, p) is not None:
                continue
            for role, err in errors_against_reference(ocl, p, solver, rng, 1000.0).items():
                assert err < 1e-5, f"{solver.name} {p.key()} {role}: {err}"


def _kernels(handle, problem, solver_name):
    solver = next(s for s in SOLVERS[problem.primitive] if s.name == solver_name)
    reason = solver.is_applicable(handle, problem)
    if reason is not None:
        return reason
    return [step.spec.name for step in solver.get_program(handle, problem).steps]


def test_packed_paths(ocl):
    """Channels-last group norm runs the packed kernels; packed backward with weights sums the
    weight gradients on the packed kernels; a dense layer norm whose normalised dims lie in
    another order (weights numbered otherwise) is left to the strided solver."""
    from miopy.problem.nd import channels_last_strides

    lens = (2, 8, 3, 5)
    nhwc = NdDesc("fp16", lens, channels_last_strides(lens))
    fwd = _kernels(ocl, GroupNormProblem(nhwc, 4, 1e-5, 1, "F"), "GroupNormFwdPacked")
    # OpenCL: the serial row reduction (PoCL runs work-group trees slowly; segments of 2 channels
    # are too short for the float8 one), the apply by rows of C channels with per-channel copies
    # of the group coefficients
    assert fwd == ["norm_reduce_rows_serial", "norm_finalize", "norm_coef_expand", "norm_apply_cyc_cpu"]
    bwd = _kernels(ocl, GroupNormProblem(nhwc, 4, 1e-5, 1, "B"), "GroupNormBwdPacked")
    assert bwd[-2:] == ["norm_pgrad_cyc_cpu", "norm_pgrad_finish"]
    nchw = _kernels(ocl, GroupNormProblem(NdDesc("fp32", lens), 4, 1e-5, 1, "B"), "GroupNormBwdPacked")
    assert nchw[-2:] == ["norm_pgrad_rows_serial", "norm_pgrad_finish"]
    ln = _kernels(ocl, LayerNormProblem(NdDesc("fp32", (6, 40)), 1, 1e-5, 1, "B"), "LayerNormBwdPacked")
    assert ln[-2:] == ["norm_pgrad_cols_serial", "norm_pgrad_finish"]
    odd = LayerNormProblem(NdDesc("fp32", (2, 3, 4), (12, 1, 3)), 1, 1e-5, 1, "B")
    assert "weights" in _kernels(ocl, odd, "LayerNormBwdPacked")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_groupnorm_nhwc_cpu_kernels(ocl, dtype):
    """Channels-last group norm on CPU OpenCL: the float8 reduction over interleaved groups
    (norm_reduce_split_cpu), the apply and weight gradients by rows of C channels
    (norm_apply_cyc_cpu, norm_pgrad_cyc_cpu); groups of 8, 12 and 20 channels (vector tails), 2-D
    and 3-D, with and without weights, data far from zero."""
    from miopy.problem.nd import channels_last_strides

    rng = np.random.default_rng(12)
    tol = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}[dtype]
    offset = {"fp32": 1000.0, "fp16": 100.0, "bf16": 10.0}[dtype]
    names_of = {"F": "GroupNormFwdPacked", "B": "GroupNormBwdPacked"}
    for lens, groups in (((2, 24, 5, 7), 3), ((3, 36, 4, 5), 3), ((1, 40, 3, 3, 3), 2)):
        x = NdDesc(dtype, lens, channels_last_strides(lens))
        for affine in (1, 0):
            for d in "FB":
                p = GroupNormProblem(x, groups, 1e-5, affine, d)
                names = _kernels(ocl, p, names_of[d])
                assert names[0] == "norm_reduce_split_cpu", names
                if affine:
                    assert "norm_apply_cyc_cpu" in names, names
                if affine and d == "B":
                    assert "norm_pgrad_cyc_cpu" in names, names
                solver = next(s for s in SOLVERS["groupnorm"] if s.name == names_of[d])
                for role, err in errors_against_reference(ocl, p, solver, rng, offset).items():
                    assert err < tol, f"{p.key()} {role}: {err}"


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_layernorm_rows_cpu_kernels(ocl, dtype):
    """Layer norm by rows on CPU OpenCL (ln_rows_fwd_cpu, ln_rows_bwd_cpu: float8 runs along a
    row): rows of 100, 13 and 140 elements (vector tails), with and without weights, data far
    from zero."""
    rng = np.random.default_rng(13)
    tol = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}[dtype]
    offset = {"fp32": 1000.0, "fp16": 100.0, "bf16": 10.0}[dtype]
    names_of = {"F": "LayerNormFwdRows", "B": "LayerNormBwdRows"}
    for lens, dim in (((37, 100), 1), ((9, 13), 1), ((3, 4, 5, 28), 2)):
        for affine in (1, 0):
            for d in "FB":
                p = LayerNormProblem(NdDesc(dtype, lens), dim, 1e-5, affine, d)
                names = _kernels(ocl, p, names_of[d])
                assert names[0] == ("ln_rows_fwd_cpu" if d == "F" else "ln_rows_bwd_cpu"), names
                solver = next(s for s in SOLVERS["layernorm"] if s.name == names_of[d])
                for role, err in errors_against_reference(ocl, p, solver, rng, offset).items():
                    assert err < tol, f"{p.key()} {role}: {err}"


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_groupnorm_many_chunks(ocl, layout):
    """Enough data per group and per channel that the reductions split into several chunks."""
    from miopy.problem.nd import channels_last_strides

    lens = (3, 16, 24, 24)
    x = NdDesc("fp32", lens, channels_last_strides(lens) if layout == "NHWC" else None)
    rng = np.random.default_rng(8)
    for d in "FB":
        p = GroupNormProblem(x, 4, 1e-5, 1, d)
        solver = next(s for s in SOLVERS["groupnorm"] if s.name.endswith("Packed") and s.kind == p.norm_kind)
        assert solver.is_applicable(ocl, p) is None
        for role, err in errors_against_reference(ocl, p, solver, rng, 10.0).items():
            assert err < 1e-5, f"{p.key()} {role}: {err}"


def test_opencl_apply_is_division_free(ocl):
    """On OpenCL the dense norms apply on a 2-D range whose inner dimension carries no index
    arithmetic (PoCL vectorises it): layer norm (key per row, weight per column), NCHW group norm
    (key and weight per H*W plane); channels-last group norm (groups of 2 channels) keeps the
    1-D kernel."""
    from miopy.solvers.norm.program import apply_2d_layout

    ln = _kernels(ocl, LayerNormProblem(NdDesc("fp32", (6, 40)), 1, 1e-5, 1, "F"), "LayerNormFwdPacked")
    assert ln[-1] == "norm_apply_2d"
    gn = _kernels(ocl, GroupNormProblem(NdDesc("fp16", (2, 8, 3, 5)), 4, 1e-5, 1, "B"), "GroupNormBwdPacked")
    assert "norm_apply_2d" in gn
    # layer norm of 6 rows of 40: d0 = 40, key = row, weight = j
    assert apply_2d_layout(240, 40, 6, 0, 0, 1, 40, True) == (40, 1, 6, 0, 1, 1)
    # group norm 2x8x(3x5), 4 groups, NCHW: d0 = H*W = 15, key = o // 2, weight = o % 8
    assert apply_2d_layout(240, 30, 8, 0, 0, 15, 8, True) == (15, 2, 16, 0, 1, 0)
    # batch norm NHWC, 64 channels: d0 = 64, key = j
    assert apply_2d_layout(64 * 49, 1, 64, 0, 0, 1, 1, False) == (64, 1, 49, 1, 1, 0)
    assert apply_2d_layout(240, 2, 4, 120, 4, 1, 8, True) is None


@pytest.mark.parametrize(
    "make",
    [
        lambda d: LayerNormProblem(NdDesc("fp32", (13, 3, 50)), 1, 1e-5, 1, d),
        lambda d: LayerNormProblem(NdDesc("fp16", (11, 700)), 1, 1e-5, 1, d),
        lambda d: LayerNormProblem(NdDesc("bf16", (5, 2, 33)), 2, 1e-4, 0, d),
        lambda d: GroupNormProblem(NdDesc("fp32", (5, 12, 7, 3)), 3, 1e-5, 1, d),
        lambda d: GroupNormProblem(NdDesc("fp16", (3, 8, 19)), 2, 1e-5, 1, d),
        lambda d: GroupNormProblem(NdDesc("bf16", (2, 6, 2, 3, 2)), 6, 1e-5, 0, d),
    ],
)
def test_one_pass_rows(ocl, make):
    """The one-pass row solvers (a row or group per work-group, held in registers; several rows
    per work-group, so the weight gradients add up partials of several work-groups), with and
    without weights, centred and far from zero."""
    rng = np.random.default_rng(12)
    for d in "FB":
        p = make(d)
        name = {"layernorm": "LayerNorm", "groupnorm": "GroupNorm"}[p.primitive]
        name += "FwdRows" if d == "F" else "BwdRows"
        solver = next(s for s in SOLVERS[p.primitive] if s.name == name)
        assert solver.is_applicable(ocl, p) is None, p.key()
        for offset in (0.0, 50.0):
            limit = {"FP32": 2e-6, "FP16": 2e-3, "BF16": 1.6e-2}[p.dtype.value]
            for role, err in errors_against_reference(ocl, p, solver, rng, offset).items():
                assert err < limit, f"{name} {p.key()} {role} offset {offset}: {err}"


def test_one_pass_rows_refuse(ocl):
    """Strided x, and groups too long for a work-group, are left to the other solvers."""
    h = ocl
    gbwd = next(s for s in SOLVERS["groupnorm"] if s.name == "GroupNormBwdRows")
    lbwd = next(s for s in SOLVERS["layernorm"] if s.name == "LayerNormBwdRows")
    assert "NCHW" in gbwd.is_applicable(
        h, GroupNormProblem(NdDesc("fp32", (2, 4, 3), (12, 1, 4)), 2, 1e-5, 1, "B")
    )
    assert "long" in gbwd.is_applicable(
        h, GroupNormProblem(NdDesc("fp32", (1, 2, 200, 200)), 1, 1e-5, 1, "B")
    )
    assert "row-major" in lbwd.is_applicable(
        h, LayerNormProblem(NdDesc("fp32", (3, 4), (1, 3)), 1, 1e-5, 1, "B")
    )
    assert "registers" in lbwd.is_applicable(h, LayerNormProblem(NdDesc("fp32", (2, 5000)), 1, 1e-5, 1, "B"))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_groupnorm_nhwc_one_pass_gpu_kernel_on_opencl(ocl, monkeypatch, dtype):
    """GroupNormFwdNhwc's kernel (GPU devices only; scalar access on OpenCL) on PoCL: groups of 1,
    3 and 8 channels, 2-D and 3-D, with and without weights, data centred and far from zero (the
    shifted statistics), groups longer than one pass of the work-group."""
    import miopy.solvers.norm.gn_nhwc as gn_nhwc
    from miopy.problem.nd import channels_last_strides

    monkeypatch.setattr(gn_nhwc, "cpu_kernels", lambda ctx: False)
    solver = next(s for s in SOLVERS["groupnorm"] if s.name == "GroupNormFwdNhwc")
    rng = np.random.default_rng(13)
    limit = {"fp32": 2e-6, "fp16": 2e-3, "bf16": 1.6e-2}[dtype]
    for lens, groups in (((2, 24, 5, 7), 3), ((3, 6, 20, 30), 6), ((1, 16, 3, 3, 3), 2)):
        for affine in (1, 0):
            p = GroupNormProblem(NdDesc(dtype, lens, channels_last_strides(lens)), groups, 1e-5, affine, "F")
            assert solver.is_applicable(ocl, p) is None, p.key()
            for offset in (0.0, 50.0):
                for role, err in errors_against_reference(ocl, p, solver, rng, offset).items():
                    assert err < limit, f"{p.key()} {role} offset {offset}: {err}"
    assert "channels-last" in solver.is_applicable(ocl, GroupNormProblem(NdDesc("fp32", (2, 4, 3, 3)), 2))


def test_groupnorm_nhwc_backward_shape():
    """GroupNormBwdNhwc (CUDA): ResNet's 8-channel groups of 56x56 fp16 two groups a work-group
    (32-byte pixel reads) with dy read again from L2; small groups keep dy in registers; groups
    of 3 channels and OpenCL are refused."""
    import support

    from miopy.problem.nd import channels_last_strides
    from miopy.solvers.norm.gn_nhwc_bwd import gn_nhwc_bwd_shape

    ctx = support.fake_cuda_ctx()

    def shape(lens, g, dtype="fp16", ctx=ctx):
        return gn_nhwc_bwd_shape(
            ctx, GroupNormProblem(NdDesc(dtype, lens, channels_last_strides(lens)), g, 1e-5, 1, "B")
        )

    cg, vw, local, per, gpb, reload = shape((32, 256, 56, 56), 32)
    assert (cg, vw, gpb, reload) == (8, 8, 2, 1) and per * 4 <= 64 and local * per * vw >= 56 * 56 * 16
    assert shape((4, 64, 14, 14), 32, "fp32")[-1] == 0
    assert "power of two" in shape((2, 24, 17, 17), 8)
    assert "backend" in shape((32, 256, 56, 56), 32, ctx=support.fake_cuda_ctx("opencl"))


@pytest.mark.parametrize(
    "dtype, shapes",
    [
        ("fp16", ((2, 41, 96),)),
        pytest.param("fp32", ((37, 12), (2, 41, 48)), marks=pytest.mark.slow),
        pytest.param("bf16", ((37, 24), (2, 41, 96)), marks=pytest.mark.slow),
    ],
)
def test_layernorm_warp_gpu_kernels_on_opencl(ocl, monkeypatch, dtype, shapes):
    """LayerNormFwdWarp / LayerNormBwdWarp's kernels (GPU devices only) on PoCL: teams of 8 (and
    4) work items, rows that fill a team's chunks in part (last chunks masked) and work-groups
    whose last teams have no row, several work-groups' weight-gradient partials, with and without
    weights, data centred and far from zero (fp16 by default: a cold PoCL build of each kernel
    costs seconds)."""
    import miopy.solvers.norm.ln_warp as ln_warp

    monkeypatch.setattr(ln_warp, "cpu_kernels", lambda ctx: False)
    # a work-group an SM: PoCL's few compute units' work-groups take several rows each
    monkeypatch.setattr(ln_warp, "BWD_SHAPE", {2: (256, 1), 4: (256, 1)})
    rng = np.random.default_rng(14)
    limit = {"fp32": 2e-6, "fp16": 2e-3, "bf16": 1.6e-2}[dtype]
    vec = 4 if dtype == "fp32" else 8
    for lens in shapes:
        dim = len(lens) - 1
        for affine in (1, 0):
            for d in "FB":
                p = LayerNormProblem(NdDesc(dtype, lens), dim, 1e-5, affine, d)
                name = "LayerNormFwdWarp" if d == "F" else "LayerNormBwdWarp"
                solver = next(s for s in SOLVERS["layernorm"] if s.name == name)
                assert solver.is_applicable(ocl, p) is None, p.key()
                for offset in (0.0, 50.0):
                    for role, err in errors_against_reference(ocl, p, solver, rng, offset).items():
                        assert err < limit, f"{name} {p.key()} {role} offset {offset}: {err}"
    # the column sums in local memory (LNW_ACC_SHARED, a variant benchmarks/ln_warp_sweep.py times)
    shared = type("AccShared", (ln_warp.LayerNormBwdWarp,), {"variant": {"defines": {"LNW_ACC_SHARED": 1}}})()
    p = LayerNormProblem(NdDesc(dtype, (2, 41, 12 * vec)), 2, 1e-5, 1, "B")
    for role, err in errors_against_reference(ocl, p, shared, rng, 50.0).items():
        assert err < limit, f"LNW_ACC_SHARED {p.key()} {role}: {err}"
    odd = LayerNormProblem(NdDesc(dtype, (4, vec + 1)), 1, 1e-5, 1, "F")
    assert "multiple" in ln_warp.LayerNormFwdWarp().is_applicable(ocl, odd)


def test_layernorm_warp_shape():
    """BERT rows: fp16 1024 and fp32 768 a warp each (4 / 6 chunks a work item); backward refuses
    rows whose column sums would not fit the registers (fp32 1024: LayerNormBwdRows was faster);
    CPU devices keep the *_cpu kernels."""
    import support

    from miopy.solvers.norm.ln_warp import LayerNormBwdWarp, LayerNormFwdWarp, lnw_shape

    assert lnw_shape(1024, 8) == (32, 4) and lnw_shape(768, 4) == (32, 6) and lnw_shape(64, 8) == (4, 2)
    ctx = support.fake_cuda_ctx()
    assert (
        LayerNormBwdWarp().is_applicable(ctx, LayerNormProblem(NdDesc("fp16", (64, 1024)), 1, 1e-5, 1, "B"))
        is None
    )
    for dtype, length in (("fp16", 2048), ("fp32", 1024)):
        assert "registers" in LayerNormBwdWarp().is_applicable(
            ctx, LayerNormProblem(NdDesc(dtype, (64, length)), 1, 1e-5, 1, "B")
        )
    assert (
        LayerNormFwdWarp().is_applicable(ctx, LayerNormProblem(NdDesc("fp16", (64, 2048)), 1, 1e-5, 1, "F"))
        is None
    )
    assert "CPU" in LayerNormFwdWarp().is_applicable(
        support.fake_cuda_ctx("opencl"), LayerNormProblem(NdDesc("fp32", (4, 64)), 1, 1e-5, 1, "F")
    )


@pytest.mark.slow  # a variant off by default: ~8 s of cold PoCL builds
def test_groupnorm_batched_loads_on_opencl(ocl, monkeypatch):
    """GN_BATCH 1 (a row's loads issued before any is used; a variant benchmarks/gn_sweep.py
    times): GroupNormFwdRows / GroupNormBwdRows over rows longer than a work-group's pass (masked
    last vectors) and GroupNormFwdNhwc, against the reference, data far from zero."""
    import miopy.solvers.norm.gn_nhwc as gn_nhwc
    from miopy.problem.nd import channels_last_strides

    monkeypatch.setattr(gn_nhwc, "cpu_kernels", lambda ctx: False)
    rng = np.random.default_rng(15)
    batch = {"variant": {"defines": {"GN_BATCH": 1}}}
    cases = [
        (GroupNormProblem(NdDesc("fp16", (2, 8, 20, 20)), 2, 1e-5, 1, d), name)
        for d, name in (("F", "GroupNormFwdRows"), ("B", "GroupNormBwdRows"))
    ]
    lens = (3, 6, 20, 30)
    cases.append((GroupNormProblem(NdDesc("fp16", lens, channels_last_strides(lens)), 6), "GroupNormFwdNhwc"))
    for p, name in cases:
        base = next(s for s in SOLVERS["groupnorm"] if s.name == name)
        solver = type("Batched" + name, (type(base),), batch)()
        assert solver.is_applicable(ocl, p) is None, p.key()
        for role, err in errors_against_reference(ocl, p, solver, rng, 50.0).items():
            assert err < 2e-3, f"GN_BATCH {name} {p.key()} {role}: {err}"
