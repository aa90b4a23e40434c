"""cuBLAS and cuBLASLt through ctypes: the cheapest calls Python can make, on our own handles.

The libraries are the ones the CUDA wheels ship (``nvidia-cublas``, found by cuda.pathfinder), or
the system's. Nothing here is imported by CI machines without a GPU except for its constants.

cuBLASLt: a ``LtGemm`` describes one column-major product ``D = op(A) op(B)`` (``alpha`` 1,
``beta`` 0, fp32 accumulation without TF32) with its batch; ``algos()`` asks cuBLASLt's heuristics
for its candidate algorithms (an index into that list is the config find times and the perf DB
keeps), and ``prepare`` binds pointers into a call of about a microsecond."""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import Any

from miopy import log
from miopy.errors import BackendUnavailable, InternalError

_log = log.get("miopy.backends.cuda_libs")

CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
COMPUTE_32F = 68  # CUBLAS_COMPUTE_32F: plain fp32, never TF32
GEMM_DEFAULT = -1
OP_N, OP_T = 0, 1
POINTER_MODE_HOST = 0
DEFAULT_MATH = 0

# cublasLtMatmulDescAttributes_t, cublasLtMatrixLayoutAttribute_t, cublasLtMatmulPreferenceAttributes_t
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_LAYOUT_BATCH_COUNT, _LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
_PREF_MAX_WORKSPACE_BYTES = 1
_PREF_MIN_ALIGNMENT = (5, 6, 7, 8)  # A, B, C, D

LT_WORKSPACE = 32 << 20  # what cuBLASLt may use (its Hopper split-K kernels want tens of MiB)
LT_ALIGNMENT = 16  # bytes every pointer handed to a cuBLASLt call must be aligned to
LT_MAX_ALGOS = 16

_vp, _i32, _i64, _u64, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t


class _Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):
    _fields_ = [
        ("algo", _Algo),
        ("workspace", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


def _load(name: str, sonames: tuple[str, ...]) -> ctypes.CDLL:
    try:
        from cuda import pathfinder

        return ctypes.CDLL(pathfinder.load_nvidia_dynamic_lib(name).abs_path)
    except Exception as exc:  # no wheel: try the system's library
        _log.debug("cuda.pathfinder did not find %s (%s)", name, exc)
    for soname in sonames:
        try:
            return ctypes.CDLL(soname)
        except OSError:
            continue
    raise BackendUnavailable(f"{name}: library not found (pip install nvidia-cublas)")


def _sig(lib: ctypes.CDLL, name: str, *argtypes: Any) -> Any:
    fn = getattr(lib, name)
    fn.argtypes = list(argtypes)
    fn.restype = ctypes.c_int
    return fn


@functools.cache
def cublas() -> Any:
    lib = _load("cublas", ("libcublas.so.13", "libcublas.so.12", "libcublas.so"))
    ns = type("cublas", (), {})()
    ns.create = _sig(lib, "cublasCreate_v2", ctypes.POINTER(_vp))
    ns.set_stream = _sig(lib, "cublasSetStream_v2", _vp, _vp)
    ns.set_pointer_mode = _sig(lib, "cublasSetPointerMode_v2", _vp, _i32)
    ns.set_math_mode = _sig(lib, "cublasSetMathMode", _vp, _i32)
    mat = (_vp, _i32, _i32)  # pointer, type, ld
    ns.gemm = _sig(
        lib, "cublasGemmEx", _vp, _i32, _i32, _i32, _i32, _i32, _vp, *mat, *mat, _vp, *mat, _i32, _i32
    )
    smat = (_vp, _i32, _i32, ctypes.c_longlong)  # pointer, type, ld, batch stride
    ns.gemm_batched = _sig(
        lib,
        "cublasGemmStridedBatchedEx",
        *(_vp, _i32, _i32, _i32, _i32, _i32, _vp),
        *smat,
        *smat,
        _vp,
        *smat,
        *(_i32, _i32, _i32),
    )
    return ns


@functools.cache
def cublaslt() -> Any:
    lib = _load("cublasLt", ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"))
    ns = type("cublasLt", (), {})()
    ns.create = _sig(lib, "cublasLtCreate", ctypes.POINTER(_vp))
    ns.desc_create = _sig(lib, "cublasLtMatmulDescCreate", ctypes.POINTER(_vp), _i32, _i32)
    ns.desc_set = _sig(lib, "cublasLtMatmulDescSetAttribute", _vp, _i32, _vp, _sz)
    ns.layout_create = _sig(lib, "cublasLtMatrixLayoutCreate", ctypes.POINTER(_vp), _i32, _u64, _u64, _i64)
    ns.layout_set = _sig(lib, "cublasLtMatrixLayoutSetAttribute", _vp, _i32, _vp, _sz)
    ns.pref_create = _sig(lib, "cublasLtMatmulPreferenceCreate", ctypes.POINTER(_vp))
    ns.pref_set = _sig(lib, "cublasLtMatmulPreferenceSetAttribute", _vp, _i32, _vp, _sz)
    ns.heuristic = _sig(
        lib,
        "cublasLtMatmulAlgoGetHeuristic",
        *(_vp,) * 7,
        _i32,
        ctypes.POINTER(_Heuristic),
        ctypes.POINTER(_i32),
    )
    ns.matmul = _sig(lib, "cublasLtMatmul", *(_vp,) * 14, _sz, _vp)
    return ns


def check(status: int, what: str) -> None:
    if status:
        raise InternalError(f"{what} failed with cublasStatus_t {status}")


_lt_handle: int | None = None
_lt_lock = threading.Lock()


def lt_handle() -> int:
    global _lt_handle
    with _lt_lock:
        if _lt_handle is None:
            h = _vp()
            check(cublaslt().create(ctypes.byref(h)), "cublasLtCreate")
            _lt_handle = h.value
    return _lt_handle


class LtGemm:
    """One column-major cuBLASLt product: D[m, n] = op_a(A) op_b(B), each a batch of ``batch``
    matrices ``stride_*`` elements apart; ``a_dims`` / ``b_dims`` are the stored (rows, cols)."""

    def __init__(
        self,
        data_type: int,
        op_a: int,
        op_b: int,
        m: int,
        n: int,
        k: int,
        lda: int,
        ldb: int,
        ldc: int,
        batch: int = 1,
        stride_a: int = 0,
        stride_b: int = 0,
        stride_c: int = 0,
    ):
        lt = cublaslt()
        self.key = (data_type, op_a, op_b, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c)
        desc = _vp()
        check(lt.desc_create(ctypes.byref(desc), COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")
        for attr, value in ((_DESC_TRANSA, op_a), (_DESC_TRANSB, op_b)):
            v = ctypes.c_int32(value)
            check(lt.desc_set(desc, attr, ctypes.byref(v), 4), "cublasLtMatmulDescSetAttribute")
        self.desc = desc
        a_dims = (m, k) if op_a == OP_N else (k, m)
        b_dims = (k, n) if op_b == OP_N else (n, k)
        self.layouts = [
            self._layout(data_type, rows, cols, ld, batch, stride)
            for (rows, cols), ld, stride in (
                (a_dims, lda, stride_a),
                (b_dims, ldb, stride_b),
                ((m, n), ldc, stride_c),
            )
        ]
        self._algos: list[tuple[_Algo, int]] | None = None

    @staticmethod
    def _layout(data_type: int, rows: int, cols: int, ld: int, batch: int, stride: int) -> Any:
        lt = cublaslt()
        layout = _vp()
        check(lt.layout_create(ctypes.byref(layout), data_type, rows, cols, ld), "cublasLtMatrixLayoutCreate")
        if batch > 1:
            count, offset = ctypes.c_int32(batch), ctypes.c_int64(stride)
            check(lt.layout_set(layout, _LAYOUT_BATCH_COUNT, ctypes.byref(count), 4), "layout batch")
            check(
                lt.layout_set(layout, _LAYOUT_STRIDED_BATCH_OFFSET, ctypes.byref(offset), 8), "layout stride"
            )
        return layout

    def algos(self) -> list[tuple[_Algo, int]]:
        """cuBLASLt's candidates, best guess first: (algorithm, workspace bytes)."""
        if self._algos is None:
            lt = cublaslt()
            pref = _vp()
            check(lt.pref_create(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
            ws = ctypes.c_uint64(LT_WORKSPACE)
            check(lt.pref_set(pref, _PREF_MAX_WORKSPACE_BYTES, ctypes.byref(ws), 8), "preference workspace")
            for attr in _PREF_MIN_ALIGNMENT:
                align = ctypes.c_uint32(LT_ALIGNMENT)
                check(lt.pref_set(pref, attr, ctypes.byref(align), 4), "preference alignment")
            results = (_Heuristic * LT_MAX_ALGOS)()
            count = ctypes.c_int32(0)
            a, b, c = self.layouts
            status = lt.heuristic(
                lt_handle(), self.desc, a, b, c, c, pref, LT_MAX_ALGOS, results, ctypes.byref(count)
            )
            if status:
                _log.info("cuBLASLt has no algorithm for %s (status %d)", self.key, status)
                self._algos = []
            else:
                self._algos = [
                    (results[i].algo, int(results[i].workspace))
                    for i in range(count.value)
                    if results[i].state == 0
                ]
        return self._algos

    def prepare(
        self, index: int, a: int, b: int, d: int, workspace: int, owner: Any, beta: float = 0.0
    ) -> Callable[[], None]:
        """A call of candidate ``index`` on these device addresses, on the stream ``owner._sptr``
        holds when it runs (the CUDA backend); D = op(A) op(B) + ``beta`` D."""
        algo, need = self.algos()[index]
        for name, ptr in (("A", a), ("B", b), ("D", d), ("workspace", workspace)):
            if ptr % LT_ALIGNMENT:
                raise InternalError(f"cuBLASLt {name} pointer {ptr:#x} is not {LT_ALIGNMENT}-byte aligned")
        scalars = (ctypes.c_float * 2)(1.0, float(beta))
        alpha, beta_p = ctypes.addressof(scalars), ctypes.addressof(scalars) + 4
        la, lb, lc = self.layouts
        matmul, handle, desc, algo_p = cublaslt().matmul, lt_handle(), self.desc, ctypes.addressof(algo)

        def call() -> None:
            status = matmul(
                handle, desc, alpha, a, la, b, lb, beta_p, d, lc, d, lc, algo_p, workspace, need, owner._sptr
            )
            if status:
                check(status, "cublasLtMatmul")

        call.keep = (scalars, algo, self)  # type: ignore[attr-defined]
        return call
