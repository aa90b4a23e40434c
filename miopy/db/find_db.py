"""Ranked find results per problem, in the perf DB's files: the user list, whole, wins over the system
one. MIOPY_DEBUG_DISABLE_FIND_DB=1 turns it off."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from miopy import config, log
from miopy.db.perf_db import dump_json, load_json, udb_files
from miopy.db.sqlite import SqliteFile

_log = log.get("miopy.db")

# Version 2 added the primitive to the key; version 1 rows were all convolutions and are converted.
SCHEMA_VERSION = 2
SCHEMA = """
CREATE TABLE IF NOT EXISTS find_db (
    primitive TEXT NOT NULL,
    problem_key TEXT NOT NULL,
    rank INTEGER NOT NULL,
    solver TEXT NOT NULL,
    time_ms REAL NOT NULL,
    workspace INTEGER NOT NULL,
    algorithm TEXT NOT NULL,
    params TEXT,
    version TEXT NOT NULL,
    PRIMARY KEY (primitive, problem_key, rank)
);
"""
MIGRATIONS = {
    1: """
ALTER TABLE find_db RENAME TO find_db_v1;
"""
    + SCHEMA
    + """;
INSERT INTO find_db (primitive, problem_key, rank, solver, time_ms, workspace, algorithm, params, version)
    SELECT 'conv', problem_key, rank, solver, time_ms, workspace, algorithm, params, version FROM find_db_v1;
DROP TABLE find_db_v1;
"""
}
_DELETE = "DELETE FROM find_db WHERE primitive = ? AND problem_key = ?"


@dataclass
class FindRecord:
    solver: str
    time_ms: float
    workspace: int
    algorithm: str
    config: dict[str, Any] | None = None


def _nonsense(solver: Any, time_ms: Any, workspace: Any, algorithm: Any) -> str | None:
    """What makes a stored record unusable for ranking, or None. SQLite keeps any value in any
    column, so types are checked too."""
    if not isinstance(solver, str) or not solver or not isinstance(algorithm, str):
        return f"solver {solver!r}, algorithm {algorithm!r}"
    if isinstance(time_ms, bool) or not isinstance(time_ms, int | float) or not math.isfinite(time_ms):
        return f"time {time_ms!r} ms"
    if time_ms < 0:
        return f"negative time {time_ms!r} ms"
    if isinstance(workspace, bool) or not isinstance(workspace, int) or workspace < 0:
        return f"workspace {workspace!r}"
    return None


_COLUMNS = "solver, time_ms, workspace, algorithm, params"


class FindDb:
    def __init__(self, db_basename: str, backend_name: str):
        self._user, self._system = udb_files(
            db_basename, backend_name, "find_db", SCHEMA, SCHEMA_VERSION, MIGRATIONS
        )
        self._system_rows: dict[tuple[str, str], list[tuple]] | None = None

    def load(self, problem_key: str, primitive: str = "conv") -> list[FindRecord] | None:
        """The ranked records, fastest first as stored, or None when neither file has the problem."""
        if config.disable_find_db():
            return None
        sql = f"SELECT {_COLUMNS} FROM find_db WHERE primitive = ? AND problem_key = ? ORDER BY rank"
        records = self._records(self._user, problem_key, self._user.query(sql, (primitive, problem_key)))
        if records:
            return records
        rows = self._system_lists().get((primitive, problem_key), [])
        return self._records(self._system, problem_key, rows)

    def preload(self) -> None:
        """Read the system file's lists now (a handle's set-up thread), not at the first load."""
        self._system_lists()

    def _system_lists(self) -> dict[tuple[str, str], list[tuple]]:
        """Every ranked list of the system file, read in one query on first use (a system file is
        read-only and opened immutable: it cannot change under a process). A network's first
        iteration asks for each of its problems; one query per problem cost more."""
        if self._system_rows is None:
            lists: dict[tuple[str, str], list[tuple]] = {}
            order = "ORDER BY primitive, problem_key, rank"
            sql = f"SELECT primitive, problem_key, {_COLUMNS} FROM find_db {order}"
            for primitive, key, *row in self._system.query(sql):
                lists.setdefault((primitive, key), []).append(tuple(row))
            self._system_rows = lists
        return self._system_rows

    def _records(self, db: SqliteFile, problem_key: str, rows: list[tuple]) -> list[FindRecord] | None:
        records = []
        for solver, time_ms, workspace, algorithm, params in rows:
            solver_config = None
            if params is not None:
                solver_config = load_json(params, f"{db.path}: find {problem_key} {solver}")
                if solver_config is None:
                    return None  # a list with a hole would rank the wrong solver first
            problem = _nonsense(solver, time_ms, workspace, algorithm)
            if problem is not None:
                log.warn_once(_log, f"{db.path}: find {problem_key}: ignoring a record with {problem}")
                continue
            records.append(FindRecord(solver, float(time_ms), int(workspace), algorithm, solver_config))
        return records or None

    def store(self, problem_key: str, records: list[FindRecord], primitive: str = "conv") -> None:
        """Replace the user list of the problem."""
        if config.disable_find_db():
            return
        statements: list[tuple[str, tuple[Any, ...]]] = [(_DELETE, (primitive, problem_key))]
        sql = (
            "INSERT INTO find_db (primitive, problem_key, rank, solver, time_ms, workspace, algorithm, "
            "params, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        for rank, rec in enumerate(records):
            params = None
            if rec.config is not None:
                params = dump_json(rec.config, f"find db {problem_key} {rec.solver}")
                if params is None:
                    return
            row = (primitive, problem_key, rank, rec.solver, float(rec.time_ms), int(rec.workspace))
            statements.append((sql, (*row, rec.algorithm, params, config.VERSION)))
        self._user.write(statements)

    def remove(self, problem_key: str, primitive: str = "conv") -> None:
        if not config.disable_find_db():
            self._user.write([(_DELETE, (primitive, problem_key))])

    def close(self) -> None:
        self._user.close()
        self._system.close()
