"""A recorded cuBLASLt config (a kernel package's choice, a find or perf record) is used without
asking cuBLASLt's heuristics, which cost about a millisecond a product in a fresh process: the
algorithm is rebuilt from its attribute values and checked (cublasLtMatmulAlgoCheck), and the
cuBLASLt solvers take a valid config as proof that they apply. The decision logic runs here with
fakes in place of the library (the real path: tests/backend/test_cuda_fastpath.py on a GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from miopy.backends import cuda_libs
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.solvers import by_name
from miopy.solvers.conv import gemm_lt, gemm_lt_wrw
from miopy.tensor import TensorDesc

GOOD = (20, 20, 26, 1, 0, 0, 0, 4, 0)  # ALGO_FIELDS values the fake library accepts
PICKED = (21, 18, 12, 1, 0, 0, 0, 2, 0)  # a heuristic pick the fake cannot rebuild


class FakeLt:
    """What LtGemm asks of the library: heuristic queries (counted) and AlgoCheck (builds)."""

    def __init__(self, monkeypatch, buildable=(GOOD,), picks=(GOOD, PICKED)):
        self.heuristics = 0
        self.builds: list[tuple[int, ...]] = []
        self.buildable, self.pick_list = set(buildable), list(picks)
        monkeypatch.setattr(cuda_libs, "config_of", lambda algo: algo)  # fake algos are tuples

    def gemm(self, k: int = 64) -> cuda_libs.LtGemm:
        g = object.__new__(cuda_libs.LtGemm)  # no descriptors: the library is not here
        g.k, g._algos, g._broad, g._picks, g._resolved, g._candidates = k, None, None, None, {}, {}
        g._heuristic = self._heuristic
        g._build = self._build
        return g

    def _heuristic(self, count: int):
        self.heuristics += 1
        return [(p, 1024) for p in self.pick_list[:count]]

    def _build(self, config):
        self.builds.append(config)
        return cuda_libs.LtAlgo(config, config, 512) if config in self.buildable else None


def test_a_recorded_config_is_rebuilt_without_the_heuristics(monkeypatch):
    lt = FakeLt(monkeypatch)
    gemm = lt.gemm()
    algo = gemm.resolve(GOOD)
    assert algo is not None and algo.config == GOOD and algo.workspace == 512  # AlgoCheck's answer
    assert lt.heuristics == 0 and lt.builds == [GOOD]
    assert gemm.resolve(list(GOOD)) is algo and lt.builds == [GOOD]  # kept per product


def test_a_config_the_library_will_not_rebuild_asks_the_heuristics_once(monkeypatch):
    lt = FakeLt(monkeypatch)
    gemm = lt.gemm()
    algo = gemm.resolve(PICKED)  # only the heuristics' own object has it: used as it came
    assert algo is not None and algo.workspace == 1024 and lt.heuristics == 1
    assert gemm.resolve((99, 1, 1, 1, 0, 0, 0, 0, 0)) is None  # neither: refused
    assert lt.heuristics == 1


def test_once_the_heuristics_were_asked_their_pick_is_used_as_it_came(monkeypatch):
    lt = FakeLt(monkeypatch)
    gemm = lt.gemm()
    gemm.picks()  # find or a default config asked them
    algo = gemm.resolve(GOOD)
    assert algo is not None and algo.workspace == 1024 and lt.builds == []


@pytest.mark.parametrize(
    "config",
    [(1, 2, 3), (-1, *GOOD[1:]), (*GOOD[:3], 0, *GOOD[4:]), (*GOOD[:3], 65, *GOOD[4:]), (*GOOD[:8], 2**31)],
)
def test_malformed_configs_reach_neither_the_library_nor_the_heuristics(monkeypatch, config):
    lt = FakeLt(monkeypatch)
    assert lt.gemm(k=64).resolve(config) is None  # wrong length, negative, split-K 0 or > k, too big
    assert lt.heuristics == 0 and lt.builds == []


# ---- the solvers: a valid recorded config proves applicability ---------------------------------


class FakeGemm:
    def __init__(self, accepted):
        self.accepted, self.heuristics = set(accepted), 0

    def algos(self):
        self.heuristics += 1
        return [(PICKED, 256)]

    def picks(self):
        self.heuristics += 1
        return [PICKED]

    def resolve(self, config):
        config = tuple(config)
        return cuda_libs.LtAlgo(config, config, 128) if config in self.accepted else None


@pytest.fixture
def fake_cuda(monkeypatch):
    """A cuda target whose cuBLASLt is a FakeGemm accepting GOOD (one per product key)."""
    gemms: dict[tuple, FakeGemm] = {}
    monkeypatch.setattr(gemm_lt, "_lt_missing", lambda: None)
    fake = lambda key: gemms.setdefault(key, FakeGemm([GOOD]))  # noqa: E731
    monkeypatch.setattr(gemm_lt, "_lt_gemm", fake)
    monkeypatch.setattr(gemm_lt_wrw, "_lt_gemm", fake)
    ctx = SimpleNamespace(backend=SimpleNamespace(name="cuda", has_vendor_gemm=True), info=None)
    return ctx, gemms


def _problem(layout: str, direction: str, dtype: str = "fp16") -> ConvProblem:
    x = TensorDesc(dtype, (4, 16, 6, 6), layout=layout)
    w = TensorDesc(dtype, (32, 16, 1, 1), layout=layout)
    return ConvProblem.create(x, w, ConvDesc((0, 0)), direction, y_layout=layout).solver_view()


def _asked(gemms) -> int:
    return sum(g.heuristics for g in gemms.values())


def test_gemm_lt_applies_by_its_recorded_config_without_heuristics(fake_cuda):
    ctx, gemms = fake_cuda
    solver, problem = by_name("GemmLtFwd1x1", "conv"), _problem("NHWC", "F")
    config = {"order": "col", **dict(zip(cuda_libs.ALGO_FIELDS, GOOD, strict=True))}
    assert solver.applicability(ctx, problem, config) is None
    assert _asked(gemms) == 0
    stale = {**config, "id": 7}  # proves nothing: the heuristics answer, as without a config
    assert solver.applicability(ctx, problem, stale) is None and _asked(gemms) == 1
    assert solver.applicability(ctx, _problem("NHWC", "B"), config) == "direction is BACKWARD_DATA"
    assert solver.applicability(ctx, problem) is None  # no config: the heuristics, as before
    assert _asked(gemms) == 2


def test_gemm_lt_wrw_nchw_pins_its_algorithm_by_attributes(fake_cuda):
    ctx, gemms = fake_cuda
    solver, problem = by_name("GemmLtWrw1x1Nchw", "conv"), _problem("NCHW", "W", "fp32")
    pinned = {"mode": "batched", "algo": list(GOOD)}
    assert solver.is_valid_config(ctx, problem, pinned)
    assert solver.applicability(ctx, problem, pinned) is None
    program = solver.get_program(ctx, problem, pinned)
    (call,) = [s for s in program.steps if getattr(s, "method", None) == "lt_matmul"]
    assert call.args[1].config == GOOD  # the rebuilt algorithm itself, not an index
    assert program.workspace >= 128
    assert _asked(gemms) == 0
    for bad in ({"mode": "batched", "algo": [*GOOD[:8]]}, {"mode": "batched", "algo": [*GOOD[:8], True]}):
        assert not solver.is_valid_config(ctx, problem, bad)
    assert _asked(gemms) == 0
    # an index (older records) needs the heuristics' list; so does a rebuilt algorithm refused here
    assert solver.is_valid_config(ctx, problem, {"mode": "batched", "algo": 0}) and _asked(gemms) == 1
    assert not solver.is_valid_config(ctx, problem, {"mode": "batched", "algo": 1})


def test_index_records_are_pinned_to_the_same_algorithm_by_attributes(fake_cuda, monkeypatch):
    """scripts/pin_lt_records.py: an index into the heuristics' list becomes that pick's values
    (when the library accepts them rebuilt); the default config is named so too."""
    ctx, gemms = fake_cuda
    monkeypatch.setattr(gemm_lt_wrw, "config_of", lambda algo: algo)
    solver, problem = by_name("GemmLtWrw1x1Nchw", "conv"), _problem("NCHW", "W", "fp32")
    assert solver.pin(ctx, problem, {"mode": "batched", "algo": 0}) is None  # PICKED not rebuilt
    for gemm in gemms.values():
        gemm.accepted.add(PICKED)
    pinned = {"mode": "batched", "algo": list(PICKED)}
    assert solver.pin(ctx, problem, {"mode": "batched", "algo": 0}) == pinned
    assert solver.pin(ctx, problem, {"mode": "batched", "algo": list(GOOD)}) is None  # pinned already
    assert solver.pin(ctx, problem, {"mode": "batched", "algo": 3}) is None  # no such pick
    assert solver.default_config(ctx, problem) == {"mode": "batched", "algo": list(PICKED)}


# ---- the engine hands the config it holds to the applicability check -----------------------------


def test_immediate_mode_checks_find_records_by_their_configs(isolated, monkeypatch):
    """A find record's config reaches ``applicability`` (where cuBLASLt solvers use it instead of
    their heuristics); a solver without one is asked as before."""
    from miopy import backends
    from miopy.db.find_db import FindDb, FindRecord
    from miopy.engine.find import get_solutions
    from miopy.handle import Handle
    from miopy.solvers.base import Solver

    why = backends.unavailable_reason("opencl")
    if why is not None:
        pytest.skip(f"opencl unavailable: {why}")
    for name in ("MIOPY_FIND_MODE", "MIOPY_FIND_ENFORCE", "MIOPY_DEBUG_FIND_ONLY_SOLVER"):
        monkeypatch.delenv(name, raising=False)
    x, w = TensorDesc("fp32", (1, 2, 6, 6)), TensorDesc("fp32", (4, 2, 3, 3))
    problem = ConvProblem.create(x, w, ConvDesc((1, 1)), "F")
    handle = Handle("opencl")
    tiled = by_name("ConvDirectTiledFwd", "conv")
    config = dict(tiled.default_config(handle, problem.solver_view()), tile_k=2)
    db = FindDb(handle.db_basename, "opencl")
    ranked = [FindRecord("ConvDirectTiledFwd", 0.1, 0, "direct", config)]
    ranked.append(FindRecord("GemmFwdRest", 0.2, 0, "gemm"))
    db.store(problem.key(), ranked)
    db.close()
    seen = []
    real = Solver.applicability

    def spy(self, ctx, view, cfg=None):
        seen.append((self.name, cfg))
        return real(self, ctx, view, cfg)

    monkeypatch.setattr(Solver, "applicability", spy)
    found = get_solutions(handle, problem)
    assert [s.solver for s in found] == ["ConvDirectTiledFwd", "GemmFwdRest"]
    assert found[0].config == config
    assert seen == [("ConvDirectTiledFwd", config), ("GemmFwdRest", None)]


def test_precheck_checks_recorded_configs_in_the_products_the_solvers_use(monkeypatch):
    """The set-up thread's pre-check resolves a package's recorded configs in the process's one
    LtGemm per product (what the solvers ask later), counts those accepted and never raises."""
    lt = FakeLt(monkeypatch)
    products = {}

    def shared(key):
        if key == ("broken",):
            raise cuda_libs.InternalError("cublasLtMatmulDescCreate failed")
        return products.setdefault(key, lt.gemm())

    monkeypatch.setattr(cuda_libs, "lt_gemm", shared)
    calls = [(("p1",), GOOD), (("p2",), PICKED), (("broken",), GOOD), (("p1",), GOOD)]
    # p1 twice; PICKED is refused rebuilt, then found among the heuristics' picks; broken skipped
    assert cuda_libs.precheck(calls) == 3 and lt.heuristics == 1
    assert lt.builds.count(GOOD) == 1  # the second p1 found it checked
    assert products[("p1",)].resolve(GOOD) is not None and lt.builds.count(GOOD) == 1
