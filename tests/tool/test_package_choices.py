"""Immediate mode's choices shipped in a kernel package (``kdb_choice``): a fresh handle builds
one solution per problem, the same one immediate mode puts first without the package, and runs it
right; records that are stale, damaged or planted, and packages for another miopy version, are
ignored (immediate mode then asks every solver); their configurations are data, never run. Also
the offline CUDA build where cuBLASLt does not load: its solvers stay in the record as unknown and
their kernels are in the package."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from miopy.db import package_choices, package_plans
from miopy.engine import find
from miopy.handle import Handle
from miopy.problem.conv import ConvProblem
from miopy.tool import kernels, target, workload
from tests.support import check

WORKLOAD = """conv -n 1 -c 4 -H 8 -W 8 -k 4 -y 3 -x 3 -p 1 -q 1 -F 1
conv -n 2 -c 4 -H 6 -W 6 -k 8 -y 1 -x 1 -p 0 -q 0 -F 4
activ -n 1 -c 4 -H 8 -W 8 -m 3 -F 1
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A PoCL package of WORKLOAD (no launches: only its records and kernels matter here)."""
    from miopy import backends

    why = backends.unavailable_reason("opencl")
    if why is not None:
        pytest.skip(f"opencl unavailable: {why}")
    root = tmp_path_factory.mktemp("choices")
    (root / "w.txt").write_text(WORKLOAD)
    with pytest.MonkeyPatch.context() as mp:
        for name in ("system", "cache", "db", "kdb"):
            (root / name).mkdir(mode=0o700)
        for name, sub in (
            ("MIOPY_SYSTEM_DB_PATH", "system"),
            ("MIOPY_CUSTOM_CACHE_DIR", "cache"),
            ("MIOPY_USER_DB_PATH", "db"),
            ("MIOPY_KDB_PATH", "kdb"),
        ):
            mp.setenv(name, str(root / sub))
        ctx = target.target("opencl")
        manifest = kernels.build(ctx, workload.load(str(root / "w.txt")), root / "out", launch=False)
    return Path(manifest["path"]), manifest, root / "w.txt"


@pytest.fixture
def installed(built, dirs):
    path, _, work = built
    shutil.copyfile(path, dirs["kdb"] / path.name)
    return dirs["kdb"] / path.name, workload.load(str(work)).problems


def _rows(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT problem_key, candidates FROM kdb_choice").fetchall())
    finally:
        conn.close()


def _rewrite(path: Path, sql: str, *params) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


def _counting(monkeypatch) -> list[str]:
    """Solver names of every solution immediate mode builds."""
    made: list[str] = []
    real = find.make_solution

    def counted(handle, problem, solver, *args, **kwargs):
        made.append(solver.name)
        return real(handle, problem, solver, *args, **kwargs)

    monkeypatch.setattr(find, "make_solution", counted)
    return made


def test_build_writes_a_record_per_problem(built):
    path, manifest, _ = built
    rows = _rows(path)
    assert manifest["choices"] == len(rows) == 3
    assert manifest["choice_format"] == package_choices.FORMAT
    for text in rows.values():
        found = package_choices.decode(text)
        assert found is not None and found[-1].known


def test_fresh_handle_builds_one_solution_per_problem(installed, monkeypatch):
    """A package without programs (made before they were shipped): each chosen solution is the same
    solver and configuration as immediate mode's without the package, built alone, and it computes
    the right result."""
    path, problems = installed
    _rewrite(path, "DROP TABLE kdb_plan")
    made = _counting(monkeypatch)
    h = Handle("opencl")
    chosen = [find.get_solutions(h, p) for p in problems]
    assert [len(c) for c in chosen] == [1, 1, 1]
    assert len(made) == len(problems) and h.package_choices.used == len(problems)
    plain = Handle("opencl")
    for p, (solution,) in zip(problems, chosen):
        first = find._immediate_fallback(plain, p)[0]
        assert (solution.solver, solution.config) == (first.solver, first.config)
    for solution in chosen:
        if isinstance(solution[0].problem, ConvProblem):
            check(h, solution[0], np.random.default_rng(1))
    assert h.kernel_cache.misses == 0  # the package holds their kernels too


@pytest.mark.parametrize(
    "candidates, why",
    [
        ('[{"solver": "NoSuchSolver", "config": null, "known": true}]', "unknown solver"),
        ('[{"solver": "ConvDirectNaiveBwd", "config": null, "known": true}]', "no longer applies"),
        ("[{not json", "damaged"),
        ('{"solver": "ConvDirectNaiveFwd"}', "damaged"),
        ('[{"solver": "ConvDirectNaiveFwd", "config": null, "known": "yes"}]', "damaged"),
    ],
)
def test_a_stale_or_damaged_record_is_a_miss(installed, monkeypatch, candidates, why):
    path, problems = installed
    conv = problems[0]
    _rewrite(path, "UPDATE kdb_choice SET candidates = ? WHERE problem_key = ?", candidates, conv.key())
    h = Handle("opencl")
    found = find.get_solutions(h, conv)
    assert h.package_choices.used == 0, why
    assert [s.solver for s in found] == [s.solver for s in find._immediate_fallback(Handle("opencl"), conv)]


def test_a_planted_configuration_is_data_never_run(installed, tmp_path):
    """A configuration naming code is refused by the solver's validation; nothing runs it."""
    path, problems = installed
    activ = problems[2]  # its solver is tunable: the record carries a configuration
    known = package_choices.decode(_rows(path)[activ.key()])[-1]
    assert known.config is not None
    marker = tmp_path / "ran"
    evil = dict(known.config) | {"unroll": f"__import__('os').system('touch {marker}')"}
    row = [{"solver": known.solver, "config": evil, "known": True}]
    _rewrite(path, "UPDATE kdb_choice SET candidates = ? WHERE problem_key = ?", json.dumps(row), activ.key())
    fresh = Handle("opencl")
    found = find.get_solutions(fresh, activ)
    assert not marker.exists() and fresh.package_choices.used == 0
    assert all(s.config != evil for s in found) and found[0].config == known.config


def test_unknown_candidates_that_do_not_apply_here_are_skipped(installed):
    """A record from a build machine without cuBLASLt lists its solvers first, as unknown: where
    they do not apply (here: no CUDA), the known solver that follows is used."""
    path, problems = installed
    conv = problems[1]  # the 1x1 backward-weights problem
    known = package_choices.decode(_rows(path)[conv.key()])[-1]
    row = [
        {"solver": "GemmLtWrw1x1Nchw", "config": None, "known": False},
        {"solver": known.solver, "config": known.config, "known": True},
    ]
    _rewrite(path, "UPDATE kdb_choice SET candidates = ? WHERE problem_key = ?", json.dumps(row), conv.key())
    h = Handle("opencl")
    (solution,) = find.get_solutions(h, conv)
    assert solution.solver == known.solver and h.package_choices.used == 1
    check(h, solution, np.random.default_rng(2))


def test_another_version_or_a_planted_link_gives_no_choices(installed, tmp_path, dirs):
    path, problems = installed
    conn = sqlite3.connect(path)
    (text,) = conn.execute("SELECT value FROM kdb_manifest WHERE name = 'manifest'").fetchone()
    manifest = json.loads(text) | {"miopy_version": "0.0.0-other"}
    conn.execute("UPDATE kdb_manifest SET value = ? WHERE name = 'manifest'", (json.dumps(manifest),))
    conn.commit()
    conn.close()
    h = Handle("opencl")
    find.get_solutions(h, problems[2])
    assert h.package_choices.used == 0
    # a link planted where packages are read is never followed (its kernels neither)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(path, elsewhere / path.name)
    _rewrite(elsewhere / path.name, "UPDATE kdb_manifest SET value = ? WHERE name = 'manifest'", text)
    (dirs["kdb"] / path.name).symlink_to(elsewhere / path.name)
    h = Handle("opencl")
    find.get_solutions(h, problems[2])
    assert h.package_choices.used == 0


def test_find_records_tuned_configs_and_knobs_come_first(installed, monkeypatch):
    path, problems = installed
    conv, activ = problems[0], problems[2]
    # MIOPY_DEBUG_FIND_ONLY_SOLVER: the record was chosen among every solver, so it is not used
    monkeypatch.setenv("MIOPY_DEBUG_FIND_ONLY_SOLVER", "ConvDirectNaiveFwd")
    h = Handle("opencl")
    assert [s.solver for s in find.get_solutions(h, conv)] == ["ConvDirectNaiveFwd"]
    assert h.package_choices.used == 0
    monkeypatch.delenv("MIOPY_DEBUG_FIND_ONLY_SOLVER")
    # a tuned configuration in the user perf DB wins over the record's
    h = Handle("opencl")
    (first,) = find.get_solutions(h, activ)
    solver = find.by_name(first.solver, "activ")
    view = activ.solver_view()
    other = next(c for c in solver.search_space(h, view) if c != first.config)
    h.perf_db.store(view.key(), solver.name, other, primitive="activ")
    fresh = Handle("opencl")
    (solution,) = find.get_solutions(fresh, activ)
    assert solution.config == other and fresh.package_choices.used == 1
    # a find (user find DB record) wins over the package
    h = Handle("opencl")
    ranked = find.find_solutions(h, activ, find.FindOptions())
    assert [s.solver for s in find.get_solutions(h, activ)] == [s.solver for s in ranked]
    assert h.package_choices.used == 0


def test_offline_cuda_build_keeps_cublaslt_solvers_unknown():
    """An sm_90 target on a machine where cuBLASLt does not load: the fp32 NCHW 1x1
    backward-weights problem records GemmLtWrw1x1Nchw first, unknown, then the solver that applies
    without it; the package gets that solver's two kernels anyway."""
    pytest.importorskip("cuda.bindings")
    from miopy.backends import cuda
    from miopy.solvers.conv import gemm_lt

    if cuda.cuda_include_dir() is None:
        pytest.skip("no CUDA headers for NVRTC")
    ctx = target.target("cuda", "sm_90", 132)
    if not gemm_lt.lt_unknown(ctx):
        pytest.skip("cuBLASLt loads here")
    (problem,) = workload.problems_from_line("conv -n 4 -c 64 -H 14 -W 14 -k 128 -y 1 -x 1 -F 4")
    found = kernels.choice(ctx, problem)
    assert found is not None and [c.known for c in found][0] is False
    assert found[0].solver == "GemmLtWrw1x1Nchw" and found[-1].known
    assert not any(c.solver.startswith("GemmLt") for c in found if c.known)
    work = workload.Workload("test", problems=[problem])
    names = {spec.name for spec in kernels.library_kernels(ctx, work)}
    assert names == {"permute_rows_f32", "batch_sum_f32"}
    found, _ = kernels.solutions(ctx, work)
    specs = {spec.name for spec in kernels.kernel_specs(found, kernels.library_kernels(ctx, work))}
    assert {"permute_rows_f32", "batch_sum_f32"} <= specs


def test_a_handle_hands_the_package_library_calls_to_its_backend(installed, monkeypatch):
    """A backend with a library warm-up (CUDA) gets the package's calls that parse as JSON when
    the handle is made with MIOPY_LIBRARY_WARM_UP=1 (off by default); which calls may run is its own check
    (tests/unit/test_library_warm_up.py)."""
    from miopy.backends.opencl import Backend as OpenCLBackend

    path, _ = installed
    call = {"kind": "lt", "key": [0, 0, 0, 8, 6, 4, 8, 4, 8, 1, 0, 0, 0, 0], "algo": 0}
    _rewrite(path, "INSERT INTO kdb_library VALUES (?)", json.dumps(call))
    _rewrite(path, "INSERT INTO kdb_library VALUES (?)", "{broken")
    seen = []
    monkeypatch.setattr(OpenCLBackend, "warm_library", lambda self, load: seen.append(load()), raising=False)
    Handle("opencl")
    assert seen == []
    monkeypatch.setenv("MIOPY_LIBRARY_WARM_UP", "1")
    Handle("opencl")
    assert call in seen[0] and "{broken" not in seen[0]


def test_workload_lines_of_every_primitive_read_back_what_miopy_logs():
    """A workload may hold a driver line of any primitive: each problem's logged command line
    (MIOPY_ENABLE_LOGGING_CMD) reads back into the same problem."""
    lines = [
        "conv -n 2 -c 4 -H 6 -W 6 -k 8 -y 3 -x 3 -p 1 -q 1 -F 0",
        "pool -W 2x4x6x6,NCHW -y 2 -x 2 -u 2 -v 2 -F 0",
        "activ -n 2 -c 4 -H 6 -W 6 -m 3 -F 0",
        "bnorm -n 2 -c 4 -H 6 -W 6 -m 1 -F 1",
        "tensorop -n 2 -c 4 -H 4 -W 4",
        "softmax -n 2 -c 4 -H 4 -W 4 -F 0",
        "reduce -D 2,4,4,4 -R 0,2",
        "reducefp64 -D 2,4,4,4 -R 1",
        "lrn -n 2 -c 4 -H 4 -W 4 -F 0",
        "layernorm -X 2x4x4x4 -F 0",
        "groupnorm -n 2 -c 8 -D 0 -H 4 -W 4 -g 2 -F 0",
    ]
    seen = set()
    for line in lines:
        problems = workload.problems_from_line(line)
        assert problems, line
        for problem in problems:
            seen.add(problem.primitive)
            again = workload.problems_from_line(" ".join(problem.driver_args()))
            assert problem.key() in [p.key() for p in again], (line, problem.driver_args())
    assert seen == {
        "conv", "pool", "activ", "bnorm", "tensorop", "softmax", "reduce", "lrn", "layernorm", "groupnorm"
    }  # fmt: skip


# ---- the chosen solutions' programs (kdb_plan), trusted after one check of the whole package -----
def _plans(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT problem_key, plan FROM kdb_plan").fetchall())
    finally:
        conn.close()


def test_a_trusted_package_runs_its_programs_without_asking_the_solvers(installed, monkeypatch):
    """Every chosen solution comes with its program: a fresh handle builds none through its solver,
    and each is the program the solver makes here (field by field) and computes the right result."""
    path, problems = installed
    assert set(_plans(path)) == {p.key() for p in problems}
    made = _counting(monkeypatch)
    h = Handle("opencl")
    chosen = [find.get_solutions(h, p) for p in problems]
    assert h.package_choices.trusted and made == []
    assert h.package_choices.planned == h.package_choices.used == len(problems)
    plain = Handle("opencl")
    for p, (solution,) in zip(problems, chosen):
        first = find._immediate_fallback(plain, p)[0]
        assert (solution.solver, solution.config) == (first.solver, first.config)
        assert solution.program == first.program
        assert solution.extra == first.extra and solution.workspace == first.workspace
        if isinstance(p, ConvProblem):
            check(h, solution, np.random.default_rng(3))
    assert h.kernel_cache.misses == 0


@pytest.mark.parametrize("what", ["a program", "a choice", "the sources", "unreadable sources"])
def test_a_changed_package_is_checked_record_by_record(installed, monkeypatch, what):
    """A program or a choice changed after the build (the records' digest no longer matches), or
    miopy sources that differ from the build's or cannot be read: no program is used, each choice
    is checked as before, and the results are right."""
    path, problems = installed
    conv = problems[0]
    if what == "a program":
        text = json.loads(_plans(path)[conv.key()])
        text["workspace"] += 4
        _rewrite(path, "UPDATE kdb_plan SET plan = ? WHERE problem_key = ?", json.dumps(text), conv.key())
    elif what == "a choice":
        row = package_choices.decode(_rows(path)[problems[2].key()])
        row = [{"solver": c.solver, "config": c.config, "known": c.known} for c in row]
        text = json.dumps(row, separators=(",", " : "))  # the same choice, written otherwise
        _rewrite(path, "UPDATE kdb_choice SET candidates = ? WHERE problem_key = ?", text, problems[2].key())
    elif what == "the sources":
        monkeypatch.setattr(package_plans, "_code", ["0" * 64])
    else:

        def unreadable():
            raise PermissionError("a source file")

        monkeypatch.setattr(package_plans, "code_digest", unreadable)
    made = _counting(monkeypatch)
    h = Handle("opencl")
    chosen = [find.get_solutions(h, p) for p in problems]
    assert not h.package_choices.trusted and h.package_choices.planned == 0
    assert h.package_choices.used == len(problems) and len(made) == len(problems)
    check(h, chosen[0][0], np.random.default_rng(4))


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p | {"steps": [{"call": "os.system", "args": ["true"]}]},
        lambda p: p | {"kernels": [k | {"file": "../../etc/passwd"} for k in p["kernels"]]},
        lambda p: p | {"steps": [s | {"codes": ["object"] * len(s["codes"])} for s in p["steps"]]},
        lambda p: p | {"steps": [s | {"codes": ["py"], "args": ["__import__('os')"]} for s in p["steps"]]},
        lambda p: p | {"steps": [s | {"codes": ["int32"], "args": ["1"]} for s in p["steps"]]},
        lambda p: p | {"steps": [s | {"codes": ["uint32"], "args": [-1]} for s in p["steps"]]},
        lambda p: p | {"workspace": -1},
        lambda p: p | {"format": 99},
    ],
)
def test_a_program_is_plain_data(installed, change):
    """What ``decode`` accepts is exactly what ``encode`` writes: a step naming a function, a path
    out of the kernel folder, an object type or code, a value of another type than its code or
    out of its range, a negative size or another format are refused."""
    path, problems = installed
    text = _plans(path)[problems[0].key()]
    assert package_plans.decode(text) is not None
    assert package_plans.decode(json.dumps(change(json.loads(text)))) is None


def test_a_library_call_gets_no_program():
    """A program calling a library with objects made at run time (cuBLASLt) cannot be written."""
    from miopy.solution import Call, Program, Tensor

    with pytest.raises(package_plans.Unplannable):
        package_plans.encode(Program((Call("lt_matmul", (object(), Tensor("x"))),)))


ACTIV = "activ -n 1 -c 4 -H 8 -W 8 -m 3 -F 1"  # ReLU forward, the activ line of WORKLOAD


@pytest.fixture(scope="module")
def built_find(tmp_path_factory):
    """A PoCL package of ACTIV built where the shipped find DB ranks ActivFwdStrided first, then
    ActivFwdPacked with a configuration of its own (its kernels are WORKLOAD's: PoCL's cache has
    them). Returns (package, system DB file, problem, the ranked records)."""
    from miopy import backends
    from miopy.db.find_db import FindDb, FindRecord

    why = backends.unavailable_reason("opencl")
    if why is not None:
        pytest.skip(f"opencl unavailable: {why}")
    root = tmp_path_factory.mktemp("find-plans")
    (root / "w.txt").write_text(ACTIV + "\n")
    (problem,) = workload.problems_from_line(ACTIV)
    with pytest.MonkeyPatch.context() as mp:
        for name in ("system", "cache", "db", "kdb", "scratch"):
            (root / name).mkdir(mode=0o700)
        for name, sub in (
            ("MIOPY_SYSTEM_DB_PATH", "system"),
            ("MIOPY_CUSTOM_CACHE_DIR", "cache"),
            ("MIOPY_USER_DB_PATH", "scratch"),
            ("MIOPY_KDB_PATH", "kdb"),
        ):
            mp.setenv(name, str(root / sub))
        ctx = target.target("opencl")
        packed = find.by_name("ActivFwdPacked", "activ")
        view = problem.solver_view()
        cfg = next(c for c in packed.search_space(ctx, view) if c != packed.default_config(ctx, view))
        records = [
            FindRecord("ActivFwdStrided", 0.0125, 0, "activ"),
            FindRecord("NoSuchSolver", 0.013, 0, "activ"),  # dropped from the list, here as there
            FindRecord("ActivFwdPacked", 0.0250, 0, "activ", cfg),
        ]
        db = FindDb(ctx.db_basename, "opencl")
        db.store(problem.key(), records, primitive="activ")
        db.close()
        system = root / "system" / f"{ctx.db_basename}.db"
        shutil.copyfile(root / "scratch" / f"{ctx.db_basename}.opencl.udb", system)
        mp.setenv("MIOPY_USER_DB_PATH", str(root / "db"))
        manifest = kernels.build(ctx, workload.load(str(root / "w.txt")), root / "out", launch=False)
    return Path(manifest["path"]), system, problem, records


def test_a_find_db_list_comes_from_the_package(built_find, dirs, monkeypatch):
    """For a problem the shipped find DB answers, the package carries the list immediate mode makes
    of those records and the first solution's program: a fresh handle asks no solver, gets the
    same solutions (solver, configuration, time, program) as without the package, and the first
    computes ReLU. A user find record for the problem (another answer) is used instead."""
    path, system, problem, records = built_find
    shutil.copyfile(path, dirs["kdb"] / path.name)
    shutil.copyfile(system, dirs["system"] / system.name)
    (row,) = _plans(dirs["kdb"] / path.name).items()
    assert row[0] == problem.key()
    made = _counting(monkeypatch)
    h = Handle("opencl")
    got = find.get_solutions(h, problem)
    assert made == [] and h.package_choices.planned == 1 and h.package_choices.used == 0
    assert [s.built for s in got] == [True, False]
    monkeypatch.setattr(package_plans, "_code", ["0" * 64])  # another miopy: the checked path
    plain = Handle("opencl")
    want = find.get_solutions(plain, problem)
    assert not plain.package_choices.trusted and plain.package_choices.planned == 0
    assert [(s.solver, s.config, s.time_ms) for s in got] == [(s.solver, s.config, s.time_ms) for s in want]
    assert [s.program for s in got] == [s.program for s in want]
    x = np.random.default_rng(5).standard_normal((1, 4, 8, 8)).astype(np.float32)
    y = np.zeros_like(x)
    got[0].run(h, {"x": x, "y": y})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    # the user's own find (another ranking) wins over the package's list
    h.find_db.store(problem.key(), [records[2], records[0]], primitive="activ")
    fresh = Handle("opencl")
    assert [s.solver for s in find.get_solutions(fresh, problem)] == ["ActivFwdPacked", "ActivFwdStrided"]
    assert fresh.package_choices.planned == 0


def test_a_handle_loads_the_package_kernels_ahead_and_compile_takes_them(installed, monkeypatch):
    """With MIOPY_KERNEL_PREFETCH=1 the set-up thread loads every binary of the package as a kernel;
    the first calls then compile nothing and load nothing themselves: each kernel they need is one
    the thread loaded (counted), and every result is right."""
    path, problems = installed
    monkeypatch.setenv("MIOPY_KERNEL_PREFETCH", "1")
    loads: list[str] = []
    h = Handle("opencl")
    h._prefetch_thread.join()
    assert h.kernels_loaded_ahead == h.kernel_cache.prefetched > 0
    real_load = h.backend.load
    monkeypatch.setattr(h.backend, "load", lambda binary, name: loads.append(name) or real_load(binary, name))
    chosen = [find.get_solutions(h, p)[0] for p in problems]
    for solution in chosen:
        h.prepare_invoker(solution)
        if isinstance(solution.problem, ConvProblem):
            check(h, solution, np.random.default_rng(5))
    assert h.kernel_cache.misses == 0 and loads == []
    assert h.kernels_ahead_used == h.kernel_cache.hits > 0
    assert len(h._loaded_ahead) == h.kernels_loaded_ahead - h.kernels_ahead_used


def test_a_kernel_loaded_ahead_is_not_used_for_another_source(installed, monkeypatch):
    """The kernels loaded ahead are keyed like the cache (source hash and compiler included): a
    kernel whose source changed here is compiled from it, not taken from what was loaded."""
    path, problems = installed
    monkeypatch.setenv("MIOPY_KERNEL_PREFETCH", "1")
    h = Handle("opencl")
    h._prefetch_thread.join()
    assert h.kernels_loaded_ahead > 0
    real = h.backend.read_source
    monkeypatch.setattr(h.backend, "read_source", lambda file: (real(file)[0], "changed"))
    solution = find.get_solutions(h, problems[0])[0]
    h.prepare_invoker(solution)
    assert h.kernels_ahead_used == 0 and h.kernel_cache.misses == len(solution.program.kernels)


@pytest.mark.parametrize("knob, frozen", [(None, 1), ("0", 0)])
def test_a_handle_with_a_package_freezes_the_collector_once(installed, monkeypatch, knob, frozen):
    """MIOPY_GC_FREEZE (default on): once the set-up thread has read the package, gc.freeze() is
    called, once per process, and the youngest generation's threshold raised until the thaw,
    which restores it; 0 leaves the collector alone."""
    import gc
    import threading

    from miopy import handle as handle_module

    thresholds = [(700, 10, 10)]
    monkeypatch.setattr(gc, "get_threshold", lambda: thresholds[-1])
    monkeypatch.setattr(gc, "set_threshold", lambda *t: thresholds.append(t))
    monkeypatch.setattr(handle_module, "_gc_threshold", [])

    if knob is None:
        monkeypatch.delenv("MIOPY_GC_FREEZE", raising=False)
    else:
        monkeypatch.setenv("MIOPY_GC_FREEZE", knob)
    calls: list[int] = []
    thawed: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(1))
    monkeypatch.setattr(gc, "unfreeze", lambda: thawed.append(1))
    monkeypatch.setattr(handle_module, "_gc_frozen", threading.Event())
    monkeypatch.setattr(handle_module, "_gc_thaw", [False, 0])
    monkeypatch.setattr(handle_module, "THAW_AFTER_RUNS", 2)
    for _ in range(2):
        h = Handle("opencl")
        h._prefetch_thread.join()
    assert len(calls) == frozen
    assert thresholds == (
        [(700, 10, 10), (handle_module.FROZEN_GEN0_THRESHOLD, 10, 10)] if frozen else [(700, 10, 10)]
    )
    # thawed once after THAW_AFTER_RUNS runs that were no replay (PoCL records none)
    _, problems = installed
    conv = [p for p in problems if isinstance(p, ConvProblem)]
    for i, p in enumerate(conv * 2):
        check(h, find.get_solutions(h, p)[0], np.random.default_rng(i))
        assert len(thawed) == (frozen if i >= 1 else 0)
    assert thresholds[-1] == (700, 10, 10)


def test_a_handle_with_a_package_reads_the_system_dbs_on_its_set_up_thread(installed, monkeypatch):
    """The set-up thread reads the system find and perf DBs' rows (one query per table), so that
    the first problem's choosing does not; MIOPY_DEBUG_DISABLE_FIND_DB leaves the find DB alone."""
    h = Handle("opencl")
    h._prefetch_thread.join()
    assert h.perf_db._system_rows is not None and h.find_db._system_rows is not None
    monkeypatch.setenv("MIOPY_DEBUG_DISABLE_FIND_DB", "1")
    h = Handle("opencl")
    h._prefetch_thread.join()
    assert h.perf_db._system_rows is not None and h._find_db is None
