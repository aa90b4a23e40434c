"""cuBLAS and cuBLASLt through ctypes: the cheapest calls Python can make, on our own handles.

The libraries are the ones the CUDA wheels ship (``nvidia-cublas``, found by cuda.pathfinder), or
the system's. Nothing here is imported by CI machines without a GPU except for its constants.

cuBLASLt: a ``LtGemm`` describes one column-major product ``D = op(A) op(B)`` (``alpha`` 1,
``beta`` 0, fp32 accumulation without TF32) with its batch; ``algos()`` asks cuBLASLt's heuristics
for its candidate algorithms (an index into that list is the config find times and the perf DB
keeps), and ``prepare`` binds pointers into a call of about a microsecond.

Beyond the heuristics, ``candidates()`` enumerates algorithms by their configuration attributes
(algorithm id, tile, stages, split-K count and reduction scheme, CTA swizzling, custom option,
cluster shape, inner shape): the heuristics' picks, then variations of the best few, each built
with ``cublasLtMatmulAlgoInit`` plus ``cublasLtMatmulAlgoConfigSetAttribute`` and kept only when
``cublasLtMatmulAlgoCheck`` accepts it for this product. Such a tuple of attributes (``LtAlgo``)
is what a perf DB record stores; ``resolve`` rebuilds and re-checks it, so a record from another
library version, device or shape is refused rather than run."""

from __future__ import annotations

import ctypes
import functools
import threading
import time
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
_LAYOUT_ORDER = 1
ORDER_COL, ORDER_ROW = 0, 1
# cublasLtMatmulAlgoCapAttributes_t
_CAP_SPLITK, _CAP_REDUCTION_MASK, _CAP_SWIZZLE, _CAP_TILE_IDS, _CAP_CUSTOM_MAX = 0, 1, 2, 6, 7
_CAP_STAGES_IDS = 13
_CAP_MIN_ALIGNMENT = (16, 17, 18, 19)  # A, B, C, D
# cublasLtMatmulAlgoConfigAttributes_t, in the order of ALGO_FIELDS, with each value's size
ALGO_FIELDS = ("id", "tile", "stages", "splitk", "reduction", "swizzle", "custom", "cluster", "inner")
_FIELD_ATTR = {
    "id": (0, 4),
    "tile": (1, 4),
    "splitk": (2, 4),
    "reduction": (3, 4),
    "swizzle": (4, 4),
    "custom": (5, 4),
    "stages": (6, 4),
    "inner": (7, 2),
    "cluster": (8, 2),
}
REDUCTION_INPLACE, REDUCTION_COMPUTE_TYPE, REDUCTION_OUTPUT_TYPE = 1, 2, 4
CLUSTER_SHAPES = (2, 3, 5, 4, 6)  # 1x1x1, 2x1x1, 1x2x1, 4x1x1, 2x2x1 (cublasLtClusterShape_t)
SPLITS = (1, 2, 3, 4, 8)  # split-K counts tried around a heuristic pick
SPLIT_MIN_K = 256  # ... while every slice keeps at least this much of the reduction

LT_WORKSPACE = 32 << 20  # what cuBLASLt may use (its Hopper split-K kernels want tens of MiB)
LT_ALIGNMENT = 16  # bytes every pointer handed to a cuBLASLt call must be aligned to
LT_MAX_ALGOS = 16
LT_HEURISTIC_ALGOS = 32  # heuristic picks that candidates() starts from
LT_VARY_TOP = 4  # distinct heuristic picks whose attributes candidates() varies one at a time
LT_PAIR_TOP = 1  # ... and whose custom option, cluster shape and swizzle it varies together
LT_SEARCH_MAX = 192  # candidates() returns at most this many

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
    ns.destroy = _sig(lib, "cublasDestroy_v2", _vp)
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
    algo_p = ctypes.POINTER(_Algo)
    ns.algo_init = _sig(lib, "cublasLtMatmulAlgoInit", _vp, *(_i32,) * 7, algo_p)
    ns.algo_check = _sig(lib, "cublasLtMatmulAlgoCheck", *(_vp,) * 6, algo_p, ctypes.POINTER(_Heuristic))
    ns.algo_ids = _sig(
        lib, "cublasLtMatmulAlgoGetIds", _vp, *(_i32,) * 7, ctypes.POINTER(_i32), ctypes.POINTER(_i32)
    )
    ns.cap_get = _sig(lib, "cublasLtMatmulAlgoCapGetAttribute", algo_p, _i32, _vp, _sz, ctypes.POINTER(_sz))
    ns.config_set = _sig(lib, "cublasLtMatmulAlgoConfigSetAttribute", algo_p, _i32, _vp, _sz)
    ns.config_get = _sig(
        lib, "cublasLtMatmulAlgoConfigGetAttribute", algo_p, _i32, _vp, _sz, ctypes.POINTER(_sz)
    )
    return ns


# calls into cuBLASLt's heuristics (cublasLtMatmulAlgoGetHeuristic) in this process, for tests
# and logs: a first iteration with a kernel package makes none
heuristic_calls = 0


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


def initialize() -> float:
    """Pay cuBLASLt's one-time initialization now: the first ``cublasLtMatmulAlgoInit`` and
    ``cublasLtMatmulAlgoCheck`` of a process take tens of milliseconds (0.069 s on the H200, each
    later one 0.1-0.2 ms), whoever makes them. The CUDA backend calls this on its BLAS set-up
    thread, which every handle starts, so that the first iteration's recorded cuBLASLt configs
    are checked at the later cost. One tiny product per data type the solvers use is checked
    (nothing runs on the device); returns the seconds spent."""
    started = time.perf_counter()
    lt = cublaslt()
    handle = lt_handle()
    for data_type in (CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF):
        ids, count = (_i32 * 4)(), _i32(0)
        t = data_type
        if lt.algo_ids(handle, COMPUTE_32F, CUDA_R_32F, t, t, t, t, 4, ids, ctypes.byref(count)):
            continue
        if not count.value:
            continue
        gemm = LtGemm(data_type, OP_N, OP_N, 64, 64, 64, 64, 64, 64)
        algo = gemm._init(ids[0])
        if algo is None:
            continue
        result = _Heuristic()
        a, b, c = gemm.layouts
        lt.algo_check(handle, gemm.desc, a, b, c, c, ctypes.byref(algo), ctypes.byref(result))
    return time.perf_counter() - started


@functools.lru_cache(maxsize=256)
def lt_gemm(key: tuple) -> LtGemm:
    """The process's one ``LtGemm`` for these arguments, with the algorithms checked for it so
    far: the cuBLASLt solvers and the handle's set-up pre-checks (``precheck``) share it."""
    return LtGemm(*key)


def precheck(calls: list[tuple[tuple, tuple[int, ...]]]) -> int:
    """Check each recorded (LtGemm arguments, ALGO_FIELDS values) in the shared product
    (``lt_gemm``), as the cuBLASLt solvers' applicability checks will: run on the set-up thread
    with a kernel package's library calls, so that a first iteration finds them checked (the first
    check of each kind of product pays more of cuBLASLt's lazy initialization: 0.03 s for the
    first of a ResNet-50 iteration's on the H200, after ``initialize``). Returns how many were
    accepted; never raises."""
    accepted = 0
    for key, config in calls:
        try:
            accepted += lt_gemm(tuple(key)).resolve(tuple(config)) is not None
        except Exception as exc:  # the solver checks it again and says what went wrong
            _log.debug("cuBLASLt pre-check of %s skipped (%s)", key, exc)
    return accepted


class LtAlgo:
    """One cuBLASLt algorithm of one product, checked: ``config`` (the values of ALGO_FIELDS),
    the opaque ``algo`` and the ``workspace`` bytes it needs."""

    __slots__ = ("algo", "config", "workspace")

    def __init__(self, config: tuple[int, ...], algo: _Algo, workspace: int):
        self.config, self.algo, self.workspace = config, algo, workspace

    def fields(self) -> dict[str, int]:
        return dict(zip(ALGO_FIELDS, self.config, strict=True))

    def __repr__(self) -> str:
        return f"LtAlgo({self.fields()}, workspace={self.workspace})"


def config_of(algo: _Algo) -> tuple[int, ...]:
    """The values of ALGO_FIELDS of an algorithm (0 where this library lacks the attribute)."""
    lt = cublaslt()
    out = []
    for name in ALGO_FIELDS:
        attr, size = _FIELD_ATTR[name]
        value = ctypes.c_uint32(0) if size == 4 else ctypes.c_uint16(0)
        written = _sz(0)
        if lt.config_get(ctypes.byref(algo), attr, ctypes.byref(value), size, ctypes.byref(written)):
            value.value = 0
        out.append(int(value.value))
    return tuple(out)


def _cap(algo: _Algo, attr: int, size: int = 4) -> int:
    value = ctypes.c_uint32(0) if size == 4 else ctypes.c_uint64(0)
    written = _sz(0)
    if cublaslt().cap_get(ctypes.byref(algo), attr, ctypes.byref(value), size, ctypes.byref(written)):
        return 0
    return int(value.value)


def _cap_list(algo: _Algo, attr: int) -> list[int]:
    """An array capability (tile or stages ids): its size first, then its values."""
    lt = cublaslt()
    need = _sz(0)
    if lt.cap_get(ctypes.byref(algo), attr, None, 0, ctypes.byref(need)) or not need.value:
        return []
    values = (ctypes.c_uint32 * (need.value // 4))()
    if lt.cap_get(ctypes.byref(algo), attr, ctypes.byref(values), need.value, ctypes.byref(need)):
        return []
    return [int(v) for v in values]


class LtGemm:
    """One cuBLASLt product: D[m, n] = op_a(A) op_b(B), each a batch of ``batch`` matrices
    ``stride_*`` elements apart, every matrix column-major (``order`` ORDER_COL) or row-major
    (ORDER_ROW, the same product with the operands' roles seen transposed by the library)."""

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
        order: int = ORDER_COL,
    ):
        lt = cublaslt()
        self.key = (data_type, op_a, op_b, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c, order)
        self.data_type, self.k, self.order = data_type, k, order
        desc = _vp()
        check(lt.desc_create(ctypes.byref(desc), COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")
        for attr, value in ((_DESC_TRANSA, op_a), (_DESC_TRANSB, op_b)):
            v = ctypes.c_int32(value)
            check(lt.desc_set(desc, attr, ctypes.byref(v), 4), "cublasLtMatmulDescSetAttribute")
        self.desc = desc
        a_dims = (m, k) if op_a == OP_N else (k, m)
        b_dims = (k, n) if op_b == OP_N else (n, k)
        self.layouts = [
            self._layout(data_type, rows, cols, ld, batch, stride, order)
            for (rows, cols), ld, stride in (
                (a_dims, lda, stride_a),
                (b_dims, ldb, stride_b),
                ((m, n), ldc, stride_c),
            )
        ]
        self._algos: list[tuple[_Algo, int]] | None = None
        self._broad: list[tuple[_Algo, int]] | None = None
        self._resolved: dict[tuple[int, ...], LtAlgo | None] = {}
        self._picks: dict[tuple[int, ...], tuple[_Algo, int]] | None = None
        self._candidates: dict[tuple[int, int], list[LtAlgo]] = {}

    @staticmethod
    def _layout(data_type: int, rows: int, cols: int, ld: int, batch: int, stride: int, order: int) -> Any:
        lt = cublaslt()
        layout = _vp()
        check(lt.layout_create(ctypes.byref(layout), data_type, rows, cols, ld), "cublasLtMatrixLayoutCreate")
        if order != ORDER_COL:
            value = ctypes.c_int32(order)
            check(lt.layout_set(layout, _LAYOUT_ORDER, ctypes.byref(value), 4), "layout order")
        if batch > 1:
            count, offset = ctypes.c_int32(batch), ctypes.c_int64(stride)
            check(lt.layout_set(layout, _LAYOUT_BATCH_COUNT, ctypes.byref(count), 4), "layout batch")
            check(
                lt.layout_set(layout, _LAYOUT_STRIDED_BATCH_OFFSET, ctypes.byref(offset), 8), "layout stride"
            )
        return layout

    def _heuristic(self, count: int) -> list[tuple[_Algo, int]]:
        global heuristic_calls
        heuristic_calls += 1
        lt = cublaslt()
        pref = _vp()
        check(lt.pref_create(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
        ws = ctypes.c_uint64(LT_WORKSPACE)
        check(lt.pref_set(pref, _PREF_MAX_WORKSPACE_BYTES, ctypes.byref(ws), 8), "preference workspace")
        for attr in _PREF_MIN_ALIGNMENT:
            align = ctypes.c_uint32(LT_ALIGNMENT)
            check(lt.pref_set(pref, attr, ctypes.byref(align), 4), "preference alignment")
        results = (_Heuristic * count)()
        found = ctypes.c_int32(0)
        a, b, c = self.layouts
        status = lt.heuristic(lt_handle(), self.desc, a, b, c, c, pref, count, results, ctypes.byref(found))
        if status:
            _log.info("cuBLASLt has no algorithm for %s (status %d)", self.key, status)
            return []
        picked = [results[i] for i in range(found.value) if results[i].state == 0]
        return [(r.algo, int(r.workspace)) for r in picked]

    def algos(self) -> list[tuple[_Algo, int]]:
        """cuBLASLt's heuristic candidates, best guess first: (algorithm, workspace bytes)."""
        if self._algos is None:
            self._algos = self._heuristic(LT_MAX_ALGOS)
        return self._algos

    def broad(self) -> list[tuple[_Algo, int]]:
        """The heuristics' longer list (LT_HEURISTIC_ALGOS), best guess first."""
        if self._broad is None:
            self._broad = self._heuristic(LT_HEURISTIC_ALGOS)
        return self._broad

    def picks(self) -> list[tuple[int, ...]]:
        """The ALGO_FIELDS values of the heuristics' longer list, in its order."""
        return list(self._by_config())

    def _by_config(self) -> dict[tuple[int, ...], tuple[_Algo, int]]:
        if self._picks is None:
            self._picks = {}
            for algo, need in self.broad():
                self._picks.setdefault(config_of(algo), (algo, need))
        return self._picks

    # ---- algorithms by their attributes ------------------------------------------------------------
    def _init(self, algo_id: int) -> _Algo | None:
        algo = _Algo()
        t = self.data_type
        status = cublaslt().algo_init(
            lt_handle(), COMPUTE_32F, CUDA_R_32F, t, t, t, t, algo_id, ctypes.byref(algo)
        )
        if status:
            return None
        return algo

    def resolve(self, config: tuple[int, ...]) -> LtAlgo | None:
        """The algorithm with these ALGO_FIELDS values, checked for this product; None when the
        library refuses it (unknown id or attribute value, unsupported here, workspace over
        LT_WORKSPACE, or an alignment above LT_ALIGNMENT).

        A recorded config (a perf or find record, a kernel package's choice) is rebuilt from its
        values and checked by cublasLtMatmulAlgoCheck without asking the heuristics: the nine
        attributes are all an algorithm's configuration, and in a fresh process the heuristics
        cost about a millisecond a product. Once the heuristics were asked for this product
        (find, a default config), a pick with these values is used as it came; the heuristics
        are asked only when the rebuilt algorithm is refused and might still be one of their
        picks."""
        config = tuple(int(v) for v in config)
        if config in self._resolved:
            return self._resolved[config]
        found = None
        fields = dict(zip(ALGO_FIELDS, config, strict=False))
        if (
            len(config) == len(ALGO_FIELDS)
            and all(0 <= v < 2**31 for v in config)
            and 1 <= fields["splitk"] <= max(self.k, 1)
        ):
            # the heuristics' list first only when it is known already
            order = ("pick", "build") if self._picks is not None else ("build", "pick")
            for step in order:
                if step == "pick":
                    pick = self._by_config().get(config)
                    found = LtAlgo(config, *pick) if pick is not None else None
                else:
                    found = self._build(config)
                if found is not None:
                    break
        self._resolved[config] = found
        return found

    def _build(self, config: tuple[int, ...]) -> LtAlgo | None:
        lt = cublaslt()
        values = dict(zip(ALGO_FIELDS, config, strict=True))
        algo = self._init(values["id"])
        if algo is None:
            return None
        for name in ALGO_FIELDS[1:]:
            attr, size = _FIELD_ATTR[name]
            if size == 2 and values[name] >= 1 << 16:
                return None
            value = ctypes.c_uint32(values[name]) if size == 4 else ctypes.c_uint16(values[name])
            if lt.config_set(ctypes.byref(algo), attr, ctypes.byref(value), size):
                if values[name]:
                    return None  # an attribute this library lacks can only be 0
        if any(_cap(algo, attr) > LT_ALIGNMENT for attr in _CAP_MIN_ALIGNMENT):
            return None
        result = _Heuristic()
        a, b, c = self.layouts
        if lt.algo_check(lt_handle(), self.desc, a, b, c, c, ctypes.byref(algo), ctypes.byref(result)):
            return None
        if result.state != 0 or result.workspace > LT_WORKSPACE:
            return None
        if config_of(algo) != config:
            return None  # the library changed a value: not the algorithm asked for
        return LtAlgo(config, algo, int(result.workspace))

    def _variants(self, base: tuple[int, ...], pairs: bool) -> list[tuple[int, ...]]:
        """Configs near ``base``: the other swizzle, split-K counts (with each reduction scheme
        the algorithm offers), cluster shapes, custom options, the algorithm's other stage counts;
        with ``pairs`` also every (custom option, cluster shape, swizzle) combination."""
        b = dict(zip(ALGO_FIELDS, base, strict=True))
        algo = self._init(b["id"])
        if algo is None:
            return []
        swizzles = [b["swizzle"]]
        if _cap(algo, _CAP_SWIZZLE):
            swizzles = sorted({b["swizzle"], 1 - min(b["swizzle"], 1)})
        customs = range(min(_cap(algo, _CAP_CUSTOM_MAX), 7) + 1)
        clusters = [b["cluster"], *(c for c in CLUSTER_SHAPES if c != b["cluster"])]
        out: list[dict[str, int]] = [{**b, "swizzle": s} for s in swizzles]
        mask = _cap(algo, _CAP_REDUCTION_MASK)
        splits = [s for s in SPLITS if s == 1 or (_cap(algo, _CAP_SPLITK) and self.k // s >= SPLIT_MIN_K)]
        for split in splits:
            schemes = [r for r in (REDUCTION_INPLACE, REDUCTION_COMPUTE_TYPE) if r & mask]
            for scheme in [0] if split == 1 else schemes:
                out += [{**b, "splitk": split, "reduction": scheme, "swizzle": s} for s in swizzles]
        out += [{**b, "cluster": c} for c in clusters]
        out += [{**b, "custom": c} for c in customs]
        out += [{**b, "stages": s} for s in _cap_list(algo, _CAP_STAGES_IDS)[:24]]
        if pairs:
            out += [
                {**b, "custom": c, "cluster": g, "swizzle": s}
                for c in customs
                for g in clusters
                for s in swizzles
            ]
        return [tuple(v[f] for f in ALGO_FIELDS) for v in out]

    def candidates(self, vary: int = LT_VARY_TOP, pairs: int = LT_PAIR_TOP) -> list[LtAlgo]:
        """The algorithms find times, each checked: the heuristics' picks in their order, then
        variations of the ``vary`` best distinct picks (combinations of custom option, cluster
        shape and swizzle for the ``pairs`` best); at most LT_SEARCH_MAX. Cached per arguments."""
        key = (vary, pairs)
        if key not in self._candidates:
            seen: dict[tuple[int, ...], LtAlgo] = {}
            for config in self.picks():
                found = self.resolve(config)
                if found is not None:
                    seen.setdefault(config, found)
            for rank, base in enumerate(list(seen)[:vary]):
                for config in self._variants(base, rank < pairs):
                    if len(seen) >= LT_SEARCH_MAX:
                        break
                    if config not in seen:
                        found = self.resolve(config)
                        if found is not None:
                            seen[config] = found
            self._candidates[key] = list(seen.values())
        return self._candidates[key]

    def every_algorithm(self, limit: int = 4000) -> list[LtAlgo]:
        """A wide enumeration (benchmarks only): every algorithm id the library has for these
        types, each with every tile and stage count it lists (no split-K, default swizzle,
        custom option and cluster), kept when checked; at most ``limit`` tried."""
        lt = cublaslt()
        ids = (_i32 * 256)()
        count = _i32(0)
        t = self.data_type
        if lt.algo_ids(lt_handle(), COMPUTE_32F, CUDA_R_32F, t, t, t, t, 256, ids, ctypes.byref(count)):
            return []
        out, tried = [], 0
        for algo_id in ids[: count.value]:
            algo = self._init(algo_id)
            if algo is None:
                continue
            tiles = _cap_list(algo, _CAP_TILE_IDS) or [0]
            stages = _cap_list(algo, _CAP_STAGES_IDS) or [0]
            for tile in tiles:
                for stage in stages:
                    if tried >= limit:
                        return out
                    tried += 1
                    found = self.resolve((algo_id, tile, stage, 1, 0, 0, 0, 0, 0))
                    if found is not None:
                        out.append(found)
        return out

    def pick(self, choice: int | LtAlgo) -> tuple[_Algo, int]:
        """(algorithm, workspace bytes) of a heuristic index or a checked LtAlgo of this product."""
        if isinstance(choice, LtAlgo):
            return choice.algo, choice.workspace
        return self.algos()[choice]

    def prepare(
        self, index: int | LtAlgo, a: int, b: int, d: int, workspace: int, owner: Any, beta: float = 0.0
    ) -> Callable[[], None]:
        """A call of candidate ``index`` (a heuristic index or an LtAlgo) on these device
        addresses, on the stream ``owner._sptr`` holds when it runs (the CUDA backend);
        D = op(A) op(B) + ``beta`` D."""
        algo, need = self.pick(index)
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
