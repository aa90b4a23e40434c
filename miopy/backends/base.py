"""The backend contract. A backend is one module in this package whose ``Backend`` subclass is
found by name (``miopy.backends.<name>``)."""

from __future__ import annotations

import abc
import hashlib
import os
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from miopy.errors import bad

KERNEL_ROOT = Path(__file__).resolve().parent.parent / "kernels"


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*$', re.M)


def expand_includes(source: str, seen: set[str] | None = None) -> str:
    """The source with our own ``#include "common/..."`` headers pasted in, once each (their
    include guards would drop repeats anyway). Used for the cache key's source hash, and by
    backends whose compiler should not be trusted with include paths (NVIDIA's OpenCL loses them
    once NVRTC is loaded in the process)."""
    seen = set() if seen is None else seen

    def paste(match: re.Match) -> str:
        name = match.group(1)
        path = KERNEL_ROOT / name
        if not path.is_file():
            return match.group(0)  # not ours: the compiler's business
        if name in seen:
            return f"/* {name}: already included */"
        seen.add(name)
        return f"/* begin {name} */\n{expand_includes(path.read_text(), seen)}\n/* end {name} */"

    return _INCLUDE.sub(paste, source)


# (kernel root, folder, extension, file), or a kernel path (a reader with a kernel_path of its own)
# -> (stamps of it and its headers, those paths as text, source, hash): see read_source
_SOURCES: dict[Any, tuple[tuple, tuple[str, ...], str, str]] = {}


def _stamps(paths: tuple[str, ...]) -> tuple:
    out = []
    stat = os.stat
    for path in paths:
        try:
            st = stat(path)
        except OSError:
            return ()  # gone: read again (and fail there as before)
        out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    arch: str  # e.g. sm_90, or an OpenCL device's short name
    compute_units: int
    fingerprint: str  # compiler + driver versions: part of every kernel cache key
    max_work_group_size: int = 256
    local_mem_size: int = 32768
    # Most dynamic shared memory a block may ask for at launch (CUDA's opt-in limit, 227 KB on
    # Hopper); 0 where launches take none (OpenCL).
    max_dynamic_shared: int = 0
    fp64: bool = True  # double precision arithmetic (OpenCL: cl_khr_fp64)

    @property
    def db_basename(self) -> str:
        """MIOpen's ``<arch>_<cu>`` (decimal up to 64 CUs, bare hex above)."""
        arch = re.sub(r"[^A-Za-z0-9]+", "_", self.arch).strip("_") or "device"
        cu = self.compute_units
        return f"{arch}_{cu}" if cu <= 64 else f"{arch}{cu:x}"


class Backend(abc.ABC):
    name: ClassVar[str]
    kernel_dir: ClassVar[str]  # folder under miopy/kernels/
    kernel_ext: ClassVar[str]  # ".cl", ".cu"

    info: DeviceInfo

    # ---- discovery ----------------------------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def unavailable_reason(cls) -> str | None:
        """None when this backend can run here, else why not (cheap; no context is created)."""

    # ---- memory -------------------------------------------------------------------------------
    @abc.abstractmethod
    def alloc(self, nbytes: int) -> Any:
        """A device buffer of at least ``nbytes`` bytes (uninitialised)."""

    @abc.abstractmethod
    def upload(self, array: np.ndarray) -> Any:
        """A new device buffer holding a copy of ``array``'s bytes."""

    @abc.abstractmethod
    def download(self, buffer: Any, out: np.ndarray) -> None:
        """Copy ``out.nbytes`` bytes from the start of ``buffer`` into the contiguous ``out``."""

    @abc.abstractmethod
    def wrap(self, obj: Any) -> Any | None:
        """Zero-copy view of a device array of this backend (DLPack, CUDA array interface, a
        native buffer), or None when ``obj`` is not one."""

    @abc.abstractmethod
    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        """Device-to-device copy."""

    @abc.abstractmethod
    def nbytes(self, buffer: Any) -> int:
        """Size of a buffer (native or wrapped) in bytes."""

    def misaligned(self, buffer: Any) -> bool:
        """Whether a wrapped device buffer starts off the boundary that miopy's kernels assume for
        their vector loads (a view into the middle of a user's tensor). Backends whose buffers
        always start aligned say False."""
        return False

    def buffer_at(self, buffer: Any, offset: int) -> Any:
        """``buffer`` from ``offset`` bytes on, as a kernel argument (a Workspace with an offset).
        Backends without plain device pointers refuse."""
        raise bad("offset", offset, f"the {self.name} backend passes no buffer at an offset")

    # ---- kernels ------------------------------------------------------------------------------
    @abc.abstractmethod
    def build(self, source: str, filename: str, options: list[str], kernel: str | None = None) -> bytes:
        """Compile ``source`` with ``options`` (``-DNAME=VALUE`` ...) into a loadable binary.
        ``kernel``: the one kernel the binary will be loaded for (a backend may leave the others
        out); None keeps them all. Raises CompileError with the compiler log."""

    @abc.abstractmethod
    def load(self, binary: bytes, kernel_name: str) -> Any:
        """A launchable kernel from a binary made by ``build``."""

    def finish_load(self, kernel: Any) -> None:
        """Finish loading ``kernel`` now where the driver would at its first launch (a handle's
        set-up thread loads a package's kernels ahead). Nothing to do by default."""
        return None

    @abc.abstractmethod
    def launch(
        self,
        kernel: Any,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...],
        args: list[Any],
        shared_mem: int = 0,
        cooperative: bool = False,
    ) -> None:
        """Enqueue ``kernel``. ``global_size`` is the total work-item count per dimension (OpenCL
        semantics, a multiple of ``local_size``). ``args`` holds buffers and NumPy scalars.
        ``shared_mem``: bytes of dynamic shared memory per block, up to
        ``info.max_dynamic_shared`` (a backend without any refuses a non-zero value).
        ``cooperative``: all blocks resident at once, guaranteed by the device or refused with an
        error (a backend without such a launch refuses it)."""

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    @abc.abstractmethod
    def time_ms(self, fn: Callable[[], None], runs: int) -> list[float]:
        """Device-event time of each of ``runs`` calls of ``fn`` (which only enqueues work)."""

    def device_time_ms(self, fn: Callable[[], None], runs: int, flush_l2: bool = False) -> float:
        """The device time (ms) of one call of ``fn``, as the device sees it: ``runs`` calls run
        back to back with the queue kept full, so the host's cost of enqueueing them is not
        counted. ``flush_l2`` evicts the cache between calls (and then times each on its own).

        This default suits backends whose ``time_ms`` already reads per-kernel profiling events
        (OpenCL): the median of ``runs`` such times."""
        return float(statistics.median(self.time_ms(fn, max(1, runs))))

    # ---- prepared calls: the per-call host cost ---------------------------------------------------
    # A prepared call is a function of no arguments that enqueues one launch (or library call)
    # whose arguments were all converted once; ``run_prepared`` enqueues a list of them on the
    # backend's current queue. Backends with a cheaper launch path override these.
    def prepare_launch(
        self,
        kernel: Any,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...],
        args: list[Any],
        shared_mem: int = 0,
        cooperative: bool = False,
    ) -> Callable[[], None]:
        args = list(args)
        if cooperative:
            return lambda: self.launch(
                kernel, global_size, local_size, args, shared_mem=shared_mem, cooperative=True
            )
        if shared_mem:
            return lambda: self.launch(kernel, global_size, local_size, args, shared_mem=shared_mem)
        return lambda: self.launch(kernel, global_size, local_size, args)

    def prepare_gemm(self, *args: Any, **kwargs: Any) -> Callable[[], None]:
        return lambda: self.gemm(*args, **kwargs)

    def finish_prepared(
        self, calls: list[Callable[[], None]], eager: bool = False
    ) -> list[Callable[[], None]]:
        """The recorded calls of one run, in the form to replay them (CUDA captures a graph, at
        the second run unless ``eager``: timing wants the graph from the first sample on)."""
        return calls

    def run_prepared(self, calls: list[Callable[[], None]]) -> None:
        for call in calls:
            call()

    def fast_key(self, obj: Any) -> Any:
        """A cheap hashable identity of a device array of this backend (its address, shape,
        strides and type: what its extent depends on), or None when ``obj`` has none (NumPy
        arrays, unknown objects). Prepared calls are cached by these keys."""
        return None

    def fast_keys(self, objs: Iterable[Any]) -> tuple[Any, ...] | None:
        """``fast_key`` of each of ``objs``, or None when any has none."""
        keys = tuple(map(self.fast_key, objs))
        return None if None in keys else keys

    # ---- library calls (optional) -------------------------------------------------------------
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
        """Vendor GEMM (cuBLAS on CUDA), row-major: for each of ``batch`` matrices,
        C[m, n] = op(A)[m, k] @ op(B)[k, n], fp32 accumulation, beta = 0. Offsets, leading
        dimensions and batch strides are in elements of ``dtype`` (a miopy DataType).
        Backends without one leave ``has_vendor_gemm`` False and don't override this."""
        raise NotImplementedError(f"backend {self.name} has no vendor GEMM")

    has_vendor_gemm: ClassVar[bool] = False

    # ---- shared helpers -----------------------------------------------------------------------
    def kernel_path(self, file: str) -> Path:
        return KERNEL_ROOT / self.kernel_dir / (file + self.kernel_ext)

    def read_source(self, file: str) -> tuple[str, str]:
        """(source, sha256 of the source with every header it includes, recursively). Kept per
        file while neither it nor any header it pastes changes size or modification time: a
        network's kernels share a few sources (the first iteration of a fresh process read and
        hashed the same files again for each of its 85 kernels)."""
        # Keyed by text, not by a Path made and hashed at each call (pathlib's parsing and hashing
        # took most of the 0.011 s that 124 calls cost in an H200 first iteration under cProfile);
        # every file is still checked at every call, as before.
        if getattr(type(self), "kernel_path", None) is Backend.kernel_path:
            key: Any = (KERNEL_ROOT, self.kernel_dir, self.kernel_ext, file)
        else:
            key = self.kernel_path(file)
        kept = _SOURCES.get(key)
        if kept is not None and kept[0] == _stamps(kept[1]):
            return kept[2], kept[3]
        path = self.kernel_path(file)
        source = path.read_text()
        seen: set[str] = set()
        digest = hashlib.sha256(expand_includes(source, seen).encode()).hexdigest()
        files = tuple(str(f) for f in (path, *(KERNEL_ROOT / name for name in sorted(seen))))
        _SOURCES[key] = (_stamps(files), files, source, digest)
        return source, digest
