"""The vendor-library calls a kernel package lists for the warm-up (miopy.backends.cuda_warm):
described from real programs, read back only when every field checks, and given scratch memory
that covers every element the call touches (enumerated here, not taken from the formula)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from miopy.backends import cuda_warm
from miopy.solution import Call, Gemm, Tensor, Workspace
from miopy.tensor import DataType


def _gemm(**over) -> Gemm:
    fields = dict(
        dtype=DataType.FP16,
        trans_a=False,
        trans_b=True,
        m=5,
        n=7,
        k=3,
        a=Tensor("x"),
        a_offset=0,
        lda=4,
        b=Workspace(),
        b_offset=0,
        ldb=3,
        c=Tensor("y"),
        c_offset=0,
        ldc=9,
        batch=2,
        stride_a=40,
        stride_b=21,
        stride_c=50,
    )
    return Gemm(**(fields | over))


class _FakeLt:
    key = (0, 1, 0, 8, 6, 4, 4, 4, 8, 3, 32, 24, 48, 0)


class _FakeAlgo:
    config = (21, 15, 0, 1, 0, 0, 0, 0, 0)


def test_describe_and_parse_round_trip():
    gemm = cuda_warm.describe(_gemm())
    assert gemm is not None and gemm["dtype"] == "FP16" and gemm["batch"] == 2
    assert cuda_warm.parse(json.loads(json.dumps(gemm))) is not None
    lt = cuda_warm.describe(Call("lt_matmul", (_FakeLt(), _FakeAlgo(), Tensor("x"), 0)))
    assert lt == {"kind": "lt", "key": list(_FakeLt.key), "algo": list(_FakeAlgo.config)}
    assert cuda_warm.parse(lt) is not None
    by_index = cuda_warm.describe(Call("lt_matmul", (_FakeLt(), 3, Tensor("x"), 0)))
    assert cuda_warm.parse(by_index).algo == 3
    assert cuda_warm.describe(Call("other", (1, 2))) is None


@pytest.mark.parametrize(
    "change",
    [
        {"m": 0},
        {"lda": -4},
        {"batch": True},
        {"k": 2.0},
        {"m": 1 << 40},
        {"dtype": "FP64"},
        {"trans_a": 1},
        {"extra": 1},
        {"kind": "eval"},
    ],
)
def test_a_gemm_description_with_any_bad_field_is_refused(change):
    good = cuda_warm.describe(_gemm())
    assert cuda_warm.parse(good | change) is None
    assert cuda_warm.parse({k: v for k, v in good.items() if k != "m"}) is None


@pytest.mark.parametrize(
    "change",
    [
        {"key": [0] * 13},
        {"key": [5, 0, 0, 8, 6, 4, 4, 4, 8, 1, 0, 0, 0, 0]},  # not a cuBLASLt data type here
        {"key": [0, 2, 0, 8, 6, 4, 4, 4, 8, 1, 0, 0, 0, 0]},  # no such operation
        {"key": [0, 0, 0, 0, 6, 4, 4, 4, 8, 1, 0, 0, 0, 0]},  # m = 0
        {"algo": [1, 2]},
        {"algo": -1},
        {"algo": "__import__('os')"},
    ],
)
def test_a_cublaslt_description_with_any_bad_field_is_refused(change):
    good = {"kind": "lt", "key": list(_FakeLt.key), "algo": list(_FakeAlgo.config)}
    assert cuda_warm.parse(good) is not None
    assert cuda_warm.parse(good | change) is None


def _touched_row_major(shape, ld, batch, stride) -> int:
    rows, cols = shape
    b, i, j = np.meshgrid(np.arange(batch), np.arange(rows), np.arange(cols), indexing="ij")
    return int((b * stride + i * ld + j).max()) + 1


def test_gemm_scratch_covers_every_element():
    rng = np.random.default_rng(0)
    for trans_a, trans_b in itertools.product((False, True), repeat=2):
        for _ in range(20):
            m, n, k, batch = (int(v) for v in rng.integers(1, 9, 4))
            a_shape = (k, m) if trans_a else (m, k)
            b_shape = (n, k) if trans_b else (k, n)
            lda, ldb, ldc = (s[1] + int(rng.integers(0, 3)) for s in (a_shape, b_shape, (m, n)))
            sa, sb, sc = (int(rng.integers(0, 80)) for _ in range(3))
            dims = dict(m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc, batch=batch)
            strides = dict(stride_a=sa, stride_b=sb, stride_c=sc)
            step = _gemm(dtype=DataType.FP32, trans_a=trans_a, trans_b=trans_b, **dims, **strides)
            call = cuda_warm.parse(cuda_warm.describe(step))
            touched = max(
                _touched_row_major(a_shape, lda, batch, sa),
                _touched_row_major(b_shape, ldb, batch, sb),
                _touched_row_major((m, n), ldc, batch, sc),
            )
            assert call.nbytes() == touched * 4


def test_cublaslt_scratch_covers_every_element_in_either_order():
    rng = np.random.default_rng(1)
    for _ in range(60):
        op_a, op_b, order = (int(v) for v in rng.integers(0, 2, 3))
        m, n, k, batch = (int(v) for v in rng.integers(1, 9, 4))
        shapes = [(m, k) if op_a == 0 else (k, m), (k, n) if op_b == 0 else (n, k), (m, n)]
        # the leading dimension cuBLASLt requires: rows (column-major) or columns (row-major)
        lds = [(s[0] if order == 0 else s[1]) + int(rng.integers(0, 3)) for s in shapes]
        strides = [int(rng.integers(0, 100)) for _ in range(3)]
        key = [2, op_a, op_b, m, n, k, *lds, batch, *strides, order]
        call = cuda_warm.parse({"kind": "lt", "key": key, "algo": 0})
        touched = 0
        for (rows, cols), ld, stride in zip(shapes, lds, strides):
            # column-major (rows, cols) is row-major (cols, rows) with the same leading dimension
            shape = (cols, rows) if order == 0 else (rows, cols)
            touched = max(touched, _touched_row_major(shape, ld, batch, stride))
        assert call.nbytes() >= touched * 2


def test_offline_package_lists_the_cublas_calls_of_its_choices():
    """Building for an sm_90 target: the chosen GEMM solutions' cuBLAS calls, each once, all
    readable back."""
    pytest.importorskip("cuda.bindings")
    from miopy.backends import cuda
    from miopy.tool import kernels, target, workload

    if cuda.cuda_include_dir() is None:
        pytest.skip("no CUDA headers for NVRTC")
    ctx = target.target("cuda", "sm_90", 132)
    work = workload.load("resnet50", [8])
    rows, library, _ = kernels.choices(ctx, work)
    assert len(rows) == len(work.problems) and library
    assert len(set(library)) == len(library)
    parsed = [cuda_warm.parse(json.loads(text)) for text in library]
    assert all(p is not None for p in parsed)
    assert all(p.nbytes() <= cuda_warm.WARM_MAX_BYTES for p in parsed)
