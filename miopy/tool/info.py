"""``miopy info``: the version, which backends can run here (and why not), the devices with their
DB names, every path miopy reads and writes, and the environment variables that steer it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

from miopy import backends, config
from miopy.db.system_files import exact_kdbs, nearest_kdb, package_folders, wheel_folders
from miopy.errors import MiopyError
from miopy.tool.common import human_size

ENV_PREFIXES = ("MIOPY_", "POCL_", "PYOPENCL_", "OCL_ICD", "CUDA_PATH", "CUDA_HOME", "CUDA_VISIBLE_DEVICES")
MAX_DEVICES = 16


def _folder(path: Path, patterns: tuple[str, ...]) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": str(path), "exists": path.is_dir()}
    if entry["exists"]:
        try:
            files = sorted({f for p in patterns for f in path.glob(p) if f.is_file()})
            entry["files"] = [f.name for f in files]
            entry["bytes"] = sum(f.stat().st_size for f in files)
        except OSError as exc:
            entry["error"] = str(exc)
    return entry


def paths() -> dict[str, dict[str, Any]]:
    folders = {
        "kernel cache (read, written)": (config.cache_dir(), ("*.ukdb",)),
        "user find and perf DBs (read, written)": (config.user_db_dir(), ("*.udb",)),
        "system DBs and kernel packages (read only)": (config.system_db_dir(), ("*.kdb", "*.db")),
        "installed kernel packages (read; written by `miopy kernels install`)": (
            config.kdb_dir(),
            ("*.kdb",),
        ),
        "once-per-user warning markers (written)": (config.user_db_dir() / ".warned", ("*",)),
    }
    for i, folder in enumerate(wheel_folders(), 1):
        folders[f"kernel wheels (read only; `pip install`ed) #{i}"] = (folder, ("*.kdb",))
    out = {}
    for what, (path, patterns) in folders.items():
        out[what] = _folder(path, patterns)
    return out


def devices() -> tuple[dict[str, str | None], list[dict[str, Any]]]:
    reasons = {name: backends.unavailable_reason(name) for name in backends.NAMES}
    found = []
    for name, why in reasons.items():
        if why is not None:
            continue
        for index in range(MAX_DEVICES):
            try:
                info = backends.create(name, index).info
            except MiopyError:
                break
            base = info.db_basename
            folders = package_folders()
            exact = exact_kdbs(base, folders)
            near = None if exact else nearest_kdb(info.arch, info.compute_units, folders)
            found.append(
                {
                    "backend": name,
                    "index": index,
                    "name": info.name,
                    "arch": info.arch,
                    "compute_units": info.compute_units,
                    "db_basename": base,
                    "fingerprint": info.fingerprint,
                    "kernel_package": str(exact[0])
                    if exact
                    else (f"{near} (nearest CU count)" if near else None),
                    "kernel_cache": str(config.cache_dir() / f"{base}.{name}.ukdb"),
                    "user_db": str(config.user_db_dir() / f"{base}.{name}.udb"),
                    "system_db": str(config.system_db_dir() / f"{base}.db"),
                }
            )
    return reasons, found


def environment() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}


def gather() -> dict[str, Any]:
    reasons, found = devices()
    return {
        "miopy_version": config.VERSION,
        "python": sys.version.split()[0],
        "package": str(Path(__file__).resolve().parent.parent),
        "backends": {
            name: ("available" if why is None else f"unavailable: {why}") for name, why in reasons.items()
        },
        "devices": found,
        "paths": paths(),
        "environment": environment(),
    }


def print_text(data: dict[str, Any], out: TextIO) -> None:
    print(f"miopy {data['miopy_version']} (python {data['python']}, {data['package']})", file=out)
    print("backends:", file=out)
    for name, state in data["backends"].items():
        print(f"  {name}: {state}", file=out)
    print("devices:", file=out)
    if not data["devices"]:
        print("  none", file=out)
    for d in data["devices"]:
        print(f"  {d['backend']}:{d['index']} {d['name']}", file=out)
        print(f"    arch {d['arch']}, {d['compute_units']} CUs, DB name {d['db_basename']}", file=out)
        print(f"    compiler fingerprint {d['fingerprint']}", file=out)
        package = d["kernel_package"] or f"none ({d['db_basename']}.kdb not found; `miopy kernels build`)"
        print(f"    kernel package: {package}", file=out)
        print(
            f"    kernel cache {d['kernel_cache']}, user DB {d['user_db']}, system DB {d['system_db']}",
            file=out,
        )
    print("paths:", file=out)
    for what, entry in data["paths"].items():
        state = "missing"
        if entry["exists"]:
            state = f"{len(entry.get('files', []))} files, {human_size(entry.get('bytes', 0))}"
            if "error" in entry:
                state = f"unreadable ({entry['error']})"
        print(f"  {what}: {entry['path']} [{state}]", file=out)
    print("environment:", file=out)
    if not data["environment"]:
        print("  (no MIOPY_* variable set: defaults)", file=out)
    for key, value in data["environment"].items():
        print(f"  {key}={value}", file=out)
