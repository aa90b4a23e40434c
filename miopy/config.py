"""Every MIOPY_* knob, read in one place. Values are read at call time so tests and long-running
processes see changes to the environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

from miopy.errors import bad

VERSION = "0.1.0"

FIND_MODES = {"NORMAL": 1, "FAST": 2, "HYBRID": 3, "DYNAMIC_HYBRID": 5}
FIND_ENFORCE = {"NONE": 1, "DB_UPDATE": 2, "SEARCH": 3, "SEARCH_DB_UPDATE": 4, "DB_CLEAN": 5}


def _env(name: str) -> str | None:
    key = _read.get(name)
    if key is None:
        _remember(name)
        key = _read[name]
    if _RAW_ENV is not None:
        # os.environ's own lookup (``decodevalue(_data[encodekey(key)])``), its key encoded once
        raw = _RAW_ENV.get(key)
        value = None if raw is None else os.environ.decodevalue(raw)  # type: ignore[attr-defined]
    else:
        value = os.environ.get("MIOPY_" + name)
    return value if value not in (None, "") else None


# Every knob read so far in this process, with the key to read it again quickly: see knob_state.
_read: dict[str, object] = {}
_read_keys: tuple[object, ...] = ()


def _remember(name: str) -> None:
    global _read_keys
    raw = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    _read[name] = encode("MIOPY_" + name) if isinstance(raw, dict) and encode is not None else "MIOPY_" + name
    _read_keys = tuple(_read.values())


def knob_state() -> tuple:
    """The value of every knob read so far in this process: an answer computed from knobs (which
    solvers apply, for example) may be reused while this stays the same. About a microsecond."""
    raw = getattr(os.environ, "_data", None)
    if isinstance(raw, dict) and hasattr(os.environ, "encodekey"):
        return tuple(map(raw.get, _read_keys))
    return tuple(os.environ.get(k) for k in _read_keys)  # type: ignore[arg-type]


def _flag(name: str) -> bool:
    value = _env(name)
    return value is not None and value.strip().lower() not in ("0", "false", "no", "off")


def _enum(name: str, table: dict[str, int], default: str) -> str:
    value = _env(name)
    if value is None:
        return default
    key = value.strip().upper()
    if key in table:
        return key
    for text, number in table.items():
        if key == str(number):
            return text
    raise bad("MIOPY_" + name, value, f"expected one of {', '.join(table)}")


def backend() -> str:
    return (_env("BACKEND") or "auto").strip().lower()


def log_level() -> int:
    """MIOpen's 0..7; anything else is refused like every other bad knob."""
    value = _env("LOG_LEVEL")
    if value is None:
        return 0
    try:
        level = int(value.strip())
    except ValueError:
        raise bad("MIOPY_LOG_LEVEL", value, "expected an integer 0..7") from None
    if not 0 <= level <= 7:
        raise bad("MIOPY_LOG_LEVEL", value, "expected an integer 0..7")
    return level


# os.environ's own store (POSIX CPython: encoded keys), read directly on the per-call path:
# ``os.environ.get`` encodes its key first, a few microseconds a call. None where os.environ is
# not the CPython mapping with an encoded store (every knob is then read through it).
_RAW_ENV = getattr(os.environ, "_data", None)
if not (
    isinstance(_RAW_ENV, dict) and hasattr(os.environ, "encodekey") and hasattr(os.environ, "decodevalue")
):
    _RAW_ENV = None
_RAW_LOGGING_CMD = (
    os.environ.encodekey("MIOPY_ENABLE_LOGGING_CMD")
    if isinstance(_RAW_ENV, dict) and hasattr(os.environ, "encodekey")
    else None
)


def enable_logging_cmd() -> bool:
    """Read on every ``Solution.run``: unset (the usual case) costs one dict lookup."""
    if _RAW_LOGGING_CMD is not None and _RAW_LOGGING_CMD not in _RAW_ENV:
        return False
    return _flag("ENABLE_LOGGING_CMD")


def disable_cache() -> bool:
    return _flag("DISABLE_CACHE")


def cache_dir() -> Path:
    custom = _env("CUSTOM_CACHE_DIR")
    if custom is not None:
        return Path(custom).expanduser()
    return Path.home() / ".cache" / "miopy" / VERSION


def user_db_dir() -> Path:
    custom = _env("USER_DB_PATH")
    if custom is not None:
        return Path(custom).expanduser()
    return Path.home() / ".config" / "miopy"


def system_db_dir() -> Path:
    custom = _env("SYSTEM_DB_PATH")
    if custom is not None:
        return Path(custom).expanduser()
    return Path(__file__).parent / "data"


def kdb_dir() -> Path:
    """Where ``miopy kernels install`` puts kernel packages (``<arch>_<cu>.kdb``) for this user;
    read after MIOPY_SYSTEM_DB_PATH and before the user kernel cache."""
    custom = _env("KDB_PATH")
    if custom is not None:
        return Path(custom).expanduser()
    return Path.home() / ".local" / "share" / "miopy" / "kdb"


def find_mode() -> str:
    return _enum("FIND_MODE", FIND_MODES, "DYNAMIC_HYBRID")


def find_enforce() -> str:
    return _enum("FIND_ENFORCE", FIND_ENFORCE, "NONE")


def find_only_solvers() -> list[str] | None:
    value = _env("DEBUG_FIND_ONLY_SOLVER")
    if value is None:
        return None
    return [part.strip() for part in value.replace(",", ";").split(";") if part.strip()]


def disable_find_db() -> bool:
    return _flag("DEBUG_DISABLE_FIND_DB")


def graph_single_launch() -> bool:
    """MIOPY_GRAPH_SINGLE_LAUNCH (default on): a recorded run of one kernel launch replays as a
    CUDA graph, whose launch costs the host less than a cuLaunchKernel with its arguments; 0
    keeps it a direct launch. Read when a CUDA backend is made."""
    value = _env("GRAPH_SINGLE_LAUNCH")
    return value is None or value.strip().lower() not in ("0", "false", "no", "off")


def library_warm_up() -> bool:
    """MIOPY_LIBRARY_WARM_UP (default off): a CUDA handle whose kernel package lists the cuBLAS
    and cuBLASLt calls of its chosen solutions runs each once in the background when it is made,
    so that their kernels are loaded before the first iteration (miopy.backends.cuda_warm). Off by
    default: on an H200 it took 0.08 s off a ResNet-50 first iteration but added 0.25 s to the
    set-up the process did meanwhile (docs/performance.md). Read when a handle is made."""
    return _flag("LIBRARY_WARM_UP")


def library_stream_warm_up() -> bool:
    """MIOPY_LIBRARY_STREAM_WARM_UP (default on; 0 turns it off): a CUDA handle whose kernel
    package names cuBLASLt algorithms makes, on its set-up thread after checking them, one cuBLASLt
    call per distinct algorithm on the handle's own stream (the one in effect when the handle is
    made, never a capture's), on scratch memory, so that the first user cuBLASLt call of a stream
    does not pay what a process's first call on it costs. The first user cuBLASLt call waits until
    those calls are enqueued (not until they ran). Without a package, or with
    MIOPY_LIBRARY_WARM_UP=1 (which warms on a private stream instead), nothing runs. On an H200
    (ResNet-50 training iteration, batch 32, 3 fresh processes each) the first iteration took
    0.052-0.055 s with it against 0.054-0.068 s without; its GPU tests pass with it. Read when a
    handle is made."""
    return _env("LIBRARY_STREAM_WARM_UP") is None or _flag("LIBRARY_STREAM_WARM_UP")


def kernel_prefetch(backend: str) -> bool:
    """MIOPY_KERNEL_PREFETCH (default on for cuda, off for opencl): a handle with a kernel package
    reads the package's binaries for its device into memory on a thread of its own when it is
    made, so that the first iteration's kernels come from memory (KernelCache.prefetch). Off on
    OpenCL by default: there PoCL's own loading of a program dominates, and the read competes for
    the CPU the kernels run on (one convolution's first call on 2 cores: 0.08 s without, 0.21 s
    with it). 1 or 0 forces it either way. Read when a handle is made."""
    if _env("KERNEL_PREFETCH") is None:
        return backend == "cuda"
    return _flag("KERNEL_PREFETCH")


def kernel_load_ahead() -> bool:
    """MIOPY_KERNEL_LOAD_AHEAD (default on): where a handle reads its package's binaries ahead
    (MIOPY_KERNEL_PREFETCH), its set-up thread also loads each as a kernel (on CUDA fully:
    cuFuncLoad, so that no first launch loads it while work is queued), and the first iteration
    takes them loaded. 0 leaves the loading to each kernel's first use. Read when a handle is
    made."""
    return _env("KERNEL_LOAD_AHEAD") is None or _flag("KERNEL_LOAD_AHEAD")


def gc_freeze() -> bool:
    """MIOPY_GC_FREEZE (default on): a handle that found a kernel package calls ``gc.freeze()``
    once its set-up thread has read and loaded the package, so that Python's full garbage
    collections, which a network's first iteration triggers as it makes its solutions and
    prepared calls, no longer walk every object the process made before (the imported modules,
    the package's decoded programs): such a collection paused the first iteration for 15 ms on
    an H200's host. The collector is thawed (``gc.unfreeze()``) at the first replayed run or
    after 2048 runs that were none, so that garbage in reference cycles among the frozen objects
    is collected again from then on. Until then the youngest generation is collected after
    100,000 new objects rather than Python's 700 or 2000 (its collections took 2.6-3 ms of an H200
    first iteration). 0 leaves the collector alone. Read when a handle is made."""
    return _env("GC_FREEZE") is None or _flag("GC_FREEZE")


def graph_single_library() -> bool:
    """MIOPY_GRAPH_SINGLE_LIBRARY (default off): a recorded run of one library call (cuBLAS,
    cuBLASLt) replays as a CUDA graph. Off, the call is made directly: on an H200 the graph's
    kernel started 0.1-0.4 us later on the device than the same call made directly (fp16/bf16
    1x1 convolutions of 11-19 us, benchmarks/conv_kernels.py), which is what separated those from
    cuDNN's time (cuDNN runs the same cuBLASLt kernels). Read when a CUDA backend is made."""
    return _flag("GRAPH_SINGLE_LIBRARY")


def bench_flush_l2() -> bool:
    """MIOPY_BENCH_FLUSH_L2: find, tuning and the driver evict the L2 cache before each timed run
    (off by default: back-to-back runs, as a network runs them)."""
    return _flag("BENCH_FLUSH_L2")


def find_copy_inputs() -> bool:
    """MIOPY_FIND_COPY_INPUTS: find and tuning time the candidates on private copies of the
    caller's input tensors too (off by default: the inputs, only read, are timed in place; the
    outputs are always copies)."""
    return _flag("FIND_COPY_INPUTS")


def debug_wgmma_config() -> dict | None:
    """MIOPY_DEBUG_WGMMA_CONFIG: a JSON object of config fields (e.g. ``{"ws": 2, "stages": 5}``)
    that the wgmma solvers' default configs take where the result is still valid, as MIOpen's
    *_PERF_VALS debug knobs force a config (for measuring a variant; tuned records win)."""
    value = _env("DEBUG_WGMMA_CONFIG")
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise bad("MIOPY_DEBUG_WGMMA_CONFIG", value, "expected a JSON object of config fields")
    return parsed
