"""CUDA: CuPy for memory, streams, events and cuBLAS; NVRTC (cuda-bindings) compiles the kernels.

Kernels are CUDA C++ built for the device's own architecture (``sm_90`` on an H100) into a CUBIN,
so the driver never JIT-compiles PTX and our kernel cache is the only one that matters. NVRTC
needs the CUDA headers (``cuda_fp16.h``): they come from the ``nvidia-cuda-runtime`` wheel, a
CUDA toolkit (``CUDA_PATH``) or ``/usr/local/cuda``.

``compile_cubin`` needs neither a GPU nor CuPy, so CI builds every kernel on machines without one.
Importing this module imports neither CuPy nor NVRTC; both load on first use.

Work goes to the legacy default stream, so it is ordered with what PyTorch and CuPy do on theirs
(their defaults) without any extra synchronisation when tensors are shared zero-copy."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from miopy import log
from miopy.backends.base import KERNEL_ROOT, DeviceInfo
from miopy.backends.base import Backend as BackendBase
from miopy.errors import AllocFailed, BackendUnavailable, CompileError, bad
from miopy.tensor import DataType

_log = log.get("miopy.backends.cuda")

_HEADERS_HINT = "pip install nvidia-cuda-runtime (the CUDA 13 headers), or set CUDA_PATH to a CUDA toolkit"


# ---- NVRTC: usable without a GPU or CuPy --------------------------------------------------------
# Set once this process has compiled with NVRTC: NVIDIA's OpenCL then miscompiles (see opencl.py).
nvrtc_compiled = False


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise BackendUnavailable(
            f"cuda-bindings is not installed ({exc}); pip install 'miopy[cuda]'"
        ) from None
    return nvrtc


def _check(result: tuple, what: str) -> tuple:
    """cuda-bindings return (status, *values); raise on a status other than success."""
    nvrtc = _nvrtc()
    status, *values = result
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(status)
        raise CompileError(f"{what}: {status.name} ({text.decode(errors='replace')})")
    return tuple(values)


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    major, minor = _check(_nvrtc().nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@functools.cache
def supported_archs() -> tuple[int, ...]:
    """Real architectures this NVRTC emits CUBINs for, as numbers (90 for sm_90)."""
    (archs,) = _check(_nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return tuple(int(a) for a in archs)


def _has_headers(path: Path) -> bool:
    return (path / "cuda_fp16.h").is_file()


@functools.cache
def cuda_include_dir() -> Path | None:
    """The CUDA headers NVRTC needs, preferring those of NVRTC's own major version.

    Order: the nvidia-cuda-runtime wheel (``nvidia/cu<major>/include``), ``CUDA_PATH`` /
    ``CUDA_HOME``, cuda.pathfinder's search, ``/usr/local/cuda``. None when nowhere."""
    candidates: list[Path] = []
    try:
        import nvidia  # namespace package of NVIDIA's wheels

        try:
            major = nvrtc_version()[0]
        except Exception:
            major = 13
        for root in getattr(nvidia, "__path__", []):
            candidates += [Path(root) / f"cu{major}" / "include", Path(root) / "cuda_runtime" / "include"]
    except ImportError:
        pass
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    for path in candidates:
        if _has_headers(path):
            return path
    try:
        from cuda import pathfinder

        found = pathfinder.find_nvidia_header_directory("cudart")
        if found and _has_headers(Path(found)):
            return Path(found)
    except Exception as exc:  # an old or missing cuda-pathfinder: fall through to the usual place
        _log.debug("cuda.pathfinder found no CUDA headers (%s)", exc)
    default = Path("/usr/local/cuda/include")
    return default if _has_headers(default) else None


@functools.cache
def _headers_version() -> str:
    inc = cuda_include_dir()
    if inc is None:
        return "none"
    try:
        text = (inc / "cuda_runtime_api.h").read_text(errors="replace")
        m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", text)
        return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


def _program_log(prog) -> str:
    nvrtc = _nvrtc()
    (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = b" " * size
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.rstrip(b"\0 ").decode(errors="replace")


def _compile(source: str, filename: str, options: list[str], arch: str) -> bytes:
    """CUBIN for a real arch (``sm_90``), PTX for a virtual one (``compute_90``)."""
    nvrtc = _nvrtc()
    inc = cuda_include_dir()
    if inc is None:
        raise CompileError(f"{filename}: the CUDA headers (cuda_fp16.h) were not found; {_HEADERS_HINT}")
    opts = [
        f"--gpu-architecture={arch}",
        "--std=c++17",
        "-default-device",
        f"--include-path={KERNEL_ROOT}",
        f"--include-path={inc}",
        *options,
    ]
    (prog,) = _check(
        nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], []), "nvrtcCreateProgram"
    )
    global nvrtc_compiled
    nvrtc_compiled = True
    try:
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        text = _program_log(prog)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(
                f"{filename}: NVRTC {'.'.join(map(str, nvrtc_version()))} failed for {arch} "
                f"with {' '.join(options) or 'no options'}:\n{text}"
            )
        if text.strip():
            _log.debug("%s %s: NVRTC says:\n%s", filename, " ".join(options), text)
        if arch.startswith("sm_"):
            get_size, get = nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN
        else:
            get_size, get = nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX
        (size,) = _check(get_size(prog), f"{filename}: binary size")
        binary = b" " * size
        _check(get(prog, binary), f"{filename}: binary")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    if not binary.strip(b"\0 "):
        raise CompileError(f"{filename}: NVRTC returned an empty binary for {arch}")
    return binary


def compile_cubin(source: str, filename: str, options: list[str], arch: str = "sm_90") -> bytes:
    """Compile CUDA C++ ``source`` with NVRTC into a CUBIN (an ELF image) for ``arch``.

    ``options`` are extra NVRTC options, usually ``-DNAME=VALUE``; the kernel root (for
    ``#include "common/..."``), the CUDA headers, ``--std=c++17`` and ``-default-device`` are
    added. Needs cuda-bindings and NVRTC, not a GPU. Raises CompileError with NVRTC's log."""
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise bad("arch", arch, "expected a real architecture such as sm_90")
    return _compile(source, filename, list(options), arch)


def _target_for(major: int, minor: int) -> str:
    """sm_XY when NVRTC can emit a CUBIN for the device, else PTX for the newest virtual arch it
    knows that the device runs (the driver finishes the job)."""
    cc = major * 10 + minor
    archs = supported_archs()
    if cc in archs:
        return f"sm_{cc}"
    older = [a for a in archs if a <= cc]
    if not older:
        raise BackendUnavailable(f"NVRTC {nvrtc_version()} cannot build for sm_{cc} (it knows {archs})")
    _log.warning(
        "NVRTC %s has no sm_%d; building PTX for compute_%d instead", nvrtc_version(), cc, max(older)
    )
    return f"compute_{max(older)}"


# ---- CuPy, loaded on first use ------------------------------------------------------------------
@functools.cache
def _cupy_or_reason() -> tuple[Any, str | None]:
    try:
        import cupy
    except ImportError as exc:
        return None, f"cupy is not installed ({exc}); pip install 'miopy[cuda]' (cupy-cuda13x)"
    except Exception as exc:  # a broken install (missing CUDA libraries) raises other errors
        return None, f"cupy failed to import ({type(exc).__name__}: {exc})"
    return cupy, None


@functools.cache
def _unavailable_reason() -> str | None:
    cp, why = _cupy_or_reason()
    if cp is None:
        return why
    # Only look for NVRTC here: loading it is a side effect (NVIDIA's OpenCL miscompiles beside it),
    # and the library itself is loaded when a cuda Backend is made.
    if importlib.util.find_spec("cuda.bindings") is None:
        return "cuda-bindings is not installed; pip install 'miopy[cuda]'"
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, or a driver that refuses (CUDARuntimeError)
        return f"no usable CUDA driver or GPU ({exc})"
    if count == 0:
        return "no CUDA GPU"
    if cuda_include_dir() is None:
        return f"the CUDA headers (cuda_fp16.h) were not found; {_HEADERS_HINT}"
    return None


_CUDA_TYPES = {DataType.FP32: 0, DataType.FP16: 2, DataType.BF16: 14}  # cudaDataType_t: R_32F, R_16F, R_16BF
_CUBLAS_COMPUTE_32F = 68
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CUBLAS_GEMM_DEFAULT = -1
_DL_CUDA, _DL_CUDA_MANAGED = 2, 13  # DLPack device types


class Backend(BackendBase):
    """Buffers are flat ``uint8`` CuPy arrays (``alloc``, ``upload``, ``wrap``); kernels are CuPy
    ``Function`` objects; ``stream`` is the CuPy stream all work goes to."""

    name = "cuda"
    kernel_dir = "cuda"
    kernel_ext = ".cu"
    has_vendor_gemm = True

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return _unavailable_reason()

    def __init__(self, device: int = 0):
        why = self.unavailable_reason()
        if why:
            raise BackendUnavailable(f"cuda: {why}")
        cp, _ = _cupy_or_reason()
        self._cp = cp
        count = cp.cuda.runtime.getDeviceCount()
        if not 0 <= device < count:
            raise BackendUnavailable(f"device={device}: only {count} CUDA device(s) here")
        self.device_id = device
        self.device = cp.cuda.Device(device)
        self.stream = cp.cuda.Stream.null
        props = cp.cuda.runtime.getDeviceProperties(device)
        name = props["name"]
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        major, minor = int(props["major"]), int(props["minor"])
        self.target = _target_for(major, minor)
        nv = ".".join(map(str, nvrtc_version()))
        fingerprint = (
            f"nvrtc {nv}|driver {cp.cuda.runtime.driverGetVersion()}"
            f"|runtime {cp.cuda.runtime.runtimeGetVersion()}|headers {_headers_version()}"
            f"|{self.target}"
        )
        self.info = DeviceInfo(
            name=name.strip(),
            arch=f"sm_{major}{minor}",
            compute_units=int(props["multiProcessorCount"]),
            fingerprint=fingerprint,
            max_work_group_size=int(props["maxThreadsPerBlock"]),
            local_mem_size=int(props["sharedMemPerBlock"]),
            max_dynamic_shared=int(props.get("sharedMemPerBlockOptin", props["sharedMemPerBlock"])),
        )
        self._dynamic_shared: dict[int, int] = {}  # kernel handle -> dynamic shared memory allowed
        self._modules: dict[bytes, Any] = {}
        self._lock = threading.Lock()

    # ---- memory -------------------------------------------------------------------------------
    def _ptr(self, buffer: Any) -> int:
        cp = self._cp
        if isinstance(buffer, cp.ndarray):
            return int(buffer.data.ptr)
        if isinstance(buffer, cp.cuda.MemoryPointer):
            return int(buffer.ptr)
        raise bad("buffer", type(buffer).__name__, "not a buffer of the cuda backend (alloc, upload or wrap)")

    def alloc(self, nbytes: int) -> Any:
        cp = self._cp
        try:
            with self.device:
                return cp.empty(max(int(nbytes), 1), dtype=cp.uint8)
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise AllocFailed(f"nbytes={nbytes}: CUDA allocation failed ({exc})") from None

    def upload(self, array: np.ndarray) -> Any:
        host = np.ascontiguousarray(array)
        buf = self.alloc(host.nbytes)
        if host.nbytes:
            with self.device:
                buf.set(host.reshape(-1).view(np.uint8), stream=self.stream)
        return buf

    def download(self, buffer: Any, out: np.ndarray) -> None:
        if not (out.flags.c_contiguous and out.flags.writeable):
            raise bad(
                "out", "a non-contiguous or read-only array", "download needs a writable C-contiguous array"
            )
        size = self.nbytes(buffer)
        if out.nbytes > size:
            raise bad("out", f"{out.nbytes} bytes", f"the buffer holds only {size} bytes")
        if out.nbytes:
            rt = self._cp.cuda.runtime
            with self.device:
                rt.memcpyAsync(
                    out.ctypes.data, self._ptr(buffer), out.nbytes, rt.memcpyDeviceToHost, self.stream.ptr
                )
                self.stream.synchronize()

    def wrap(self, obj: Any) -> Any | None:
        cp = self._cp
        if isinstance(obj, cp.cuda.MemoryPointer):
            self._check_device(obj.device_id, obj)
            return obj
        if isinstance(obj, cp.ndarray):
            arr = obj
        else:
            view = obj
            if getattr(obj, "requires_grad", False) and hasattr(obj, "detach"):
                view = obj.detach()  # a torch tensor that needs grad exports nothing; detach shares storage
            try:
                cai = getattr(view, "__cuda_array_interface__", None)
            except (AttributeError, RuntimeError):
                cai = None
            if cai is not None:
                arr = cp.asarray(view)  # zero-copy, and waits for the producer's stream (CAI v3)
            elif hasattr(view, "__dlpack__") and hasattr(view, "__dlpack_device__"):
                dev_type, _ = view.__dlpack_device__()
                if int(dev_type) not in (_DL_CUDA, _DL_CUDA_MANAGED):
                    return None  # NumPy and other host arrays
                arr = cp.from_dlpack(view)
            else:
                return None
        self._check_device(arr.data.device_id, obj)
        if arr.size == 0:
            extent = 0
        else:
            if any(s < 0 for s in arr.strides):
                raise bad("buffer", f"strides {arr.strides}", "negative strides are not supported")
            extent = arr.itemsize + sum((n - 1) * s for n, s in zip(arr.shape, arr.strides))
        if arr.dtype == cp.uint8 and arr.ndim == 1 and arr.flags.c_contiguous:
            return arr
        mem = cp.cuda.UnownedMemory(int(arr.data.ptr), extent, arr, self.device_id)
        return cp.ndarray((extent,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))

    def _check_device(self, device_id: int, obj: Any) -> None:
        if device_id not in (-1, self.device_id):
            raise bad(
                "buffer",
                f"{type(obj).__name__} on CUDA device {device_id}",
                f"this handle runs on CUDA device {self.device_id}",
            )

    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        nbytes = int(nbytes)
        for field, buf in (("dst", dst), ("src", src)):
            if self.nbytes(buf) < nbytes:
                raise bad(field, f"buffer of {self.nbytes(buf)} bytes", f"the copy needs {nbytes} bytes")
        if nbytes:
            rt = self._cp.cuda.runtime
            with self.device:
                rt.memcpyAsync(
                    self._ptr(dst), self._ptr(src), nbytes, rt.memcpyDeviceToDevice, self.stream.ptr
                )

    def nbytes(self, buffer: Any) -> int:
        cp = self._cp
        if isinstance(buffer, cp.ndarray):
            return int(buffer.nbytes)
        if isinstance(buffer, cp.cuda.MemoryPointer):
            return int(buffer.mem.size) - (int(buffer.ptr) - int(buffer.mem.ptr))
        raise bad("buffer", type(buffer).__name__, "not a buffer of the cuda backend (alloc, upload or wrap)")

    # ---- kernels ------------------------------------------------------------------------------
    def build(self, source: str, filename: str, options: list[str]) -> bytes:
        return _compile(source, filename, list(options), self.target)

    def load(self, binary: bytes, kernel_name: str) -> Any:
        binary = bytes(binary)
        key = hashlib.sha256(binary).digest()
        with self._lock:
            module = self._modules.get(key)
            if module is None:
                module = self._cp.cuda.function.Module()
                with self.device:
                    module.load(binary)
                self._modules[key] = module  # one module per binary, shared by its kernels
        try:
            return module.get_function(kernel_name)
        except self._cp.cuda.driver.CUDADriverError as exc:
            raise bad("kernel_name", kernel_name, f"not in the binary ({exc})") from None

    def _arg(self, i: int, a: Any) -> Any:
        if isinstance(a, np.generic):
            return a  # CuPy passes a NumPy scalar by value with its own size
        if a is None:
            return np.uint64(0)
        cp = self._cp
        if isinstance(a, (cp.ndarray, cp.cuda.MemoryPointer)):
            return np.uint64(self._ptr(a))
        raise bad(
            f"args[{i}]", type(a).__name__, "expected a buffer or a NumPy scalar (np.int32, np.float32 ...)"
        )

    def _allow_dynamic_shared(self, kernel: Any, nbytes: int) -> None:
        """Raise the kernel's dynamic shared memory limit (48 KB unless asked) to ``nbytes``."""
        if nbytes > self.info.max_dynamic_shared:
            limit = self.info.max_dynamic_shared
            raise bad("shared_mem", nbytes, f"the device allows {limit} bytes per block")
        ptr = int(kernel.ptr)
        if self._dynamic_shared.get(ptr, 48 * 1024) >= nbytes:
            return
        from cupy_backends.cuda.api import driver

        with self.device:
            driver.funcSetAttribute(ptr, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes))
        with self._lock:
            self._dynamic_shared[ptr] = int(nbytes)

    def launch(
        self,
        kernel: Any,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...],
        args: list[Any],
        shared_mem: int = 0,
    ) -> None:
        if len(global_size) != len(local_size) or not 1 <= len(global_size) <= 3:
            raise bad("global_size", global_size, f"needs 1 to 3 dims, like local_size {local_size}")
        grid = []
        for g, loc in zip(global_size, local_size):
            if loc <= 0 or g % loc:
                raise bad("global_size", global_size, f"not a multiple of local_size {local_size}")
            grid.append(g // loc)
        block = tuple(int(v) for v in local_size) + (1,) * (3 - len(local_size))
        grid3 = tuple(grid) + (1,) * (3 - len(grid))
        kargs = [self._arg(i, a) for i, a in enumerate(args)]
        shared_mem = int(shared_mem)
        if shared_mem < 0:
            raise bad("shared_mem", shared_mem, "must be >= 0")
        if shared_mem > 48 * 1024:
            self._allow_dynamic_shared(kernel, shared_mem)
        with self.device:
            kernel(grid3, block, kargs, stream=self.stream, shared_mem=shared_mem)

    def synchronize(self) -> None:
        with self.device:
            self.stream.synchronize()

    def time_ms(self, fn: Callable[[], None], runs: int) -> list[float]:
        cp = self._cp
        times = []
        with self.device:
            start, end = cp.cuda.Event(), cp.cuda.Event()
            for _ in range(runs):
                start.record(self.stream)
                fn()
                end.record(self.stream)
                end.synchronize()
                times.append(float(cp.cuda.get_elapsed_time(start, end)))
        return times

    # ---- cuBLAS -------------------------------------------------------------------------------
    def gemm(
        self,
        dtype: Any,
        trans_a: bool,
        trans_b: bool,
        m: int,
        n: int,
        k: int,
        a: Any,
        a_offset: int,
        lda: int,
        b: Any,
        b_offset: int,
        ldb: int,
        c: Any,
        c_offset: int,
        ldc: int,
        batch: int = 1,
        stride_a: int = 0,
        stride_b: int = 0,
        stride_c: int = 0,
    ) -> None:
        from cupy_backends.cuda.libs import cublas

        dt = DataType.parse(dtype)
        m, n, k, batch = int(m), int(n), int(k), int(batch)
        if min(m, n, k) < 0 or batch < 1:
            raise bad("gemm", (m, n, k, batch), "m, n, k must be >= 0 and batch >= 1")
        if m == 0 or n == 0:
            return
        size = dt.itemsize
        # Row-major (rows, cols) of each stored matrix, checked against its leading dim and buffer.
        shapes = {
            "a": ((k, m) if trans_a else (m, k), a, a_offset, lda, stride_a),
            "b": ((n, k) if trans_b else (k, n), b, b_offset, ldb, stride_b),
            "c": ((m, n), c, c_offset, ldc, stride_c),
        }
        ptrs = {}
        for role, ((rows, cols), buf, offset, ld, stride) in shapes.items():
            if ld < max(cols, 1):
                raise bad(f"ld{role}", ld, f"must be >= {cols}, the row length of {role.upper()}")
            if offset < 0 or stride < 0:
                raise bad(f"{role}_offset", (offset, stride), "offsets and strides must be >= 0")
            need = (offset + (batch - 1) * stride + (rows - 1) * ld + cols) * size if rows and cols else 0
            if self.nbytes(buf) < need:
                raise bad(
                    role, f"buffer of {self.nbytes(buf)} bytes", f"the GEMM reads or writes {need} bytes"
                )
            ptrs[role] = self._ptr(buf) + offset * size
        t = _CUDA_TYPES[dt]
        alpha = np.ones((), np.float32)
        beta = np.zeros((), np.float32)
        # cuBLAS is column-major: a row-major X is X^T to it, so compute C^T = op(B)^T op(A)^T.
        op_b = cublas.CUBLAS_OP_T if trans_b else cublas.CUBLAS_OP_N
        op_a = cublas.CUBLAS_OP_T if trans_a else cublas.CUBLAS_OP_N
        with self.device:
            handle = self._cp.cuda.device.get_cublas_handle()
            cublas.setStream(handle, self.stream.ptr)
            # Host scalars, and no TF32 for fp32 (CuPy's handle may allow it): restored afterwards.
            pointer_mode, math_mode = cublas.getPointerMode(handle), cublas.getMathMode(handle)
            cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
            cublas.setMathMode(handle, cublas.CUBLAS_DEFAULT_MATH)
            try:
                if batch == 1:
                    cublas.gemmEx(
                        handle,
                        op_b,
                        op_a,
                        n,
                        m,
                        k,
                        alpha.ctypes.data,
                        ptrs["b"],
                        t,
                        ldb,
                        ptrs["a"],
                        t,
                        lda,
                        beta.ctypes.data,
                        ptrs["c"],
                        t,
                        ldc,
                        _CUBLAS_COMPUTE_32F,
                        _CUBLAS_GEMM_DEFAULT,
                    )
                else:
                    cublas.gemmStridedBatchedEx(
                        handle,
                        op_b,
                        op_a,
                        n,
                        m,
                        k,
                        alpha.ctypes.data,
                        ptrs["b"],
                        t,
                        ldb,
                        stride_b,
                        ptrs["a"],
                        t,
                        lda,
                        stride_a,
                        beta.ctypes.data,
                        ptrs["c"],
                        t,
                        ldc,
                        stride_c,
                        batch,
                        _CUBLAS_COMPUTE_32F,
                        _CUBLAS_GEMM_DEFAULT,
                    )
            finally:
                cublas.setPointerMode(handle, pointer_mode)
                cublas.setMathMode(handle, math_mode)
