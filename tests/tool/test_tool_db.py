"""``miopy db``: show, export, import, merge (the user record wins), check and prune, never
touching a system DB, and clear messages on damaged files."""

from __future__ import annotations

import hashlib
import json
import shutil

from miopy import config
from miopy.db.find_db import FindDb, FindRecord
from miopy.db.perf_db import PerfDb
from miopy.engine.candidates import make_solution
from miopy.solvers import by_name
from miopy.tool import workload

LINE = "conv -n 1 -c 8 -H 16 -W 16 -k 8 -y 3 -x 3 -p 1 -q 1 -F 1"
TILED = "ConvDirectTiledFwd"


def _problem():
    (problem,) = workload.problems_from_line(LINE)
    return problem


def _fill(handle) -> tuple[str, dict]:
    """A valid perf record, a valid find list, an unknown solver and an invalid config."""
    problem = _problem()
    view = problem.solver_view()
    solver = by_name(TILED, "conv")
    assert solver.is_applicable(handle, view) is None
    good = solver.default_config(handle, view)
    perf = PerfDb(handle.db_basename, "opencl")
    perf.store(view.key(), TILED, good)
    perf.store(view.key(), "NoSuchSolver", {"x": 1})
    (other,) = workload.problems_from_line(LINE.replace("-H 16 -W 16", "-H 12 -W 12"))
    perf.store(other.solver_view().key(), TILED, {"tile_h": 3})
    perf.close()
    find = FindDb(handle.db_basename, "opencl")
    solution = make_solution(handle, problem, solver, good)
    find.store(problem.key(), [FindRecord(TILED, 0.5, solution.workspace, solution.algorithm, good)])
    find.close()
    return view.key(), good


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_show_check_prune(ocl, tool, tool_json):
    key, good = _fill(ocl)
    records = tool_json("db", "show")
    assert {(r["kind"], r["solver"]) for r in records} >= {
        ("perf", TILED),
        ("find", TILED),
        ("perf", "NoSuchSolver"),
    }
    only = tool_json("db", "show", "--problem", key, "--primitive", "conv")
    assert only and all(r["problem"] == key for r in only)
    assert {r["solver"] for r in only if r["kind"] == "perf"} == {TILED, "NoSuchSolver"}
    assert tool_json("db", "show", "--primitive", "pool") == []
    code, out, _ = tool("db", "show")
    assert code == 0 and f"perf  {TILED}" in out and "find  #0" in out
    code, out, _ = tool("db", "check")
    assert code == 2
    assert "unknown solver 'NoSuchSolver'" in out and "invalid ConvDirectTiledFwd config" in out
    assert "checked on" in out
    report = tool_json("db", "prune")
    assert report["removed"] == 2
    code, out, _ = tool("db", "check")
    assert code == 0, out
    kept = tool_json("db", "show")
    assert {(r["kind"], r["solver"]) for r in kept} == {("perf", TILED), ("find", TILED)}
    assert next(r for r in kept if r["kind"] == "perf")["config"] == good


def test_export_import_merge_user_record_wins(ocl, tool, tool_json, tmp_path):
    key, good = _fill(ocl)
    code, out, _ = tool("db", "export", tmp_path / "all.json")
    assert code == 0 and "exported 4 records" in out
    doc = json.loads((tmp_path / "all.json").read_text())
    other = json.loads(json.dumps(doc))
    for r in other["records"]:
        if r["kind"] == "perf" and r["solver"] == TILED and r["problem"] == key:
            r["config"] = dict(good, tile_h=1)
    (tmp_path / "other.json").write_text(json.dumps(other))
    udb = config.user_db_dir() / f"{ocl.db_basename}.opencl.udb"
    shutil.copy(udb, tmp_path / f"{ocl.db_basename}.opencl.udb")
    for suffix in ("", "-wal", "-shm"):
        (config.user_db_dir() / f"{udb.name}{suffix}").unlink(missing_ok=True)
    assert tool_json("db", "show", "--user-only") == []
    report = tool_json("db", "import", tmp_path / "all.json")
    assert report["added"] == 4 and report["conflicts"] == []  # 3 perf records and 1 find list
    # the same records again: nothing changes; another run's config: the user record wins
    report = tool_json("db", "merge", tmp_path / f"{ocl.db_basename}.opencl.udb", tmp_path / "other.json")
    assert report["added"] == 0 and report["replaced"] == 0
    assert len(report["conflicts"]) == 1 and key in report["conflicts"][0]
    perf = [
        r
        for r in tool_json("db", "show")
        if r["kind"] == "perf" and r["solver"] == TILED and r["problem"] == key
    ]
    assert perf[0]["config"] == good
    report = tool_json("db", "merge", "--prefer-incoming", tmp_path / "other.json")
    assert report["replaced"] == 1
    perf = [
        r
        for r in tool_json("db", "show")
        if r["kind"] == "perf" and r["solver"] == TILED and r["problem"] == key
    ]
    assert perf[0]["config"]["tile_h"] == 1


def test_system_db_is_never_modified(ocl, tool, tool_json, tmp_path):
    _fill(ocl)
    udb = config.user_db_dir() / f"{ocl.db_basename}.opencl.udb"
    PerfDb(ocl.db_basename, "opencl").close()
    import sqlite3

    conn = sqlite3.connect(udb)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    system = config.system_db_dir() / f"{ocl.db_basename}.db"
    shutil.copy(udb, system)
    before = _digest(system)
    tool_json("db", "show")
    assert tool("db", "check")[0] == 2
    tool_json("db", "prune")
    tool_json("db", "merge", system, "--db", f"{ocl.db_basename}.opencl")
    assert _digest(system) == before
    code, out, _ = tool("db", "check", "--json")
    report = json.loads(out)
    sys_entry = next(f for f in report["files"] if f["where"] == "system")
    assert any("NoSuchSolver" in p for p in sys_entry["problems"])  # reported, left alone


def test_damaged_files_give_messages(ocl, tool, tmp_path):
    config.user_db_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    bad = config.user_db_dir() / f"{ocl.db_basename}.opencl.udb"
    bad.write_bytes(b"garbage, not a database" * 200)
    code, out, err = tool("db", "check")
    assert code == 2 and "damaged" in out
    before = _digest(bad)
    code, out, err = tool("db", "show")
    # read-only: reported and left as it is (no repair, no copy moved aside)
    assert code == 0 and "damaged" in err and "db check" in err
    assert _digest(bad) == before
    assert sorted(p.name for p in config.user_db_dir().iterdir()) == [bad.name]
    code, out, err = tool("db", "export", "-")
    assert code == 0 and "damaged" in err and _digest(bad) == before
    (tmp_path / "x.json").write_text("{not json")
    code, out, err = tool("db", "import", tmp_path / "x.json")
    assert code == 1 and "neither a miopy DB nor a JSON export" in out
    code, out, err = tool("db", "merge", tmp_path / "missing.udb")
    assert code == 1 and "no such file" in out
