"""The CUDA backend on a GPU: the naive convolutions against the NumPy reference, zero-copy
buffers (CuPy, PyTorch), cuBLAS GEMM against NumPy, raw launches and event timing."""

from __future__ import annotations

import numpy as np
import pytest

from miopy import backends
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.reference.conv import conv_reference_buffers, rms_range, store_logical, view
from miopy.reference.tolerance import tolerance
from miopy.solution import InvokeArgs
from miopy.tensor import DataType, TensorDesc, from_storage, to_storage

_WHY = backends.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]

DTYPES = ("fp32", "fp16", "bf16")
NAIVE = {
    Direction.FORWARD: "ConvDirectNaiveFwd",
    Direction.BACKWARD_DATA: "ConvDirectNaiveBwd",
    Direction.BACKWARD_WEIGHTS: "ConvDirectNaiveWrw",
}


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def make_problem(case: str, dtype: str, direction: str) -> ConvProblem:
    if case == "grouped_nhwc_2d":
        x = TensorDesc(dtype, (2, 6, 7, 9), layout="NHWC")
        w = TensorDesc(dtype, (4, 3, 3, 2), layout="NHWC")
        conv = ConvDesc((1, 0), (2, 1), (1, 2), groups=2)
        return ConvProblem.create(x, w, conv, direction)
    if case == "3d":
        x = TensorDesc(dtype, (2, 4, 4, 5, 6), layout="NCDHW")
        w = TensorDesc(dtype, (6, 4, 2, 3, 3), layout="NCDHW")
        conv = ConvDesc((1, 1, 0), (1, 2, 1), (1, 1, 2))
        return ConvProblem.create(x, w, conv, direction, y_layout="NDHWC")
    if case == "transposed":
        x = TensorDesc(dtype, (2, 6, 5, 7))
        w = TensorDesc(dtype, (6, 2, 3, 3))
        conv = ConvDesc((1, 0), (2, 2), groups=2, mode="trans", trans_output_pads=(1, 0))
        return ConvProblem.create(x, w, conv, direction)
    raise ValueError(case)


def random_buffers(problem: ConvProblem, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for role, desc in (("x", problem.x), ("w", problem.w), ("y", problem.y)):
        values = rng.uniform(-1, 1, desc.lens).astype(np.float32)
        if role == problem.output_role:
            values[...] = np.nan  # unwritten outputs show up as NaN
        out[role] = store_logical(values, desc)
    return out


def output_of(problem: ConvProblem, flat: np.ndarray) -> np.ndarray:
    desc = {"x": problem.x, "w": problem.w, "y": problem.y}[problem.output_role]
    return from_storage(view(flat, desc), problem.dtype)


def solution_for(handle, problem: ConvProblem, solver_name: str | None = None):
    from miopy.engine.candidates import make_solution
    from miopy.solvers import CONV_SOLVERS, by_name

    v = problem.conv_view()
    if solver_name is None:
        solver = by_name(NAIVE[v.direction])
    else:
        solver = next(s for s in CONV_SOLVERS if s.name == solver_name)
    assert solver is not None and solver.is_applicable(handle, v) is None
    return make_solution(handle, problem, solver)


# ---- device ---------------------------------------------------------------------------------
def test_device_info(handle):
    info = handle.info
    assert handle.backend.name == "cuda"
    assert info.arch.startswith("sm_") and info.compute_units > 0
    assert "nvrtc" in info.fingerprint and info.fingerprint.endswith(handle.backend.target)
    # what a CUBIN depends on, nothing of the driver: packages are built without one
    assert "driver" not in info.fingerprint
    assert info.max_work_group_size >= 256 and info.local_mem_size >= 16384
    print(info)


def test_memory_roundtrip(handle):
    be = handle.backend
    host = np.arange(1000, dtype=np.float32)
    buf = be.upload(host)
    assert be.nbytes(buf) == host.nbytes
    other = be.alloc(host.nbytes)
    be.copy(other, buf, host.nbytes)
    out = np.empty_like(host)
    be.download(other, out)
    np.testing.assert_array_equal(out, host)
    half = np.empty(500, np.float32)
    be.download(buf, half)  # a prefix
    np.testing.assert_array_equal(half, host[:500])


def test_launch_scalars_by_value(handle):
    """Pointers, int32, int64 and float32 arguments land with the right sizes, 2-D geometry too."""
    be = handle.backend
    src = (
        'extern "C" __global__ void axpy(float* y, const float* x, float a, int n, long long off,'
        " int cols) {\n"
        "  long long i = (long long)(blockIdx.y * blockDim.y + threadIdx.y) * cols"
        " + blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) y[i] = a * x[i] + (float)(off >> 32);\n}\n"
    )
    kernel = be.load(be.build(src, "axpy.cu", []), "axpy")
    n = 16 * 8
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    xb, yb = be.upload(x), be.alloc(4 * n)
    args = [yb, xb, np.float32(2.5), np.int32(n), np.int64(1 << 33), np.int32(16)]
    be.launch(kernel, (16, 8), (8, 4), args)
    y = np.empty(n, np.float32)
    be.download(yb, y)
    # off >> 32 == 2 only if all 64 bits came; the GPU fuses a * x + 2 into one FMA (one rounding)
    np.testing.assert_allclose(y, 2.5 * x + 2.0, rtol=1e-6, atol=1e-6)


def test_launch_with_dynamic_shared_memory(handle):
    """More than 48 KB of dynamic shared memory: the limit is raised at launch; too much is refused."""
    from miopy.errors import BadParm

    be = handle.backend
    src = (
        'extern "C" __global__ void rev(float* y, const float* x, int n) {\n'
        "  extern __shared__ float s[];\n"
        "  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];\n"
        "  __syncthreads();\n"
        "  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = s[n - 1 - i];\n}\n"
    )
    kernel = be.load(be.build(src, "rev.cu", []), "rev")
    n = 100 * 1024 // 4
    assert be.info.max_dynamic_shared >= n * 4
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    xb, yb = be.upload(x), be.alloc(4 * n)
    be.launch(kernel, (256,), (256,), [yb, xb, np.int32(n)], shared_mem=n * 4)
    y = np.empty(n, np.float32)
    be.download(yb, y)
    np.testing.assert_array_equal(y, x[::-1])
    with pytest.raises(BadParm, match="shared_mem"):
        be.launch(kernel, (256,), (256,), [yb, xb, np.int32(n)], shared_mem=be.info.max_dynamic_shared + 1)


def test_cooperative_launch_meets_at_a_grid_barrier(handle):
    """A kernel whose blocks wait for one another (a grid-wide barrier on a counter) runs when
    launched cooperatively, directly and as a prepared call; a grid that cannot all be resident is
    refused with an error at launch instead of hanging."""
    from miopy.errors import InternalError

    be = handle.backend
    src = (
        'extern "C" __global__ void meet(unsigned* count, float* y, const float* x, unsigned blocks) {\n'
        "  if (threadIdx.x == 0) {\n"
        "    atomicAdd(count, 1u);\n"
        "    while (atomicAdd(count, 0u) < blocks) { }\n"
        "  }\n"
        "  __syncthreads();\n"
        "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  y[i] = x[i] + (float)atomicAdd(count, 0u);\n}\n"
    )
    kernel = be.load(be.build(src, "meet.cu", []), "meet")
    blocks = be.info.compute_units  # one block of 128 threads per SM: always co-resident
    n = blocks * 128
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    xb, yb = be.upload(x), be.alloc(4 * n)
    for how in ("direct", "prepared"):
        count = be.upload(np.zeros(1, np.uint32))
        args = [count, yb, xb, np.uint32(blocks)]
        if how == "direct":
            be.launch(kernel, (n,), (128,), args, cooperative=True)
        else:
            be.prepare_launch(kernel, (n,), (128,), args, cooperative=True)()
        y = np.empty(n, np.float32)
        be.download(yb, y)
        np.testing.assert_array_equal(y, x + np.float32(blocks))
    too_many = blocks * 64  # 1024-thread blocks, 64 per SM: more than any SM holds
    big = be.alloc(4 * too_many * 1024)
    with pytest.raises(InternalError, match="resident"):
        be.launch(
            kernel, (too_many * 1024,), (1024,), [count, big, big, np.uint32(too_many)], cooperative=True
        )
    be.synchronize()


def test_compile_error(handle):
    from miopy.errors import CompileError

    with pytest.raises(CompileError, match="nope"):
        handle.backend.build('extern "C" __global__ void f() { nope(); }', "bad.cu", [])


# ---- naive convolutions vs the reference ------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", ["F", "B", "W"])
@pytest.mark.parametrize("case", ["grouped_nhwc_2d", "3d", "transposed"])
def test_naive_conv(handle, case, direction, dtype):
    problem = make_problem(case, dtype, direction)
    sol = solution_for(handle, problem)
    bufs = random_buffers(problem)
    expected = conv_reference_buffers(problem, bufs)
    sol.run(handle, bufs)
    err = rms_range(output_of(problem, bufs[problem.output_role]), expected)
    assert err < tolerance(problem), f"{sol.solver} {problem.key()}: error {err}"


@pytest.mark.parametrize("direction", ["F", "B", "W"])
def test_every_applicable_solver(handle, direction):
    """Whatever solvers are registered, those that take this problem agree with the reference."""
    from miopy.solvers import CONV_SOLVERS

    x = TensorDesc("fp32", (2, 8, 10, 12))
    w = TensorDesc("fp32", (16, 8, 3, 3))
    problem = ConvProblem.create(x, w, ConvDesc((1, 1)), direction)
    v = problem.conv_view()
    ran = []
    for solver in CONV_SOLVERS:
        if solver.is_applicable(handle, v) is not None:
            continue
        sol = solution_for(handle, problem, solver.name)
        bufs = random_buffers(problem)
        expected = conv_reference_buffers(problem, bufs)
        sol.run(handle, bufs)
        err = rms_range(output_of(problem, bufs[problem.output_role]), expected)
        assert err < tolerance(problem) * 4, f"{solver.name}: error {err}"  # TF32-free GEMMs included
        ran.append(solver.name)
    assert ran


# ---- zero-copy ----------------------------------------------------------------------------------
def test_zero_copy_cupy(handle, cp):
    problem = make_problem("grouped_nhwc_2d", "fp32", "F")
    sol = solution_for(handle, problem)
    host = random_buffers(problem)
    expected = conv_reference_buffers(problem, host)
    dev = {role: cp.asarray(buf) for role, buf in host.items()}
    wrapped = handle.backend.wrap(dev["y"])
    assert wrapped.data.ptr == dev["y"].data.ptr and handle.backend.nbytes(wrapped) == dev["y"].nbytes
    sol.run(handle, dev)
    got = output_of(problem, cp.asnumpy(dev["y"]))
    assert rms_range(got, expected) < tolerance(problem)


def test_zero_copy_cupy_strided_view(handle, cp):
    base = cp.arange(64, dtype=cp.float32).reshape(8, 8)
    sub = base[2:, ::2]  # non-contiguous: the wrap spans the view's memory
    wrapped = handle.backend.wrap(sub)
    assert wrapped.data.ptr == sub.data.ptr
    assert handle.backend.nbytes(wrapped) == (5 * 8 + 3 * 2 + 1) * 4


def test_wrap_rejects_host_arrays(handle):
    assert handle.backend.wrap(np.zeros(4, np.float32)) is None
    assert handle.backend.wrap([1, 2, 3]) is None


def torch_check(dtype: str) -> float:
    """Run a transposed convolution on PyTorch CUDA tensors; return the error. Called in a fresh
    process by test_zero_copy_torch, which imports torch first (as applications do)."""
    import torch

    from miopy.handle import Handle

    handle = Handle("cuda")
    problem = make_problem("transposed", dtype, "F")
    sol = solution_for(handle, problem)
    host = random_buffers(problem)
    expected = conv_reference_buffers(problem, host)
    device = f"cuda:{handle.backend.device_id}"
    dev = {role: torch.from_numpy(buf.copy()).to(device) for role, buf in host.items()}
    dev["w"].requires_grad_(True)  # an input that needs grad is still shared, through detach()
    out_role = problem.output_role
    wrapped = handle.backend.wrap(dev[out_role])
    assert wrapped.data.ptr == dev[out_role].data_ptr(), "not zero-copy"
    sol.run(handle, dev)
    torch.cuda.synchronize()
    err = rms_range(output_of(problem, dev[out_role].cpu().numpy()), expected)
    assert err < tolerance(problem), f"error {err}"
    return err


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_zero_copy_torch(dtype):
    """In a subprocess: on the GPU machine, importing torch inside this pytest process failed
    (torch 2.11 parsing one of its own op schemas), while a plain process imports it fine."""
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    code = (
        "import sys\n"
        "try:\n"
        "    import torch\n"
        "    ok = torch.cuda.is_available()\n"
        "except Exception as exc:\n"
        "    print('SKIP torch cannot be imported:', type(exc).__name__, exc); sys.exit(0)\n"
        "if not ok:\n"
        "    print('SKIP torch has no CUDA'); sys.exit(0)\n"
        f"sys.path.insert(0, {str(here)!r})\n"
        "import test_cuda_runtime as t\n"
        f"print('OK', t.torch_check({dtype!r}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=here.parent.parent
    )
    assert out.returncode == 0, out.stdout + out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip(out.stdout.strip())
    assert "OK" in out.stdout, out.stdout + out.stderr


def test_zero_copy_dlpack_only(handle, cp):
    """An object that only speaks DLPack (no CUDA array interface) is wrapped too."""
    arr = cp.arange(10, dtype=cp.float32)

    class OnlyDlpack:
        def __dlpack__(self, **kwargs):
            return arr.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return arr.__dlpack_device__()

    wrapped = handle.backend.wrap(OnlyDlpack())
    assert wrapped.data.ptr == arr.data.ptr and handle.backend.nbytes(wrapped) == 40


# ---- cuBLAS ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("batch", [1, 3])
def test_gemm(handle, dtype, trans_a, trans_b, batch):
    be = handle.backend
    dt = DataType.parse(dtype)
    rng = np.random.default_rng(7)
    m, n, k = 37, 29, 70
    a_rows, a_cols = (k, m) if trans_a else (m, k)
    b_rows, b_cols = (n, k) if trans_b else (k, n)
    lda, ldb, ldc = a_cols + 3, b_cols + 1, n + 5  # padded leading dims
    a_off, b_off, c_off = 5, 2, 3
    sa, sb, sc = a_rows * lda + 7, b_rows * ldb, m * ldc + 1
    a_vals = rng.uniform(-1, 1, a_off + batch * sa).astype(np.float32)
    b_vals = rng.uniform(-1, 1, b_off + batch * sb).astype(np.float32)
    a_st, b_st = to_storage(a_vals, dt), to_storage(b_vals, dt)
    sentinel = to_storage(np.full(c_off + batch * sc, 123.0, np.float32), dt)
    ab, bb, cb = be.upload(a_st), be.upload(b_st), be.upload(sentinel)
    be.gemm(
        dt,
        trans_a,
        trans_b,
        m,
        n,
        k,
        ab,
        a_off,
        lda,
        bb,
        b_off,
        ldb,
        cb,
        c_off,
        ldc,
        batch=batch,
        stride_a=sa if batch > 1 else 0,
        stride_b=sb if batch > 1 else 0,
        stride_c=sc if batch > 1 else 0,
    )
    c_st = np.empty_like(sentinel)
    be.download(cb, c_st)
    a64 = from_storage(a_st, dt).astype(np.float64)
    b64 = from_storage(b_st, dt).astype(np.float64)
    c_all = from_storage(c_st, dt).astype(np.float64)
    touched = np.zeros(c_all.shape, bool)
    for i in range(batch):
        a = a64[a_off + i * sa :][: a_rows * lda].reshape(a_rows, lda)[:, :a_cols]
        b = b64[b_off + i * sb :][: b_rows * ldb].reshape(b_rows, ldb)[:, :b_cols]
        ref = (a.T if trans_a else a) @ (b.T if trans_b else b)
        start = c_off + i * sc
        got = c_all[start : start + m * ldc].reshape(m, ldc)[:, :n]
        touched[start : start + m * ldc].reshape(m, ldc)[:, :n] = True
        tol = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}[dtype]
        assert rms_range(got, ref) < tol, f"batch {i}: error {rms_range(got, ref)}"
    assert np.all(c_all[~touched] == 123.0), "GEMM wrote outside C"


def test_gemm_checks_buffer_sizes(handle):
    from miopy.errors import BadParm

    be = handle.backend
    small = be.alloc(16)
    with pytest.raises(BadParm):
        be.gemm(DataType.FP32, False, False, 8, 8, 8, small, 0, 8, small, 0, 8, small, 0, 8)


# ---- timing ---------------------------------------------------------------------------------------
def test_time_ms(handle):
    be = handle.backend
    a = be.upload(np.ones(256 * 256, np.float32))
    c = be.alloc(256 * 256 * 4)
    times = be.time_ms(
        lambda: be.gemm(DataType.FP32, False, False, 256, 256, 256, a, 0, 256, a, 0, 256, c, 0, 256), 3
    )
    assert len(times) == 3 and all(t > 0 for t in times)
    problem = make_problem("3d", "fp32", "F")
    sol = solution_for(handle, problem)
    invoker = handle.prepare_invoker(sol)
    bufs = {role: be.upload(b) for role, b in random_buffers(problem).items()}
    times = be.time_ms(lambda: invoker(InvokeArgs(bufs)), 2)
    assert len(times) == 2 and all(t > 0 for t in times)


def test_kernel_cache_second_handle_loads_binary(handle):
    """A second Handle finds the CUBINs the first one built (the cache stores what build made)."""
    from miopy.handle import Handle

    problem = make_problem("grouped_nhwc_2d", "fp16", "B")
    sol = solution_for(handle, problem)
    sol.run(handle, random_buffers(problem))
    other = Handle("cuda")
    sol2 = solution_for(other, problem)
    bufs = random_buffers(problem)
    expected = conv_reference_buffers(problem, bufs)
    sol2.run(other, bufs)
    assert rms_range(output_of(problem, bufs[problem.output_role]), expected) < tolerance(problem)
