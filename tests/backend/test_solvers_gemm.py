"""The GEMM solvers (GemmFwd1x1_0_1, GemmFwdRest, GemmBwd1x1_stride1, GemmBwdRest,
GemmWrw1x1_stride1, GemmWrwUniversal) against the NumPy reference on OpenCL (PoCL in CI), on our
own GEMM kernel and on a stand-in "vendor" GEMM (NumPy behind ``Backend.gemm``) for the path CUDA
takes through cuBLAS.

Problems are small and the data types few per test: on PoCL every distinct kernel build costs
about a second, and the GEMM kernel has few variants (dtype x tile x fp32 workspace)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import support

from miopy.backends.base import DeviceInfo
from miopy.backends.opencl import Backend as OpenCLBackend
from miopy.engine.candidates import make_solution
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.solvers import CONV_SOLVERS
from miopy.solvers.conv import gemm
from miopy.solvers.conv.gemm import (
    GemmBwd1x1_stride1,
    GemmBwdRest,
    GemmFwd1x1_0_1,
    GemmFwdRest,
    GemmPlan,
    GemmWrw1x1_stride1,
    GemmWrwUniversal,
    Operand,
)
from miopy.tensor import DataType, TensorDesc, from_storage, to_storage

cl = pytest.importorskip("pyopencl")  # every test here runs on OpenCL

PAIRS = {  # direction -> (the 1x1 solver, the general one): exactly one applies to a packed problem
    Direction.FORWARD: (GemmFwd1x1_0_1(), GemmFwdRest()),
    Direction.BACKWARD_DATA: (GemmBwd1x1_stride1(), GemmBwdRest()),
    Direction.BACKWARD_WEIGHTS: (GemmWrw1x1_stride1(), GemmWrwUniversal()),
}
ALL = [s for pair in PAIRS.values() for s in pair]


@pytest.fixture(scope="module")
def handle(ocl):
    return ocl


def solve(handle, problem: ConvProblem, solver):
    """The solver's solution for the user's problem (solvers see its conv view)."""
    view_ = problem.conv_view()
    assert solver.is_applicable(handle, view_) is None, solver.is_applicable(handle, view_)
    solution = make_solution(handle, problem, solver)
    assert solution.workspace == solver.workspace_size(handle, view_)
    return solution


def check(handle, problem: ConvProblem, solver, rng: np.random.Generator) -> float:
    return support.check(handle, solve(handle, problem, solver), rng)


def make(dtype, xlens, wlens, direction="F", layouts=("NCHW",) * 3, **conv) -> ConvProblem:
    x = TensorDesc(dtype, xlens, layout=layouts[0])
    w = TensorDesc(dtype, wlens, layout=layouts[1])
    return ConvProblem.create(x, w, ConvDesc(**conv), direction, y_layout=layouts[2])


def random_geometry(rng: np.random.Generator, dtype: str, dims: int) -> list[ConvProblem]:
    """One random convolution (layouts, strides, padding, dilation, groups incl. depthwise, 1x1,
    transposed) in all three directions."""
    while True:
        g = int(rng.choice([1, 1, 2, 3]))
        c, k = g * int(rng.integers(1, 4)), g * int(rng.integers(1, 4))
        if rng.random() < 0.2:
            c = k = g = int(rng.integers(2, 5))  # depthwise
        n = int(rng.integers(1, 4))
        sp = [int(rng.integers(2 if dims == 3 and i == 0 else 3, 5 if dims == 3 else 9)) for i in range(dims)]
        if rng.random() < 0.3:  # the 1x1 solvers' case
            fil, pads, strides, dils = [1] * dims, [0] * dims, [1] * dims, [1] * dims
        else:
            fil = [int(rng.integers(1, 4)) for _ in range(dims)]
            pads = [int(rng.integers(0, 3)) for _ in range(dims)]
            strides = [int(rng.integers(1, 3)) for _ in range(dims)]
            dils = [int(rng.integers(1, 3)) for _ in range(dims)]
        mode = "trans" if rng.random() < 0.25 else "conv"
        opads = [int(rng.integers(0, s)) for s in strides] if mode == "trans" else None
        names = ("NCHW", "NHWC") if dims == 2 else ("NCDHW", "NDHWC")
        layouts = [str(rng.choice(names)) for _ in range(3)]
        wlens = (k, c // g, *fil) if mode == "conv" else (c, k // g, *fil)
        try:
            conv = ConvDesc(pads, strides, dils, g, mode, opads)
            x = TensorDesc(dtype, (n, c, *sp), layout=layouts[0])
            w = TensorDesc(dtype, wlens, layout=layouts[1])
            return [ConvProblem.create(x, w, conv, d, y_layout=layouts[2]) for d in "FBW"]
        except ValueError:
            continue  # filter larger than the padded input: draw again


def the_gemm_solver(handle, problem: ConvProblem):
    """The one GEMM solver of the problem's direction that applies."""
    view_ = problem.conv_view()
    pair = PAIRS[view_.direction]
    ok = [s for s in pair if s.is_applicable(handle, view_) is None]
    assert len(ok) == 1, {s.name: s.is_applicable(handle, view_) for s in pair}
    return ok[0]


# ---- correctness ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_gemm_random_problems(handle, dtype):
    rng = np.random.default_rng({"fp32": 11, "fp16": 12, "bf16": 13}[dtype])
    used = set()
    for i in range(12):
        for problem in random_geometry(rng, dtype, dims=3 if i % 3 == 2 else 2):
            solver = the_gemm_solver(handle, problem)
            check(handle, problem, solver, rng)
            used.add(solver.name)
    assert {"GemmFwdRest", "GemmBwdRest", "GemmWrwUniversal"} <= used


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_gemm_1x1_solvers(handle, layout):
    rng = np.random.default_rng(3)
    for n, groups, dtype in ((3, 1, "fp32"), (1, 2, "fp16"), (2, 3, "bf16")):
        for direction in "FBW":
            problem = make(
                dtype,
                (n, 6, 4, 5),
                (6, 6 // groups, 1, 1),
                direction,
                (layout,) * 3,
                pads=(0, 0),
                groups=groups,
            )
            solver = the_gemm_solver(handle, problem)
            # an NCHW batch of several images cannot fold into one reduction: Universal sums it
            expect_1x1 = not (direction == "W" and layout == "NCHW" and n > 1)
            assert (solver in (p[0] for p in PAIRS.values())) == expect_1x1, solver.name
            if expect_1x1:
                assert solver.workspace_size(handle, problem.conv_view()) == 0
            check(handle, problem, solver, rng)


def test_gemm_depthwise_dilated_strided_3d(handle):
    rng = np.random.default_rng(4)
    for direction in "FBW":
        dw = make(
            "fp32",
            (2, 4, 9, 8),
            (4, 1, 3, 3),
            direction,
            ("NHWC",) * 3,
            pads=(2, 1),
            strides=(2, 1),
            dilations=(2, 2),
            groups=4,
        )
        check(handle, dw, the_gemm_solver(handle, dw), rng)
        d3 = make(
            "fp32",
            (2, 4, 3, 5, 6),
            (4, 2, 2, 3, 1),
            direction,
            ("NCDHW", "NDHWC", "NDHWC"),
            pads=(1, 0, 1),
            strides=(1, 2, 1),
            groups=2,
        )
        check(handle, d3, the_gemm_solver(handle, d3), rng)


def test_gemm_transposed_problem(handle):
    """A transposed convolution reaches the solvers as its conv view (forward -> backward data)."""
    rng = np.random.default_rng(5)
    for direction, expect in (("F", GemmBwdRest), ("B", GemmFwdRest), ("W", GemmWrwUniversal)):
        x = TensorDesc("fp16", (2, 4, 5, 4), layout="NHWC")
        w = TensorDesc("fp16", (4, 3, 3, 2), layout="NHWC")  # (C, K/G, ...) for trans
        conv = ConvDesc((1, 0), (2, 1), (1, 1), 1, "trans", (1, 0))
        problem = ConvProblem.create(x, w, conv, direction)
        solver = the_gemm_solver(handle, problem)
        assert isinstance(solver, expect)
        check(handle, problem, solver, rng)


def test_gemm_chunks_of_images(handle, monkeypatch):
    """With a small workspace budget, forward and backward data run im2col/col2im over chunks of
    images (the last one shorter) and the workspace shrinks to one chunk."""
    rng = np.random.default_rng(6)
    problem = make("fp32", (5, 3, 6, 6), (4, 3, 3, 3), "F", pads=(1, 1))
    per_image = 3 * 9 * 36 * 4
    full = GemmFwdRest().workspace_size(handle, problem.conv_view())
    assert full == 5 * per_image
    monkeypatch.setattr(gemm, "CHUNK_BYTES", 2 * per_image)
    assert GemmFwdRest().workspace_size(handle, problem.conv_view()) == 2 * per_image
    for direction in "FB":
        chunked = make("fp32", (5, 3, 6, 6), (4, 3, 3, 3), direction, pads=(1, 1))
        solver = the_gemm_solver(handle, chunked)
        work = solver.work(handle, chunked.conv_view())
        assert sum(isinstance(s, GemmPlan) for s in work.steps) == 3
        check(handle, chunked, solver, rng)


# ---- the vendor-GEMM path, with NumPy standing in for cuBLAS ---------------------------------
class NumpyGemmBackend(OpenCLBackend):
    """OpenCL, plus ``gemm`` done in NumPy with Backend.gemm's contract (and cuBLAS's checks)."""

    has_vendor_gemm = True
    calls = 0

    def gemm(
        self,
        dtype,
        trans_a,
        trans_b,
        m,
        n,
        k,
        a,
        a_offset,
        lda,
        b,
        b_offset,
        ldb,
        c,
        c_offset,
        ldc,
        batch=1,
        stride_a=0,
        stride_b=0,
        stride_c=0,
    ):
        type(self).calls += 1
        dtype = DataType.parse(dtype)

        def host(buf):
            out = np.empty(buf.size // dtype.itemsize, dtype.storage)
            self.download(buf, out)
            return out

        def matrix(flat, offset, rows, cols, ld):
            idx = offset + np.arange(rows)[:, None] * ld + np.arange(cols)[None, :]
            return from_storage(flat[idx], dtype).astype(np.float64)

        stored_a = (k, m) if trans_a else (m, k)
        stored_b = (n, k) if trans_b else (k, n)
        assert lda >= max(1, stored_a[1]) and ldb >= max(1, stored_b[1]) and ldc >= max(1, n)
        fa, fb, fc = host(a), host(b), host(c)
        for i in range(batch):
            am = matrix(fa, a_offset + i * stride_a, *stored_a, lda)
            bm = matrix(fb, b_offset + i * stride_b, *stored_b, ldb)
            product = (am.T if trans_a else am) @ (bm.T if trans_b else bm)
            idx = c_offset + i * stride_c + np.arange(m)[:, None] * ldc + np.arange(n)[None, :]
            fc[idx] = to_storage(product.astype(np.float32), dtype)
        cl.enqueue_copy(self.queue, c, fc)


@pytest.fixture
def vendor_handle(handle):
    """The module's handle, its backend posing as one with a vendor GEMM. Its invoker cache is
    emptied around the test: invokers are cached by problem and solver, not by GEMM path."""
    original = handle.backend.__class__
    handle._invokers.clear()
    handle.backend.__class__ = NumpyGemmBackend
    try:
        yield handle
    finally:
        handle.backend.__class__ = original
        handle._invokers.clear()


def test_gemm_vendor_path(vendor_handle):
    rng = np.random.default_rng(7)
    problems = (
        [
            make(
                "fp32",
                (2, 6, 7, 9),
                (6, 3, 3, 2),
                d,
                ("NCHW", "NHWC", "NCHW"),
                pads=(1, 0),
                strides=(2, 1),
                dilations=(1, 2),
                groups=2,
            )
            for d in "FBW"
        ]
        + [make("fp16", (3, 4, 5, 5), (6, 4, 1, 1), d, ("NHWC",) * 3, pads=(0, 0)) for d in "FBW"]
        + [make("bf16", (2, 4, 5, 5), (4, 2, 1, 1), d, pads=(0, 0), groups=2) for d in "FBW"]
        + [make("fp16", (2, 3, 2, 4, 5), (2, 3, 2, 2, 2), d, ("NCDHW",) * 3, pads=(1, 0, 1)) for d in "FBW"]
    )
    used = set()
    for problem in problems:
        solver = the_gemm_solver(vendor_handle, problem)
        solution = solve(vendor_handle, problem, solver)
        assert solution.extra["vendor_gemm"] is True
        assert not any(spec.file == "gemm" for spec in solution.kernels)
        NumpyGemmBackend.calls = 0
        check(vendor_handle, problem, solver, rng)
        assert NumpyGemmBackend.calls >= 1
        used.add(solver.name)
    assert used == {s.name for s in ALL}


def test_gemm_vendor_workspace_has_the_data_type(vendor_handle):
    """Backward data keeps its GEMM result in fp32 on our kernel, in the data type on a vendor GEMM
    (whose output type is its input type)."""
    problem = make("fp16", (2, 3, 6, 6), (4, 3, 3, 3), "B", pads=(1, 1)).conv_view()
    assert GemmBwdRest().workspace_size(vendor_handle, problem) == 3 * 9 * 36 * 2 * 2
    own = SimpleNamespace(info=vendor_handle.info, backend=None)
    assert GemmBwdRest().workspace_size(own, problem) == 3 * 9 * 36 * 2 * 4


# ---- plans, without a device ----------------------------------------------------------------------
def test_nhwc_batch_folds_into_one_product():
    nhwc = make("fp32", (4, 8, 5, 5), (6, 8, 1, 1), layouts=("NHWC",) * 3, pads=(0, 0)).conv_view()
    (plan,) = GemmFwd1x1_0_1().work(None, nhwc).steps
    assert (plan.batch0, plan.batch1) == (1, 1) and plan.n == 4 * 25
    nchw = make("fp32", (4, 8, 5, 5), (6, 4, 1, 1), pads=(0, 0), groups=2).conv_view()
    (plan,) = GemmFwd1x1_0_1().work(None, nchw).steps
    assert (plan.batch0, plan.batch1, plan.m, plan.n, plan.k) == (4, 2, 3, 25, 4)


def test_blas_layouts():
    row = Operand("x", 0, 7, 1)
    assert gemm._blas_layout(row, 3, 5) == (False, 7)
    assert gemm._blas_layout(row.t(), 5, 3) == (True, 7)
    assert gemm._blas_layout(Operand("x", 0, 3, 2), 4, 4) is None  # no unit stride
    assert gemm._blas_layout(Operand("x", 0, 1, 1), 1, 9) == (False, 9)  # one row: any stride
    plan = GemmPlan(4, 6, 5, row, Operand("y", 0, 1, 9), Operand("w", 0, 1, 4))
    blas = gemm._blas_plan(plan)
    assert blas is not None and (blas.m, blas.n) == (6, 4) and blas.c.cs == 1  # C^T = B^T A^T


# ---- applicability ---------------------------------------------------------------------------------
def test_applicability_reasons(handle):
    p3 = make("fp32", (2, 4, 6, 6), (4, 4, 3, 3), "F", pads=(1, 1)).conv_view()
    assert "direction" in GemmBwdRest().is_applicable(handle, p3)
    assert "1x1" in GemmFwd1x1_0_1().is_applicable(handle, p3)
    p1 = make("fp32", (2, 4, 6, 6), (4, 4, 1, 1), "F", pads=(0, 0)).conv_view()
    assert "GemmFwd1x1_0_1" in GemmFwdRest().is_applicable(handle, p1)
    strided1x1 = make("fp32", (2, 4, 6, 6), (4, 4, 1, 1), "B", pads=(0, 0), strides=(2, 2)).conv_view()
    assert "1x1" in GemmBwd1x1_stride1().is_applicable(handle, strided1x1)
    assert GemmBwdRest().is_applicable(handle, strided1x1) is None
    wrw = make("fp32", (2, 4, 6, 6), (4, 4, 1, 1), "W", pads=(0, 0)).conv_view()
    assert "NCHW" in GemmWrw1x1_stride1().is_applicable(handle, wrw)
    assert GemmWrwUniversal().is_applicable(handle, wrw) is None
    x = TensorDesc("fp32", (2, 3, 6, 7), strides=(200, 60, 9, 1))
    w = TensorDesc("fp32", (4, 3, 3, 3))
    for direction in "FBW":
        strided = ConvProblem.create(x, w, ConvDesc((1, 1)), direction).conv_view()
        for solver in ALL:
            reason = solver.is_applicable(handle, strided)
            assert reason is not None and (
                "x is not packed" in reason or "direction" in reason or "1x1" in reason
            )
    tiny = SimpleNamespace(info=DeviceInfo("tiny", "tiny", 1, "", max_work_group_size=128), backend=None)
    assert "work-group" in GemmFwdRest().is_applicable(tiny, p3)


def test_registry_order():
    names = [s.name for s in CONV_SOLVERS]
    for solver in ALL:
        assert names.index(solver.name) < names.index("ConvDirectNaiveFwd")
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)
    assert {s.id for s in ALL} == {88, 91, 96, 97, 101, 102}
    assert all(s.algorithm == "gemm" for s in ALL)


def test_exactly_one_gemm_solver_per_packed_problem(handle):
    rng = np.random.default_rng(8)
    for dims, _ in itertools.product((2, 3), range(15)):
        for problem in random_geometry(rng, "fp32", dims):
            the_gemm_solver(handle, problem)
