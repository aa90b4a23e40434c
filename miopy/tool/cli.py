"""``miopy <info|cache|db|kernels|tune> ...`` (also ``python -m miopy``). Errors are one line on
stderr, never a traceback (MIOPY_LOG_LEVEL=5 adds it for bugs); system DBs are only ever read."""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import traceback
from pathlib import Path
from typing import TextIO

from miopy import config
from miopy.errors import MiopyError
from miopy.tool.common import ToolError, human_age, human_size, parse_duration, write_json

PROG = "miopy"
EXIT_OK, EXIT_ERROR, EXIT_PROBLEMS = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="miopy's caches, DBs, kernel packages and tuning")
    p.add_argument("--version", action="version", version=f"miopy {config.VERSION}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{info,cache,db,kernels,tune}")

    info = sub.add_parser("info", help="version, backends, devices, paths and environment")
    info.add_argument("--json", action="store_true")

    cache = sub.add_parser("cache", help="the user kernel cache").add_subparsers(dest="action", required=True)
    c = cache.add_parser("list", help="entries: kernel file, name, options, size, age")
    c.add_argument("--json", action="store_true")
    c = cache.add_parser("stats", help="sizes and counts per cache file")
    c.add_argument("--json", action="store_true")
    c = cache.add_parser(
        "prune", help="drop stale entries (changed kernels, other compilers, damaged binaries)"
    )
    c.add_argument("--older-than", metavar="D", help="also entries older than D days (or Ns, Nm, Nh)")
    c.add_argument("--not-this-version", action="store_true", help="also entries of other miopy versions")
    c.add_argument("--dry-run", action="store_true")
    c.add_argument("--json", action="store_true")
    c = cache.add_parser("clear", help="delete this version's kernel cache files")
    c.add_argument("--json", action="store_true")

    db = sub.add_parser("db", help="find and perf records").add_subparsers(dest="action", required=True)
    d = db.add_parser("show", help="records as text or JSON")
    d.add_argument("--primitive")
    d.add_argument("--problem", help="a problem key (or part of one)")
    d.add_argument("--user-only", action="store_true", help="leave out the system DBs")
    d.add_argument("--json", action="store_true")
    d = db.add_parser("export", help="the user records into a JSON file (- for stdout)")
    d.add_argument("file")
    d.add_argument("--with-system", action="store_true")
    for name, what in (("import", "a JSON export or a .udb file"), ("merge", "JSON exports or .udb files")):
        d = db.add_parser(name, help=f"merge {what} into the user DBs (the user record wins)")
        d.add_argument("sources", nargs=1 if name == "import" else "+", type=Path, metavar="SRC")
        d.add_argument(
            "--db", help="the user DB to merge into, <arch>_<cu>.<backend> (default: from the source)"
        )
        d.add_argument("--prefer-incoming", action="store_true", help="incoming records replace the user's")
        d.add_argument("--json", action="store_true")
    d = db.add_parser("prune", help="delete user records that the current solvers cannot use")
    d.add_argument("--json", action="store_true")
    d = db.add_parser("check", help="integrity, and every record against the current solvers")
    d.add_argument("--user-only", action="store_true")
    d.add_argument("--json", action="store_true")

    kernels = sub.add_parser("kernels", help="kernel packages (.kdb)").add_subparsers(
        dest="action", required=True
    )
    k = kernels.add_parser("build", help="build a kernel package for a target without running on it")
    k.add_argument(
        "workload", help="a file of driver lines, or built-in sets: resnet50, resnet50-small, vgg16"
    )
    k.add_argument("--backend", default="cuda", choices=["cuda", "opencl"])
    k.add_argument("--arch", help="CUDA: the target architecture, e.g. sm_90")
    k.add_argument("--cu", type=int, help="CUDA: the target's SM count, e.g. 132")
    k.add_argument("--device", type=int, default=0, help="the device when building for one present")
    k.add_argument("--batch", help="built-in sets: batch sizes, comma-separated (default 32,64,128,256)")
    k.add_argument("--dtype", default="fp32", help="built-in sets: fp32, fp16 or bf16")
    k.add_argument("--jobs", type=int, help="parallel compiles (default: the CPU count)")
    k.add_argument(
        "--no-launch",
        action="store_true",
        help="PoCL: skip launching each solution once to keep the code PoCL generates at a first launch",
    )
    k.add_argument("-o", "--output", type=Path, default=Path("."), help="folder for <arch>_<cu>.kdb")
    k.add_argument("--json", action="store_true")
    k = kernels.add_parser("install", help="check a .kdb (or a wheel with one) and install it")
    k.add_argument("file", type=Path)
    k.add_argument("--dest", type=Path, help="folder to install into (default MIOPY_KDB_PATH)")
    k.add_argument("--device", type=int, default=0)
    k.add_argument("--force", action="store_true", help="install even if it does not match the device")
    k.add_argument("--json", action="store_true")
    k = kernels.add_parser("show", help="a package's manifest (a .kdb, or each one in a wheel)")
    k.add_argument("file", type=Path)
    k.add_argument("--json", action="store_true")
    k = kernels.add_parser(
        "check", help="whether a package holds every kernel a workload needs (exit 2 when not)"
    )
    k.add_argument("file", type=Path, help="a .kdb")
    k.add_argument("workload", help="as for build")
    k.add_argument("--backend", default="cuda", choices=["cuda", "opencl"])
    k.add_argument("--arch", help="CUDA: the target architecture, e.g. sm_90")
    k.add_argument("--cu", type=int, help="CUDA: the target's SM count, e.g. 132")
    k.add_argument("--device", type=int, default=0)
    k.add_argument("--batch", help="built-in sets: batch sizes, comma-separated")
    k.add_argument("--dtype", default="fp32")
    k.add_argument("--json", action="store_true")
    k = kernels.add_parser(
        "package", help="a small wheel holding a .kdb, which `pip install` puts where miopy looks"
    )
    k.add_argument("file", type=Path, help="a .kdb made by `miopy kernels build`")
    k.add_argument("--out", type=Path, default=Path("."), help="folder for the wheel (default: here)")
    k.add_argument("--json", action="store_true")

    t = sub.add_parser("tune", help="tune every tunable solver of a workload's problems")
    t.add_argument("workload")
    t.add_argument("--backend", default=None, help="auto (default), cuda or opencl")
    t.add_argument("--device", type=int, default=0)
    t.add_argument(
        "--strategy", choices=["exhaustive", "budget"], help="default: budget when a budget is given"
    )
    t.add_argument("--budget", type=float, metavar="SECONDS", help="per solver and problem")
    t.add_argument("--configs", type=int, metavar="N", help="at most N configs per solver and problem")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--retune", action="store_true", help="tune again what the user perf DB already has")
    t.add_argument("--batch")
    t.add_argument("--dtype", default="fp32")
    t.add_argument("--json", action="store_true")
    return p


def _batches(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ToolError(f"--batch={text!r}: expected batch sizes separated by commas") from None
    if not sizes or min(sizes) < 1:
        raise ToolError(f"--batch={text!r}: expected positive batch sizes")
    return sizes


def _info(args, out: TextIO) -> int:
    from miopy.tool import info

    data = info.gather()
    write_json(data, out) if args.json else info.print_text(data, out)
    return EXIT_OK


def _cache(args, out: TextIO) -> int:
    from miopy.tool import cache

    if args.action == "list":
        rows = [dict(r, cache_file=str(p)) for p in cache.files() for r in cache.entries(p)]
        if args.json:
            write_json(rows, out)
            return EXIT_OK
        if not rows:
            print(f"no kernel cache entries in {config.cache_dir()}", file=out)
        current = None
        for r in rows:
            if r["cache_file"] != current:
                current = r["cache_file"]
                print(current, file=out)
            print(
                f"  {r['file']} {r['name']} [{r['options']}] {human_size(r['size'] or 0)}, "
                f"age {human_age(r['created'])}, miopy {r['version'] or '?'}",
                file=out,
            )
        return EXIT_OK
    if args.action == "stats":
        data = [cache.stats(p) for p in cache.files()]
        if args.json:
            write_json(data, out)
            return EXIT_OK
        if not data:
            print(f"no kernel cache files in {config.cache_dir()}", file=out)
        for s in data:
            print(
                f"{s['file']}: {s['entries']} entries, {human_size(s['disk_bytes'])} on disk "
                f"({human_size(s['binary_bytes'])} of binaries), oldest {human_age(s['oldest'] or 0)}, "
                f"versions {s['versions']}, compilers {len(s['fingerprints'])}",
                file=out,
            )
        return EXIT_OK
    if args.action == "prune":
        older = None if args.older_than is None else parse_duration(args.older_than)
        report = cache.prune(older, args.not_this_version, args.dry_run)
        if args.json:
            write_json(report, out)
            return EXIT_OK
        verb = "would remove" if args.dry_run else "removed"
        for f in report["files"]:
            why = ", ".join(f"{n} {k}" for k, n in f["reasons"].items()) or "nothing stale"
            print(f"{f['file']}: {verb} {f['removed']} of {f['entries']} entries ({why})", file=out)
        for folder in report["removed_folders"]:
            print(f"{verb} the cache of another version: {folder}", file=out)
        for note in report.get("notes", []):
            print(note, file=out)
        print(
            f"size: {human_size(report['bytes_before'])} before, {human_size(report['bytes_after'])} after",
            file=out,
        )
        return EXIT_OK
    report = cache.clear()
    if args.json:
        write_json(report, out)
    else:
        print(
            f"removed {len(report['removed'])} files ({human_size(report['bytes_before'])}) "
            f"from {report['folder']}",
            file=out,
        )
    return EXIT_OK


def _db(args, out: TextIO) -> int:
    from miopy.tool import db

    if args.action == "show":
        records, notes = db.show(args.primitive, args.problem, include_system=not args.user_only)
        for note in notes:
            print(f"warning: {note}", file=sys.stderr)
        if args.json:
            write_json(records, out)
        else:
            lines = db.format_text(records) or ["no records"]
            print("\n".join(lines), file=out)
        return EXIT_OK
    if args.action == "export":
        report = db.export(args.file, args.with_system)
        if args.file == "-":
            out.write(report["text"])
        else:
            print(f"exported {report['records']} records to {args.file}", file=out)
        for note in report["notes"]:
            print(f"warning: {note}", file=sys.stderr)
        return EXIT_OK
    if args.action in ("import", "merge"):
        report = db.merge(list(args.sources), args.db, args.prefer_incoming)
        if args.json:
            write_json(report, out)
        else:
            for line in report["skipped"]:
                print(f"skipped: {line}", file=out)
            for line in report["conflicts"]:
                print(f"conflict: {line}", file=out)
            print(
                f"{report['added']} added, {report['replaced']} replaced, {report['unchanged']} unchanged, "
                f"{len(report['conflicts'])} conflicts",
                file=out,
            )
        return EXIT_ERROR if report["skipped"] and not (report["added"] or report["unchanged"]) else EXIT_OK
    report = db.prune() if args.action == "prune" else db.check(include_system=not args.user_only)
    for f in report["files"]:
        f.pop("bad", None)
    if args.json:
        write_json(report, out)
    else:
        if not report["files"]:
            print(f"no DB files in {config.user_db_dir()} or {config.system_db_dir()}", file=out)
        for f in report["files"]:
            state = "ok" if not f["problems"] else f"{len(f['problems'])} problems"
            device = f", checked on {f['device']}" if f.get("device") else ""
            print(f"{f['file']} ({f['where']}): {f['records']} records, {state}{device}", file=out)
            for line in f["problems"]:
                print(f"  {line}", file=out)
        if args.action == "prune":
            print(f"removed {report['removed']} records", file=out)
    if args.action == "check" and report["problems"]:
        return EXIT_PROBLEMS
    return EXIT_OK


def _kernels(args, out: TextIO) -> int:
    from miopy.tool import kernels

    if args.action == "build":
        from miopy.tool import target, workload

        ctx = target.target(args.backend, args.arch, args.cu, args.device)
        load = workload.load(args.workload, _batches(args.batch), args.dtype)
        manifest = kernels.build(
            ctx, load, args.output, args.jobs, device=args.device, launch=not args.no_launch
        )
        if args.json:
            write_json(manifest, out)
        else:
            print(f"wrote {manifest['path']}", file=out)
            print(kernels.describe(manifest), file=out)
        return EXIT_OK if manifest["failed"] == 0 else EXIT_PROBLEMS
    if args.action == "show":
        shown = kernels.show(args.file)
        if args.json:
            write_json(shown, out)
        else:
            for manifest in shown.get("packages", [shown]):
                print(kernels.describe(manifest), file=out)
        return EXIT_OK
    if args.action == "check":
        from miopy.tool import target, workload

        ctx = target.target(args.backend, args.arch, args.cu, args.device)
        load = workload.load(args.workload, _batches(args.batch), args.dtype)
        report = kernels.coverage(ctx, load, args.file)
        if args.json:
            write_json(report, out)
        else:
            for line in report["missing"]:
                print(f"missing: {line}", file=out)
            print(
                f"{args.file}: {report['needed'] - len(report['missing'])} of {report['needed']} kernels "
                f"the workload needs (compiler {report['fingerprint']})",
                file=out,
            )
        return EXIT_OK if not report["missing"] else EXIT_PROBLEMS
    if args.action == "package":
        made = kernels.package(args.file, args.out)
        if args.json:
            write_json(made, out)
        else:
            print(f"wrote {made['wheel']} ({made['project']}, {human_size(made['wheel_size'])})", file=out)
            print(f"install it with: pip install {made['wheel']}", file=out)
        return EXIT_OK
    report = kernels.install(args.file, args.dest, args.force, args.device)
    if args.json:
        write_json(report, out)
    else:
        print(f"installed {report['installed']}", file=out)
    return EXIT_OK


def _tune(args, out: TextIO) -> int:
    from miopy.handle import Handle
    from miopy.tool import tune, workload

    strategy = args.strategy or (
        "budget" if args.budget is not None or args.configs is not None else "exhaustive"
    )
    if strategy == "budget" and args.budget is None and args.configs is None:
        raise ToolError("--strategy=budget: give --budget SECONDS or --configs N")
    load = workload.load(args.workload, _batches(args.batch), args.dtype)
    handle = Handle(args.backend, args.device)
    report = tune.run(handle, load, strategy, args.budget, args.configs, args.retune, args.seed)
    if args.json:
        write_json(report, out)
    else:
        print("\n".join(tune.summary(report)), file=out)
    return EXIT_OK


_COMMANDS = {"info": _info, "cache": _cache, "db": _db, "kernels": _kernels, "tune": _tune}


def _verbose() -> bool:
    try:
        return config.log_level() >= 5
    except MiopyError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the tool; returns the exit status (the console script's entry point)."""
    args = _parser().parse_args(argv)
    out = sys.stdout
    try:
        code = _COMMANDS[args.command](args, out)
        out.flush()  # a reader gone (`miopy info | head`) shows here, not at the exit
        return code
    except BrokenPipeError:
        # The reader has all it wanted: exit quietly and successfully, as other tools do; stdout
        # goes to /dev/null so that the flush at the exit does not complain again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except (MiopyError, ToolError) as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
        print(f"{PROG}: {lines[0] if not _verbose() else str(exc)}", file=sys.stderr)
    except (OSError, sqlite3.Error) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: one line, the traceback only when asked for
        if _verbose():
            traceback.print_exc()
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    return EXIT_ERROR
