"""Softmax and reductions: keys, errors naming the field, reference properties, solvers on PoCL on
random shapes / layouts / dtypes, large inputs (softmax) and NaN rules (reductions)."""

from __future__ import annotations

import numpy as np
import pytest
from misc_support import random_buffers, run_all

from miopy.errors import BadParm
from miopy.problem.reduce import ReduceProblem
from miopy.problem.softmax import SoftmaxProblem
from miopy.reference import reduce as rref
from miopy.reference import softmax as sref
from miopy.reference.common import rms_range, store_logical, view
from miopy.reference.tolerance import BASE, reduce_tolerance
from miopy.tensor import DataType, TensorDesc, from_storage


def test_keys_round_trip():
    for p in sref.samples():
        assert SoftmaxProblem.parse(p.key()) == p
    for p in rref.samples():
        assert ReduceProblem.parse(p.key()) == p


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda d: SoftmaxProblem("F", 3, 1, x=d, y=d), "algorithm"),
        (lambda d: SoftmaxProblem("F", 1, "spatial", x=d, y=d), "mode"),
        (lambda d: SoftmaxProblem("F", x=d, y=TensorDesc("fp32", (2, 3, 4, 6))), "y.lens"),
        (lambda d: SoftmaxProblem("B", y=d, dy=d), "dx"),
        (lambda d: ReduceProblem("add", d, (4,)), "dims"),
        (lambda d: ReduceProblem("add", d, (1,), indices=True), "indices"),
        (lambda d: ReduceProblem("sum2", d, (1,)), "op"),
        (lambda d: ReduceProblem("max", d, (), True), "dims"),
    ],
)
def test_errors_name_the_field(make, field):
    with pytest.raises(BadParm, match=field.replace(".", r"\.")):
        make(TensorDesc("fp32", (2, 3, 4, 5)))


def test_softmax_reference_sums_to_one_and_log_matches():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4, 5)) * 50
    d = TensorDesc("fp32", x.shape)
    for mode, axes in (("instance", (1, 2, 3)), ("channel", (1,))):
        y = sref.softmax_reference(SoftmaxProblem.create(d, "F", "accurate", mode), {"x": x})
        np.testing.assert_allclose(y.sum(axis=axes), 1.0)
        ly = sref.softmax_reference(SoftmaxProblem.create(d, "F", "log", mode), {"x": x})
        np.testing.assert_allclose(np.exp(ly), y, atol=1e-12)


def _softmax_problem(rng) -> SoftmaxProblem:
    dtype = str(rng.choice(["fp32", "fp16", "bf16"]))
    lens = (
        int(rng.integers(1, 4)),
        int(rng.choice([1, 3, 16, 130])),
        int(rng.integers(1, 5)),
        int(rng.integers(1, 6)),
    )
    layout = str(rng.choice(["NCHW", "NHWC"]))
    return SoftmaxProblem.create(
        TensorDesc(dtype, lens, layout=layout),
        str(rng.choice(["F", "B"])),
        int(rng.integers(0, 3)),
        int(rng.integers(0, 2)),
        float(rng.uniform(0.5, 2)),
        float(rng.choice([0.0, 0.5])),
    )


def test_softmax_random_problems(ocl):
    rng = np.random.default_rng(7)
    for _ in range(6):
        p = _softmax_problem(rng)
        run_all(ocl, p, sref, BASE[p.dtype] * 2, rng=rng)


def test_softmax_is_safe_for_large_inputs(ocl):
    d = TensorDesc("fp32", (2, 40, 3, 3))
    for algo in ("fast", "accurate", "log"):
        p = SoftmaxProblem.create(d, "F", algo, "channel")
        bufs = random_buffers(p, np.random.default_rng(1), -1e4, 1e4)
        run_all(ocl, p, sref, 1e-5, buffers=bufs)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_softmax_cols_cpu_kernels(ocl, dtype):
    """PoCL's channel-mode kernels over NCHW planes (softmax_*_cols_cpu: runs of up to 8 blocks of
    8 positions in float8, the positions past the last block one at a time): 81 positions (runs of
    8 and 2 blocks and a tail of 1), 6 (a tail only), both directions, every algorithm, beta; 70
    channels of 8 blocks: more exps than the forward keeps, so computed again."""
    rng = np.random.default_rng(31)
    for i, lens in enumerate([(2, 5, 9, 9), (1, 3, 2, 3), (1, 70, 8, 8)]):
        d = TensorDesc(dtype, lens)
        for direction in ("F", "B"):
            for algo in ("accurate", "log"):
                beta = 0.5 if (i + len(algo)) % 2 else 0.0
                p = SoftmaxProblem.create(d, direction, algo, "channel", 1.5, beta)
                ran = run_all(ocl, p, sref, BASE[p.dtype] * 2, rng=rng, only=("SoftmaxCols",))
                assert ran == ["SoftmaxCols"]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_softmax_rows_cpu_kernels(ocl, dtype):
    """PoCL's rows kernels (softmax_*_rows_cpu: float8 runs and a scalar tail, y holding the exps
    between passes, or a private row of them): every algorithm, both directions, with and without
    beta, rows of 5, 16, 130 and 1032 elements in channel and instance mode, and a large range."""
    rng = np.random.default_rng(12)
    for i, (lens, mode) in enumerate(
        [((7, 5, 1, 1), "channel"), ((3, 16, 1, 1), "channel"), ((2, 13, 2, 5), "instance")]
        + [((2, 1032, 1, 1), "channel")]  # longer than the forward's private row of exps
    ):
        d = TensorDesc(dtype, lens)
        for direction in ("F", "B"):
            for algo in ("fast", "accurate", "log"):
                beta = 0.5 if (i + len(algo)) % 2 else 0.0
                p = SoftmaxProblem.create(d, direction, algo, mode, 1.5, beta)
                ran = run_all(ocl, p, sref, BASE[p.dtype] * 2, rng=rng)
                assert "SoftmaxRows" in ran
    p = SoftmaxProblem.create(TensorDesc(dtype, (3, 37, 1, 1)), "F", "accurate", "channel")
    bufs = random_buffers(p, rng, -1e3, 1e3)
    run_all(ocl, p, sref, BASE[p.dtype] * 2, buffers=bufs)
    masked = np.where(rng.random((3, 37, 1, 1)) < 0.3, -np.inf, rng.uniform(-5, 5, (3, 37, 1, 1)))
    bufs = random_buffers(p, rng)
    bufs["x"] = store_logical(masked, p.tensors()["x"])  # attention masks: exp(-inf) is 0
    want = sref.reference(p, {r: b.copy() for r, b in bufs.items()})["y"]
    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name

    make_solution(ocl, p, by_name("SoftmaxRows", "softmax")).run(ocl, bufs)
    got = from_storage(view(bufs["y"], p.tensors()["y"]), p.dtype)
    assert rms_range(got, want) < BASE[p.dtype] * 2 and (got[np.isneginf(masked)] == 0).all()


def _reduce_problem(rng) -> ReduceProblem:
    dtype = str(rng.choice(["fp32", "fp16", "bf16", "fp64"]))
    lens = tuple(int(v) for v in rng.integers(1, 6, 4))
    op = str(rng.choice(["add", "min", "max", "amax", "avg", "norm1", "norm2"]))
    dims = tuple(int(a) for a in np.flatnonzero(rng.random(4) < 0.5)) or (int(rng.integers(0, 4)),)
    idx = op in ("min", "max", "amax") and bool(rng.integers(0, 2))
    x = TensorDesc(dtype, lens, layout=str(rng.choice(["NCHW", "NHWC"])))
    return ReduceProblem(
        op, x, dims, idx, bool(rng.integers(0, 2)), 1.0, 0.0 if idx else float(rng.choice([0, 0.5]))
    )


def test_reduce_random_problems(ocl):
    rng = np.random.default_rng(11)
    for _ in range(8):
        p = _reduce_problem(rng)
        run_all(ocl, p, rref, reduce_tolerance(p), rng=rng)


@pytest.mark.parametrize("nanprop", [False, True])
def test_reduce_nan_rules(ocl, nanprop):
    x = TensorDesc("fp32", (2, 3, 4, 5))
    values = np.random.default_rng(3).uniform(-1, 1, x.lens)
    values[0, 1, 2, 3] = np.nan
    values[1, 0, 0, 1] = np.nan
    values[1, 0, 3, 4] = np.nan
    for op in ("max", "min", "amax"):
        p = ReduceProblem(op, x, (2, 3), True, nanprop)
        bufs = {"x": store_logical(values, x), "y": store_logical(np.full(p.y.lens, np.nan), p.y)}
        bufs["indices"] = np.full(p.y.element_space, -7, np.int32)
        want = rref.reference(p, bufs)
        assert np.isnan(want["y"][0, 1, 0, 0]) == nanprop
        assert (want["indices"][1, 0, 0, 0] == 1) == nanprop  # the first NaN
        for solver in ("ReduceRows", "ReduceRowsVec", "ReduceGeneric"):
            from miopy.engine.candidates import make_solution
            from miopy.solvers import by_name

            got = {r: b.copy() for r, b in bufs.items()}
            make_solution(ocl, p, by_name(solver, "reduce")).run(ocl, got)
            np.testing.assert_array_equal(got["indices"], want["indices"].ravel())
            np.testing.assert_allclose(got["y"], want["y"].ravel(), rtol=1e-6)


def test_reduce_kernels_compile_for_fp64_with_nvrtc():
    """test_cuda_compile covers fp32/fp16/bf16; reducefp64 needs the fp64 build too."""
    try:
        from miopy.backends import cuda

        cuda.nvrtc_version()
    except Exception as exc:
        pytest.skip(f"NVRTC unavailable: {exc}")
    from miopy.backends.base import KERNEL_ROOT
    from miopy.backends.cuda import compile_cubin

    path = KERNEL_ROOT / "cuda" / "reduce.cu"
    for team in (4, 256):
        cubin = compile_cubin(
            path.read_text(), path.name, ["-DMIOPY_DTYPE=3", f"-DRED_TEAM={team}"], arch="sm_90"
        )
        assert cubin[:4] == b"\x7fELF" and b"reduce_rows" in cubin and b"reduce_generic" in cubin


@pytest.mark.parametrize("op, idx", [("amax", True), ("norm2", False), ("mul", False)])
def test_reduce_columns_merges_row_chunks(ocl, monkeypatch, op, idx):
    """Per-channel reductions of an NHWC tensor split the rows into chunks and merge them."""
    from miopy.engine.candidates import make_solution
    from miopy.solvers.reduce.direct import ReduceColumns

    monkeypatch.setattr(ReduceColumns, "TARGET_ITEMS", 12)
    x = TensorDesc("fp32", (5, 3, 3, 7), layout="NHWC")
    p = ReduceProblem(op, x, (0, 2, 3), idx, False, 1.0, 0.0)
    sol = make_solution(ocl, p, ReduceColumns())
    assert sol.workspace > 0 and len(sol.program.steps) == 2
    rng = np.random.default_rng(4)
    bufs = random_buffers(p, rng)
    values = rng.uniform(0.95, 1.05, x.lens) if op == "mul" else rng.uniform(-1, 1, x.lens)
    values[2, 1, 1, 3] = values[0, 1, 0, 0] = 5.0  # a tie: the first position wins
    bufs["x"] = store_logical(values, x)
    want = rref.reference(p, bufs)
    sol.run(ocl, bufs)
    np.testing.assert_allclose(bufs["y"], want["y"].ravel(), rtol=1e-5)
    if idx:
        np.testing.assert_array_equal(bufs["indices"], want["indices"].ravel())
        assert want["indices"].ravel()[1] == 0  # channel 1: (n=0, h=0, w=0) before (2, 1, 3)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_reduce_cpu_kernels_ties_nans_and_infs(ocl, dtype):
    """PoCL's float8 kernels: reduce_cols_partial_cpu (per-channel reductions of NHWC, 16
    channels, row chunks merged) and reduce_rows_cpu (runs of 8k + 5 elements): ties keep the
    first position, NaNs propagate or are skipped, infs stay in compensated sums."""
    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name

    rng = np.random.default_rng(8)
    cases = [("ReduceColumns", (0, 2, 3), 16), ("ReduceRows", (1,), 21)]
    for solver, dims, channels in cases:
        x = TensorDesc(dtype, (5, channels, 3, 7), layout="NHWC")
        for op, idx, nanprop in [
            ("max", True, True),
            ("min", True, False),
            ("amax", True, False),
            ("add", False, False),
            ("norm2", False, False),
            ("mul", False, False),
        ]:
            values = rng.uniform(0.9, 1.1, x.lens) if op == "mul" else rng.uniform(-1, 1, x.lens)
            values[3, 2, 1, 4] = values[1, 2, 0, 2] = values[1, 6, 0, 2] = 3.0  # ties
            values[4, 2, 2, 5] = -3.0
            values[2, 5, 1, 1] = values[4, 5, 0, 0] = values[0, 9, 2, 6] = np.nan
            values[1, 11, :, 3] = np.inf
            p = ReduceProblem(op, x, dims, idx, nanprop, 1.0, 0.0)
            bufs = random_buffers(p, rng)
            bufs["x"] = store_logical(values, x)
            want = rref.reference(p, bufs)
            got = {r: b.copy() for r, b in bufs.items()}
            make_solution(ocl, p, by_name(solver, "reduce")).run(ocl, got)
            w = want["y"].ravel().astype(np.float64)
            g = from_storage(got["y"], p.y.dtype).astype(np.float64)
            finite = np.isfinite(w)
            np.testing.assert_array_equal(g[~finite], w[~finite], f"{solver} {op}")  # NaN, inf
            scale = np.abs(w[finite]).max()
            atol = reduce_tolerance(p) * 4 * scale
            np.testing.assert_allclose(g[finite], w[finite], atol=atol, err_msg=f"{solver} {op}")
            if idx:
                np.testing.assert_array_equal(got["indices"], want["indices"].ravel(), f"{solver} {op}")


@pytest.mark.parametrize(
    "op, idx, nanprop", [("max", True, True), ("min", True, False), ("add", False, False)]
)
def test_reduce_columns_vec_merges_row_chunks(ocl, monkeypatch, op, idx, nanprop):
    """The 16-byte column kernel: several columns per work item, rows in chunks (a partial row
    count in the last), partials merged by a local tree; ties and NaN keep the first position."""
    from miopy.engine.candidates import make_solution
    from miopy.solvers.reduce.direct import ReduceColumnsVec

    monkeypatch.setattr(ReduceColumnsVec, "ITEMS_PER_CU", 8)
    x = TensorDesc("fp16", (7, 16, 3, 5), layout="NHWC")
    p = ReduceProblem(op, x, (0, 2, 3), idx, nanprop, 1.0, 0.0)
    assert ReduceColumnsVec().is_applicable(ocl, p) is None
    sol = make_solution(ocl, p, ReduceColumnsVec())
    rows, cols, chunk, _ = ReduceColumnsVec()._split(ocl, p)
    assert -(-rows // chunk) > 2 and rows % chunk
    rng = np.random.default_rng(5)
    bufs = random_buffers(p, rng)
    values = rng.uniform(-1, 1, x.lens)
    values[4, 3, 1, 2] = values[1, 3, 0, 4] = 5.0  # a tie in channel 3: (1, 0, 4) comes first
    values[6, 5, 2, 1] = values[2, 5, 2, 2] = np.nan  # channel 5: (2, 2, 2) is the first NaN
    bufs["x"] = store_logical(values, x)
    want = rref.reference(p, bufs)
    sol.run(ocl, bufs)
    np.testing.assert_allclose(bufs["y"], want["y"].ravel(), rtol=2e-3)
    if idx:
        np.testing.assert_array_equal(bufs["indices"], want["indices"].ravel())


def test_reduce_long_sum_uses_the_length_rule(ocl):
    """401k-element fp32 sums: the tolerance grows like sqrt(length) (the shared rule), and every
    solver stays under it, the one-work-item-per-output ones through compensated sums (a plain
    running sum of 401k squares was off by 4.8e-5, over the rule's 3.8e-5)."""
    x = TensorDesc("fp32", (8, 64, 28, 28))
    short = ReduceProblem("add", TensorDesc("fp32", (8, 4, 1, 1)), (0,))
    assert reduce_tolerance(short) == BASE[DataType.FP32]
    for op in ("add", "norm2", "norm1", "avg"):
        p = ReduceProblem(op, x, (0, 1, 2, 3))
        assert reduce_tolerance(p) > BASE[DataType.FP32] * 20
        ran = run_all(ocl, p, rref, reduce_tolerance(p) / 4, rng=np.random.default_rng(4))
        assert "ReduceGeneric" in ran


@pytest.mark.parametrize("op", ["add", "norm1", "avg"])
def test_reduce_compensated_sums_keep_inf_and_nan(ocl, op):
    x = TensorDesc("fp32", (3, 4, 5, 6))
    values = np.random.default_rng(6).uniform(-1, 1, x.lens)
    values[1, :, 2, 3] = np.inf
    values[2, 1, :, 0] = np.nan
    p = ReduceProblem(op, x, (1, 2))
    bufs = {"x": store_logical(values, x), "y": store_logical(np.full(p.y.lens, 7.0), p.y)}
    want = rref.reference(p, bufs)["y"]
    assert np.isinf(want).any() and np.isnan(want).any()
    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name

    for solver in ("ReduceGeneric", "ReduceColumns"):
        if by_name(solver, "reduce").is_applicable(ocl, p) is not None:
            continue
        got = {r: b.copy() for r, b in bufs.items()}
        make_solution(ocl, p, by_name(solver, "reduce")).run(ocl, got)
        y = got["y"].reshape(want.shape)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(y), np.isinf(want))
        fin = np.isfinite(want)
        np.testing.assert_allclose(y[fin], want[fin], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cpu_shaped", [True, False])
@pytest.mark.parametrize("mode, lens", [("channel", (2, 40, 3, 1)), ("instance", (3, 5, 2, 4))])
def test_softmax_rows_starting_with_neg_inf(ocl, monkeypatch, cpu_shaped, mode, lens):
    """Attention-mask rows whose first values are -inf: every solver gives exp(-inf) = 0 there
    and the softmax of the rest (the online max starts at -inf, and exp(-inf - -inf) is NaN).
    cpu_shaped=False runs the kernels CUDA uses (the rows kernel's GPU shape) on OpenCL."""
    import miopy.solvers.softmax.direct as direct

    if not cpu_shaped:
        monkeypatch.setattr(direct, "cpu_kernels", lambda ctx: False)
    rng = np.random.default_rng(21)
    x = rng.uniform(-5, 5, lens)
    flat = x.reshape(lens[0], -1) if mode == "instance" else np.moveaxis(x, 1, -1)
    flat[..., : flat.shape[-1] // 2] = -np.inf  # the first half of every softmax row
    for direction in ("F",):
        for algo in ("fast", "accurate"):  # (log softmax is -inf there: not an rms comparison)
            p = SoftmaxProblem.create(TensorDesc("fp32", lens), direction, algo, mode)
            bufs = random_buffers(p, rng)
            bufs["x"] = store_logical(x, p.tensors()["x"])
            ran = run_all(ocl, p, sref, BASE[p.dtype] * 2, buffers=bufs)
            assert len(ran) >= 2, ran


# only the warp kernel: the other solvers' GPU-shaped kernels build on a cold PoCL cache for
# seconds each, and the GPU tests run them
WARP = ("SoftmaxRowsWarp",)


@pytest.mark.parametrize(
    "dtype, rows, length",
    [
        ("fp32", 9, 40),
        ("fp32", 5, 1024),
        ("fp16", 37, 512),
        ("fp16", 3, 2048),
        ("bf16", 7, 24),
        ("fp16", 4, 72),
    ],
)
def test_softmax_rows_warp_gpu_kernel_on_opencl(ocl, monkeypatch, dtype, rows, length):
    """SoftmaxRowsWarp's kernel (the row in registers, one exp per element; GPU devices only) on
    PoCL: masked chunks past the row, teams of 4-32, alpha / beta blending, the log algorithm, and
    rows whose first half is -inf."""
    import miopy.solvers.softmax.direct as direct

    monkeypatch.setattr(direct, "cpu_kernels", lambda ctx: False)
    rng = np.random.default_rng(rows * length)
    desc = TensorDesc(dtype, (rows, length, 1, 1))
    for algo, alpha, beta in (("accurate", 1.0, 0.0), ("fast", 1.5, 0.5), ("log", 0.75, 0.25)):
        p = SoftmaxProblem.create(desc, "F", algo, "channel", alpha, beta)
        assert run_all(ocl, p, sref, BASE[p.dtype] * 2, rng=rng, only=WARP) == list(WARP)
    x = rng.uniform(-5, 5, desc.lens)
    x[:, : length // 2] = -np.inf
    p = SoftmaxProblem.create(desc, "F", "accurate", "channel")
    bufs = random_buffers(p, rng)
    bufs["x"] = store_logical(x, p.tensors()["x"])
    assert run_all(ocl, p, sref, BASE[p.dtype] * 2, buffers=bufs, only=WARP) == list(WARP)


@pytest.mark.parametrize(
    "dtype, lens, layout, dims",
    [
        ("fp32", (9, 24, 7, 8), "NCHW", (2, 3)),
        ("fp16", (5, 6, 16, 40), "NCHW", (2, 3)),
        ("bf16", (3, 24, 5, 7), "NHWC", (1,)),
        ("fp32", (4, 64, 28, 28), "NCHW", (1, 2, 3)),
    ],
)
def test_reduce_rows_warp_gpu_kernel_on_opencl(ocl, monkeypatch, dtype, lens, layout, dims):
    """ReduceRowsWarp's kernel (GPU devices only) on PoCL: teams of 4-32, the slots past the run,
    kept strides of another layout, alpha / beta, and 50k-element runs under the length rule."""
    import miopy.solvers.reduce.direct as direct

    monkeypatch.setattr(direct, "cpu_kernels", lambda ctx: False)
    rng = np.random.default_rng(len(dims) * 7 + lens[1])
    # On a cold PoCL cache every (op, solver) pair is a build of several seconds: each case runs
    # two of the four ops (all four over the cases), and the first case runs the GPU-only siblings
    # (a batch of rows per work-group, the L2-resident pass) on their kernels too.
    first = (dtype, lens) == ("fp32", (9, 24, 7, 8))
    only = ("ReduceRowsWarp", "ReduceRowsWarpBatch", "ReduceRowsWarpL2") if first else ("ReduceRowsWarp",)
    ops = (("add", 1.0, 0.0), ("norm2", 0.5, 0.25), ("avg", 1.5, 0.5), ("norm1", 1.0, 0.0))
    pick = ops[:2] if len(dims) % 2 == 0 else ops[2:]
    for op, alpha, beta in pick:
        p = ReduceProblem(op, TensorDesc(dtype, lens, layout=layout), dims, False, False, alpha, beta)
        assert set(run_all(ocl, p, rref, reduce_tolerance(p), rng=rng, only=only)) == set(only)
