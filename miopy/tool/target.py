"""A device to plan for without running on it: what solvers see of a handle (backend name, device
info, vendor GEMM, the DBs shipped for it) and a compiler for its kernels.

CUDA needs no GPU: NVRTC builds for any architecture it knows (``--arch sm_90 --cu 132``), and the
limits the solvers look at come from the table below. OpenCL compiles for the device present."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from miopy import backends, config
from miopy.backends.base import Backend as BackendBase
from miopy.backends.base import DeviceInfo
from miopy.db import find_db, perf_db
from miopy.db.find_db import FindRecord
from miopy.db.kernel_cache import KernelKey
from miopy.db.sqlite import SqliteFile
from miopy.db.system_files import compute_units_of
from miopy.errors import MiopyError
from miopy.solution import KernelSpec
from miopy.tool.common import ToolError

# CUDA limits by architecture: threads per block, static shared memory per block, the opt-in
# dynamic shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin).
CUDA_LIMITS = {
    "sm_70": (1024, 49152, 98304),
    "sm_75": (1024, 49152, 65536),
    "sm_80": (1024, 49152, 166912),
    "sm_86": (1024, 49152, 101376),
    "sm_87": (1024, 49152, 166912),
    "sm_89": (1024, 49152, 101376),
    "sm_90": (1024, 49152, 232448),
    "sm_100": (1024, 49152, 232448),
    "sm_103": (1024, 49152, 232448),
    "sm_110": (1024, 49152, 232448),
    "sm_120": (1024, 49152, 101376),
    "sm_121": (1024, 49152, 101376),
}


class OfflineCuda:
    """The parts of the cuda backend that need no GPU: reading kernel sources and NVRTC."""

    name = "cuda"
    kernel_dir = "cuda"
    kernel_ext = ".cu"
    has_vendor_gemm = True
    kernel_path = BackendBase.kernel_path
    read_source = BackendBase.read_source

    def __init__(self, target: str):
        self.target = target

    def build(self, source: str, filename: str, options: list[str], kernel: str | None = None) -> bytes:
        from miopy.backends import cuda

        return cuda.compile_cubin(source, filename, options, self.target)


def cuda_info(arch: str, compute_units: int) -> tuple[DeviceInfo, OfflineCuda]:
    """The DeviceInfo a live ``arch`` GPU with ``compute_units`` SMs would have, and its compiler."""
    from miopy.backends import cuda

    if arch not in CUDA_LIMITS:
        raise ToolError(f"--arch={arch!r}: unknown CUDA architecture (known: {', '.join(CUDA_LIMITS)})")
    if compute_units < 1:
        raise ToolError(f"--cu={compute_units}: expected a positive number of SMs")
    try:
        target = cuda.target_for_arch(arch)
        fingerprint = cuda.compiler_fingerprint(target)
    except MiopyError as exc:
        raise ToolError(f"--arch={arch}: NVRTC cannot build for it here ({exc})") from None
    if not target.startswith("sm_"):
        raise ToolError(f"--arch={arch}: this NVRTC emits no CUBIN for it (only {target} PTX)")
    threads, shared, dynamic = CUDA_LIMITS[arch]
    info = DeviceInfo(
        name=f"{arch} with {compute_units} SMs (offline target)",
        arch=arch,
        compute_units=compute_units,
        fingerprint=fingerprint,
        max_work_group_size=threads,
        local_mem_size=shared,
        max_dynamic_shared=dynamic,
    )
    return info, OfflineCuda(target)


class ShippedPerfDb:
    """The perf DB shipped for a device (``<base>.db`` in MIOPY_SYSTEM_DB_PATH), read only."""

    def __init__(self, db_basename: str):
        path = config.system_db_dir() / f"{db_basename}.db"
        self._file = SqliteFile(path, "perf_db", perf_db.SCHEMA, perf_db.SCHEMA_VERSION, readonly=True)

    def load(self, problem_key: str, solver: str, primitive: str = "conv") -> dict[str, Any] | None:
        sql = "SELECT params FROM perf_db WHERE primitive = ? AND problem_key = ? AND solver = ?"
        for (text,) in self._file.query(sql, (primitive, problem_key, solver)):
            value = perf_db.load_json(text, f"{self._file.path}: {primitive} {problem_key} {solver}")
            if value is not None:
                return value
        return None

    def records(self, problem_key: str, primitive: str = "conv") -> dict[str, dict[str, Any]]:
        return {}

    def close(self) -> None:
        self._file.close()


class ShippedFindDb:
    """The find records shipped for a device, read only."""

    def __init__(self, db_basename: str):
        path = config.system_db_dir() / f"{db_basename}.db"
        self._file = SqliteFile(path, "find_db", find_db.SCHEMA, find_db.SCHEMA_VERSION, readonly=True)

    def load(self, problem_key: str, primitive: str = "conv") -> list[FindRecord] | None:
        sql = (
            "SELECT solver, time_ms, workspace, algorithm, params FROM find_db "
            "WHERE primitive = ? AND problem_key = ? ORDER BY rank"
        )
        out = []
        for solver, ms, ws, algorithm, params in self._file.query(sql, (primitive, problem_key)):
            cfg = None
            if params is not None:
                try:
                    cfg = json.loads(params)
                except (TypeError, ValueError):
                    continue
            if isinstance(solver, str) and isinstance(ms, int | float) and isinstance(ws, int):
                out.append(FindRecord(solver, float(ms), ws, str(algorithm), cfg))
        return out or None

    def close(self) -> None:
        self._file.close()


@dataclass
class TargetContext:
    """What solvers and the engine's candidate functions read from a handle, for a target."""

    backend: Any
    info: DeviceInfo
    perf_db: Any
    find_db: Any

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def db_basename(self) -> str:
        return self.info.db_basename

    def kernel_key(self, spec: KernelSpec) -> tuple[KernelKey, str]:
        """The kernel cache key a handle on the target would look up for ``spec``, and the source."""
        source, source_hash = self.backend.read_source(spec.file)
        options = " ".join(spec.options())
        key = KernelKey(
            spec.file + self.backend.kernel_ext, spec.name, options, source_hash, self.info.fingerprint
        )
        return key, source

    def build(self, spec: KernelSpec) -> tuple[KernelKey, bytes]:
        key, source = self.kernel_key(spec)
        return key, self.backend.build(source, key.file, list(spec.options()), spec.name)


def target(backend: str, arch: str | None = None, compute_units: int | None = None, device: int = 0):
    """A TargetContext: an offline CUDA target (``arch`` and ``compute_units``), else the device
    present (the only choice for OpenCL)."""
    backend = (backend or "auto").lower()
    if backend == "cuda" and arch is not None:
        if compute_units is None:
            raise ToolError("--cu: needed with --arch (the GPU's SM count, e.g. 132 for an H200)")
        info, compiler = cuda_info(arch, compute_units)
    else:
        live = live_backend(backend, device)
        info, compiler = live.info, live
        if arch is not None and arch != info.arch:
            raise ToolError(
                f"--arch={arch}: the {live.name} device here is {info.arch}; "
                "only CUDA builds for a device that is not present"
            )
        if compute_units is not None and compute_units != info.compute_units:
            raise ToolError(f"--cu={compute_units}: the {live.name} device here has {info.compute_units}")
    return TargetContext(compiler, info, ShippedPerfDb(info.db_basename), ShippedFindDb(info.db_basename))


def live_backend(name: str, device: int = 0):
    try:
        return backends.create(name, device)
    except MiopyError as exc:
        raise ToolError(f"no device to build for: {exc}") from None


def context_for_db(db_name: str):
    """A context to validate records of ``<base>.<backend>`` against: the device here when it has
    that name, a CUDA architecture the name spells, else None."""
    base, _, backend = db_name.rpartition(".")
    if backend not in backends.NAMES:
        return None
    if backends.unavailable_reason(backend) is None:
        try:
            live = backends.create(backend)
            if live.info.db_basename == base:
                return TargetContext(live, live.info, ShippedPerfDb(base), ShippedFindDb(base))
        except MiopyError:
            pass
    if backend == "cuda":
        for arch in sorted(CUDA_LIMITS, key=len, reverse=True):
            cus = compute_units_of(base, arch)
            if cus is not None:
                try:
                    info, compiler = cuda_info(arch, cus)
                except ToolError:
                    threads, shared, dynamic = CUDA_LIMITS[arch]
                    info = DeviceInfo(base, arch, cus, "", threads, shared, dynamic)
                    compiler = OfflineCuda(arch)
                return TargetContext(compiler, info, ShippedPerfDb(base), ShippedFindDb(base))
    return None
