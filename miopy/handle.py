"""Handle: the backend, its device info, the kernel cache, the DBs and the invoker cache. It
compiles and runs solutions of any primitive; it knows neither the engine nor the solvers."""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from miopy import arrays, backends, bounds, config, log
from miopy.backends.prepared import PreparedCache, Recorder
from miopy.errors import BadParm, bad
from miopy.invoker import ProgramInvoker
from miopy.logging_cmd import log_command
from miopy.solution import InvokeArgs, KernelSpec, Solution

_log = log.get("miopy.handle")

# primitive -> hook(handle, solution, tensors, workspace, scalars) -> ran it (see run_solution)
_output_scaling: dict[str, Callable[..., bool]] = {}

# At most this many package kernels are loaded ahead by a handle's set-up thread (a ResNet-50
# training iteration's package holds about 190).
LOAD_AHEAD_MAX = 2048


def register_output_scaling(primitive: str, hook: Callable[..., bool]) -> None:
    """Let ``hook`` run ``primitive``'s solutions given scalars that scale the output (it returns
    False, having done nothing, for the default scaling)."""
    _output_scaling[primitive] = hook


_gc_frozen = threading.Event()  # set once a handle froze the collector (gc_freeze)
# [frozen and not thawed yet, runs left before thawing]: see _freeze_gc and _thaw_gc
_gc_thaw = [False, 0]
# Unprepared runs after which the collector is thawed when no run was replayed (OpenCL, host
# arrays): a network's first few iterations.
THAW_AFTER_RUNS = 2048
# While frozen, the youngest generation is collected after this many more container objects
# (Python's default: 700 in 3.11, 2000 in 3.12): a first iteration makes tens of thousands
# (solutions, invokers, prepared calls), and its young collections, each walking what is young,
# took 2.6-3 ms of an H200 first iteration of 0.052 s. Restored at the thaw.
FROZEN_GEN0_THRESHOLD = 100_000
_gc_threshold: list[tuple[int, ...]] = []  # [the thresholds before, those set] while raised


def _freeze_gc() -> None:
    """``gc.freeze()``, once per process (MIOPY_GC_FREEZE): what exists now is not walked by the
    collector until ``_thaw_gc``, so the first iteration's full collections cost what it made,
    not what the whole process holds; the youngest generation's threshold is raised to
    FROZEN_GEN0_THRESHOLD until then (never lowered; left alone where collection is off)."""
    if not _gc_frozen.is_set():
        _gc_frozen.set()
        gc.freeze()
        before = gc.get_threshold()
        if 0 < before[0] < FROZEN_GEN0_THRESHOLD:
            raised = (FROZEN_GEN0_THRESHOLD, *before[1:])
            gc.set_threshold(*raised)
            _gc_threshold[:] = [before, raised]
        _gc_thaw[:] = [True, THAW_AFTER_RUNS]
        _log.debug("gc.freeze(): %d objects frozen", gc.get_freeze_count())


def _thaw_gc() -> None:
    """``gc.unfreeze()`` once after ``_freeze_gc``: at the first replayed run (the second
    iteration has begun) or after THAW_AFTER_RUNS runs that were none, so that garbage in
    reference cycles among what was frozen is collected again. The frozen objects join the
    oldest generation: a later full collection walks them again, outside the first iteration.
    The thresholds raised by ``_freeze_gc`` are restored, unless they were changed since."""
    if _gc_thaw[0]:
        _gc_thaw[0] = False
        gc.unfreeze()
        if _gc_threshold:
            before, raised = _gc_threshold
            _gc_threshold.clear()
            if gc.get_threshold() == raised:
                gc.set_threshold(*before)


class Handle:
    """``Handle(backend="auto"|"cuda"|"opencl", device=0)``; auto follows MIOPY_BACKEND, then
    picks cuda when a GPU is usable, else opencl."""

    def __init__(self, backend: str | None = None, device: int = 0):
        if backend is not None and not isinstance(backend, str):
            raise bad("backend", backend, "expected auto, cuda or opencl")
        config.log_level()  # a bad MIOPY_LOG_LEVEL is refused here, like every other bad knob
        name = (backend or config.backend()).lower()
        self.backend = backends.create(name, device)
        self.info = self.backend.info
        self._programs: dict[tuple[str, str, tuple[str, ...]], Any] = {}
        self._invokers: dict[tuple[str, str, str, str], bounds.CheckedInvoker] = {}
        self._lock = threading.RLock()
        self._cache_lock = threading.Lock()  # compiles run in threads; the cache file is not shared
        self._kernel_cache = None
        self._perf_db = None
        self._find_db = None
        self._package_choices = None
        self._prepared = PreparedCache()  # (solution, buffers) -> prepared calls: see run_solution
        # (primitive, problem key, invoker key) -> (DB and knob state, solutions): see
        # miopy.engine.find.get_solutions
        self.immediate_choices: dict[tuple[str, str, str], tuple[Any, tuple[Solution, ...]]] = {}
        warm = getattr(self.backend, "warm_library", None)
        precheck = getattr(self.backend, "precheck_library", None)
        if warm is not None and config.library_warm_up() and not config.disable_cache():
            warm(self.package_choices.library_calls)  # made here: the thread only reads it
        elif precheck is not None and not config.disable_cache():
            # checks, then with a package one cuBLASLt call per algorithm on this handle's stream
            stream = config.library_stream_warm_up() and self.package_choices.path is not None
            precheck(self.package_choices.library_calls, stream_warm_up=stream)
        prefetch = config.kernel_prefetch(self.backend.name) and not config.disable_cache()
        # kernel key columns -> kernel loaded by the set-up thread (_read_package), taken by compile
        self._loaded_ahead: dict[tuple[str, ...], Any] = {}
        self.kernels_loaded_ahead = 0  # kernels the set-up thread loaded (for tests and logs)
        self.kernels_ahead_used = 0  # of those, the ones compile() handed out
        self._prefetch_thread = self._read_package(prefetch) if not config.disable_cache() else None
        _log.info(
            "handle: backend %s, device %s (%s, %d CUs)",
            self.backend.name,
            self.info.name,
            self.info.arch,
            self.info.compute_units,
        )

    def _read_package(self, binaries: bool) -> threading.Thread | None:
        """With a kernel package, on a thread of its own while the caller sets up: its
        immediate-mode choices and programs, checked once as a whole (PackageChoices: the package,
        its records and the miopy sources hashed) and decoded, the system find and perf DBs' rows
        read (``preload``), then with ``binaries`` (MIOPY_KERNEL_PREFETCH)
        its binaries for this device read into memory (KernelCache.prefetch), the sources of
        their kernels read and hashed (the kernel keys of the first iteration) and each binary
        loaded as a kernel (``Backend.load``, then ``Backend.finish_load``: on CUDA the driver
        loads the function now rather than at its first launch, where a lazily loaded kernel may
        wait for the work already queued on the device): the first iteration then finds all of
        it in memory instead of in SQLite, zlib, the files and the driver (``compile`` takes a
        kernel loaded ahead when its key, source hash included, is the one it computes)."""
        cache = self.kernel_cache
        if not cache.package_paths():
            return None
        choices = self.package_choices
        packages = ()
        if binaries:
            with self._cache_lock:
                packages = cache._files()[:-1]  # opened here: one set of files for both threads
        backend = self.backend
        load = config.kernel_load_ahead()
        freeze = config.gc_freeze()
        # the system find and perf DBs' rows, read in one query per table at their first use:
        # here, not in the first problem's choosing (opening the file, its checks, the query)
        system_dbs = [self.perf_db] + ([] if config.disable_find_db() else [self.find_db])

        def run() -> None:
            try:
                choices.read_ahead()  # reads and checks the package's records, decodes them
                for db in system_dbs:
                    db.preload()
                if not packages:
                    return
                cache.prefetch(self.info.fingerprint, packages)
                ext = backend.kernel_ext
                for file in {key[0] for key in list(cache._ahead)}:
                    if file.endswith(ext):
                        with contextlib.suppress(OSError):  # gone here: its key is a miss anyway
                            backend.read_source(file[: -len(ext)])
                if load:
                    self._load_ahead(list(cache._ahead.items())[:LOAD_AHEAD_MAX])
            except Exception as exc:  # the first iteration reads them itself
                _log.debug("kernel package read-ahead failed (%s)", exc)
            finally:
                if freeze:
                    _freeze_gc()

        thread = threading.Thread(target=run, name="miopy-kernel-prefetch", daemon=True)
        thread.start()
        return thread

    def _load_ahead(self, entries: list[tuple[tuple[str, ...], bytes]]) -> None:
        """Load each (key columns, binary) as a kernel (the set-up thread): ``compile`` takes them
        from ``_loaded_ahead``. A binary that does not load is left to ``compile``, which reports
        and rebuilds it as before."""
        backend = self.backend
        finish = getattr(backend, "finish_load", None)
        ahead = self.kernel_cache._ahead
        for key, binary in entries:
            if key in self._loaded_ahead or key not in ahead:
                continue  # loaded, or taken by compile() meanwhile
            try:
                kernel = backend.load(binary, key[1])
                if finish is not None:
                    finish(kernel)
            except Exception as exc:  # compile() meets it again and says so
                _log.debug("kernel %s/%s not loaded ahead (%s)", key[0], key[1], exc)
                continue
            self._loaded_ahead[key] = kernel
            self.kernels_loaded_ahead += 1

    # ---- identity ---------------------------------------------------------------------------------
    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def db_basename(self) -> str:
        return self.info.db_basename

    # ---- persistent state (opened lazily; never fails a call) ---------------------------------
    @property
    def kernel_cache(self):
        if self._kernel_cache is None:
            from miopy.db.kernel_cache import KernelCache

            self._kernel_cache = KernelCache(
                self.db_basename, self.backend_name, self.info.arch, self.info.compute_units
            )
        return self._kernel_cache

    @property
    def perf_db(self):
        if self._perf_db is None:
            from miopy.db.perf_db import PerfDb

            self._perf_db = PerfDb(self.db_basename, self.backend_name)
        return self._perf_db

    @property
    def find_db(self):
        if self._find_db is None:
            from miopy.db.find_db import FindDb

            self._find_db = FindDb(self.db_basename, self.backend_name)
        return self._find_db

    @property
    def package_choices(self):
        """Immediate mode's choices shipped in this device's kernel package (read on first use)."""
        if self._package_choices is None:
            from miopy.db.package_choices import PackageChoices

            paths = [] if config.disable_cache() else self.kernel_cache.package_paths()
            choices = PackageChoices(paths, self.db_basename, self.backend_name, self.info.fingerprint)
            # a package's cuBLASLt programs are bound to this process's products when first used
            choices.binder = getattr(self.backend, "bind_library", None)
            self._package_choices = choices
        return self._package_choices

    # ---- kernels ----------------------------------------------------------------------------------
    def compile(self, spec: KernelSpec) -> Any:
        """In-process program cache -> system .kdb -> user kernel cache -> compiler."""
        from miopy.db.kernel_cache import KernelKey

        options = spec.option_tuple()
        program_key = (spec.file, spec.name, options)
        with self._lock:
            kernel = self._programs.get(program_key)
        if kernel is None:
            source, source_hash = self.backend.read_source(spec.file)
            key = KernelKey(
                spec.file + self.backend.kernel_ext,
                spec.name,
                " ".join(options),
                source_hash,
                self.info.fingerprint,
            )
            kernel = self._loaded_ahead.pop(key.columns(), None) if self._loaded_ahead else None
            if kernel is not None:  # loaded by the set-up thread from the package
                with self._cache_lock:
                    self.kernel_cache.take_ahead(key)
                self.kernels_ahead_used += 1
                binary = None
            else:
                with self._cache_lock:
                    binary = self.kernel_cache.get(key)
            if binary is not None:
                try:
                    kernel = self.backend.load(binary, spec.name)
                except Exception as exc:  # a stale or foreign binary is a miss, never an error
                    _log.warning(
                        "cached binary for %s/%s did not load (%s); rebuilding", spec.file, spec.name, exc
                    )
                    binary = None
            if binary is None and kernel is None:
                _log.info(
                    "compiling %s%s %s %s", spec.file, self.backend.kernel_ext, spec.name, " ".join(options)
                )
                binary = self.backend.build(
                    source, spec.file + self.backend.kernel_ext, list(options), spec.name
                )
                with self._cache_lock:
                    self.kernel_cache.put(key, binary)
                kernel = self.backend.load(binary, spec.name)
            with self._lock:
                self._programs[program_key] = kernel
        return kernel

    def use_binary(self, file: str, name: str, options: tuple[str, ...], binary: bytes) -> None:
        """Load ``binary`` as kernel ``name`` of ``file`` built with ``options``: this handle then
        runs it without looking in any cache (``miopy kernels build`` launching what it built)."""
        kernel = self.backend.load(binary, name)
        with self._lock:
            self._programs[(file, name, tuple(options))] = kernel

    def prepare_invoker(self, solution: Solution) -> bounds.CheckedInvoker:
        """Compile the solution's kernels and build its invoker, cached by (primitive, invoker key
        (the network config with every tensor's strides), solver, config) as MIOpen's invoker
        cache (and the fused epilogue, ``extra["epilogue"]``, where there is one). The invoker
        checks, before each launch, that the buffers hold what its kernels touch."""
        problem = solution.problem
        key = (problem.primitive, problem.invoker_key(), solution.solver, solution.config_key())
        if solution.built and "epilogue" in solution.extra:
            key = (*key, solution.extra["epilogue"])
        with self._lock:
            invoker = self._invokers.get(key)
        if invoker is None:
            need = bounds.required_bytes(solution)  # before building: a region outside is a bug
            program = solution.program
            kernels = {spec: self.compile(spec) for spec in program.kernels}
            invoker = bounds.CheckedInvoker(
                ProgramInvoker(self.backend, program, kernels), need, self.backend
            )
            with self._lock:
                self._invokers[key] = invoker
        return invoker

    # ---- buffers ----------------------------------------------------------------------------------
    def buffer(
        self, obj: Any, nbytes: int, field: str, desc: Any = None, output: bool = False
    ) -> tuple[Any, np.ndarray | None]:
        """(device buffer, host array to copy back into or None) for a user tensor argument.

        NumPy arrays are copied (and written back when they are outputs); device arrays of this
        backend are used in place. With ``desc``, the array's type and shape are checked against
        it (miopy.arrays), before anything launches."""
        if isinstance(obj, np.ndarray):
            arrays.check_host(obj, desc, nbytes, field, output)
            return self.backend.upload(obj), obj
        wrapped = self.backend.wrap(obj)
        if wrapped is None:
            raise bad(field, type(obj).__name__, f"not a NumPy array nor a {self.backend_name} device array")
        arrays.check_device(obj, desc, field)
        size = self.backend.nbytes(wrapped)
        if size < nbytes:
            raise bad(field, f"buffer of {size} bytes", f"the tensor needs {nbytes} bytes")
        return wrapped, None

    def run_solution(
        self,
        solution: Solution,
        tensors: dict[str, Any],
        workspace: Any = None,
        scalars: dict[str, float] | None = None,
    ) -> None:
        """Enqueue ``solution`` on ``tensors`` by role on the backend's stream and return (cuDNN's
        contract); only outputs given as NumPy arrays are copied back, which waits for the device.

        On device arrays the first run records the program's launches as prepared calls (see
        ``miopy.backends.prepared``), cached by the solution, the buffers' addresses, shapes,
        strides and types, the workspace and the scalars; later runs on them only replay.

        A primitive may scale its output by scalars that no program reads (a convolution's
        "alpha" and "beta": output = alpha * result + beta * output, see
        miopy.solvers.conv.scaled): its hook (``register_output_scaling``) runs such a call."""
        if scalars:
            scaling = _output_scaling.get(solution.problem.primitive)
            if scaling is not None and scaling(self, solution, tensors, workspace, scalars):
                return
        key = None
        if type(tensors) is dict and (scalars is None or type(scalars) is dict):
            # The hit path: one key of the buffers' addresses, shapes, strides and types, one
            # lookup, the replay. Everything else was checked when the entry was recorded.
            backend = self.backend
            parts = backend.fast_keys(tensors.values())
            ws_key = None if workspace is None or parts is None else backend.fast_key(workspace)
            if parts is not None and (workspace is None or ws_key is not None):
                key = (id(solution), tuple(tensors), parts, ws_key, tuple(scalars.items()) if scalars else ())
                entries = self._prepared.entries
                entry = entries.get(key)
                if entry is not None and entry[0]() is solution:
                    if _gc_thaw[0]:
                        _thaw_gc()
                    entries.move_to_end(key)
                    if config.enable_logging_cmd():
                        log_command(solution.problem, solution.solver_id)
                    backend.run_prepared(entry[1])
                    return
        self._run_unprepared(solution, tensors, workspace, scalars, key)

    def _run_unprepared(
        self,
        solution: Solution,
        tensors: Any,
        workspace: Any,
        scalars: Any,
        key: Any,
    ) -> None:
        """``run_solution`` past the prepared-call cache: checks every argument, runs, and records
        the prepared calls under ``key`` (None: not recordable)."""
        if _gc_thaw[0]:
            _gc_thaw[1] -= 1
            if _gc_thaw[1] <= 0:
                _thaw_gc()
        if not isinstance(tensors, dict):
            roles = ", ".join(solution.problem.tensors())
            raise BadParm(f"tensors={type(tensors).__name__}: expected a dict with {roles}")
        if scalars is not None and not isinstance(scalars, dict):
            raise BadParm(f"scalars={type(scalars).__name__}: expected a dict of numbers by name")
        if config.enable_logging_cmd():
            log_command(solution.problem, solution.solver_id)
        backend = self.backend
        problem = solution.problem
        descs = problem.tensors()
        missing = [r for r in descs if tensors.get(r) is None]
        if missing:
            raise BadParm(f"tensors: missing {', '.join(missing)} (need {', '.join(descs)})")
        bufs, hosts = {}, {}
        outputs = problem.outputs
        for role, desc in descs.items():
            bufs[role], hosts[role] = self.buffer(tensors[role], desc.nbytes, role, desc, role in outputs)
        # tensors the solution reads beyond its problem's (a fused epilogue's bias)
        for role, nbytes in (solution.extra.get("extra_tensors") or {}).items():
            if tensors.get(role) is None:
                raise BadParm(f"tensors: missing {role} (the solution reads it)")
            bufs[role], hosts[role] = self.buffer(tensors[role], nbytes, role)
        ws = owned = None
        if solution.workspace:
            if workspace is not None:
                ws, _ = self.buffer(workspace, solution.workspace, "workspace")
            if ws is None or backend.misaligned(ws):
                ws = owned = backend.alloc(solution.workspace)
        staged = self._stage_misaligned(solution, bufs, hosts)
        if staged:
            key = None  # the user's buffers are not the ones the kernels see: nothing to record
        invoker = self.prepare_invoker(solution)
        args = InvokeArgs(bufs, ws, scalars or {})
        if key is not None and all(h is None for h in hosts.values()):
            invoker.check(args)  # the buffers the recorded calls are bound to
            recorder = Recorder(backend)
            inner = invoker.invoker
            if isinstance(inner, ProgramInvoker) and inner.program is solution.program:
                inner.on(recorder)(args)  # its kernels and resolved steps, recorded
            else:
                kernels = {spec: self.compile(spec) for spec in solution.program.kernels}
                ProgramInvoker(recorder, solution.program, kernels)(args)
            if recorder.ok:
                calls = backend.finish_prepared(recorder.calls)
                self._prepared.put(key, (weakref.ref(solution), calls, owned))
                backend.run_prepared(calls)
                return
        invoker(args)
        if staged:
            for role, user_buf, nbytes in staged:
                if role in problem.outputs:
                    backend.copy(user_buf, bufs[role], nbytes)
            backend.synchronize()  # the aligned copies are freed on return: let the device finish
        for out in problem.outputs:
            if hosts[out] is not None:
                backend.download(bufs[out], hosts[out])

    def _stage_misaligned(
        self, solution: Solution, bufs: dict[str, Any], hosts: dict[str, Any]
    ) -> list[tuple[str, Any, int]]:
        """Replace each user device buffer that starts off the kernels' alignment (a view into the
        middle of a tensor: a slice, a storage offset) by an aligned copy, in ``bufs``; returns
        (role, the user's buffer, bytes) of each, whose outputs are copied back after the run.
        Rare and slow by design: the kernels' vector accesses would fault on such a pointer."""
        backend = self.backend
        staged = []
        extra = solution.extra.get("extra_tensors") or {}
        descs = solution.problem.tensors()
        for role, buf in bufs.items():
            if hosts.get(role) is not None or not backend.misaligned(buf):
                continue
            nbytes = descs[role].nbytes if role in descs else int(extra[role])
            copy = backend.alloc(nbytes)
            backend.copy(copy, buf, nbytes)  # outputs too: beta and accumulating kernels read them
            staged.append((role, buf, nbytes))
            bufs[role] = copy
            _log.info("%s: the device buffer is not aligned for the kernels; the run uses a copy", role)
        return staged

    def __repr__(self) -> str:
        return f"Handle({self.backend_name}, {self.info.name}, {self.db_basename})"
