"""Tuned solver configs per problem: system ``<base>.db`` (read-only), user ``<base>.<backend>.udb``.

Configs are JSON objects with fields by name and carry the miopy version that wrote them; a record
from another version is still returned, since the solver re-validates it."""

from __future__ import annotations

import json
from typing import Any

from miopy import config, log
from miopy.db.sqlite import SqliteFile

_log = log.get("miopy.db")

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS perf_db (
    problem_key TEXT NOT NULL,
    solver TEXT NOT NULL,
    params TEXT NOT NULL,
    version TEXT NOT NULL,
    PRIMARY KEY (problem_key, solver)
);
"""


def udb_files(
    db_basename: str, backend_name: str, component: str, schema: str, version: int
) -> tuple[SqliteFile, SqliteFile]:
    """(user, system) files of a DB kept in ``<base>.<backend>.udb`` and ``<base>.db``."""
    user = config.user_db_dir() / f"{db_basename}.{backend_name}.udb"
    system = config.system_db_dir() / f"{db_basename}.db"
    return (
        SqliteFile(user, component, schema, version),
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
        self._user, self._system = udb_files(db_basename, backend_name, "perf_db", SCHEMA, SCHEMA_VERSION)

    def _rows(self, db: SqliteFile, problem_key: str, solver: str | None) -> dict[str, dict[str, Any]]:
        sql, params = "SELECT solver, params FROM perf_db WHERE problem_key = ?", [problem_key]
        if solver is not None:
            sql, params = sql + " AND solver = ?", params + [solver]
        found = {}
        for name, text in db.query(sql, params):
            value = load_json(text, f"{db.path}: {problem_key} {name}")
            if value is not None:
                found[name] = value
        return found

    def load(self, problem_key: str, solver: str) -> dict[str, Any] | None:
        for db in (self._user, self._system):
            found = self._rows(db, problem_key, solver)
            if solver in found:
                return found[solver]
        return None

    def records(self, problem_key: str) -> dict[str, dict[str, Any]]:
        """Every solver's config for the problem, user records over system ones."""
        return self._rows(self._system, problem_key, None) | self._rows(self._user, problem_key, None)

    def store(self, problem_key: str, solver: str, config: dict[str, Any]) -> None:
        text = dump_json(config, f"perf db {problem_key} {solver}")
        if text is not None:
            sql = "INSERT OR REPLACE INTO perf_db (problem_key, solver, params, version) VALUES (?, ?, ?, ?)"
            self._user.write([(sql, (problem_key, solver, text, _version()))])

    def remove(self, problem_key: str, solver: str | None = None) -> None:
        """Delete the user records of the problem (of one solver, if given); system ones stay."""
        if solver is None:
            self._user.write([("DELETE FROM perf_db WHERE problem_key = ?", (problem_key,))])
        else:
            sql = "DELETE FROM perf_db WHERE problem_key = ? AND solver = ?"
            self._user.write([(sql, (problem_key, solver))])

    def close(self) -> None:
        self._user.close()
        self._system.close()


def _version() -> str:
    # store()'s ``config`` argument hides the module there.
    return config.VERSION
