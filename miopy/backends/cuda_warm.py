"""Loading cuBLAS's and cuBLASLt's kernels before the first iteration needs them.

CUDA loads a library's kernels lazily (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2): the
first cuBLAS or cuBLASLt call that picks a kernel loads it (0.1-0.4 ms each on an H200), and the
first cuBLASLt call of a process initializes the library (about 0.07 s there). A kernel package knows the
library calls its chosen solutions make (``describe``, at build time; the ``kdb_library`` table);
a handle on a GPU that has the package runs each once (``warm``) on a thread of its own, right after
the BLAS handles are made, on scratch memory, a private non-blocking stream and a private cuBLAS
handle, so that the same kernels are loaded when the first iteration calls them. The results are
garbage and thrown away; nothing of the user's is touched, the calls do not wait for the user's
stream nor it for them. MIOPY_LIBRARY_WARM_UP=1 turns it on: it is off by default, since it
competes with whatever the process does meanwhile (measured on an H200 with a ResNet-50 training
iteration's problems: 0.08 s off the first iteration, 0.25 s more for the set-up before it).

``warm_on_stream`` is the other warm-up, on by default with a package that names cuBLASLt
algorithms (MIOPY_LIBRARY_STREAM_WARM_UP): one call per distinct algorithm on the handle's own
stream (as the user set it last; skipped while that stream is being captured), made by the set-up
thread after the algorithms were checked, since the first cuBLASLt call of a process on a stream
blocked the host (about 10 ms in an H200 first iteration) even after the private-stream warm-up.

The descriptions are data read from a package: every field is checked (``parse``), the scratch
memory is sized from the call itself (so no call reads or writes past it), and a call that needs
more than WARM_MAX_BYTES is skipped."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any

from miopy import log
from miopy.solution import Call, Gemm

_log = log.get("miopy.backends.cuda_warm")

WARM_MAX_BYTES = 256 << 20  # scratch for the largest call (operands alias one region) + workspace
_DTYPES = {"FP32": (0, 4), "FP16": (2, 2), "BF16": (14, 2)}  # cudaDataType_t, bytes
_LT_ITEM = {0: 4, 2: 2, 14: 2}
_MAX_DIM = 1 << 31
_GEMM_FIELDS = ("m", "n", "k", "lda", "ldb", "ldc", "batch", "stride_a", "stride_b", "stride_c")


def describe(step: Any) -> dict[str, Any] | None:
    """The JSON description of a program step that calls cuBLAS (``Gemm``) or cuBLASLt
    (``Call("lt_matmul", ...)``), or None for any other step."""
    if isinstance(step, Gemm):
        dtype = str(getattr(step.dtype, "value", step.dtype))
        head = {"kind": "gemm", "dtype": dtype, "trans_a": bool(step.trans_a), "trans_b": bool(step.trans_b)}
        return head | {f: int(getattr(step, f)) for f in _GEMM_FIELDS}
    if isinstance(step, Call) and step.method == "lt_matmul" and len(step.args) >= 2:
        gemm, algo = step.args[0], step.args[1]
        key = getattr(gemm, "key", None)
        if key is None:
            return None
        choice = list(algo.config) if hasattr(algo, "config") else int(algo)
        return {"kind": "lt", "key": [int(v) for v in key], "algo": choice}
    return None


def _int(value: Any, low: int = 0, high: int = _MAX_DIM) -> int | None:
    return value if type(value) is int and low <= value <= high else None


@dataclass(frozen=True)
class _GemmCall:
    dtype: str
    trans_a: bool
    trans_b: bool
    dims: tuple[int, ...]  # m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c

    def nbytes(self) -> int:
        m, n, k, lda, ldb, ldc, batch, sa, sb, sc = self.dims
        shapes = (
            ((k, m) if self.trans_a else (m, k), lda, sa),
            ((n, k) if self.trans_b else (k, n), ldb, sb),
            ((m, n), ldc, sc),
        )
        need = max((batch - 1) * stride + (rows - 1) * ld + cols for (rows, cols), ld, stride in shapes)
        return need * _DTYPES[self.dtype][1]


@dataclass(frozen=True)
class _LtCall:
    key: tuple[int, ...]  # LtGemm's arguments
    algo: tuple[int, ...] | int

    def nbytes(self) -> int:
        t, op_a, op_b, m, n, k, lda, ldb, ldc, batch, sa, sb, sc, _ = self.key
        a = (m, k) if op_a == 0 else (k, m)
        b = (k, n) if op_b == 0 else (n, k)
        # an upper bound for either storage order: ld times the longer side
        need = max(
            (batch - 1) * stride + ld * max(rows, cols)
            for (rows, cols), ld, stride in ((a, lda, sa), (b, ldb, sb), ((m, n), ldc, sc))
        )
        return need * _LT_ITEM[t]


def parse(value: Any) -> _GemmCall | _LtCall | None:
    """A checked call from its JSON description, or None when any field is off."""
    if not isinstance(value, dict):
        return None
    if value.get("kind") == "gemm":
        if set(value) != {"kind", "dtype", "trans_a", "trans_b", *_GEMM_FIELDS}:
            return None
        dims = tuple(_int(value[f], 0 if f.startswith("stride") else 1) for f in _GEMM_FIELDS)
        flags = (value["trans_a"], value["trans_b"])
        if value["dtype"] not in _DTYPES or None in dims or any(type(f) is not bool for f in flags):
            return None
        return _GemmCall(value["dtype"], value["trans_a"], value["trans_b"], dims)  # type: ignore[arg-type]
    if value.get("kind") == "lt" and set(value) == {"kind", "key", "algo"}:
        key, algo = value["key"], value["algo"]
        if not isinstance(key, list) or len(key) != 14 or any(_int(v) is None for v in key):
            return None
        if key[0] not in _LT_ITEM or key[1] not in (0, 1) or key[2] not in (0, 1) or key[13] not in (0, 1):
            return None
        if min(key[3:10]) < 1:
            return None
        if isinstance(algo, list):
            if len(algo) != 9 or any(_int(v, -(1 << 31)) is None for v in algo):
                return None
            return _LtCall(tuple(key), tuple(algo))
        if _int(algo, 0, 1 << 16) is None:
            return None
        return _LtCall(tuple(key), algo)
    return None


def warm(backend: Any, values: list[Any]) -> int:
    """Run each call of ``values`` once on ``backend``'s device; returns how many ran. Never
    raises: a call that fails is skipped (the first iteration then loads its kernels itself)."""
    from miopy.backends import cuda_libs as libs

    calls = [c for c in map(parse, values) if c is not None]
    calls = list(dict.fromkeys(calls))
    if not calls:
        return 0
    started = time.perf_counter()
    cp = backend._cp
    ran = 0
    with backend.device:
        stream = cp.cuda.Stream(non_blocking=True)
        lt_algos = {}
        for call in calls:
            if isinstance(call, _LtCall):
                try:
                    gemm = libs.lt_gemm(call.key)  # the solvers' own product: checked once
                    algo = gemm.resolve(call.algo) if isinstance(call.algo, tuple) else call.algo
                    lt_algos[call] = (gemm, algo, 0 if algo is None else gemm.pick(algo)[1])
                except Exception as exc:
                    _log.debug("warm-up: cuBLASLt product %s skipped (%s)", call.key, exc)
        size = max((c.nbytes() for c in calls if c.nbytes() <= WARM_MAX_BYTES), default=0)
        workspace = max((need for _, _, need in lt_algos.values()), default=0)
        if size == 0:
            return 0
        region = (size + 255) // 256 * 256
        memory = cp.cuda.alloc(region + workspace)
        base = int(memory.ptr)
        blas = ctypes.c_void_p()
        lib = libs.cublas()
        try:
            libs.check(lib.create(ctypes.byref(blas)), "cublasCreate")
            libs.check(lib.set_pointer_mode(blas, libs.POINTER_MODE_HOST), "cublasSetPointerMode")
            libs.check(lib.set_math_mode(blas, libs.DEFAULT_MATH), "cublasSetMathMode")
            libs.check(lib.set_stream(blas, stream.ptr), "cublasSetStream")
            owner = type("WarmStream", (), {"_sptr": stream.ptr})()
            for call in calls:
                if call.nbytes() > WARM_MAX_BYTES:
                    continue
                try:
                    if isinstance(call, _GemmCall):
                        _run_gemm(lib, blas, call, base)
                    elif call in lt_algos and lt_algos[call][1] is not None:
                        gemm, algo, _ = lt_algos[call]
                        gemm.prepare(algo, base, base, base, base + region, owner)()
                    else:
                        continue
                    ran += 1
                except Exception as exc:
                    _log.debug("warm-up: %s skipped (%s)", call, exc)
        finally:
            stream.synchronize()  # before the scratch memory goes back to the pool
            if blas.value:
                lib.destroy(blas)
            del memory
    _log.info("warm-up: %d of %d library calls in %.3f s", ran, len(calls), time.perf_counter() - started)
    return ran


def warm_on_stream(backend: Any, values: list[Any], stream_ptr: int, enqueued: Any) -> int:
    """One cuBLASLt call per distinct algorithm of ``values`` (the smallest call of each; recorded
    algorithms only, rebuilt and checked as the solvers do) on the raw stream ``stream_ptr``, the
    handle's own, on scratch memory: the user's first cuBLASLt call on that stream then finds it
    used. ``enqueued`` (a threading.Event) is set once the calls are enqueued, before they ran,
    whatever happens; the scratch memory goes back to the pool when they are done. Returns how
    many were enqueued; never raises."""
    from miopy.backends import cuda_libs as libs

    ran = 0
    try:
        calls = [c for c in map(parse, values) if isinstance(c, _LtCall) and isinstance(c.algo, tuple)]
        smallest: dict[tuple[int, ...], _LtCall] = {}
        for call in sorted(dict.fromkeys(calls), key=_LtCall.nbytes):
            if call.nbytes() <= WARM_MAX_BYTES:
                smallest.setdefault(call.algo, call)  # type: ignore[arg-type]
        if not smallest:
            return 0
        started = time.perf_counter()
        cp = backend._cp
        with backend.device:
            chosen = []
            for call in smallest.values():
                try:
                    gemm = libs.lt_gemm(call.key)  # the solvers' own product: checked once
                    algo = gemm.resolve(call.algo)
                    if algo is not None:
                        chosen.append((call, gemm, algo))
                except Exception as exc:
                    _log.debug("stream warm-up: cuBLASLt product %s skipped (%s)", call.key, exc)
            if not chosen or _capturing(cp, stream_ptr):
                return 0
            size = max(c.nbytes() for c, _, _ in chosen)
            region = (size + 255) // 256 * 256
            memory = cp.cuda.alloc(region + max(a.workspace for _, _, a in chosen))
            base = int(memory.ptr)
            owner = type("UserStream", (), {"_sptr": stream_ptr})()
            for call, gemm, algo in chosen:
                try:
                    gemm.prepare(algo, base, base, base, base + region, owner)()
                    ran += 1
                except Exception as exc:
                    _log.debug("stream warm-up: %s skipped (%s)", call, exc)
            done = cp.cuda.Event(disable_timing=True)
            done.record(cp.cuda.ExternalStream(stream_ptr) if stream_ptr else cp.cuda.Stream.null)
            enqueued.set()
            done.synchronize()  # this thread waits, not the user's; then the scratch goes back
            del memory
        _log.info("stream warm-up: %d cuBLASLt calls in %.3f s", ran, time.perf_counter() - started)
    except Exception as exc:  # the first iteration makes its first calls itself
        _log.debug("stream warm-up failed (%s)", exc)
    finally:
        enqueued.set()
    return ran


def _capturing(cp: Any, stream_ptr: int) -> bool:
    """Whether the stream is being captured into a CUDA graph (a warm-up call there would join the
    user's graph), or cannot be asked (the legacy stream while another one captures)."""
    try:
        found = getattr(cp.cuda.runtime, "streamIsCapturing", None)
        return bool(found(stream_ptr)) if found is not None else False
    except Exception:
        return True


def _run_gemm(lib: Any, blas: ctypes.c_void_p, call: _GemmCall, base: int) -> None:
    from miopy.backends import cuda_libs as libs

    m, n, k, lda, ldb, ldc, batch, sa, sb, sc = call.dims
    t = _DTYPES[call.dtype][0]
    scalars = (ctypes.c_float * 2)(1.0, 0.0)
    alpha, beta = ctypes.addressof(scalars), ctypes.addressof(scalars) + 4
    op_a = libs.OP_T if call.trans_a else libs.OP_N
    op_b = libs.OP_T if call.trans_b else libs.OP_N
    # as Backend.prepare_gemm: row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T
    if batch == 1:
        args = (blas, op_b, op_a, n, m, k, alpha, base, t, ldb, base, t, lda, beta, base, t, ldc)
        status = lib.gemm(*args, libs.COMPUTE_32F, libs.GEMM_DEFAULT)
    else:
        args = (blas, op_b, op_a, n, m, k, alpha, base, t, ldb, sb, base, t, lda, sa, beta, base, t, ldc, sc)
        status = lib.gemm_batched(*args, batch, libs.COMPUTE_32F, libs.GEMM_DEFAULT)
    libs.check(status, "cublasGemmEx (warm-up)")


__all__ = ["WARM_MAX_BYTES", "describe", "parse", "warm", "warm_on_stream"]
