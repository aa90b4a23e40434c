"""Immediate mode's answers shipped in a kernel package: for each problem of the workload a
package was built for, the solvers immediate mode would try, in its order, up to the first one that
applied on the build target (``miopy kernels build`` writes them into the ``kdb_choice`` table of
``<arch>_<cu>.kdb``). With them a fresh process checks and builds one solution per problem instead
of asking every solver of the list and making a program for each applicable one.

They are data, never code: JSON naming solvers and configuration fields, read from a package found
and trust-checked like its kernels (``miopy.db.kernel_cache``). They are only read when the
package is for exactly this device, this miopy version and this compiler (its manifest says so),
and the engine validates every entry against the current solvers before using it
(``miopy.engine.find``): an unknown solver, a solver that no longer applies or a configuration that
is no longer valid makes the whole record a miss, and immediate mode asks every solver as without
a package. A damaged row is a miss too."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miopy import config, log
from miopy.db import kernel_cache
from miopy.db.sqlite import SqliteFile

_log = log.get("miopy.db")

FORMAT = 1  # the manifest's "choice_format": how kdb_choice rows are written
TABLE = """
CREATE TABLE IF NOT EXISTS kdb_choice (
    primitive TEXT NOT NULL,
    problem_key TEXT NOT NULL,
    invoker_key TEXT NOT NULL,
    candidates TEXT NOT NULL,
    PRIMARY KEY (primitive, problem_key, invoker_key)
);
CREATE TABLE IF NOT EXISTS kdb_library (call TEXT PRIMARY KEY);
"""
MAX_CANDIDATES = 64  # more than any primitive's list of solvers: a longer row is not ours


@dataclass(frozen=True)
class Candidate:
    """One solver of a record. ``known``: it applied on the build target (the record ends with the
    first such); else whether it applies was unknown there (a vendor library it calls did not
    load) and it is tried first where it does. ``config``: the configuration immediate mode
    built it with there (tunable solvers that applied), else None."""

    solver: str
    config: dict[str, Any] | None
    known: bool

    def to_json(self) -> dict[str, Any]:
        return {"solver": self.solver, "config": self.config, "known": self.known}


def encode(candidates: list[Candidate]) -> str:
    return json.dumps([c.to_json() for c in candidates], sort_keys=True, separators=(",", ":"))


def decode(text: Any) -> tuple[Candidate, ...] | None:
    """The candidates of a stored row, or None when the row is not what ``encode`` writes: a list
    of at most MAX_CANDIDATES objects with exactly ``solver`` (a non-empty string), ``config`` (an
    object or null) and ``known`` (a boolean), whose last entry, and only that one, is known."""
    if not isinstance(text, str):
        return None
    try:
        items = json.loads(text)
    except ValueError:
        return None
    if not isinstance(items, list) or not 0 < len(items) <= MAX_CANDIDATES:
        return None
    out = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"solver", "config", "known"}:
            return None
        solver, cfg, known = item["solver"], item["config"], item["known"]
        if not isinstance(solver, str) or not solver or type(known) is not bool:
            return None
        if cfg is not None and (not isinstance(cfg, dict) or not known):
            return None
        out.append(Candidate(solver, cfg, known))
    if not out[-1].known or any(c.known for c in out[:-1]):
        return None
    return tuple(out)


class PackageChoices:
    """The choices of the first exact package of a device (``KernelCache.package_paths``), read
    in one query on first use. ``get`` answers None for anything it cannot vouch for."""

    def __init__(self, paths: list[Path], db_basename: str, backend_name: str, fingerprint: str):
        self.db_basename = db_basename
        self.backend_name = backend_name
        self.fingerprint = fingerprint
        exact = [p for p in paths if Path(p).name == f"{db_basename}.kdb"]
        self.path = exact[0] if exact else None  # a nearest-CU package chose for another device
        self._rows: dict[tuple[str, str, str], str] | None = None
        self._library: list[Any] = []
        self._lock = threading.Lock()  # read by immediate mode and by a library warm-up thread
        self.used = 0  # records that gave immediate mode its answer (for tests and logs)

    def _loaded(self) -> dict[tuple[str, str, str], str]:
        with self._lock:
            if self._rows is None:
                self._rows, self._library = self._load()
            return self._rows

    def library_calls(self) -> list[Any]:
        """The vendor-library calls (JSON values) of the package's chosen solutions, each once:
        what ``Backend.warm_library`` may run ahead of the first iteration."""
        self._loaded()
        return list(self._library)

    def _load(self) -> tuple[dict[tuple[str, str, str], str], list[Any]]:
        if self.path is None or config.disable_cache():
            return {}, []
        db = SqliteFile(self.path, "kern_db", kernel_cache.SCHEMA, kernel_cache.SCHEMA_VERSION, readonly=True)
        try:
            tables = {
                name
                for (name,) in db.query(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name IN ('kdb_manifest', 'kdb_choice', 'kdb_library')"
                )
            }
            if tables != {"kdb_manifest", "kdb_choice", "kdb_library"}:
                return {}, []  # a package made before choices were shipped, or by hand
            row = db.query("SELECT value FROM kdb_manifest WHERE name = 'manifest'")
            why = self._refuse(row[0][0] if row else None)
            if why is not None:
                _log.info("%s: its immediate-mode choices are not used (%s)", self.path, why)
                return {}, []
            rows = db.query("SELECT primitive, problem_key, invoker_key, candidates FROM kdb_choice")
            calls = db.query("SELECT call FROM kdb_library")
        finally:
            db.close()
        library = []
        for (text,) in calls:
            try:
                library.append(json.loads(text))
            except (TypeError, ValueError):
                continue  # the consumer validates every field of what does parse
        chosen = {(p, k, i): c for p, k, i, c in rows if all(isinstance(v, str) for v in (p, k, i))}
        return chosen, library

    def _refuse(self, text: Any) -> str | None:
        """Why the package's choices do not hold here, from its manifest; None when they do."""
        try:
            manifest = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            manifest = None
        if not isinstance(manifest, dict):
            return "no readable manifest"
        for field, here in (
            ("choice_format", FORMAT),
            ("miopy_version", config.VERSION),
            ("backend", self.backend_name),
            ("db_basename", self.db_basename),
            ("fingerprint", self.fingerprint),
        ):
            if manifest.get(field) != here:
                return f"{field}: package {manifest.get(field)!r}, here {here!r}"
        return None

    def get(self, primitive: str, problem_key: str, invoker_key: str) -> tuple[Candidate, ...] | None:
        rows = self._rows if self._rows is not None else self._loaded()
        text = rows.get((primitive, problem_key, invoker_key))
        if text is None:
            return None
        found = decode(text)
        if found is None:
            log.warn_once(_log, f"{self.path}: a damaged immediate-mode choice for {problem_key}; ignored")
        return found


__all__ = ["FORMAT", "TABLE", "Candidate", "PackageChoices", "decode", "encode"]
