"""OpenCL through PyOpenCL: PoCL on the CPU, NVIDIA's OpenCL on its GPUs, any other ICD.

fp16 and bf16 are stored in memory and computed in fp32 (vload_half / bf16 as ushort), since PoCL
has no cl_khr_fp16. PyOpenCL's own binary cache is bypassed: ours is the only one."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from miopy import log
from miopy.backends.base import Backend as BackendBase
from miopy.backends.base import DeviceInfo, expand_includes
from miopy.backends.one_kernel import one_kernel_source
from miopy.errors import AllocFailed, BackendUnavailable, CompileError, bad

_log = log.get("miopy.backends.opencl")

try:
    import pyopencl as cl
except ImportError:  # the opencl extra is not installed
    cl = None


# PoCL's LLVM writes temporary files while it builds; when one passes the process's file-size
# limit (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write fails with EFBIG) LLVM's fatal-error
# handler exits the whole process. A 3x3 direct convolution already needs more than 1 MB.
MIN_BUILD_FILE_LIMIT = 16 << 20


def _check_file_size_limit(filename: str) -> None:
    """CompileError, before the compiler starts, when the file-size limit is below what it needs."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and soft < MIN_BUILD_FILE_LIMIT:
        raise CompileError(
            f"{filename}: the file-size limit (RLIMIT_FSIZE, ulimit -f) is {soft} bytes; the OpenCL "
            f"compiler writes larger files and would end the process mid-build; raise it to at least "
            f"{MIN_BUILD_FILE_LIMIT >> 20} MiB"
        )


def _devices() -> list:
    devices = []
    for platform in cl.get_platforms():
        try:
            devices.extend(platform.get_devices())
        except cl.Error:  # a platform with no devices raises instead of returning []
            continue
    return devices


def _arch(device) -> str:
    if device.type & cl.device_type.GPU and "NVIDIA" in device.vendor.upper():
        try:
            return f"sm_{device.compute_capability_major_nv}{device.compute_capability_minor_nv}"
        except (cl.Error, AttributeError):
            pass
    name = device.name
    if device.type & cl.device_type.CPU:
        # PoCL names CPUs "pthread-<llvm cpu>-<marketing name>"
        name = "cpu_" + re.sub(r"^(pthread|cpu)-", "", name).split("-Intel")[0].split("-AMD")[0]
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")[:40]


def _nvrtc_used() -> bool:
    """Has this process compiled with NVRTC through the cuda backend?"""
    cuda = sys.modules.get("miopy.backends.cuda")
    return bool(getattr(cuda, "nvrtc_compiled", False))


class Backend(BackendBase):
    name = "opencl"
    kernel_dir = "opencl"
    kernel_ext = ".cl"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if cl is None:
            return "pyopencl is not installed (pip install 'miopy[opencl]')"
        try:
            if not _devices():
                return "no OpenCL device (install an ICD, e.g. apt-get install pocl-opencl-icd)"
        except cl.Error as exc:
            return f"no OpenCL platform ({exc}); install an ICD, e.g. apt-get install pocl-opencl-icd"
        return None

    def __init__(self, device: int = 0):
        why = self.unavailable_reason()
        if why:
            raise BackendUnavailable(f"opencl: {why}")
        devices = _devices()
        if not 0 <= device < len(devices):
            raise BackendUnavailable(f"device={device}: only {len(devices)} OpenCL device(s) here")
        self.device = devices[device]
        self.ctx = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        d = self.device
        self._nvidia = "NVIDIA" in d.platform.name.upper()
        fingerprint = f"{d.platform.name} {d.platform.version}|{d.name}|{d.driver_version}|{d.version}"
        self.info = DeviceInfo(
            name=d.name.strip(),
            arch=_arch(d),
            compute_units=d.max_compute_units,
            fingerprint=fingerprint,
            max_work_group_size=d.max_work_group_size,
            local_mem_size=d.local_mem_size,
            fp64=bool(getattr(d, "double_fp_config", 0)) or "cl_khr_fp64" in d.extensions,
        )
        self._recording: list | None = None

    # ---- memory -------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Any:
        nbytes = int(nbytes)
        limit = int(self.device.max_mem_alloc_size)
        if nbytes > limit:
            raise AllocFailed(
                f"nbytes={nbytes}: more than this OpenCL device allocates at once ({limit} bytes)"
            )
        try:
            return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size=max(nbytes, 1))
        except (cl.Error, MemoryError) as exc:
            raise AllocFailed(f"nbytes={nbytes}: OpenCL allocation failed ({exc})") from None

    def upload(self, array: np.ndarray) -> Any:
        try:
            array = np.ascontiguousarray(array)
        except MemoryError:
            raise AllocFailed(f"nbytes={array.nbytes}: no host memory for a contiguous copy") from None
        buf = self.alloc(array.nbytes)
        if array.nbytes:
            cl.enqueue_copy(self.queue, buf, array)
        return buf

    def download(self, buffer: Any, out: np.ndarray) -> None:
        cl.enqueue_copy(self.queue, out, buffer)
        self.queue.finish()

    def wrap(self, obj: Any) -> Any | None:
        if isinstance(obj, cl.Buffer):
            return obj
        data = getattr(obj, "base_data", None)  # pyopencl.array.Array
        if isinstance(data, cl.Buffer) and getattr(obj, "offset", 0) == 0:
            return data
        return None

    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        cl.enqueue_copy(self.queue, dst, src, byte_count=int(nbytes))

    def nbytes(self, buffer: Any) -> int:
        return int(buffer.size)

    # ---- kernels ------------------------------------------------------------------------------
    def build(self, source: str, filename: str, options: list[str], kernel: str | None = None) -> bytes:
        if self._nvidia and _nvrtc_used():
            # Seen on an H100 with CUDA 13: once NVRTC (cuda-bindings) has compiled in the process,
            # NVIDIA's OpenCL still builds, but some kernels then compute wrong results. Merely
            # loading NVRTC, or CuPy's own use of it, did no harm. A clear error beats wrong results.
            raise CompileError(
                f"{filename}: NVIDIA's OpenCL miscompiles once NVRTC has compiled in the same "
                "process; use MIOPY_BACKEND=cuda here, or OpenCL in a process of its own"
            )
        _check_file_size_limit(filename)
        try:
            source = expand_includes(source)
            if kernel is not None:  # PoCL spends seconds of CPU on each kernel of a program
                source = one_kernel_source(source, kernel)
            program = cl.Program(self.ctx, source).build(options=options, cache_dir=False)
        except cl.RuntimeError as exc:
            raise CompileError(f"{filename}: OpenCL build failed with {' '.join(options)}:\n{exc}") from None
        binary = bytes(program.get_info(cl.program_info.BINARIES)[0])
        if not binary:  # never cache (or load) an empty program
            raise CompileError(f"{filename}: the OpenCL compiler returned an empty binary")
        return binary

    def load(self, binary: bytes, kernel_name: str) -> Any:
        program = cl.Program(self.ctx, [self.device], [binary]).build()
        return cl.Kernel(program, kernel_name)

    def launch(
        self,
        kernel: Any,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...],
        args: list[Any],
        shared_mem: int = 0,
        cooperative: bool = False,
    ) -> None:
        if shared_mem:
            raise bad("shared_mem", shared_mem, "OpenCL launches take no dynamic shared memory")
        if cooperative:
            raise bad("cooperative", cooperative, "OpenCL cannot promise that every work-group is resident")
        kernel.set_args(*args)
        event = cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)
        if self._recording is not None:
            self._recording.append(event)

    def synchronize(self) -> None:
        self.queue.finish()

    def time_ms(self, fn: Callable[[], None], runs: int) -> list[float]:
        times = []
        for _ in range(runs):
            self._recording = []
            try:
                fn()
                self.queue.finish()
                events = self._recording
            finally:
                self._recording = None
            if not events:
                times.append(0.0)
                continue
            start = min(e.profile.start for e in events)
            end = max(e.profile.end for e in events)
            times.append((end - start) * 1e-6)
        return times
