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

import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miopy import config, log
from miopy.db import kernel_cache, package_plans
from miopy.db.sqlite import SqliteFile
from miopy.invoker import step_plan

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
READ_AHEAD_MAX = 4096  # programs a handle decodes ahead (a ResNet-50 iteration needs 121)


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
        # (program, find list or None) by problem: only those of a trusted package
        self._plans: dict[tuple[str, str, str], tuple[str, str | None]] = {}
        self._library: list[Any] = []
        # decoded ahead by ``read_ahead`` (a handle's set-up thread): by problem
        self._programs: dict[tuple[str, str, str], Any] = {}
        self._candidates: dict[tuple[str, str, str], Any] = {}
        # programs with cuBLASLt steps bound by ``binder`` (Backend.bind_library; the handle sets
        # it): the process's product and a checked algorithm in place of the plan's placeholders
        self.binder: Any = None
        self._bound: dict[tuple[str, str, str], Any] = {}
        self._lock = threading.Lock()  # read by immediate mode and by a library warm-up thread
        self.used = 0  # records that gave immediate mode its answer (for tests and logs)
        self.planned = 0  # of those, the ones whose program came from the package

    def _loaded(self) -> dict[tuple[str, str, str], str]:
        with self._lock:
            if self._rows is None:
                self._rows, self._library, self._plans = self._load()
            return self._rows

    @property
    def trusted(self) -> bool:
        """Whether the package passed the whole-package check (its plans are then used)."""
        self._loaded()
        return bool(self._plans)

    def read_ahead(self, most: int = READ_AHEAD_MAX) -> int:
        """Read the package and, when it is trusted, decode up to ``most`` of its choices and
        programs now (a handle runs this on its set-up thread), so that immediate mode finds them
        decoded. Returns how many programs were decoded."""
        rows = self._loaded()
        count = 0
        for key, (text, _) in list(self._plans.items())[:most]:
            program = package_plans.decode(text)
            if program is not None:
                # what its first run would work out from the program alone: its invoker's step
                # plan, its kernels and their compile options
                step_plan(program)
                for spec in program.kernels:
                    spec.option_tuple()
                self._programs[key] = program
                count += 1
            found = rows.get(key)
            if found is not None:
                self._candidates[key] = decode(found)
        return count

    def library_calls(self) -> list[Any]:
        """The vendor-library calls (JSON values) of the package's chosen solutions, each once:
        what ``Backend.warm_library`` may run ahead of the first iteration."""
        self._loaded()
        return list(self._library)

    def _load(self) -> tuple[dict[tuple[str, str, str], str], list[Any], dict[tuple[str, str, str], tuple]]:
        if self.path is None or config.disable_cache():
            return {}, [], {}
        db = SqliteFile(self.path, "kern_db", kernel_cache.SCHEMA, kernel_cache.SCHEMA_VERSION, readonly=True)
        try:
            tables = {
                name
                for (name,) in db.query(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name IN ('kdb_manifest', 'kdb_choice', 'kdb_library', 'kdb_plan')"
                )
            }
            if not {"kdb_manifest", "kdb_choice", "kdb_library"} <= tables:
                return {}, [], {}  # a package made before choices were shipped, or by hand
            row = db.query("SELECT value FROM kdb_manifest WHERE name = 'manifest'")
            manifest = row[0][0] if row else None
            why = self._refuse(manifest)
            if why is not None:
                _log.info("%s: its immediate-mode choices are not used (%s)", self.path, why)
                return {}, [], {}
            rows = db.query("SELECT primitive, problem_key, invoker_key, candidates FROM kdb_choice")
            calls = db.query("SELECT call FROM kdb_library")
            plans = []
            if "kdb_plan" in tables:
                plans = db.query("SELECT primitive, problem_key, invoker_key, plan, find FROM kdb_plan")
        finally:
            db.close()
        library = []
        for (text,) in calls:
            try:
                library.append(json.loads(text))
            except (TypeError, ValueError):
                continue  # the consumer validates every field of what does parse
        chosen = {(p, k, i): c for p, k, i, c in rows if all(isinstance(v, str) for v in (p, k, i))}
        why = self._distrust(json.loads(manifest), rows, plans) if plans else "no programs in it"
        if why is not None:
            _log.info("%s: its programs are not used, its choices are checked (%s)", self.path, why)
            return chosen, library, {}
        return chosen, library, {(p, k, i): (t, f) for p, k, i, t, f in plans}

    @staticmethod
    def _distrust(manifest: dict[str, Any], rows: list, plans: list) -> str | None:
        """Why the package's choices and programs cannot be used unchecked; None when they can."""
        if manifest.get("plan_format") != package_plans.FORMAT:
            return f"plan_format: package {manifest.get('plan_format')!r}, here {package_plans.FORMAT!r}"
        if manifest.get("records_sha256") != records_digest(rows, plans):
            return "its choices or programs changed since it was built"
        try:
            here = package_plans.code_digest()
        except OSError as exc:  # a source file unreadable here: nothing to compare with
            return f"the miopy sources cannot be read ({exc})"
        if manifest.get("code_sha256") != here:
            return "the miopy sources here differ from those it was built with"
        return None

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

    def plan(self, primitive: str, problem_key: str, invoker_key: str, records: Any = None) -> Any:
        """The program of the problem's chosen solution when the package is trusted, else None.
        With ``records`` (the find DB's answer here): (the program of the first solution, the
        ranked (solver, configuration, time) list) of a row made from exactly those records."""
        if self._rows is None:
            self._loaded()
        row = self._plans.get((primitive, problem_key, invoker_key))
        if row is None or (row[1] is None) != (records is None):
            return None
        listed = None
        if records is not None:
            listed = package_plans.find_matches(row[1], records)
            if listed is None:
                return None  # another find DB answer than the build's: checked as without it
        key = (primitive, problem_key, invoker_key)
        found = self._bound.get(key) or self._programs.get(key) or package_plans.decode(row[0])
        if found is None:
            log.warn_once(_log, f"{self.path}: a damaged program for {problem_key}; ignored")
            return None
        if package_plans.library_steps(found):
            found = self._bind(key, found)
            if found is None:
                return None
        return found if records is None else (found, listed)

    def _bind(self, key: tuple[str, str, str], program: Any) -> Any:
        """The program with its cuBLASLt placeholders bound (kept per problem), or None with a
        log line when this backend cannot bind them or the library refuses an algorithm here."""
        bound = self.binder(program) if self.binder is not None else None
        if bound is None:
            why = "is refused here" if self.binder is not None else "cannot run on this backend"
            log.warn_once(_log, f"{self.path}: the cuBLASLt call of the program for {key[1]} {why}; ignored")
            return None
        self._bound[key] = bound
        return bound

    def get(self, primitive: str, problem_key: str, invoker_key: str) -> tuple[Candidate, ...] | None:
        rows = self._rows if self._rows is not None else self._loaded()
        key = (primitive, problem_key, invoker_key)
        found = self._candidates.get(key)
        if found is not None:
            return found
        text = rows.get(key)
        if text is None:
            return None
        found = decode(text)
        if found is None:
            log.warn_once(_log, f"{self.path}: a damaged immediate-mode choice for {problem_key}; ignored")
        return found


def records_digest(choices: list, plans: list) -> str:
    """sha256 of the rows of ``kdb_choice`` and ``kdb_plan`` (tuples of their columns), in any
    order: what a package's manifest holds as records_sha256."""
    digest = hashlib.sha256()
    for table, rows in (("choice", choices), ("plan", plans)):
        for row in sorted(tuple(str(v) for v in r) for r in rows):
            digest.update(("\x1e".join((table, *row)) + "\x1d").encode())
    return digest.hexdigest()


__all__ = ["FORMAT", "TABLE", "Candidate", "PackageChoices", "decode", "encode", "records_digest"]
