"""``miopy db show | export | import | merge | prune | check``: the find and perf records of the
user DBs (``<base>.<backend>.udb``, read and written) and the system DBs (``<base>.db``, only ever
read). Records are moved between machines as JSON exports or as the ``.udb`` files themselves."""

from __future__ import annotations

import json
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

from miopy import config
from miopy.db import find_db, perf_db, trust
from miopy.db.sqlite import SqliteFile
from miopy.errors import MiopyError
from miopy.tool.common import ToolError

EXPORT_FORMAT = "miopy-db-export"
PERF_COLUMNS = ("primitive", "problem_key", "solver", "params", "version")
FIND_COLUMNS = (
    "primitive",
    "problem_key",
    "rank",
    "solver",
    "time_ms",
    "workspace",
    "algorithm",
    "params",
    "version",
)


# ---- where records live ---------------------------------------------------------------------------
def db_files(include_system: bool = True) -> list[tuple[Path, str]]:
    out = []
    for folder, pattern, where in (
        (config.user_db_dir(), "*.udb", "user"),
        (config.system_db_dir(), "*.db", "system"),
    ):
        if where == "system" and not include_system:
            continue
        try:
            out += [(p, where) for p in sorted(folder.glob(pattern)) if p.is_file() or p.is_symlink()]
        except OSError:
            continue
    return out


def db_name(path: Path) -> str:
    """``<base>.<backend>`` of a user file, ``<base>`` of a system one."""
    return path.name.rsplit(".", 1)[0]


def user_files(name: str) -> tuple[SqliteFile, SqliteFile]:
    path = config.user_db_dir() / f"{name}.udb"
    return (
        SqliteFile(path, "perf_db", perf_db.SCHEMA, perf_db.SCHEMA_VERSION, migrations=perf_db.MIGRATIONS),
        SqliteFile(path, "find_db", find_db.SCHEMA, find_db.SCHEMA_VERSION, migrations=find_db.MIGRATIONS),
    )


def _record(kind: str, db: str, where: str, columns: tuple[str, ...], row: tuple) -> dict[str, Any]:
    rec: dict[str, Any] = {"kind": kind, "db": db, "where": where}
    for name, value in zip(columns, row):
        if name == "problem_key":
            rec["problem"] = value
        elif name == "params":
            try:
                rec["config"] = None if value is None else json.loads(value)
            except (TypeError, ValueError):
                rec["config"] = value  # kept as text; check reports it
        else:
            rec[name] = value
    return rec


def _raw_rows(path: Path, immutable: bool) -> tuple[list[tuple], list[tuple], list[str]]:
    """(perf rows, find rows, problems) of a file read directly, never repaired."""
    problems = []
    try:
        trust.check_file(path, system=True)
    except trust.Untrusted as exc:
        return [], [], [f"not read: {exc}"]
    mode = "mode=ro&immutable=1" if immutable else "mode=ro"
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True)
    except sqlite3.Error as exc:
        return [], [], [f"cannot open: {exc}"]
    perf, find = [], []
    try:
        for table, columns, out in (("perf_db", PERF_COLUMNS, perf), ("find_db", FIND_COLUMNS, find)):
            try:
                out += conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    problems.append(f"{table}: {exc}")
            except sqlite3.DatabaseError as exc:
                problems.append(f"{table}: damaged ({exc})")
    finally:
        conn.close()
    return perf, find, problems


def read(path: Path, where: str, repair: bool = False) -> list[dict[str, Any]]:
    """Records of one file. ``repair`` reads a user file through miopy's own opening (a damaged
    file is moved aside and its readable rows kept, as any miopy run would)."""
    name = db_name(path)
    if repair and where == "user":
        perf, find = user_files(name)
        try:
            perf_rows = perf.query(f"SELECT {', '.join(PERF_COLUMNS)} FROM perf_db")
            find_rows = find.query(
                f"SELECT {', '.join(FIND_COLUMNS)} FROM find_db ORDER BY primitive, problem_key, rank"
            )
        finally:
            perf.close()
            find.close()
    else:
        perf_rows, find_rows, problems = _raw_rows(path, immutable=where != "user")
        if problems:
            raise ToolError(f"{path}: {'; '.join(problems)}")
    return [_record("perf", name, where, PERF_COLUMNS, r) for r in perf_rows] + [
        _record("find", name, where, FIND_COLUMNS, r) for r in find_rows
    ]


def select(records: list[dict[str, Any]], primitive: str | None, problem: str | None) -> list[dict[str, Any]]:
    return [
        r
        for r in records
        if (primitive is None or r.get("primitive") == primitive)
        and (problem is None or problem in str(r.get("problem")))
    ]


def show(primitive: str | None, problem: str | None, include_system: bool = True) -> tuple[list, list[str]]:
    """Records of every DB file, read as they are: a damaged file is reported in the notes and
    left untouched (a read-only command never moves or rewrites a file; ``miopy db check`` says
    what is wrong and ``miopy db prune`` repairs a user file)."""
    records, notes = [], []
    for path, where in db_files(include_system):
        try:
            records += read(path, where)
        except ToolError as exc:
            fix = "; left as it is (`miopy db check` says more, `miopy db prune` repairs it)"
            notes.append(f"{exc}{fix if where == 'user' else ''}")
    return select(records, primitive, problem), notes


def format_text(records: list[dict[str, Any]]) -> list[str]:
    lines, current = [], None
    for r in sorted(
        records,
        key=lambda r: (
            r["db"],
            r["where"],
            str(r["primitive"]),
            str(r["problem"]),
            r["kind"],
            r.get("rank", 0),
        ),
    ):
        head = (r["db"], r["where"], r["primitive"], r["problem"])
        if head != current:
            if current is None or current[:2] != head[:2]:
                lines.append(f"{r['db']} ({r['where']})")
            lines.append(f"  {r['primitive']} {r['problem']}")
            current = head
        cfg = "" if r.get("config") is None else " " + json.dumps(r["config"], sort_keys=True)
        if r["kind"] == "perf":
            lines.append(f"    perf  {r['solver']}{cfg} (miopy {r['version']})")
        else:
            lines.append(
                f"    find  #{r['rank']} {r['solver']} {r['time_ms']:.4f} ms, workspace {r['workspace']}{cfg}"
                if isinstance(r.get("time_ms"), int | float)
                else f"    find  #{r['rank']} {r['solver']} time {r.get('time_ms')!r}{cfg}"
            )
    return lines


# ---- export, import, merge ------------------------------------------------------------------------------
def export(path: str, include_system: bool = False) -> dict[str, Any]:
    records, notes = show(None, None, include_system)
    doc = {
        "format": EXPORT_FORMAT,
        "format_version": 1,
        "miopy_version": config.VERSION,
        "exported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "records": records,
    }
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if path == "-":
        return {"text": text, "records": len(records), "notes": notes}
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise ToolError(f"{path}: cannot write it ({exc})") from None
    return {"file": path, "records": len(records), "notes": notes}


def _load_source(path: Path, name_override: str | None) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ToolError(f"{path}: no such file")
    try:
        head = path.open("rb").read(16)
    except OSError as exc:
        raise ToolError(f"{path}: cannot read it ({exc})") from None
    if head.startswith(b"SQLite format 3"):
        records = read(path, "source")
        if name_override or path.suffix != ".udb":
            if not name_override:
                raise ToolError(f"{path}: not named <arch>_<cu>.<backend>.udb; say which DB with --db")
            for r in records:
                r["db"] = name_override
        return records
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ToolError(f"{path}: neither a miopy DB nor a JSON export ({exc})") from None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != EXPORT_FORMAT
        or not isinstance(doc.get("records"), list)
    ):
        raise ToolError(f"{path}: not a `miopy db export` file")
    out = []
    for r in doc["records"]:
        if not isinstance(r, dict) or r.get("kind") not in ("perf", "find"):
            continue
        r = dict(r)
        if name_override:
            r["db"] = name_override
        if not isinstance(r.get("db"), str) or "." not in r["db"]:
            raise ToolError(
                f"{path}: a record of {r.get('db')!r}, not a user DB (<base>.<backend>); use --db"
            )
        out.append(r)
    return out


def _perf_key(r: dict) -> tuple:
    return (r["primitive"], r["problem"], r["solver"])


def _find_list(records: list[dict]) -> list[tuple]:
    return [
        (r["solver"], json.dumps(r.get("config"), sort_keys=True))
        for r in sorted(records, key=lambda r: r["rank"])
    ]


def merge(
    sources: list[Path], name_override: str | None = None, prefer_incoming: bool = False
) -> dict[str, Any]:
    """Merge the records of ``sources`` into the user DBs: the user's record wins (or the incoming
    one with ``prefer_incoming``), then the first source's; every disagreement is reported."""
    report: dict[str, Any] = {"added": 0, "replaced": 0, "unchanged": 0, "conflicts": [], "skipped": []}
    incoming: dict[str, list[tuple[str, dict]]] = {}
    for src in sources:
        try:
            for r in _load_source(src, name_override):
                incoming.setdefault(r["db"], []).append((str(src), r))
        except ToolError as exc:
            report["skipped"].append(str(exc))
    for name, items in sorted(incoming.items()):
        existing = (
            read(config.user_db_dir() / f"{name}.udb", "user", repair=True)
            if (config.user_db_dir() / f"{name}.udb").exists()
            else []
        )
        have_perf = {_perf_key(r): r for r in existing if r["kind"] == "perf"}
        have_find: dict[tuple, list[dict]] = {}
        for r in existing:
            if r["kind"] == "find":
                have_find.setdefault((r["primitive"], r["problem"]), []).append(r)
        chosen_perf: dict[tuple, tuple[str, dict]] = {}
        chosen_find: dict[tuple, tuple[str, list[dict]]] = {}
        grouped: dict[tuple, dict[str, list[dict]]] = {}
        for src, r in items:
            if r["kind"] == "perf":
                key = _perf_key(r)
                if key in chosen_perf and chosen_perf[key][1].get("config") != r.get("config"):
                    report["conflicts"].append(
                        f"{name} perf {key[0]} {key[1]} {key[2]}: {chosen_perf[key][0]} kept over {src}"
                    )
                    continue
                chosen_perf.setdefault(key, (src, r))
            else:
                grouped.setdefault((r["primitive"], r["problem"]), {}).setdefault(src, []).append(r)
        for key, by_src in grouped.items():
            for src, recs in by_src.items():
                if key in chosen_find and _find_list(chosen_find[key][1]) != _find_list(recs):
                    report["conflicts"].append(
                        f"{name} find {key[0]} {key[1]}: {chosen_find[key][0]} kept over {src}"
                    )
                    continue
                chosen_find.setdefault(key, (src, recs))
        statements: list[tuple[str, tuple]] = []
        for key, (src, r) in chosen_perf.items():
            old = have_perf.get(key)
            if old is not None and old.get("config") == r.get("config"):
                report["unchanged"] += 1
                continue
            if old is not None:
                report["conflicts"].append(
                    f"{name} perf {key[0]} {key[1]} {key[2]}: "
                    + (
                        f"{src} replaced the user record"
                        if prefer_incoming
                        else f"the user record kept over {src}"
                    )
                )
                if not prefer_incoming:
                    continue
                report["replaced"] += 1
            else:
                report["added"] += 1
            statements.append(
                (
                    "INSERT OR REPLACE INTO perf_db (primitive, problem_key, solver, params, version) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (
                        key[0],
                        key[1],
                        key[2],
                        json.dumps(r.get("config"), sort_keys=True),
                        str(r.get("version") or config.VERSION),
                    ),
                )
            )
        find_statements: list[tuple[str, tuple]] = []
        for key, (src, recs) in chosen_find.items():
            old = have_find.get(key)
            if old is not None and _find_list(old) == _find_list(recs):
                report["unchanged"] += 1
                continue
            if old is not None:
                report["conflicts"].append(
                    f"{name} find {key[0]} {key[1]}: "
                    + (
                        f"{src} replaced the user record"
                        if prefer_incoming
                        else f"the user record kept over {src}"
                    )
                )
                if not prefer_incoming:
                    continue
                report["replaced"] += 1
            else:
                report["added"] += 1
            find_statements.append(("DELETE FROM find_db WHERE primitive = ? AND problem_key = ?", key))
            for rank, r in enumerate(sorted(recs, key=lambda r: r["rank"])):
                cfg = r.get("config")
                find_statements.append(
                    (
                        "INSERT INTO find_db (primitive, problem_key, rank, solver, time_ms, workspace, "
                        "algorithm, "
                        "params, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            key[0],
                            key[1],
                            rank,
                            r["solver"],
                            r["time_ms"],
                            r["workspace"],
                            r["algorithm"],
                            None if cfg is None else json.dumps(cfg, sort_keys=True),
                            str(r.get("version") or config.VERSION),
                        ),
                    )
                )
        perf, find = user_files(name)
        try:
            if statements and not perf.write(statements):
                raise ToolError(f"{perf.path}: could not write it; nothing merged into it")
            if find_statements and not find.write(find_statements):
                raise ToolError(f"{find.path}: could not write it; its find records were not merged")
        finally:
            perf.close()
            find.close()
    return report


# ---- check and prune --------------------------------------------------------------------------------------
def problem_classes() -> dict[str, type]:
    from miopy.problem.activation import ActivationProblem
    from miopy.problem.bnorm import BatchNormProblem
    from miopy.problem.conv import ConvProblem
    from miopy.problem.pooling import PoolingProblem

    return {c.primitive: c for c in (ConvProblem, PoolingProblem, ActivationProblem, BatchNormProblem)}


def validate(r: dict[str, Any], ctx: Any) -> str | None:
    """Why the record is unusable by the current solvers, or None."""
    from miopy.solvers import by_name

    cls = problem_classes().get(r.get("primitive"))
    if cls is None:
        return f"unknown primitive {r.get('primitive')!r}"
    try:
        problem = cls.parse(r["problem"])
    except (MiopyError, ValueError, TypeError, KeyError, IndexError) as exc:
        return f"problem key does not parse ({exc})"
    solver = by_name(str(r.get("solver")), r["primitive"])
    if solver is None:
        return f"unknown solver {r.get('solver')!r}"
    cfg = r.get("config")
    if cfg is not None and not isinstance(cfg, dict):
        return f"config is not a JSON object: {cfg!r}"
    if r["kind"] == "perf" and not solver.tunable:
        return f"{solver.name} is not tunable"
    if r["kind"] == "find":
        t, ws = r.get("time_ms"), r.get("workspace")
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
            return f"time {t!r} ms"
        if isinstance(ws, bool) or not isinstance(ws, int) or ws < 0:
            return f"workspace {ws!r}"
    if ctx is None:
        return None
    view = problem if r["kind"] == "perf" else problem.solver_view()
    try:
        why = solver.applicability(ctx, view)
        if why is not None:
            return f"{solver.name} not applicable: {why}"
        if solver.tunable and cfg is not None and not solver.is_valid_config(ctx, view, cfg):
            return f"invalid {solver.name} config {json.dumps(cfg, sort_keys=True)}"
    except Exception as exc:  # a config the solver cannot even read (missing fields, wrong types)
        return f"{solver.name} rejects the record ({type(exc).__name__}: {exc})"
    return None


def _context(path: Path, where: str):
    from miopy.tool.target import context_for_db

    name = db_name(path)
    if where == "user":
        return context_for_db(name)
    return context_for_db(f"{name}.opencl") or context_for_db(f"{name}.cuda")


def check(include_system: bool = True) -> dict[str, Any]:
    """Integrity of every DB file, then every record against the current solvers (on the device the
    file is for, when it is here or a known CUDA architecture)."""
    report: dict[str, Any] = {"files": [], "problems": 0}
    for path, where in db_files(include_system):
        entry: dict[str, Any] = {"file": str(path), "where": where, "problems": [], "records": 0}
        report["files"].append(entry)
        try:
            trust.check_file(path, system=where == "system")
        except trust.Untrusted as exc:
            entry["problems"].append(f"refused: {exc}")
            continue
        try:
            # a user file's latest writes may still be in its -wal: read it as SQLite would
            mode = "mode=ro&immutable=1" if where == "system" else "mode=ro"
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, timeout=10)
            try:
                result = [row[0] for row in conn.execute("PRAGMA integrity_check(20)").fetchall()]
                versions = {}
                if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
                    versions = dict(conn.execute("SELECT component, version FROM meta").fetchall())
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            result, versions = [f"unreadable: {exc}"], {}
        if result != ["ok"]:
            fix = (
                " (any miopy run, or `miopy db prune`, moves it aside and keeps its readable rows)"
                if where == "user"
                else ""
            )
            entry["problems"].append(f"damaged: {'; '.join(result[:3])}{fix}")
            continue
        for component, version in (("perf_db", perf_db.SCHEMA_VERSION), ("find_db", find_db.SCHEMA_VERSION)):
            if component in versions and versions[component] != version:
                entry["problems"].append(
                    f"{component} schema version {versions[component]}, expected {version}"
                )
        try:
            records = read(path, where)
        except ToolError as exc:
            entry["problems"].append(str(exc))
            continue
        ctx = _context(path, where)
        entry["device"] = None if ctx is None else f"{ctx.info.arch} ({ctx.info.compute_units} CUs)"
        entry["records"] = len(records)
        for r in records:
            why = validate(r, ctx)
            if why is not None:
                entry["problems"].append(
                    f"{r['kind']} {r['primitive']} {r['problem']} {r.get('solver')}: {why}"
                )
                entry.setdefault("bad", []).append(r)
    report["problems"] = sum(len(f["problems"]) for f in report["files"])
    return report


def prune() -> dict[str, Any]:
    """Delete the user records that ``check`` finds unusable (system DBs are never changed). A
    damaged user file is repaired first, as any miopy run would."""
    for path, where in db_files(include_system=False):
        if where == "user":
            perf, find = user_files(db_name(path))
            perf.query("SELECT 1 FROM perf_db LIMIT 1")  # opening repairs a damaged file
            find.query("SELECT 1 FROM find_db LIMIT 1")
            perf.close()
            find.close()
    report = check(include_system=False)
    removed = 0
    for entry in report["files"]:
        bad = entry.pop("bad", [])
        if not bad:
            continue
        perf, find = user_files(db_name(Path(entry["file"])))
        perf_statements, find_statements = [], []
        for r in bad:
            if r["kind"] == "perf":
                perf_statements.append(
                    (
                        "DELETE FROM perf_db WHERE primitive = ? AND problem_key = ? AND solver = ?",
                        (r["primitive"], r["problem"], r["solver"]),
                    )
                )
            else:
                find_statements.append(
                    (
                        "DELETE FROM find_db WHERE primitive = ? AND problem_key = ? AND rank = ?",
                        (r["primitive"], r["problem"], r["rank"]),
                    )
                )
        try:
            if perf_statements and perf.write(perf_statements):
                removed += len(perf_statements)
            if find_statements and find.write(find_statements):
                removed += len(find_statements)
        finally:
            perf.close()
            find.close()
    report["removed"] = removed
    return report
