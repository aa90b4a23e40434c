"""Tensor ops, softmax, reductions and LRN on a CUDA GPU against the NumPy references, at shapes
that reach the GPU-only paths: warp-shuffle teams and register-cached rows (softmax), compiled-in
ops, vector loads of a broadcast b, chunked column reductions, the sliding LRN window."""

from __future__ import annotations

import numpy as np
import pytest
from misc_support import random_buffers, run_all

from miopy import backends
from miopy.problem.lrn import LRNProblem
from miopy.problem.reduce import ReduceProblem
from miopy.problem.softmax import SoftmaxProblem
from miopy.problem.tensorop import TensorOpProblem
from miopy.reference import lrn as lref
from miopy.reference import reduce as rref
from miopy.reference import softmax as sref
from miopy.reference import tensorop as tref
from miopy.reference.tolerance import BASE, reduce_tolerance
from miopy.tensor import DataType, TensorDesc

_WHY = backends.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]


@pytest.fixture(scope="module")
def cuda():
    from miopy.handle import Handle

    return Handle("cuda")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("length", [7, 64, 512, 1000, 3072, 40000])
@pytest.mark.parametrize("direction", ["F", "B"])
def test_softmax_rows(cuda, dtype, length, direction):
    desc = TensorDesc(dtype, (37, length, 1, 1))
    for algo in ("accurate", "log"):
        p = SoftmaxProblem.create(desc, direction, algo, "channel", 1.0, 0.5 if length == 64 else 0.0)
        assert "SoftmaxRows" in run_all(cuda, p, sref, BASE[p.dtype] * 2)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("length", [8, 40, 512, 768, 1024, 2048])
def test_softmax_rows_warp(cuda, dtype, length):
    """The register-held rows of SoftmaxRowsWarp (teams of 4-32, masked chunks), with alpha / beta,
    log, large inputs and rows whose first half is -inf (attention masks)."""
    from miopy.reference.common import store_logical
    from miopy.solvers.softmax.direct import WARP_MOST_PER_BWD, warp_shape

    desc = TensorDesc(dtype, (301, length, 1, 1))
    rng = np.random.default_rng(length)
    for algo, alpha, beta in (("accurate", 1.0, 0.0), ("fast", 1.5, 0.5), ("log", 0.75, 0.25)):
        p = SoftmaxProblem.create(desc, "F", algo, "channel", alpha, beta)
        ran = run_all(cuda, p, sref, BASE[p.dtype] * 2, rng=rng)
        assert "SoftmaxRowsWarp" in ran or (dtype == "fp32" and length == 2048), ran
    for algo, alpha, beta in (("accurate", 1.0, 0.0), ("log", 0.75, 0.25)):  # backward: y, dy held
        p = SoftmaxProblem.create(desc, "B", algo, "channel", alpha, beta)
        ran = run_all(cuda, p, sref, BASE[p.dtype] * 2, rng=rng)
        fits = warp_shape(length, 16 // p.dtype.itemsize)[1] <= WARP_MOST_PER_BWD
        assert ("SoftmaxRowsWarp" in ran) == fits, ran
    p = SoftmaxProblem.create(desc, "F", "accurate", "channel")
    for low, high, masked in ((-5.0, 5.0, True), (1000.0, 1010.0, False)):
        x = rng.uniform(low, high, desc.lens)
        if masked:
            x[:, : length // 2] = -np.inf
        bufs = random_buffers(p, rng)
        bufs["x"] = store_logical(x, p.tensors()["x"])
        run_all(cuda, p, sref, BASE[p.dtype] * 2, buffers=bufs)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_softmax_modes(cuda, layout):
    desc = TensorDesc("fp16", (4, 96, 14, 14), layout=layout)
    for mode in ("instance", "channel"):
        for direction in "FB":
            run_all(cuda, SoftmaxProblem.create(desc, direction, "fast", mode), sref, BASE[DataType.FP16] * 2)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_tensorop_resnet_shapes(cuda, dtype, layout):
    c = TensorDesc(dtype, (4, 256, 14, 14), layout=layout)
    for blens in ((4, 256, 14, 14), (1, 256, 1, 1), (1, 1, 1, 1), (4, 1, 14, 14)):
        b = TensorDesc(dtype, blens, layout=layout)
        for op in ("add", "mul", "min", "max"):
            ran = run_all(cuda, TensorOpProblem(op, c, b, c, 1.5, 0.5, 0.25), tref, BASE[c.dtype] * 2)
            if blens == c.lens or (layout == "NHWC" and blens == (1, 256, 1, 1)):
                assert "TensorOpPackedVec" in ran, ran
    run_all(cuda, TensorOpProblem("scale", y=c, value=0.5), tref, BASE[c.dtype])


def test_tensorop_vec_tail_and_unaligned(cuda):
    """TensorOpPackedVec: a length that is no multiple of a vector (the scalar tail), beta = 0
    (c not read), and views 2 bytes into their buffers (the scalar path)."""
    import cupy as cp

    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name

    c = TensorDesc("fp16", (3, 5, 7, 9))
    for beta in (0.0, 0.25):
        p = TensorOpProblem("add", c, c, c, 1.5, 0.5, beta)
        assert "TensorOpPackedVec" in run_all(cuda, p, tref, BASE[c.dtype] * 2)
    bufs = random_buffers(p, np.random.default_rng(4))
    want = tref.reference(p, {r: b.copy() for r, b in bufs.items()})["c"]
    big = {r: cp.asarray(np.concatenate([np.zeros(1, np.float16), b])) for r, b in bufs.items()}
    views = {r: a[1:] for r, a in big.items()}
    make_solution(cuda, p, by_name("TensorOpPackedVec", "tensorop")).run(cuda, views)
    cp.cuda.Stream.null.synchronize()
    got = cp.asnumpy(views["c"]).astype(np.float64).reshape(np.shape(want))
    assert np.abs(got - want).max() < 4e-3


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "fp64"])
def test_reductions(cuda, dtype):
    x = TensorDesc(dtype, (8, 64, 28, 28), layout="NHWC")
    y = TensorDesc(dtype, (8, 64, 28, 28))
    for desc, dims in ((y, (2, 3)), (x, (1,)), (x, (0, 2, 3)), (y, (0,)), (y, (0, 1, 2, 3))):
        for op in ("add", "avg", "norm2"):
            p = ReduceProblem(op, desc, dims)
            ran = run_all(cuda, p, rref, reduce_tolerance(p), rng=np.random.default_rng(1))
            if dtype != "fp64" and desc is y and dims == (2, 3):  # 7 loads a work item, one batch
                assert "ReduceRowsWarpBatch" in ran, ran
        for op in ("max", "amax", "min"):
            p = ReduceProblem(op, desc, dims, True)
            ran = run_all(cuda, p, rref, reduce_tolerance(p), rng=np.random.default_rng(2))
            if dtype != "fp64" and dims in ((2, 3), (0, 2, 3)):
                assert {"ReduceRowsVec", "ReduceColumnsVec"} & set(ran), ran


@pytest.mark.parametrize("nanprop", [False, True])
def test_column_compare_values_only(cuda, nanprop):
    """ReduceColumnsVec without indices (values alone: RED_VALUES_OP): min / max / amax over N, H, W
    of NHWC data with scattered NaNs and a channel of only NaNs, ties and infinities."""
    from miopy.engine.candidates import make_solution
    from miopy.reference.common import store_logical
    from miopy.solvers import by_name

    for dtype in ("fp16", "fp32"):
        x = TensorDesc(dtype, (5, 64, 13, 11), layout="NHWC")
        rng = np.random.default_rng(12)
        values = np.round(rng.uniform(-4, 4, x.lens))  # many ties
        values[0, 1, 2, 3] = values[4, 1, 0, 0] = np.nan
        values[:, 7] = np.nan
        values[2, 9, 1, 1], values[3, 10, 2, 2] = np.inf, -np.inf
        for op in ("max", "min", "amax"):
            p = ReduceProblem(op, x, (0, 2, 3), False, nanprop)
            bufs = {"x": store_logical(values, x), "y": store_logical(np.full(p.y.lens, np.nan), p.y)}
            want = rref.reference(p, {r: b.copy() for r, b in bufs.items()})["y"]
            want = np.asarray(want, np.float64).ravel()
            got = {r: b.copy() for r, b in bufs.items()}
            make_solution(cuda, p, by_name("ReduceColumnsVec", "reduce")).run(cuda, got)
            np.testing.assert_array_equal(got["y"].astype(np.float64).ravel(), want, err_msg=f"{dtype} {op}")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("mode", ["cross", "within"])
def test_lrn(cuda, layout, mode):
    x = TensorDesc("fp16", (4, 96, 27, 27), layout=layout)
    for direction, save in (("F", True), ("F", False), ("B", False)):
        p = LRNProblem.create(x, mode, 5, 1e-4, 0.75, 1.0, direction, save)
        rng = np.random.default_rng(3)
        run_all(cuda, p, lref, BASE[DataType.FP16] * 2, buffers=lref.random_buffers(p, rng))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_lrn_chunked_kernels(cuda, dtype):
    """LrnCrossRingChunk (the channels walked in chunks of loads in flight: C not a multiple of the
    chunk or smaller than it, even sizes, windows wider than C) in NCHW and NHWC, and
    LrnChannelsChunk (backward: two vectors a work item; C not dividing the vector, a partial last
    work-group)."""
    cases = [((2, 11, 5, 7), "NCHW", 5), ((3, 3, 4, 4), "NCHW", 4), ((2, 13, 6, 8), "NHWC", 5)]
    cases.append(((1, 96, 9, 10), "NHWC", 9))
    rng = np.random.default_rng(13)
    for lens, layout, size in cases:
        x = TensorDesc(dtype, lens, layout=layout)
        for direction, save in (("F", True), ("F", False), ("B", False)):
            p = LRNProblem.create(x, "cross", size, 0.7, 0.75, 1.5, direction, save)
            only = ("LrnCrossRingChunk", "LrnChannelsChunk")
            ran = run_all(cuda, p, lref, BASE[p.dtype] * 4, buffers=lref.random_buffers(p, rng), only=only)
            assert "LrnCrossRingChunk" in ran, ran
            assert ("LrnChannelsChunk" in ran) == (layout == "NHWC"), ran


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_column_reduction_long_chunks(cuda, dtype):
    """ReduceColumnsVec with chunks of rows longer than its rows loaded ahead (RED_UNROLL) and not
    a multiple of them, and tens of thousands of chunks for the final merge: 1.12 M rows of 8
    channels, max with and without indices (many ties: the first position wins), add."""
    x = TensorDesc(dtype, (2, 8, 800, 700), layout="NHWC")
    for op, indices in (("max", False), ("max", True), ("add", False)):
        p = ReduceProblem(op, x, (0, 2, 3), indices)
        rng = np.random.default_rng(4)
        ran = run_all(cuda, p, rref, reduce_tolerance(p), rng=rng, only=("ReduceColumnsVec",))
        assert ran == ["ReduceColumnsVec"]


def test_unaligned_device_views(cuda):
    """Zero-copy views starting 2 bytes into a buffer: vector paths must fall back."""
    import cupy as cp

    desc = TensorDesc("fp16", (3, 200, 1, 1))
    p = SoftmaxProblem.create(desc, "F", "accurate", "channel")
    bufs = random_buffers(p, np.random.default_rng(5))
    want = sref.reference(p, bufs)["y"].ravel()
    from miopy.engine.candidates import make_solution
    from miopy.solvers.softmax import SoftmaxRows

    big = {r: cp.asarray(np.concatenate([np.zeros(1, np.float16), b])) for r, b in bufs.items()}
    views = {r: a[1:] for r, a in big.items()}
    make_solution(cuda, p, SoftmaxRows()).run(cuda, views)
    cp.cuda.Stream.null.synchronize()
    got = cp.asnumpy(views["y"]).astype(np.float64)
    assert np.abs(got - want).max() < 2e-3


def test_unaligned_reduce_vec_views(cuda):
    """The 16-byte reductions on views 2 bytes into their buffers fall back to scalar loads."""
    import cupy as cp

    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name

    for name, layout, dims in (("ReduceRowsVec", "NCHW", (2, 3)), ("ReduceColumnsVec", "NHWC", (0, 2, 3))):
        p = ReduceProblem("max", TensorDesc("fp16", (4, 32, 8, 8), layout=layout), dims, True)
        bufs = random_buffers(p, np.random.default_rng(7))
        want = rref.reference(p, {r: b.copy() for r, b in bufs.items()})
        big = {r: cp.asarray(np.concatenate([np.zeros(1, b.dtype), b])) for r, b in bufs.items()}
        views = {r: a[1:] for r, a in big.items()}
        make_solution(cuda, p, by_name(name, "reduce")).run(cuda, views)
        cp.cuda.Stream.null.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(views["indices"]), np.asarray(want["indices"]).ravel())
        got = cp.asnumpy(views["y"]).astype(np.float64)
        assert np.abs(got - np.asarray(want["y"], np.float64).ravel()).max() < 2e-3, name
