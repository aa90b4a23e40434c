"""The implicit-GEMM solvers' system perf DB for the H200 (miopy/data/sm_9084.db, tuned on the
benchmark's 3x3 layers and installed with the package) and immediate mode's use of system
records, on the CPU: a handle that looks like an H200 (sm_90, 132 SMs) reads the DBs the way a
real one does, and make_solution (what immediate mode and find build solutions with) must take
the record's config instead of the solver's default. The same file's find lists (a NORMAL find of
every benchmark problem on the H200) must cover the benchmark and rank what immediate mode takes."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_solvers_igemm import fake_ctx

import miopy
from miopy.db.perf_db import PerfDb
from miopy.engine.candidates import make_solution
from miopy.solvers import by_name
from miopy.tool import workload

SHIPPED = Path(miopy.__file__).parent / "data"
BASE = "sm_9084"  # sm_90 with 132 (0x84) multiprocessors
# the 3x3 lines of benchmarks/resnet50.txt (its layers 3, 6, 9 and 12)
LAYERS = [(64, 56), (128, 28), (256, 14), (512, 7)]
SOLVERS = {"F": "ConvIgemmFwdNhwc", "B": "ConvIgemmBwdNhwc", "W": "ConvIgemmWrwNhwc"}
PREFIX = {"fp16": "convfp16", "bf16": "convbfp16"}


def problems(dtype: str):
    for c, hw in LAYERS:
        line = (
            f"{PREFIX[dtype]} -n 32 -c {c} -H {hw} -W {hw} -k {c} -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 "
            "-I NHWC -O NHWC -f NHWC -F 0"
        )
        yield from workload.problems_from_line(line)


def h200(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, system: Path):
    """A CUDA handle's stand-in for an H200 whose system DB folder is ``system``."""
    monkeypatch.setenv("MIOPY_SYSTEM_DB_PATH", str(system))
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(tmp_path / "user"))
    info = fake_ctx().info
    assert info.db_basename == BASE
    return SimpleNamespace(info=info, backend_name="cuda", perf_db=PerfDb(BASE, "cuda"))


def direction_of(problem) -> str:
    return problem.solver_view().key()[-1]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_shipped_db_has_a_tuned_config_for_every_benchmark_layer(monkeypatch, tmp_path, dtype):
    assert (SHIPPED / f"{BASE}.db").is_file() and (SHIPPED / f"{BASE}.txt").is_file()
    handle = h200(monkeypatch, tmp_path, SHIPPED)
    differs = 0
    for problem in problems(dtype):
        view = problem.solver_view()
        solver = by_name(SOLVERS[direction_of(problem)], "conv")
        record = handle.perf_db.load(view.key(), solver.name)
        assert record is not None, view.key()
        assert solver.is_valid_config(handle, view, record), (view.key(), record)
        solution = make_solution(handle, problem, solver)
        assert solution.config == record
        differs += record != solver.default_config(handle, view)
    assert differs > 0  # tuning found something the defaults do not pick


def test_a_planted_system_record_is_what_immediate_mode_uses(monkeypatch, tmp_path):
    problem = [p for p in problems("bf16") if direction_of(p) == "F"][-1]  # 7x7, 512 channels
    view = problem.solver_view()
    solver = by_name("ConvIgemmFwdNhwc", "conv")
    system = tmp_path / "system"
    system.mkdir()
    handle = h200(monkeypatch, tmp_path, system)
    default = solver.default_config(handle, view)
    assert make_solution(handle, problem, solver).config == default  # no record anywhere yet
    tuned = {**default, "bm": 128, "bn": 128, "warps_m": 4, "warps_n": 2, "split_k": 2}
    assert tuned != default and solver.is_valid_config(handle, view, tuned)
    # write the record through the DB classes into a scratch user folder, install it as the system file
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(tmp_path / "build"))
    build = PerfDb(BASE, "cuda")
    build.store(view.key(), solver.name, tuned)
    build.close()  # the write-ahead log is folded into the file
    shutil.copy(tmp_path / "build" / f"{BASE}.cuda.udb", system / f"{BASE}.db")
    handle = h200(monkeypatch, tmp_path, system)
    solution = make_solution(handle, problem, solver)
    assert solution.config == tuned
    (launch,) = solution.program.steps  # a split of two: one kernel, its slices a cluster
    assert dict(launch.spec.defines)["IG_CLUSTER"] == 1 and dict(launch.spec.defines)["IG_BN"] == 128
    # a user record still wins over the system one; a record the solver refuses is ignored
    mine = {**default, "stages": 4}
    handle.perf_db.store(view.key(), solver.name, mine)
    assert make_solution(handle, problem, solver).config == mine
    handle.perf_db.store(view.key(), solver.name, {**default, "bm": 48})
    assert make_solution(handle, problem, solver).config == default


# ---- the shipped find DB: immediate mode's ranking of the benchmark's layers on an H200 ----------
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "resnet50.txt"
FIND_LAYOUTS = [("fp16", "NHWC"), ("bf16", "NHWC"), ("fp32", "NCHW"), ("fp32", "NHWC")]
DRIVER = {"fp16": "convfp16", "bf16": "convbfp16", "fp32": "conv"}


def benchmark_problems():
    """benchmarks/conv.py's problems: every ResNet-50 line in every direction, fp16 and bf16 in
    NHWC, fp32 in NCHW and NHWC."""
    lines = [ln.split("#", 1)[0].strip() for ln in BENCH.read_text().splitlines()]
    for line in filter(None, lines):
        for dtype, layout in FIND_LAYOUTS:
            text = (
                line.replace("conv ", f"{DRIVER[dtype]} ", 1) + f" -I {layout} -O {layout} -f {layout} -F 0"
            )
            yield from workload.problems_from_line(text)


def test_shipped_find_db_ranks_every_benchmark_layer(monkeypatch, tmp_path):
    """Every problem of the benchmark has a shipped ranked list; each list's first record whose
    solver applies here (cuBLASLt's records need the library, absent on a CPU machine) is what
    immediate mode's find-DB path returns first, with the record's config; and `miopy db check`
    finds nothing else wrong with the shipped file against today's solvers."""
    from miopy.db.find_db import FindDb
    from miopy.engine.find import _from_find_db
    from miopy.tool import db as db_tool

    handle = h200(monkeypatch, tmp_path, SHIPPED)
    handle.find_db = FindDb(BASE, "cuda")
    problems = list(benchmark_problems())
    assert len(problems) == 13 * 3 * len(FIND_LAYOUTS)
    firsts = set()
    for problem in problems:
        records = handle.find_db.load(problem.key(), primitive="conv")
        assert records, problem.key()
        view = problem.solver_view()
        usable = [r for r in records if by_name(r.solver, "conv").applicability(handle, view) is None]
        if not usable:  # only cuBLASLt ranked here
            continue
        found = _from_find_db(handle, problem)
        assert found and found[0].solver == usable[0].solver, problem.key()
        if usable[0].config is not None:
            assert found[0].config == usable[0].config
        firsts.add(found[0].solver)
    assert {"ConvWgmmaFwdNhwc", "ConvIgemmFwdTf32x3", "ConvWinogradWrwF2x3Tf32x3"} <= firsts
    report = db_tool.check(include_system=True)
    shipped = [f for f in report["files"] if f["where"] == "system"]
    assert shipped and shipped[0]["records"] > 400
    other = [p for p in shipped[0]["problems"] if "cuBLASLt is not available" not in p]
    assert other == []
