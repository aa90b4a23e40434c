"""Find, immediate mode, find modes, enforce modes, perf DB and tuning on OpenCL (PoCL in CI)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from support import check, random_buffers

from miopy import errors
from miopy.engine import bench
from miopy.engine.candidates import make_solution
from miopy.engine.find import FindOptions, find_solutions, get_solutions, solution_for
from miopy.engine.tune import tune
from miopy.handle import Handle
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.solvers import by_name
from miopy.tensor import TensorDesc

TUNABLE = "ConvDirectTiledFwd"


def small(direction="F", c=2, k=4, hw=6, fil=3, pad=1, n=1):
    """Small enough that tuning ConvDirectTiledFwd (10 configs) is quick on PoCL."""
    x = TensorDesc("fp32", (n, c, hw, hw))
    w = TensorDesc("fp32", (k, c, fil, fil))
    return ConvProblem.create(x, w, ConvDesc((pad, pad)), direction)


@pytest.fixture
def handle(isolated, monkeypatch):
    monkeypatch.delenv("MIOPY_FIND_MODE", raising=False)
    monkeypatch.delenv("MIOPY_FIND_ENFORCE", raising=False)
    return Handle("opencl")


def benchmarks() -> int:
    return bench.counters["benchmarks"]


def test_find_times_every_candidate_and_ranks_by_time(handle, monkeypatch):
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    problem = small()
    found = find_solutions(handle, problem)
    names = [s.solver for s in found]
    assert "ConvDirectNaiveFwd" in names and len(names) >= 3
    times = [s.time_ms for s in found]
    assert all(t > 0 for t in times) and times == sorted(times)
    for solution in found:
        check(handle, solution)


def test_ranking_follows_measured_time(handle, monkeypatch):
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    fake = {"ConvDirectNaiveFwd": 0.5, TUNABLE: 3.0}
    monkeypatch.setattr(
        bench, "median_time", lambda h, s, p, **kw: fake.get(s.solver, 1.0 + len(s.solver) / 100)
    )
    found = find_solutions(handle, small())
    assert found[0].solver == "ConvDirectNaiveFwd" and found[-1].solver == TUNABLE
    by_ws = find_solutions(handle, small(), FindOptions(results_order="workspace"))
    assert [s.workspace for s in by_ws] == sorted(s.workspace for s in by_ws)
    limited = find_solutions(handle, small(), FindOptions(workspace_limit=0))
    assert limited and all(s.workspace == 0 for s in limited)


def test_normal_mode_always_benchmarks(handle, monkeypatch):
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    before = benchmarks()
    first = len(find_solutions(handle, small()))
    mid = benchmarks()
    find_solutions(handle, small())
    assert mid - before == first and benchmarks() - mid == first


def test_hybrid_uses_find_db_after_first_find(handle, monkeypatch):
    monkeypatch.setenv("MIOPY_FIND_MODE", "HYBRID")
    before = benchmarks()
    first = find_solutions(handle, small())
    assert benchmarks() - before == len(first)
    before = benchmarks()
    again = find_solutions(handle, small())
    assert benchmarks() == before
    assert [s.solver for s in again] == [s.solver for s in first]
    assert [s.time_ms for s in again] == pytest.approx([s.time_ms for s in first])


def test_fast_mode_never_benchmarks_on_a_miss(handle, monkeypatch):
    monkeypatch.setenv("MIOPY_FIND_MODE", "FAST")
    before = benchmarks()
    found = find_solutions(handle, small())
    assert benchmarks() == before and found and all(s.time_ms is None for s in found)
    check(handle, found[0])
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    timed = find_solutions(handle, small())
    monkeypatch.setenv("MIOPY_FIND_MODE", "FAST")
    before = benchmarks()
    hit = find_solutions(handle, small())
    assert benchmarks() == before and hit[0].solver == timed[0].solver and hit[0].time_ms is not None


def test_dynamic_hybrid_finds_among_dynamic_solvers_only(handle):
    before = benchmarks()
    found = find_solutions(handle, small())  # the default mode
    assert found and all(s.dynamic for s in found)
    assert benchmarks() - before == len(found)
    assert by_name(TUNABLE).dynamic is False and TUNABLE not in [s.solver for s in found]
    before = benchmarks()
    find_solutions(handle, small())
    assert benchmarks() == before


def test_find_only_solver_restricts_candidates(handle, monkeypatch):
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    monkeypatch.setenv("MIOPY_DEBUG_FIND_ONLY_SOLVER", "ConvDirectNaiveFwd;" + TUNABLE)
    assert sorted(s.solver for s in find_solutions(handle, small())) == sorted(
        ["ConvDirectNaiveFwd", TUNABLE]
    )


def test_find_leaves_caller_tensors_unmodified(handle, monkeypatch):
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    problem = small()
    bufs = random_buffers(problem, np.random.default_rng(3))
    copies = {k: v.copy() for k, v in bufs.items()}
    find_solutions(handle, problem, tensors=bufs)
    for role in bufs:
        np.testing.assert_array_equal(bufs[role].view(np.uint8), copies[role].view(np.uint8))


def test_find_times_read_only_device_inputs_in_place(handle, monkeypatch):
    """Device arrays of the roles a problem only reads are timed in place, its outputs on private
    copies (MIOPY_FIND_COPY_INPUTS=1: every role copied); find leaves every tensor as it was."""
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    backend = handle.backend
    for direction, output in (("F", "y"), ("B", "x"), ("W", "w")):
        problem = small(direction=direction)
        host = random_buffers(problem, np.random.default_rng(5))
        device = {role: backend.upload(a) for role, a in host.items()}
        naive = {"F": "ConvDirectNaiveFwd", "B": "ConvDirectNaiveBwd", "W": "ConvDirectNaiveWrw"}[direction]
        solution = make_solution(handle, problem, by_name(naive))
        args = bench.device_args(handle, solution, device)
        for role in device:
            assert (args.tensors[role] is device[role]) == (role != output), (direction, role)
        monkeypatch.setenv("MIOPY_FIND_COPY_INPUTS", "1")
        copied = bench.device_args(handle, solution, device)
        assert all(copied.tensors[role] is not device[role] for role in device)
        monkeypatch.delenv("MIOPY_FIND_COPY_INPUTS")
        find_solutions(handle, problem, tensors=device)
        for role, a in host.items():
            back = np.empty_like(a)
            backend.download(device[role], back)
            np.testing.assert_array_equal(back.view(np.uint8), a.view(np.uint8))


def test_immediate_mode(handle):
    problem = small(direction="B")
    solutions = get_solutions(handle, problem)
    assert solutions[-1].solver == "ConvDirectNaiveBwd" and all(s.time_ms is None for s in solutions)
    for solution in solutions:
        check(handle, solution)
    chosen = solution_for(handle, problem, "ConvDirectNaiveBwd")
    assert chosen.solver == "ConvDirectNaiveBwd"
    assert solution_for(handle, problem, str(by_name("ConvDirectNaiveBwd").id)).solver == "ConvDirectNaiveBwd"
    with pytest.raises(errors.BadParm, match="not applicable: direction"):
        solution_for(handle, problem, "ConvDirectNaiveFwd")
    with pytest.raises(errors.BadParm, match="unknown solver"):
        solution_for(handle, problem, "NoSuchSolver")


def test_tuning_writes_perf_db_and_find_uses_it(handle):
    problem = small()
    results = tune(handle, problem)
    best, ms = results[TUNABLE]
    assert ms > 0
    solver = by_name(TUNABLE)
    assert solver.is_valid_config(handle, problem.conv_view(), best)
    assert handle.perf_db.load(problem.conv_view().key(), TUNABLE) == best
    assert make_solution(handle, problem, solver).config == best
    # a second process (a new handle) sees the record
    assert make_solution(Handle("opencl"), problem, solver).config == best


def test_invalid_stored_config_warns_and_falls_back_to_default(handle, caplog):
    problem = small()
    solver = by_name(TUNABLE)
    handle.perf_db.store(problem.conv_view().key(), TUNABLE, {"bogus": 1})
    with caplog.at_level(logging.WARNING, logger="miopy"):
        logging.getLogger("miopy").propagate = True
        try:
            solution = make_solution(handle, problem, solver)
        finally:
            logging.getLogger("miopy").propagate = False
    assert solution.config == solver.default_config(handle, problem.conv_view())
    assert any("Invalid config loaded from Perf Db" in r.getMessage() for r in caplog.records)
    check(handle, solution)


def _count_tunes(monkeypatch):
    """Replace the search by a stand-in that records the call and stores the default config:
    the enforce logic is under test here, the search itself in the test above."""
    from miopy.engine import find as find_module

    calls = []

    def fake_tune(handle, problem, solvers=None, **kwargs):
        calls.append(1)
        view = problem.conv_view()
        for solver in solvers if solvers is not None else [by_name(TUNABLE)]:
            handle.perf_db.store(view.key(), solver.name, solver.default_config(handle, view))
        return {}

    monkeypatch.setattr(find_module.tune, "tune", fake_tune)
    return calls


def test_enforce_modes(handle, monkeypatch):
    problem = small()
    key = problem.conv_view().key()
    calls = _count_tunes(monkeypatch)
    # tuning requested, no record: search
    find_solutions(handle, problem, FindOptions(tuning=True))
    assert len(calls) == 1 and handle.perf_db.load(key, TUNABLE) is not None
    # requested again with a record: skipped (NONE)
    find_solutions(handle, problem, FindOptions(tuning=True))
    assert len(calls) == 1
    # DB_UPDATE: search even though a record exists
    monkeypatch.setenv("MIOPY_FIND_ENFORCE", "DB_UPDATE")
    find_solutions(handle, problem, FindOptions(tuning=True))
    assert len(calls) == 2
    # DB_CLEAN: the user record is removed, nothing searched
    monkeypatch.setenv("MIOPY_FIND_ENFORCE", "DB_CLEAN")
    find_solutions(handle, problem)
    assert len(calls) == 2 and handle.perf_db.load(key, TUNABLE) is None
    # SEARCH: tune although not requested, when no record
    monkeypatch.setenv("MIOPY_FIND_ENFORCE", "SEARCH")
    find_solutions(handle, problem)
    assert len(calls) == 3 and handle.perf_db.load(key, TUNABLE) is not None
    find_solutions(handle, problem)
    assert len(calls) == 3
    # SEARCH_DB_UPDATE: always
    monkeypatch.setenv("MIOPY_FIND_ENFORCE", "SEARCH_DB_UPDATE")
    find_solutions(handle, problem)
    assert len(calls) == 4
    monkeypatch.setenv("MIOPY_FIND_ENFORCE", "4")  # numeric form
    find_solutions(handle, problem)
    assert len(calls) == 5


def test_bad_env_values_name_the_variable(handle, monkeypatch):
    monkeypatch.setenv("MIOPY_FIND_MODE", "SOMETIMES")
    with pytest.raises(errors.BadParm, match="MIOPY_FIND_MODE"):
        find_solutions(handle, small())


def test_bad_problem_and_options(handle):
    with pytest.raises(errors.BadParm, match="problem="):
        find_solutions(handle, "3x3")
    with pytest.raises(errors.BadParm, match="results_order"):
        FindOptions(results_order="random")


def test_run_rejects_bad_tensors(handle):
    solution = get_solutions(handle, small())[0]
    with pytest.raises(errors.BadParm, match="tensors: missing w"):
        solution.run(handle, {"x": np.zeros(1000, np.float32), "y": np.zeros(1000, np.float32)})
    with pytest.raises(errors.BadParm, match="x="):
        solution.run(
            handle,
            {"x": np.zeros(3, np.float32), "w": np.zeros(1000, np.float32), "y": np.zeros(1000, np.float32)},
        )
    with pytest.raises(errors.BadParm, match="w="):
        solution.run(handle, {"x": np.zeros(1000, np.float32), "w": [1, 2], "y": np.zeros(1000, np.float32)})


def test_every_convolution_call_logs_its_driver_command(handle, monkeypatch, capsys):
    monkeypatch.setenv("MIOPY_ENABLE_LOGGING_CMD", "1")
    problem = small(direction="W")
    solution = get_solutions(handle, problem)[0]
    check(handle, solution)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "[LogCmdConvolution]" in ln]
    assert len(lines) == 2
    assert lines[0].split("] ", 1)[1].startswith("miopy-driver conv -n 1 -c 2 -H 6 -W 6 -k 4")
    assert " -F 4" in lines[0] and f" -S {by_name(solution.solver).id}" in lines[1]
    monkeypatch.delenv("MIOPY_ENABLE_LOGGING_CMD")
    get_solutions(handle, problem)
    assert "[LogCmdConvolution]" not in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_find_survives_a_corrupt_user_db(handle, isolated, monkeypatch, caplog, damage):
    monkeypatch.setenv("MIOPY_FIND_MODE", "HYBRID")
    first = find_solutions(handle, small())
    handle.find_db.close()
    handle.perf_db.close()
    (udb,) = (isolated / "db").glob("*.udb")
    assert not list(udb.parent.glob(udb.name + "-*"))  # closed: the WAL is folded in
    data = udb.read_bytes()
    damaged = b"this is not a database" * 64 if damage == "garbage" else data[: len(data) // 2]
    udb.write_bytes(damaged)
    logging.getLogger("miopy").propagate = True
    try:
        with caplog.at_level(logging.WARNING, logger="miopy"):
            again = find_solutions(Handle("opencl"), small())
    finally:
        logging.getLogger("miopy").propagate = False
    assert [s.solver for s in again] and {s.solver for s in again} == {s.solver for s in first}
    (aside,) = (isolated / "db").glob("*.corrupt-*")  # moved aside once, as it was
    assert aside.read_bytes() == damaged
    assert len({r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()}) == 1
    before = benchmarks()
    find_solutions(Handle("opencl"), small())  # the recreated DB holds the new record
    assert benchmarks() == before


def test_find_without_a_writable_db_dir(isolated, monkeypatch):
    blocker = isolated / "not-a-dir"
    blocker.write_text("a file where the DB folder should be")
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(blocker / "db"))
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv("MIOPY_FIND_MODE", "HYBRID")
    h = Handle("opencl")
    found = find_solutions(h, small())
    check(h, found[0])
    before = benchmarks()
    find_solutions(h, small())  # nothing was persisted: HYBRID finds again
    assert benchmarks() > before


def test_api_rejects_a_wrong_handle(handle):
    with pytest.raises(errors.BadParm, match="handle="):
        find_solutions(None, small())
    with pytest.raises(errors.BadParm, match="handle="):
        get_solutions("opencl", small())
    with pytest.raises(errors.BadParm, match="handle="):
        get_solutions(handle, small())[0].run(object(), {})


def test_normal_find_searches_past_a_system_perf_record(handle, monkeypatch):
    """A search_in_find solver's space is timed by a NORMAL find unless the *user* perf DB has a
    record: one of the shipped system file (another process's race) does not stop the search."""
    from miopy.engine import find as find_mod

    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    solver = by_name(TUNABLE)
    monkeypatch.setattr(type(solver), "search_in_find", True, raising=False)
    problem = small()
    view_key = problem.solver_view().key()
    default = solver.default_config(handle, problem.solver_view())
    user: dict = {}
    monkeypatch.setattr(handle.perf_db, "load", lambda key, name, primitive="conv": default)  # "system"
    monkeypatch.setattr(handle.perf_db, "load_user", lambda key, name, primitive="conv": user.get(name))
    searched = []
    monkeypatch.setattr(find_mod.tune, "tune", lambda h, p, solvers, **kw: searched.append(solvers) or {})
    monkeypatch.setattr(bench, "median_time", lambda h, s, p, **kw: 1.0 + len(s.solver) / 100)
    assert [s.name for s in find_mod._search_in_find(handle, problem, [solver])] == [TUNABLE]
    find_solutions(handle, problem)
    assert [[s.name for s in group] for group in searched] == [[TUNABLE]]
    user[TUNABLE] = default  # the user perf DB knows it now: no search
    assert find_mod._search_in_find(handle, problem, [solver]) == []
    find_solutions(handle, problem)
    assert len(searched) == 1 and handle.perf_db.load(view_key, TUNABLE) == default


def test_find_races_solvers_within_ten_percent(handle, monkeypatch):
    """Solvers are timed one after another: one whose first time is up to find.RACE_MARGIN (10 %)
    behind the fastest is timed again in interleaved rounds, and the medians decide."""
    from miopy.engine import find as find_mod

    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    first = {"ConvDirectNaiveFwd": 1.0, TUNABLE: 1.08}  # a fast spell for the naive solver
    true = {"ConvDirectNaiveFwd": 1.2, TUNABLE: 0.9}
    seen: dict[str, int] = {}

    def median_time(h, s, p, **kw):
        seen[s.solver] = seen.get(s.solver, 0) + 1
        if s.solver not in first:
            return 5.0 + len(s.solver) / 100  # far behind: never raced
        return first[s.solver] if seen[s.solver] == 1 else true[s.solver]

    monkeypatch.setattr(bench, "median_time", median_time)
    assert first[TUNABLE] / first["ConvDirectNaiveFwd"] - 1 > bench.RACE_MARGIN
    found = find_solutions(handle, small())
    assert found[0].solver == TUNABLE and found[0].time_ms == 0.9
    assert seen[TUNABLE] == seen["ConvDirectNaiveFwd"] == 1 + find_mod.RACE_ROUNDS
    assert all(n == 1 for name, n in seen.items() if name not in first)
