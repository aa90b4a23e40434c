"""Tuned solver configs per problem: system ``<base>.db`` (read-only), user ``<base>.<backend>.udb``.

Configs are JSON objects with fields by name and carry the miopy version that wrote them; a record
from another version is still returned, since the solver re-validates it."""

from __future__ import annotations

import json
from typing import Any

from miopy import config, log
from miopy.db.sqlite import SqliteFile

_log = log.get("miopy.db")

# Version 2 added the primitive ("conv", "activ", "pool", ...) to the key; version 1 rows were all
# convolutions and are converted in place.
SCHEMA_VERSION = 2
SCHEMA = """
CREATE TABLE IF NOT EXISTS perf_db (
    primitive TEXT NOT NULL,
    problem_key TEXT NOT NULL,
    solver TEXT NOT NULL,
    params TEXT NOT NULL,
    version TEXT NOT NULL,
    PRIMARY KEY (primitive, problem_key, solver)
);
"""
MIGRATIONS = {
    1: """
ALTER TABLE perf_db RENAME TO perf_db_v1;
"""
    + SCHEMA
    + """;
INSERT INTO perf_db (primitive, problem_key, solver, params, version)
    SELECT 'conv', problem_key, solver, params, version FROM perf_db_v1;
DROP TABLE perf_db_v1;
"""
}


def udb_files(
    db_basename: str,
    backend_name: str,
    component: str,
    schema: str,
    version: int,
    migrations: dict[int, str] | None = None,
) -> tuple[SqliteFile, SqliteFile]:
    """(user, system) files of a DB kept in ``<base>.<backend>.udb`` and ``<base>.db``."""
    user = config.user_db_dir() / f"{db_basename}.{backend_name}.udb"
    system = config.system_db_dir() / f"{db_basename}.db"
    return (
        SqliteFile(user, component, schema, version, migrations=migrations),
        SqliteFile(system, component, schema, version, readonly=True),
    )


def dump_json(value: Any, what: str) -> str | None:
    """JSON text, or None (with a warning) for a value JSON cannot hold."""
    try:
        # NumPy scalars sneak into configs; .item() turns them into plain numbers.
        return json.dumps(value, sort_keys=True, default=lambda obj: obj.item())
    except (TypeError, ValueError, AttributeError) as exc:
        _log.warning("%s: cannot store %r as JSON (%s); not saved", what, value, exc)
        return None


def load_json(text: str | None, what: str) -> dict[str, Any] | None:
    """The JSON object in ``text``, or None (with a warning) when it is not one."""
    try:
        value = json.loads(text) if text is not None else None
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, dict):
        log.warn_once(_log, f"{what}: ill-formed record {text!r}; ignoring it")
        return None
    return value


class PerfDb:
    def __init__(self, db_basename: str, backend_name: str):
        self._user, self._system = udb_files(
            db_basename, backend_name, "perf_db", SCHEMA, SCHEMA_VERSION, MIGRATIONS
        )
        self._system_rows: dict[tuple[str, str], list[tuple[Any, Any]]] | None = None

    def preload(self) -> None:
        """Read the system file's rows now (a handle's set-up thread), not at the first load."""
        self._system_records("", "")

    def _system_records(self, primitive: str, problem_key: str) -> list[tuple[Any, Any]]:
        """(solver, params) rows of the system file, every row read in one query on first use (it
        is read-only and opened immutable: it cannot change under a process)."""
        if self._system_rows is None:
            rows: dict[tuple[str, str], list[tuple[Any, Any]]] = {}
            for prim, key, name, text in self._system.query(
                "SELECT primitive, problem_key, solver, params FROM perf_db"
            ):
                rows.setdefault((prim, key), []).append((name, text))
            self._system_rows = rows
        return self._system_rows.get((primitive, problem_key), [])

    def _rows(
        self, db: SqliteFile, primitive: str, problem_key: str, solver: str | None
    ) -> dict[str, dict[str, Any]]:
        if db is self._system:
            rows = [r for r in self._system_records(primitive, problem_key) if solver in (None, r[0])]
        else:
            sql = "SELECT solver, params FROM perf_db WHERE primitive = ? AND problem_key = ?"
            params = [primitive, problem_key]
            if solver is not None:
                sql, params = sql + " AND solver = ?", params + [solver]
            rows = db.query(sql, params)
        found = {}
        for name, text in rows:
            value = load_json(text, f"{db.path}: {primitive} {problem_key} {name}")
            if value is not None:
                found[name] = value
        return found

    def load(self, problem_key: str, solver: str, primitive: str = "conv") -> dict[str, Any] | None:
        for db in (self._user, self._system):
            found = self._rows(db, primitive, problem_key, solver)
            if solver in found:
                return found[solver]
        return None

    def load_user(self, problem_key: str, solver: str, primitive: str = "conv") -> dict[str, Any] | None:
        """The user file's record only (``miopy tune`` resumes past what it already wrote)."""
        return self._rows(self._user, primitive, problem_key, solver).get(solver)

    def records(self, problem_key: str, primitive: str = "conv") -> dict[str, dict[str, Any]]:
        """Every solver's config for the problem, user records over system ones."""
        system = self._rows(self._system, primitive, problem_key, None)
        return system | self._rows(self._user, primitive, problem_key, None)

    def store(self, problem_key: str, solver: str, config: dict[str, Any], primitive: str = "conv") -> None:
        text = dump_json(config, f"perf db {primitive} {problem_key} {solver}")
        if text is not None:
            sql = (
                "INSERT OR REPLACE INTO perf_db (primitive, problem_key, solver, params, version) "
                "VALUES (?, ?, ?, ?, ?)"
            )
            self._user.write([(sql, (primitive, problem_key, solver, text, _version()))])

    def remove(self, problem_key: str, solver: str | None = None, primitive: str = "conv") -> None:
        """Delete the user records of the problem (of one solver, if given); system ones stay."""
        sql, params = "DELETE FROM perf_db WHERE primitive = ? AND problem_key = ?", [primitive, problem_key]
        if solver is not None:
            sql, params = sql + " AND solver = ?", params + [solver]
        self._user.write([(sql, params)])

    def close(self) -> None:
        self._user.close()
        self._system.close()


def _version() -> str:
    # store()'s ``config`` argument hides the module there.
    return config.VERSION
