"""CUDA: CuPy for memory, streams, events and cuBLAS; NVRTC (cuda-bindings) compiles the kernels.

Kernels are CUDA C++ built for the device's own architecture (``sm_90`` on an H100) into a CUBIN,
so the driver never JIT-compiles PTX and our kernel cache is the only one that matters. NVRTC
needs the CUDA headers (``cuda_fp16.h``): they come from the ``nvidia-cuda-runtime`` wheel, a
CUDA toolkit (``CUDA_PATH``) or ``/usr/local/cuda``.

``compile_cubin`` needs neither a GPU nor CuPy, so CI builds every kernel on machines without one.
Importing this module imports neither CuPy nor NVRTC; both load on first use.

Work goes to the backend's stream: the legacy default stream unless ``set_stream`` picks another,
or ``follow_stream("torch"|"cupy")`` makes every run use that framework's current stream. The
legacy default stream is ordered with what PyTorch and CuPy do on their default streams without
any extra synchronisation when tensors are shared zero-copy.

Per-call host cost: ``prepare_launch`` / ``prepare_gemm`` turn a launch or a GEMM into a call
whose arguments were converted once (``cuLaunchKernel`` through ctypes, our own cuBLAS handle whose
modes are set once); the handle caches these per (solution, buffers)."""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import importlib.util
import os
import re
import statistics
import struct
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from miopy import config, log
from miopy.backends.base import KERNEL_ROOT, DeviceInfo
from miopy.backends.base import Backend as BackendBase
from miopy.errors import AllocFailed, BackendUnavailable, CompileError, InternalError, bad
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
    # A fresh bytearray: NVRTC writes into the buffer, and ``b" " * 1`` is CPython's shared
    # one-byte object, which the write would corrupt for the whole process.
    buf = bytearray(size)
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return bytes(buf).rstrip(b"\0 ").decode(errors="replace")


# A kernel file that uses a chip's arch-specific instructions (Hopper's wgmma, setmaxnreg) names
# the target in a line ``// miopy-target: sm_90a``: on a device of that family (sm_90) it is
# built for that target instead; its solver is applicable nowhere else.
_ARCH_SPECIFIC = re.compile(r"^\s*//\s*miopy-target:\s*(sm_\d+a)\s*$", re.M)


def source_target(source: str, arch: str) -> str:
    """The target ``source`` is built for on a device of ``arch``: the arch-specific target its
    ``miopy-target`` line names where that is ``arch`` plus ``a`` (sm_90 -> sm_90a), else ``arch``."""
    m = _ARCH_SPECIFIC.search(source)
    return m.group(1) if m and m.group(1) == arch + "a" else arch


def _compile(source: str, filename: str, options: list[str], arch: str) -> bytes:
    """CUBIN for a real arch (``sm_90``), PTX for a virtual one (``compute_90``); a file with a
    ``miopy-target`` line is built for the arch-specific target it names (source_target)."""
    nvrtc = _nvrtc()
    arch = source_target(source, arch)
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
        buf = bytearray(size)  # written by NVRTC: never a shared bytes object
        _check(get(prog, buf), f"{filename}: binary")
        binary = bytes(buf)
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


def compiler_fingerprint(target: str) -> str:
    """What a CUBIN depends on: NVRTC's version, the CUDA headers' and the target. Not the driver's:
    kernel packages are built on machines without one (``miopy kernels build``), and a binary the
    driver refuses is rebuilt on load."""
    nv = ".".join(map(str, nvrtc_version()))
    return f"nvrtc {nv}|headers {_headers_version()}|{target}"


def target_for_arch(arch: str) -> str:
    """The binary target for a device of ``arch`` (``sm_90``): what a live device would get."""
    m = re.fullmatch(r"sm_(\d+)", arch)
    if m is None:
        raise bad("arch", arch, "expected an architecture such as sm_90")
    cc = int(m.group(1))
    return _target_for(cc // 10, cc % 10)


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


# ---- the driver API through ctypes: the cheapest launch Python has --------------------------------
@functools.cache
def _libcuda() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuLaunchCooperativeKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 2
    lib.cuLaunchCooperativeKernel.restype = ctypes.c_int
    return lib


@functools.cache
def _cu_func_load() -> Any:
    """The driver's ``cuFuncLoad`` (CUDA 12.4 and later), or None."""
    fn = getattr(_libcuda(), "cuFuncLoad", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = ctypes.c_int
    return fn


@functools.cache
def _cython_launch() -> tuple[Callable[..., None], type] | None:
    """CuPy's compiled ``launchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)``
    (all plain ints) and the error it raises, or None where this CuPy has none."""
    try:
        from cupy_backends.cuda.api import driver
    except ImportError:
        return None
    launch = getattr(driver, "launchKernel", None)
    failure = getattr(driver, "CUDADriverError", None)
    if launch is None or failure is None:
        return None
    return launch, failure


def _raw_launch(fn: int, dims: tuple[int, ...], stream: ctypes.c_void_p, params: ctypes.Array) -> int:
    """cuLaunchKernel through ctypes; the CUresult."""
    fixed = (ctypes.c_void_p(fn), *(ctypes.c_uint(v) for v in dims))
    return _libcuda().cuLaunchKernel(*fixed, stream, params, None)


def _cooperative_launch(fn: int, dims: tuple[int, ...], stream: ctypes.c_void_p, params: ctypes.Array) -> int:
    """cuLaunchCooperativeKernel through ctypes (every block resident at once, or an error such as
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE); the CUresult."""
    fixed = (ctypes.c_void_p(fn), *(ctypes.c_uint(v) for v in dims))
    return _libcuda().cuLaunchCooperativeKernel(*fixed, stream, params)


_CUDA_ERROR_INVALID_CONTEXT = 201
_CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720

# The spin kernel holds the stream while the host enqueues the runs to time, so the device then
# runs them back to back however slow the host is (globaltimer counts nanoseconds).
_SPIN_SOURCE = r"""
extern "C" __global__ void miopy_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""
_SPIN_MAX_NS = 200_000_000
# The byte boundary miopy's CUDA kernels and cuBLASLt assume every tensor starts on (16-byte vector
# loads and stores, cp.async, TMA); a user's tensor that starts elsewhere runs on aligned copies.
KERNEL_ALIGNMENT = 16
STREAM_WARM_UP_WAIT_S = 10.0  # the most a first cuBLASLt call waits for the set-up thread's calls


def _c_scalar(value: np.generic) -> ctypes.Array:
    """A kernel argument passed by value: the scalar's own bytes."""
    raw = value.tobytes() if isinstance(value, np.generic) else np.asarray(value).tobytes()
    return (ctypes.c_char * len(raw)).from_buffer_copy(raw)


# argument sizes -> (pointers' struct, each argument's offset in the block, pointer count, words)
_PARAM_LAYOUTS: dict[tuple[int, ...], tuple[struct.Struct, tuple[int, ...], int, int]] = {}


def _param_layout(sizes: tuple[int, ...]) -> tuple[struct.Struct, tuple[int, ...], int, int]:
    """Where each argument of these sizes goes: the pointer array first (one 8-byte word per
    argument), then each argument at its natural alignment."""
    offsets, end = [], 0
    for size in sizes:
        align = size if size in (1, 2, 4, 8) else 8
        end += -end % align
        offsets.append(end)
        end += size
    count = max(len(sizes), 1)
    head = 8 * count
    layout = (
        struct.Struct(f"<{len(sizes)}Q"),
        tuple(head + o for o in offsets),
        count,
        count + max((end + 7) // 8, 1),
    )
    if len(_PARAM_LAYOUTS) < 4096:  # a network's kernels have a few dozen signatures
        _PARAM_LAYOUTS[sizes] = layout
    return layout


def pack_params(raws: list[bytes]) -> tuple[ctypes.Array, ctypes.Array]:
    """(the kernelParams array of cuLaunchKernel, the storage it points into) for kernel arguments
    given as their bytes: one 8-byte-aligned block holding the pointer array, then every argument
    at its natural alignment (a prepared launch keeps both; the pointer array is a view of the
    block). The layout is computed once per list of argument sizes."""
    sizes = tuple(map(len, raws))
    layout = _PARAM_LAYOUTS.get(sizes) or _param_layout(sizes)
    pointers, offsets, count, words = layout
    storage = (ctypes.c_uint64 * words)()
    base = ctypes.addressof(storage)
    block = memoryview(storage).cast("B")
    pointers.pack_into(block, 0, *[base + o for o in offsets])
    for o, raw in zip(offsets, raws):
        block[o : o + len(raw)] = raw
    params = (ctypes.c_void_p * count).from_buffer(storage)
    return params, storage


_U64 = struct.Struct("<Q")

# NumPy integer and bool scalars packed by struct code, by (dtype kind, itemsize): exact on every
# platform (a C long is 4 bytes on some); floats keep their own bytes
_INT_CODES = {("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("b", 1): "?"}
_INT_CODES |= {("u", 1): "B", ("u", 2): "H", ("u", 4): "I", ("u", 8): "Q"}


class ArgPacker:
    """Kernel arguments straight into the block ``pack_params`` makes, in one ``struct`` call: a
    plan per list of argument types (NumPy scalar types, this backend's buffer types, None) gives
    each argument's code and offset once, so a launch of 25 arguments (a convolution's) costs a
    few microseconds to record instead of a conversion per argument. ``pointer_of`` maps each
    buffer type (exact type) to its device address; ``pack`` answers None for an argument of any
    other type (the caller converts it the checked way, ``Backend._raw_args``)."""

    MAX_PLANS = 4096  # a network's kernels have a few dozen signatures

    def __init__(self, pointer_of: dict[type, Callable[[Any], int]]):
        self._pointer_of = dict(pointer_of)
        self._plans: dict[tuple[type, ...], Any] = {}

    def _plan(self, kinds: tuple[type, ...]) -> Any:
        codes, sizes, convert, floats = [], [], [], []
        for i, kind in enumerate(kinds):
            if kind in self._pointer_of:
                codes.append("Q")
                sizes.append(8)
                convert.append((i, self._pointer_of[kind]))
            elif issubclass(kind, np.generic):
                dtype = np.dtype(kind)
                code = _INT_CODES.get((dtype.kind, dtype.itemsize))
                if code is None and not (dtype.kind == "f" and dtype.itemsize in (2, 4, 8)):
                    return False
                codes.append(code or f"{dtype.itemsize}s")
                sizes.append(dtype.itemsize)
                if code is None:
                    floats.append(i)
            else:
                return False
        count = max(len(kinds), 1)
        fmt, end, offsets = [f"{len(kinds)}Q", f"{8 * count - 8 * len(kinds)}x"], 8 * count, []
        for code, size in zip(codes, sizes):
            pad = -end % (size if size in (1, 2, 4, 8) else 8)
            fmt.append(f"{pad}x{code}")
            offsets.append(end + pad)
            end += pad + size
        words = max((end + 7) // 8, count + 1)
        return struct.Struct("<" + "".join(fmt)), tuple(offsets), count, words, tuple(convert), tuple(floats)

    def pack(self, args: list[Any]) -> tuple[ctypes.Array, ctypes.Array] | None:
        """(kernelParams, the storage it points into), as ``pack_params`` gives them, or None."""
        kinds = tuple(map(type, args))
        plan = self._plans.get(kinds)
        if plan is None:
            plan = self._plan(kinds)
            if len(self._plans) < self.MAX_PLANS:
                self._plans[kinds] = plan
        if plan is False:
            return None
        fmt, offsets, count, words, convert, floats = plan
        values = list(args)
        for i, pointer in convert:
            values[i] = pointer(values[i])
        for i in floats:
            values[i] = values[i].tobytes()
        storage = (ctypes.c_uint64 * words)()
        base = ctypes.addressof(storage)
        fmt.pack_into(storage, 0, *[base + o for o in offsets], *values)
        return (ctypes.c_void_p * count).from_buffer(storage), storage


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
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_DL_CUDA, _DL_CUDA_MANAGED = 2, 13  # DLPack device types


def _external_stream(cp, ptr: int, device_id: int) -> Any:
    """A CuPy view of a stream miopy does not own (a framework's). CuPy 14 deprecates
    ``ExternalStream`` for ``Stream.from_external``, but the latter makes a ``Stream``, whose
    finaliser destroys the handle it wraps when collected: that would destroy the framework's
    stream. So ExternalStream stays, with its deprecation warning silenced here only."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cp.cuda.ExternalStream(ptr, device_id)


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
        fingerprint = compiler_fingerprint(self.target)
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
        self.l2_bytes = int(props.get("l2CacheSize", 0) or 0)
        self._modules: dict[bytes, Any] = {}
        self._lock = threading.Lock()
        self._sptr = 0  # the stream's handle, read by every prepared call
        self._user_sptr = 0  # the stream the user set last (_sptr is a capture's while capturing)
        self._c_sptr = ctypes.c_void_p(0)
        # A lone kernel launch replays as a graph too when this is set (see finish_prepared).
        self.graph_single_launch = config.graph_single_launch()
        # A lone library call (cuBLAS, cuBLASLt) is captured only when this is set.
        self.graph_single_library = config.graph_single_library()
        self._multi_gpu = count > 1
        self._follow: str | None = None
        self._keyers: dict[type, Callable[[Any], Any]] = {}
        self._packer = ArgPacker(
            {
                cp.ndarray: lambda a: a.data.ptr,
                cp.cuda.MemoryPointer: lambda m: m.ptr,
                type(None): lambda _: 0,
            }
        )
        self._cublas_handle: int | None = None
        self._cublas_stream: int | None = None
        self._blas_lock = threading.Lock()
        self._spin: Any = None
        self._flush_buf: Any = None
        # Setting up the vendor libraries (loading cuBLAS and cuBLASLt, creating their handles)
        # takes tens of milliseconds: it starts now, on a thread of its own, as MIOpen creates its
        # BLAS handle with the handle, so that the first GEMM of a fresh process finds it done
        # (it waits for it otherwise, and a failure there is only reported by that GEMM).
        self.library_warmed = 0  # vendor-library calls run ahead by warm_library
        self.lt_initialized_s: float | None = None  # cuBLASLt's initialization on that thread
        self.library_prechecked = 0  # recorded cuBLASLt algorithms checked by precheck_library
        self.library_stream_warmed = 0  # cuBLASLt calls run on the handle's stream ahead
        self._lt_stream_ready: threading.Event | None = None  # set once those are enqueued
        self._blas_thread = threading.Thread(target=self._set_up_blas, name="miopy-blas-set-up", daemon=True)
        self._blas_thread.start()
        atexit.register(self._blas_thread.join, 10)  # never torn down in the middle of it

    def _set_up_blas(self) -> None:
        from miopy.backends import cuda_libs as libs

        try:
            self._cublas()
            with self.device:
                libs.lt_handle()
                # cuBLASLt's one-time initialization, paid by the first algorithm check of a
                # process: here, while the user sets up, not in the first iteration
                self.lt_initialized_s = libs.initialize()
        except Exception as exc:  # the first GEMM tries again and says what went wrong
            _log.debug("cuBLAS set-up in the background failed (%s)", exc)

    def precheck_library(self, load: Callable[[], list[Any]], stream_warm_up: bool = False) -> None:
        """Check the recorded cuBLASLt algorithms of the library calls that ``load()`` describes
        (a kernel package's), on a thread of its own after the BLAS set-up: the first iteration's
        applicability checks then find them checked (cuda_libs.precheck). With ``stream_warm_up``
        and such algorithms, one call per algorithm then runs on this backend's stream as the
        user set it last (cuda_warm.warm_on_stream); the first ``prepare_lt_matmul`` waits until
        they are enqueued."""

        def run() -> None:
            from miopy.backends import cuda_libs, cuda_warm

            self._blas_thread.join()
            values: list[Any] = []
            try:
                values = load()
                calls = [c for c in map(cuda_warm.parse, values) if isinstance(c, cuda_warm._LtCall)]
                recorded = [(c.key, c.algo) for c in dict.fromkeys(calls) if isinstance(c.algo, tuple)]
                with self.device:
                    self.library_prechecked = cuda_libs.precheck(recorded)
            except Exception as exc:  # the first iteration checks them itself
                _log.debug("cuBLASLt pre-check failed (%s)", exc)
            if ready is not None:  # the user's stream as set last (never a capture's, see _capture)
                self.library_stream_warmed = cuda_warm.warm_on_stream(self, values, self._user_sptr, ready)

        ready = threading.Event() if stream_warm_up else None
        self._lt_stream_ready = ready

        self._precheck_thread = threading.Thread(target=run, name="miopy-lt-precheck", daemon=True)
        self._precheck_thread.start()
        atexit.register(self._precheck_thread.join, 10)  # never torn down in the middle of it

    def warm_library(self, load: Callable[[], list[Any]]) -> None:
        """Run the vendor-library calls that ``load()`` describes once each, on a thread of its own
        after the BLAS set-up, so that CUDA has loaded their kernels when the first iteration
        makes them (miopy.backends.cuda_warm; the descriptions come from a kernel package)."""

        def run() -> None:
            from miopy.backends import cuda_warm

            self._blas_thread.join()
            try:
                self.library_warmed = cuda_warm.warm(self, load())
            except Exception as exc:  # the first iteration loads them itself
                _log.debug("library warm-up failed (%s)", exc)

        self._warm_thread = threading.Thread(target=run, name="miopy-library-warm-up", daemon=True)
        self._warm_thread.start()
        atexit.register(self._warm_thread.join, 30)  # never torn down in the middle of it

    # ---- streams ------------------------------------------------------------------------------
    def set_stream(self, stream: Any) -> None:
        """Enqueue on ``stream`` from now on: a CuPy or PyTorch stream, a raw ``cudaStream_t``
        (int), or None for the legacy default stream. Stops following a framework's stream."""
        self._follow = None
        self._use_stream(stream)

    def follow_stream(self, framework: str | None) -> None:
        """``"torch"`` or ``"cupy"``: every run enqueues on that framework's current stream (read
        at each run); None: stay on the stream set last."""
        if framework not in (None, "torch", "cupy"):
            raise bad("framework", framework, "expected torch, cupy or None")
        if framework == "torch":
            import torch

            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            if raw is not None:
                self._current = lambda: int(raw(self.device_id))
            else:
                self._current = lambda: int(torch.cuda.current_stream(self.device_id).cuda_stream)
        elif framework == "cupy":
            cp = self._cp
            self._current = lambda: int(cp.cuda.get_current_stream().ptr)
        self._follow = framework
        if framework is not None:
            self._use_stream(self._current())

    def _use_stream(self, stream: Any) -> None:
        cp = self._cp
        if stream is None:
            ptr = 0
        elif isinstance(stream, int):
            ptr = int(stream)
        elif hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
            ptr = int(stream.cuda_stream)
        elif hasattr(stream, "ptr"):  # cupy.cuda.Stream
            ptr = int(stream.ptr)
        else:
            raise bad("stream", type(stream).__name__, "expected a CuPy or PyTorch stream, an int or None")
        if ptr == self._sptr and self.stream is not None:
            return
        self.stream = cp.cuda.Stream.null if ptr == 0 else _external_stream(cp, ptr, self.device_id)
        self._sptr = ptr
        self._c_sptr = ctypes.c_void_p(ptr)
        self._user_sptr = ptr

    def _refresh_stream(self) -> None:
        ptr = self._current()
        if ptr != self._sptr:
            self._use_stream(ptr)

    # ---- memory -------------------------------------------------------------------------------
    def _ptr(self, buffer: Any) -> int:
        cp = self._cp
        if isinstance(buffer, cp.ndarray):
            return int(buffer.data.ptr)
        if isinstance(buffer, cp.cuda.MemoryPointer):
            return int(buffer.ptr)
        raise bad("buffer", type(buffer).__name__, "not a buffer of the cuda backend (alloc, upload or wrap)")

    def misaligned(self, buffer: Any) -> bool:
        return self._ptr(buffer) % KERNEL_ALIGNMENT != 0

    def alloc(self, nbytes: int) -> Any:
        cp = self._cp
        try:
            with self.device:
                return cp.empty(max(int(nbytes), 1), dtype=cp.uint8)
        except (cp.cuda.memory.OutOfMemoryError, MemoryError) as exc:
            raise AllocFailed(f"nbytes={nbytes}: CUDA allocation failed ({exc})") from None

    def upload(self, array: np.ndarray) -> Any:
        try:
            host = np.ascontiguousarray(array)
        except MemoryError:
            raise AllocFailed(f"nbytes={array.nbytes}: no host memory for a contiguous copy") from None
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

    def buffer_at(self, buffer: Any, offset: int) -> Any:
        """A MemoryPointer ``offset`` bytes into ``buffer`` (checked against its size)."""
        offset = int(offset)
        if buffer is None or not 0 <= offset < self.nbytes(buffer):
            have = None if buffer is None else self.nbytes(buffer)
            raise bad("workspace", have, f"has no byte {offset} (a step reads the workspace from there)")
        cp = self._cp
        base = buffer.data if isinstance(buffer, cp.ndarray) else buffer
        return base + offset

    # ---- kernels ------------------------------------------------------------------------------
    def build(self, source: str, filename: str, options: list[str], kernel: str | None = None) -> bytes:
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

    def finish_load(self, kernel: Any) -> None:
        """``cuFuncLoad``: with CUDA_MODULE_LOADING=LAZY (the default) a function got from a
        module may be only partly loaded, and the driver finishes at its first launch, where
        loading may wait for the work already queued on the device (CUDA programming guide,
        lazy loading): a first iteration that loads its kernels as it goes then waits for the
        device at each new kernel instead of queuing ahead of it. Drivers without cuFuncLoad
        (before CUDA 12.4) load at the first launch as before."""
        load = _cu_func_load()
        if load is None:
            return
        with self.device:
            rc = load(ctypes.c_void_p(int(kernel.ptr)))
        if rc:
            raise InternalError(f"cuFuncLoad failed with CUresult {rc}")

    def is_loaded(self, kernel: Any) -> bool | None:
        """Whether the driver has fully loaded ``kernel`` (``cuFuncIsLoaded``); None where the
        driver cannot say."""
        lib = _libcuda()
        query = getattr(lib, "cuFuncIsLoaded", None)
        if query is None:
            return None
        state = ctypes.c_int(-1)
        with self.device:
            rc = query(ctypes.byref(state), ctypes.c_void_p(int(kernel.ptr)))
        return None if rc else state.value == 1  # CU_FUNCTION_LOADING_STATE_LOADED

    def _raw_args(self, args: list[Any]) -> list[bytes]:
        """Each kernel argument's bytes as the kernel takes it: a NumPy scalar's own, a buffer's
        device address (8 bytes), None as a null pointer."""
        cp = self._cp
        out = []
        for i, a in enumerate(args):
            if isinstance(a, np.generic):
                out.append(a.tobytes())
            elif isinstance(a, cp.ndarray):
                out.append(_U64.pack(a.data.ptr))
            elif a is None:
                out.append(bytes(8))
            else:
                out.append(_c_scalar(self._arg(i, a)).raw)
        return out

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

    def _geometry(
        self, global_size: tuple[int, ...], local_size: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if len(global_size) != len(local_size) or not 1 <= len(global_size) <= 3:
            raise bad("global_size", global_size, f"needs 1 to 3 dims, like local_size {local_size}")
        grid = []
        for g, loc in zip(global_size, local_size):
            if loc <= 0 or g % loc:
                raise bad("global_size", global_size, f"not a multiple of local_size {local_size}")
            grid.append(g // loc)
        block = tuple(int(v) for v in local_size) + (1,) * (3 - len(local_size))
        return tuple(grid) + (1,) * (3 - len(grid)), block

    def launch(
        self,
        kernel: Any,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...],
        args: list[Any],
        shared_mem: int = 0,
        cooperative: bool = False,
    ) -> None:
        if cooperative:
            self.prepare_launch(kernel, global_size, local_size, args, shared_mem, cooperative=True)()
            return
        grid3, block = self._geometry(global_size, local_size)
        kargs = [self._arg(i, a) for i, a in enumerate(args)]
        shared_mem = int(shared_mem)
        if shared_mem < 0:
            raise bad("shared_mem", shared_mem, "must be >= 0")
        if shared_mem > 48 * 1024:
            self._allow_dynamic_shared(kernel, shared_mem)
        with self.device:
            kernel(grid3, block, kargs, stream=self.stream, shared_mem=shared_mem)

    def prepare_launch(
        self,
        kernel: Any,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...],
        args: list[Any],
        shared_mem: int = 0,
        cooperative: bool = False,
    ) -> Callable[[], None]:
        """``cuLaunchKernel`` with the argument array built once: about a microsecond a call
        (``cuLaunchCooperativeKernel`` when ``cooperative``)."""
        (gx, gy, gz), (bx, by, bz) = self._geometry(global_size, local_size)
        shared_mem = int(shared_mem)
        if shared_mem < 0:
            raise bad("shared_mem", shared_mem, "must be >= 0")
        if shared_mem > 48 * 1024:
            self._allow_dynamic_shared(kernel, shared_mem)
        packed = self._packer.pack(args)
        params, holders = packed if packed is not None else pack_params(self._raw_args(args))
        dims = (gx, gy, gz, bx, by, bz, shared_mem)
        backend = self
        fast = _cython_launch()
        if cooperative:
            fn = int(kernel.ptr)

            def call() -> None:
                rc = _cooperative_launch(fn, dims, backend._c_sptr, params)
                if rc:
                    backend._launch_failed(
                        rc, lambda: _cooperative_launch(fn, dims, backend._c_sptr, params), "cooperative "
                    )

        elif fast is not None:
            # CuPy's compiled cuLaunchKernel wrapper takes plain ints: no per-argument conversion
            # objects as ctypes has (several microseconds a call for 11 arguments).
            launch, failure = fast
            fn, paddr = int(kernel.ptr), ctypes.addressof(params)

            def call() -> None:
                try:
                    launch(fn, gx, gy, gz, bx, by, bz, shared_mem, backend._sptr, paddr, 0)
                except failure as exc:
                    backend._launch_failed(
                        int(getattr(exc, "status", -1)),
                        lambda: _raw_launch(fn, dims, backend._c_sptr, params),
                    )

        else:
            # ctypes objects of the argument types: passed without conversion on every call
            fixed = (ctypes.c_void_p(int(kernel.ptr)), *(ctypes.c_uint(v) for v in dims))
            launch_c = _libcuda().cuLaunchKernel

            def call() -> None:
                rc = launch_c(*fixed, backend._c_sptr, params, None)
                if rc:
                    backend._launch_failed(rc, lambda: launch_c(*fixed, backend._c_sptr, params, None))

        call.keep = (holders, params, kernel)  # type: ignore[attr-defined]
        return call

    def _launch_failed(self, rc: int, retry: Callable[[], int], kind: str = "") -> None:
        if rc == _CUDA_ERROR_INVALID_CONTEXT:  # a thread where CUDA was never made current
            with self.device:
                self._cp.cuda.runtime.free(0)  # makes the primary context current here
            rc = retry()
            if not rc:
                return
        if rc == _CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
            raise InternalError(
                f"cuLaunchCooperativeKernel failed with CUresult {rc}: the grid cannot be resident "
                "at once on this device"
            )
        raise InternalError(f"cuLaunch{kind.strip().title()}Kernel failed with CUresult {rc}")

    def finish_prepared(
        self, calls: list[Callable[[], None]], eager: bool = False
    ) -> list[Callable[[], None]]:
        """The calls of one run are captured into a CUDA graph; a run then costs one graph launch
        (about 1.5 us of host time on an H200's host, where a cuLaunchKernel with its arguments
        costs 3.5 us and a cuBLAS call several). The capture (a stream, the capture, the graph's
        instantiation) waits for the second run: a call made once, as in a network's first
        iteration, runs its calls directly and pays for no graph (``eager`` captures now: find
        times the graph from its first sample on). A lone kernel launch stays
        direct when ``graph_single_launch`` is off, a lone library call unless
        ``graph_single_library`` is on (MIOPY_GRAPH_SINGLE_LIBRARY)."""
        if len(calls) == 1:
            library = getattr(calls[0], "library", False)
            if not (self.graph_single_library if library else self.graph_single_launch):
                return calls
        backend = self
        state: dict[str, Any] = {"runs": 0, "graph": None, "stream": None}
        if eager:
            state["graph"], state["stream"] = self._capture(calls)
            if state["graph"] is None:
                return calls

        def replay() -> None:
            graph = state["graph"]
            if graph is not None:
                graph.launch(backend.stream)
                return
            state["runs"] += 1
            if state["runs"] == 2:
                graph, state["stream"] = backend._capture(calls)
                state["graph"] = graph
                if graph is not None:
                    graph.launch(backend.stream)
                    return
            for call in calls:
                call()

        replay.keep = (state, calls)  # type: ignore[attr-defined]
        return [replay]

    def _capture(self, calls: list[Callable[[], None]]) -> tuple[Any, Any]:
        """A CUDA graph of ``calls`` (recorded on a stream of its own, nothing runs) and that
        stream, or (None, None) when they cannot be captured here (they keep running directly)."""
        cp = self._cp
        saved = self.stream, self._sptr
        with self.device:
            capture = cp.cuda.Stream(non_blocking=True)
            self.stream, self._sptr, self._c_sptr = capture, int(capture.ptr), ctypes.c_void_p(capture.ptr)
            mode = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", 2)
            graph = None
            try:
                capture.begin_capture(mode)
                try:
                    for call in calls:
                        call()
                finally:
                    graph = capture.end_capture()
            except Exception as exc:  # not capturable here: keep the calls
                _log.info("prepared calls not captured into a CUDA graph (%s)", exc)
                return None, None
            finally:
                self.stream, self._sptr = saved
                self._c_sptr = ctypes.c_void_p(self._sptr)
        return graph, capture

    def run_prepared(self, calls: list[Callable[[], None]]) -> None:
        if self._follow is not None:
            self._refresh_stream()
        if self._multi_gpu and self._cp.cuda.runtime.getDevice() != self.device_id:
            with self.device:
                for call in calls:
                    call()
            return
        for call in calls:
            call()

    def fast_key(self, obj: Any) -> Any:
        kind = type(obj)
        keyer = self._keyers.get(kind)
        if keyer is None:
            keyer = self._keyers[kind] = self._keyer_for(kind)
        return keyer(obj)

    def fast_keys(self, objs: Iterable[Any]) -> tuple[Any, ...] | None:
        keyers = self._keyers
        keys = []
        for obj in objs:
            keyer = keyers.get(type(obj))
            if keyer is None:
                keyer = keyers[type(obj)] = self._keyer_for(type(obj))
            key = keyer(obj)
            if key is None:
                return None
            keys.append(key)
        return tuple(keys)

    def _keyer_for(self, kind: type) -> Callable[[Any], Any]:
        cp = self._cp
        if issubclass(kind, cp.ndarray):
            return lambda a: (a.data.ptr, a.shape, a.strides, a.dtype)
        if any(c.__module__.startswith("torch") and c.__name__ == "Tensor" for c in kind.__mro__):
            # a CPU tensor's key is never recorded (its first run fails), so no device check here
            return lambda t: (t.data_ptr(), t.shape, t.stride(), t.dtype)
        return lambda obj: None

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

    def _hold(self, ns: float) -> None:
        """Keep the stream busy for ``ns`` nanoseconds (the spin kernel)."""
        if self._spin is None:
            self._spin = self.load(self.build(_SPIN_SOURCE, "miopy_spin.cu", []), "miopy_spin")
        ns = int(min(max(ns, 20_000), _SPIN_MAX_NS))
        self._spin((1, 1, 1), (1, 1, 1), (np.uint64(ns),), stream=self.stream)

    def flush_l2(self) -> None:
        """Overwrite a buffer twice the size of the L2 cache on the stream (evicts what runs left)."""
        size = 2 * max(self.l2_bytes, 32 << 20)
        if self._flush_buf is None:
            self._flush_buf = self.alloc(size)
        rt = self._cp.cuda.runtime
        rt.memsetAsync(self._ptr(self._flush_buf), 0, size, self._sptr)

    def device_time_ms(self, fn: Callable[[], None], runs: int, flush_l2: bool = False) -> float:
        """A spin kernel holds the stream while the host enqueues ``runs`` calls; then they run
        back to back. Without ``flush_l2``: one event pair around all of them, over ``runs``.
        With it: an L2 flush before each call, outside each call's own event pair; the median."""
        cp = self._cp
        runs = max(1, int(runs))
        with self.device:
            begin = time.perf_counter()
            fn()  # warm-up, and the host's cost of one call
            host_ns = (time.perf_counter() - begin) * 1e9
            self.synchronize()
            self._hold(runs * host_ns * 1.5 + (runs * 20_000 if flush_l2 else 0) + 100_000)
            if not flush_l2:
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record(self.stream)
                for _ in range(runs):
                    fn()
                end.record(self.stream)
                end.synchronize()
                return float(cp.cuda.get_elapsed_time(start, end)) / runs
            pairs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(runs)]
            for start, end in pairs:
                self.flush_l2()
                start.record(self.stream)
                fn()
                end.record(self.stream)
            pairs[-1][1].synchronize()
            return float(statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in pairs))

    # ---- cuBLASLt ------------------------------------------------------------------------------
    def bind_library(self, program: Any) -> Any:
        """A kernel package's program (miopy.db.package_plans) with each cuBLASLt placeholder
        bound: the product is the process's one (cuda_libs.lt_gemm: descriptor and layouts made
        from the recorded arguments), the algorithm rebuilt from its recorded attributes and
        checked (cublasLtMatmulAlgoCheck; no heuristics query; usually done already by
        ``precheck_library`` on the set-up thread). None when the library is missing, refuses the
        algorithm, or the algorithm needs more workspace than the program has."""
        import dataclasses

        from miopy.backends import cuda_libs
        from miopy.db.package_plans import LtChoice, LtProduct
        from miopy.solution import Call

        steps = []
        try:
            with self.device:
                for step in program.steps:
                    if isinstance(step, Call) and step.args and isinstance(step.args[0], LtProduct):
                        product, choice = step.args[0], step.args[1]
                        if not isinstance(choice, LtChoice):
                            return None
                        gemm = cuda_libs.lt_gemm(product.key)
                        algo = gemm.resolve(choice.config)
                        if algo is None or algo.workspace > choice.workspace:
                            return None
                        step = Call(step.method, (gemm, algo, *step.args[2:]))
                    steps.append(step)
        except Exception as exc:  # no library, a descriptor refused: the solver is asked instead
            _log.info("cuBLASLt program from the package not bound (%s)", exc)
            return None
        return dataclasses.replace(program, steps=tuple(steps))

    def lt_matmul(self, *args: Any) -> None:
        self.prepare_lt_matmul(*args)()

    def prepare_lt_matmul(
        self,
        gemm: Any,
        index: int,
        a: Any,
        a_offset: int,
        b: Any,
        b_offset: int,
        d: Any,
        d_offset: int,
        workspace: Any,
        workspace_offset: int = 0,
        beta: float = 0.0,
    ) -> Callable[[], None]:
        """Candidate ``index`` of the cuBLASLt product ``gemm`` (cuda_libs.LtGemm) on these
        buffers (offsets in bytes), as a prepared call on this backend's stream. cuBLASLt's own
        scratch starts ``workspace_offset`` bytes into ``workspace``; ``beta`` 1 adds to D."""
        ready = self._lt_stream_ready
        if ready is not None:  # the set-up thread's calls on this stream go first (precheck_library)
            ready.wait(STREAM_WARM_UP_WAIT_S)
            self._lt_stream_ready = None
        need = gemm.pick(index)[1]
        if need and (workspace is None or self.nbytes(workspace) < workspace_offset + need):
            have = workspace if workspace is None else self.nbytes(workspace)
            raise bad("workspace", have, f"needs {workspace_offset + need} bytes")
        ws = self._ptr(workspace) + workspace_offset if need else 0
        call = gemm.prepare(
            index, self._ptr(a) + a_offset, self._ptr(b) + b_offset, self._ptr(d) + d_offset, ws, self, beta
        )
        call.library = True  # type: ignore[attr-defined]
        return call

    # ---- cuBLAS ----------------------------------------------------------------------------------
    def _cublas(self) -> int:
        """Our own cuBLAS handle (through ctypes): host scalars and no TF32, set once; its stream
        follows ours. CuPy's handle and its modes are left alone."""
        if self._cublas_handle is None:
            from miopy.backends import cuda_libs as libs

            lib = libs.cublas()
            with self._blas_lock, self.device:
                if self._cublas_handle is None:
                    handle = ctypes.c_void_p()
                    libs.check(lib.create(ctypes.byref(handle)), "cublasCreate")
                    libs.check(lib.set_pointer_mode(handle, libs.POINTER_MODE_HOST), "cublasSetPointerMode")
                    libs.check(lib.set_math_mode(handle, libs.DEFAULT_MATH), "cublasSetMathMode")
                    self._cublas_handle = int(handle.value)
        return self._cublas_handle

    def gemm(self, *args: Any, **kwargs: Any) -> None:
        self.prepare_gemm(*args, **kwargs)()

    def prepare_gemm(
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
    ) -> Callable[[], None]:
        """``gemm`` as a prepared call: validated and converted once, one cuBLAS call per run."""
        from miopy.backends import cuda_libs as libs

        dt = DataType.parse(dtype)
        m, n, k, batch = int(m), int(n), int(k), int(batch)
        if min(m, n, k) < 0 or batch < 1:
            raise bad("gemm", (m, n, k, batch), "m, n, k must be >= 0 and batch >= 1")
        if m == 0 or n == 0:
            return lambda: None
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
        scalars = (ctypes.c_float * 2)(1.0, 0.0)
        alpha, beta = ctypes.addressof(scalars), ctypes.addressof(scalars) + 4
        # cuBLAS is column-major: a row-major X is X^T to it, so compute C^T = op(B)^T op(A)^T.
        op_b = libs.OP_T if trans_b else libs.OP_N
        op_a = libs.OP_T if trans_a else libs.OP_N
        handle = self._cublas()
        lib = libs.cublas()
        pa, pb, pc = ptrs["a"], ptrs["b"], ptrs["c"]
        if batch == 1:
            fn = lib.gemm
            args = (handle, op_b, op_a, n, m, k, alpha, pb, t, ldb, pa, t, lda, beta, pc, t, ldc)
        else:
            fn = lib.gemm_batched
            args = (handle, op_b, op_a, n, m, k, alpha, pb, t, ldb, stride_b, pa, t, lda, stride_a)
            args += (beta, pc, t, ldc, stride_c, batch)
        args += (libs.COMPUTE_32F, libs.GEMM_DEFAULT)
        set_stream, backend = lib.set_stream, self

        def call() -> None:
            if backend._cublas_stream != backend._sptr:
                libs.check(set_stream(handle, backend._sptr), "cublasSetStream")
                backend._cublas_stream = backend._sptr
            status = fn(*args)
            if status:
                libs.check(status, "cublasGemmEx")

        call.keep = scalars  # type: ignore[attr-defined]
        call.library = True  # type: ignore[attr-defined]
        return call
