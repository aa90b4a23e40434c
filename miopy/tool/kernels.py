"""``miopy kernels build``: a kernel package (``<arch>_<cu>.kdb`` and its manifest) for a target,
holding every kernel that immediate mode and find would build for a workload; ``miopy kernels
install``: checks a package against the device here and puts it where miopy looks."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from miopy import config, log
from miopy.backends import cuda_warm
from miopy.db import kernel_cache, package_choices, package_plans, trust
from miopy.db.package_choices import Candidate
from miopy.db.system_files import exact_kdbs, nearest_kdb
from miopy.engine.candidates import allowed, applicable, make_solution
from miopy.errors import MiopyError
from miopy.problem.base import Problem
from miopy.solution import KernelSpec, Solution
from miopy.solvers import by_name, solvers_for
from miopy.tool import launch_state, wheel
from miopy.tool.common import ToolError, human_size, progress
from miopy.tool.target import TargetContext
from miopy.tool.workload import Workload

_log = log.get("miopy.tool.kernels")

MANIFEST_TABLE = "CREATE TABLE IF NOT EXISTS kdb_manifest (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
FORMAT = "miopy-kdb"


def solutions(ctx: TargetContext, workload: Workload) -> tuple[list[Solution], list[str]]:
    """Every solution immediate mode and find would consider for the workload's problems on the
    target: each applicable solver with the shipped perf DB's config (else its default), and the
    configs of the shipped find records. Also the problems no solver takes."""
    out, skipped = [], []
    for problem in workload.problems:
        solvers = applicable(ctx, problem)
        if not solvers:
            skipped.append(f"{problem.primitive} {problem.key()}: no applicable solver")
            continue
        configs: dict[str, list[dict | None]] = {s.name: [None] for s in solvers}
        for rec in ctx.find_db.load(problem.key(), primitive=problem.primitive) or []:
            if rec.solver in configs and rec.config is not None:
                configs[rec.solver].append(rec.config)
        for solver in solvers:
            seen = set()
            for cfg in configs[solver.name]:
                try:
                    solution = make_solution(ctx, problem, solver, cfg)
                except MiopyError as exc:
                    _log.warning("%s on %s: no solution (%s)", solver.name, problem.key(), exc)
                    continue
                if solution.config_key() not in seen:
                    seen.add(solution.config_key())
                    out.append(solution)
    return out, skipped


def library_kernels(ctx: TargetContext, workload: Workload) -> list[KernelSpec]:
    """Kernels of solvers whose applicability is unknown on the target because a vendor library
    they call does not load here (cuBLASLt on a CPU build machine): built anyway, so that the
    package serves the device, where the library is, all the same."""
    out = []
    for problem in workload.problems:
        view = problem.solver_view()
        for solver in solvers_for(problem):
            if allowed(solver):
                out += solver.without_library(ctx, view) or []
    return out


def choice(
    ctx: TargetContext,
    problem: Problem,
    library: list[dict[str, Any]] | None = None,
    plans: list[str] | None = None,
) -> list[Candidate] | None:
    """Immediate mode's candidates for ``problem`` on the target, in its order (applicable solvers
    in registry order, those that defer last), up to the first one known to apply: solvers
    whose applicability the target cannot tell (``Solver.without_library``) stay in the list,
    marked unknown. None when a shipped find record decides instead, or nothing applies.
    ``library`` gets the descriptions of the chosen solution's vendor-library calls; ``plans``
    the chosen solution's program as data (miopy.db.package_plans) when the record is decided
    here (no unknown solver before it) and the program can be written."""
    if ctx.find_db.load(problem.key(), primitive=problem.primitive):
        return None
    view = problem.solver_view()
    listed: list[tuple[Any, bool]] = []
    for solver in solvers_for(problem):
        if not allowed(solver):
            continue
        if solver.applicability(ctx, view) is None:
            listed.append((solver, True))
        elif solver.without_library(ctx, view) is not None:
            listed.append((solver, False))
    listed.sort(key=lambda item: item[0].defers(ctx, view))
    out = []
    for solver, known in listed:
        if not known:
            out.append(Candidate(solver.name, None, False))
            continue
        try:
            solution = make_solution(ctx, problem, solver)
        except MiopyError as exc:
            _log.warning("%s on %s: no solution (%s)", solver.name, problem.key(), exc)
            return None
        cfg = dict(solution.config) if solution.config is not None else None
        out.append(Candidate(solver.name, cfg, True))
        if plans is not None and len(out) == 1:
            try:
                plans.append(package_plans.encode(solution.program))
            except package_plans.Unplannable as exc:
                _log.info("%s on %s: no program in the package (%s)", solver.name, problem.key(), exc)
        if library is not None:
            for step in solution.program.steps:
                described = cuda_warm.describe(step)
                if described is not None:
                    library.append(described)
        return out
    return None


def find_plan(
    ctx: TargetContext, problem: Problem, library: list[dict[str, Any]] | None = None
) -> tuple[str, str] | None:
    """For a problem the shipped find DB answers: (the program of immediate mode's first solution
    as data, the records and the ranked list they give on the target: package_plans.encode_find),
    the list being what ``miopy.engine.find`` makes of the records (unknown solvers and those that
    do not apply dropped, each record's configuration). None when the target cannot tell whether
    a listed solver applies (a vendor library missing), when a configuration would come from the
    perf DB instead of the record, or when the first program cannot be written. ``library`` gets
    the descriptions of that program's vendor-library calls."""
    if config.find_only_solvers() is not None:
        return None
    records = ctx.find_db.load(problem.key(), primitive=problem.primitive)
    if not records:
        return None
    view = problem.solver_view()
    listed: list[tuple[str, dict | None, float]] = []
    for rec in records:
        solver = by_name(rec.solver, problem.primitive)
        if solver is None:
            continue
        if solver.applicability(ctx, view, rec.config) is not None:
            if solver.without_library(ctx, view) is not None:
                return None
            continue
        cfg = rec.config if solver.tunable and solver.is_valid_config(ctx, view, rec.config) else None
        if solver.tunable and cfg is None:
            return None
        listed.append((solver.name, None if cfg is None else dict(cfg), float(rec.time_ms)))
    if not listed:
        return None
    name, cfg, time_ms = listed[0]
    try:
        first = make_solution(ctx, problem, by_name(name, problem.primitive), cfg, time_ms=time_ms)
        planned = package_plans.encode(first.program), package_plans.encode_find(records, listed)
        if library is not None:
            library += [d for d in map(cuda_warm.describe, first.program.steps) if d is not None]
        return planned
    except (MiopyError, package_plans.Unplannable) as exc:
        _log.info("%s on %s: no program in the package (%s)", name, problem.key(), exc)
        return None


def choices(
    ctx: TargetContext, workload: Workload
) -> tuple[list[tuple[str, str, str, str]], list[str], list[tuple[str, str, str, str, str | None]]]:
    """Rows of the package's ``kdb_choice`` table: (primitive, problem key, invoker key,
    candidates as JSON), one per problem immediate mode would answer without a find record; the
    vendor-library calls of the chosen solutions (``kdb_library``: JSON, each once); and rows of
    ``kdb_plan``: (primitive, problem key, invoker key, the chosen solution's program as JSON, and
    for a problem the shipped find DB answers, the records and list of ``find_plan``)."""
    rows: dict[tuple[str, str, str], str] = {}
    plans: dict[tuple[str, str, str], tuple[str, str | None]] = {}
    library: list[dict[str, Any]] = []
    for problem in workload.problems:
        made: list[str] = []
        found = choice(ctx, problem, library, made)
        key = (problem.primitive, problem.key(), problem.invoker_key())
        if found is not None:
            rows[key] = package_choices.encode(found)
            if made:
                plans[key] = (made[0], None)
        elif key not in plans:
            planned = find_plan(ctx, problem, library)
            if planned is not None:
                plans[key] = planned
    calls = list(dict.fromkeys(json.dumps(c, sort_keys=True, separators=(",", ":")) for c in library))
    return [(*k, v) for k, v in rows.items()], calls, [(*k, *v) for k, v in plans.items()]


def kernel_specs(found: list[Solution], extra: list[KernelSpec] | None = None) -> list[KernelSpec]:
    specs: dict[tuple, KernelSpec] = {}
    for spec in [k for solution in found for k in solution.kernels] + (extra or []):
        specs.setdefault((spec.file, spec.name, tuple(spec.options())), spec)
    return list(specs.values())


def _write_kdb(
    path: Path,
    entries: list[tuple[Any, bytes]],
    manifest: dict[str, Any],
    chosen: list[tuple] | None = None,
    library: list[str] | None = None,
    plans: list[tuple] | None = None,
) -> None:
    """A fresh SQLite file in the kernel cache's schema (one file, no WAL) plus the manifest,
    immediate mode's choices and the programs of the chosen solutions."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("CREATE TABLE meta (component TEXT PRIMARY KEY, version INTEGER)")
        conn.executescript(
            kernel_cache.SCHEMA + ";" + MANIFEST_TABLE + ";" + package_choices.TABLE + package_plans.TABLE
        )
        conn.execute("BEGIN")
        conn.execute("INSERT INTO meta VALUES (?, ?)", ("kern_db", kernel_cache.SCHEMA_VERSION))
        for key, binary in entries:
            conn.execute(*kernel_cache.entry_statement(key, binary))
        conn.executemany("INSERT INTO kdb_choice VALUES (?, ?, ?, ?)", chosen or [])
        conn.executemany("INSERT INTO kdb_library VALUES (?)", [(c,) for c in library or []])
        conn.executemany("INSERT INTO kdb_plan VALUES (?, ?, ?, ?, ?)", plans or [])
        conn.execute(
            "INSERT INTO kdb_manifest VALUES ('manifest', ?)", (json.dumps(manifest, sort_keys=True),)
        )
        conn.execute("COMMIT")
        conn.execute("VACUUM")
    finally:
        conn.close()
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def build(
    ctx: TargetContext,
    workload: Workload,
    out_dir: Path,
    jobs: int | None = None,
    err: TextIO | None = None,
    device: int = 0,
    launch: bool = True,
) -> dict[str, Any]:
    """Compile every kernel the workload needs on the target into ``out_dir/<base>.kdb``; returns
    the manifest (also written beside it as ``<base>.kdb.json``). On PoCL (``launch``) every
    solution is then launched once on ``device`` and the binaries taken again, so that they hold
    the code PoCL generates at a first launch (``miopy.tool.launch_state``)."""
    err = err or sys.stderr
    started = time.time()
    found, skipped = solutions(ctx, workload)
    specs = kernel_specs(found, library_kernels(ctx, workload))
    chosen, library, plans = choices(ctx, workload)
    for line in skipped:
        print(f"skipped: {line}", file=err)
    print(
        f"{len(workload.problems)} problems, {len(found)} solutions, {len(specs)} kernels to build "
        f"for {ctx.info.arch} ({ctx.info.compute_units} CUs, {ctx.backend_name})",
        file=err,
    )
    failed: list[str] = []

    def one(spec: KernelSpec):
        try:
            return ctx.build(spec)
        except MiopyError as exc:
            failed.append(f"{spec.file} {spec.name} {' '.join(spec.options())}: {str(exc).splitlines()[0]}")
            return None

    workers = max(1, min(jobs or os.cpu_count() or 1, 32, max(1, len(specs))))
    launched: dict[str, Any] = {}
    with ThreadPoolExecutor(workers) as pool:
        results = list(progress(pool.map(one, specs), len(specs), "miopy kernels build", "kernel"))
        keys = {launch_state.spec_key(spec): e[0] for spec, e in zip(specs, results) if e}
        binaries = {launch_state.spec_key(spec): e[1] for spec, e in zip(specs, results) if e}
        if launch and binaries and launch_state.applies(ctx):
            binaries, launched = launch_state.add_launch_code(
                ctx, found, specs, binaries, device, pool.map, err
            )
    built = [(keys[k], binaries[k]) for k in keys]
    for line in failed:
        print(f"failed to build: {line}", file=err)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{ctx.db_basename}.kdb"
    manifest = {
        "format": FORMAT,
        "miopy_version": config.VERSION,
        "backend": ctx.backend_name,
        "arch": ctx.info.arch,
        "compute_units": ctx.info.compute_units,
        "db_basename": ctx.db_basename,
        "fingerprint": ctx.info.fingerprint,
        "device": ctx.info.name,
        "workload": workload.description,
        "workload_lines": len(workload.lines),
        "problems": len(workload.problems),
        "solutions": len(found),
        "kernels": len(built),
        "failed": len(failed),
        "choices": len(chosen),
        "library_calls": len(library),
        "choice_format": package_choices.FORMAT,
        "plans": len(plans),
        "plan_format": package_plans.FORMAT,
        "records_sha256": package_choices.records_digest(chosen, plans),
        "code_sha256": package_plans.code_digest(),
        "binary_bytes": sum(len(b) for _, b in built),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": round(time.time() - started, 1),
    } | launched
    _write_kdb(path, built, manifest, chosen, library, plans)
    manifest["file"] = path.name
    manifest["size"] = path.stat().st_size
    manifest["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (out_dir / f"{path.name}.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest | {"path": str(path)}


def coverage(ctx: TargetContext, workload: Workload, path: Path) -> dict[str, Any]:
    """Which kernels the workload needs on the target that the package ``path`` lacks (another
    kernel source, options or compiler fingerprint than it was built with): a stale package."""
    read_manifest(path)
    found, _ = solutions(ctx, workload)
    specs = kernel_specs(found, library_kernels(ctx, workload))
    where = " AND ".join(f"{c} = ?" for c in kernel_cache.KEY_COLUMNS)
    missing = []
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        for spec in specs:
            key, _ = ctx.kernel_key(spec)
            if conn.execute(f"SELECT 1 FROM kern_db WHERE {where}", key.columns()).fetchone() is None:
                missing.append(f"{key.file} {key.name} {key.options}")
    except sqlite3.DatabaseError as exc:
        raise ToolError(f"{path}: cannot read it ({exc})") from None
    finally:
        conn.close()
    return {
        "package": str(path),
        "workload": workload.description,
        "fingerprint": ctx.info.fingerprint,
        "needed": len(specs),
        "missing": missing,
    }


# ---- install ----------------------------------------------------------------------------------------
def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest inside a kdb, after checking that it is a readable, intact kernel package."""
    try:
        if not path.is_file():
            raise ToolError(f"{path}: no such file")
        if path.stat().st_size < 512:
            raise ToolError(f"{path}: too small to be a kernel package (a Git LFS pointer?)")
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    except OSError as exc:
        raise ToolError(f"{path}: cannot read it ({exc})") from None
    try:
        check = conn.execute("PRAGMA quick_check(1)").fetchall()
        if check != [("ok",)]:
            raise ToolError(
                f"{path}: damaged ({check[0][0] if check else 'no answer'}); rebuild or download it again"
            )
        version = conn.execute("SELECT version FROM meta WHERE component = 'kern_db'").fetchone()
        row = conn.execute("SELECT value FROM kdb_manifest WHERE name = 'manifest'").fetchone()
        count = conn.execute("SELECT count(*) FROM kern_db").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise ToolError(f"{path}: not a miopy kernel package ({exc})") from None
    finally:
        conn.close()
    if version is None or version[0] != kernel_cache.SCHEMA_VERSION:
        found = None if version is None else version[0]
        raise ToolError(
            f"{path}: kernel table version {found}, "
            f"this miopy reads {kernel_cache.SCHEMA_VERSION}; rebuild it"
        )
    try:
        manifest = json.loads(row[0]) if row else None
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ToolError(f"{path}: no miopy manifest in it (not made by `miopy kernels build`)")
    return manifest | {"entries": count}


def _from_wheel(path: Path, workdir: Path, want: str | None, arch: str | None, cus: int | None) -> Path:
    """The kdb inside a wheel (or any zip): the one named for the device, else the same arch with
    the nearest CU count, else the only one."""
    files = wheel.extract_kdbs(path, workdir)
    if want is not None:
        exact = exact_kdbs(want, [workdir])
        if exact:
            return exact[0]
        if arch is not None and cus is not None:
            near = nearest_kdb(arch, cus, [workdir])
            if near is not None:
                return near
    if len(files) == 1:
        return files[0]
    raise ToolError(f"{path}: holds {', '.join(f.name for f in files)}; none for {want or 'this device'}")


def package(path: Path, out_dir: Path) -> dict[str, Any]:
    """A wheel holding the kernel package ``path`` (checked first); returns its manifest with the
    wheel's path and project name."""
    manifest = read_manifest(path)
    built = wheel.build_wheel(path, manifest, out_dir)
    return manifest | {
        "wheel": str(built),
        "project": wheel.project_name(manifest),
        "wheel_size": built.stat().st_size,
    }


def show(path: Path) -> dict[str, Any]:
    """The manifest of a kdb, or of each kdb inside a wheel (checked against its RECORD)."""
    if path.is_file() and zipfile.is_zipfile(path):
        with tempfile.TemporaryDirectory(prefix="miopy-kdb-") as tmp:
            found = [
                read_manifest(f) | {"file": f.name, "size": f.stat().st_size}
                for f in wheel.extract_kdbs(path, Path(tmp))
            ]
        return {"wheel": str(path), "packages": found}
    return read_manifest(path) | {"file": path.name, "size": path.stat().st_size}


def _device(backend: str, device: int):
    from miopy import backends

    try:
        return backends.create(backend, device).info, None
    except MiopyError as exc:
        return None, str(exc)


def _destination(dest: Path | None) -> Path:
    if dest is None:
        folder = config.kdb_dir()
        try:
            trust.private_dir(folder)
        except (OSError, trust.Untrusted) as exc:
            raise ToolError(f"cannot use {folder} ({exc}); set MIOPY_KDB_PATH or pass --dest") from None
        return folder
    try:
        dest.mkdir(parents=True, exist_ok=True)
        trust.system_dir(dest)
    except (OSError, trust.Untrusted) as exc:
        raise ToolError(f"--dest={dest}: {exc}") from None
    return dest


def install(
    path: Path, dest: Path | None = None, force: bool = False, device: int = 0, err: TextIO | None = None
) -> dict[str, Any]:
    """Check the package against the device here and copy it to ``dest`` (MIOPY_KDB_PATH by
    default) as ``<base>.kdb``; returns what was done. Mismatches refuse unless ``force``."""
    err = err or sys.stderr
    with tempfile.TemporaryDirectory(prefix="miopy-kdb-") as tmp:
        source = path
        if zipfile.is_zipfile(path) if path.is_file() else False:
            first = _peek_wheel_backend(path)
            info, why = _device(first, device) if first else (None, "no backend named in the wheel")
            source = _from_wheel(
                path,
                Path(tmp),
                None if info is None else info.db_basename,
                None if info is None else info.arch,
                None if info is None else info.compute_units,
            )
        manifest = read_manifest(source)
        info, why = _device(manifest["backend"], device)
        problems = []
        if info is None:
            problems.append(f"no {manifest['backend']} device here ({why})")
        else:
            for field, here in (
                ("arch", info.arch),
                ("compute_units", info.compute_units),
                ("fingerprint", info.fingerprint),
            ):
                if manifest.get(field) != here:
                    problems.append(f"{field}: package {manifest.get(field)!r}, device {here!r}")
        if manifest.get("miopy_version") != config.VERSION:
            problems.append(
                f"miopy_version: package {manifest.get('miopy_version')!r}, here {config.VERSION!r}"
            )
        if problems and not force:
            raise ToolError(
                f"{path.name} does not match this machine: {'; '.join(problems)} "
                "(--force installs it anyway; entries that do not match are never used)"
            )
        for line in problems:
            print(f"warning: {line}", file=err)
        folder = _destination(dest)
        name = f"{manifest['db_basename']}.kdb"
        target = folder / name
        with contextlib.suppress(FileNotFoundError):
            trust.check_file(target, system=True)  # never replace a link planted there
        tmp_target = folder / f".{name}.{os.getpid()}.tmp"
        shutil.copyfile(source, tmp_target)
        os.chmod(tmp_target, 0o600 if dest is None else 0o644)
        os.replace(tmp_target, target)
    return {"installed": str(target), "manifest": manifest, "warnings": problems}


def _peek_wheel_backend(path: Path) -> str | None:
    """The backend named by the first kdb's manifest in a wheel (to know which device to ask)."""
    with tempfile.TemporaryDirectory(prefix="miopy-kdb-") as tmp:
        try:
            first = _from_wheel(path, Path(tmp), None, None, None)
        except ToolError:
            files = sorted(Path(tmp).glob("*.kdb"))
            if not files:
                raise
            first = files[0]
        try:
            return read_manifest(first).get("backend")
        except ToolError:
            return None


def describe(manifest: dict[str, Any]) -> str:
    size = human_size(manifest.get("size", 0))
    return (
        f"{manifest.get('file', manifest.get('db_basename', '?'))}: "
        f"{manifest.get('kernels')} kernels, {manifest.get('choices', 0)} immediate-mode choices, "
        f"{manifest.get('plans', 0)} programs, {size}, "
        f"{manifest.get('backend')} {manifest.get('arch')} {manifest.get('compute_units')} CUs, "
        f"miopy {manifest.get('miopy_version')}, compiler {manifest.get('fingerprint')}, "
        f"workload {manifest.get('workload')}"
    )
