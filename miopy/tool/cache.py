"""``miopy cache list | stats | prune | clear``: the user kernel cache (``<base>.<backend>.ukdb``
files under MIOPY_CUSTOM_CACHE_DIR). Kernel packages (``.kdb``) are never touched."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

from miopy import backends, config
from miopy.backends.base import KERNEL_ROOT, expand_includes
from miopy.db import kernel_cache
from miopy.db.sqlite import SqliteFile
from miopy.errors import MiopyError
from miopy.tool.common import ToolError

_COLUMNS = (
    "id, kernel_file, kernel_name, kernel_args, source_hash, fingerprint, length(kernel_blob), "
    "uncompressed_size, created, miopy_version"
)
SIDECARS = ("-wal", "-shm", "-journal")


def files(folder: Path | None = None) -> list[Path]:
    folder = folder or config.cache_dir()
    try:
        return sorted(p for p in folder.glob("*.ukdb") if not p.is_symlink())
    except OSError as exc:
        raise ToolError(f"cannot list {folder} ({exc})") from None


def _open(path: Path) -> SqliteFile:
    # Through SqliteFile: a damaged file is moved aside (its readable rows kept), an untrusted one
    # refused, both with a warning; an old schema is converted.
    return SqliteFile(
        path, "kern_db", kernel_cache.SCHEMA, kernel_cache.SCHEMA_VERSION, migrations=kernel_cache.MIGRATIONS
    )


def backend_of(path: Path) -> str:
    return path.name[: -len(".ukdb")].rpartition(".")[2]


def entries(path: Path) -> list[dict[str, Any]]:
    db = _open(path)
    try:
        rows = db.query(f"SELECT {_COLUMNS} FROM kern_db ORDER BY id")
    finally:
        db.close()
    keys = (
        "id",
        "file",
        "name",
        "options",
        "source_hash",
        "fingerprint",
        "stored",
        "size",
        "created",
        "version",
    )
    return [dict(zip(keys, row)) for row in rows]


def damaged(path: Path) -> set[int]:
    """Ids of the entries whose stored binary fails its integrity check (``kernel_cache.unpack``:
    it does not decompress, or its size or hash differ from those stored with it). Read a few
    entries at a time, so a large cache never sits in memory at once."""
    db = _open(path)
    bad: set[int] = set()
    last = -1
    try:
        while True:
            rows = db.query(
                "SELECT id, kernel_blob, kernel_hash, uncompressed_size FROM kern_db "
                "WHERE id > ? ORDER BY id LIMIT 32",
                (last,),
            )
            for row_id, blob, digest, size in rows:
                if kernel_cache.unpack(blob, digest, size) is None:
                    bad.add(row_id)
            if len(rows) < 32:
                return bad
            last = rows[-1][0]
    finally:
        db.close()


def disk_size(path: Path) -> int:
    total = 0
    for p in (path, *(Path(f"{path}{s}") for s in SIDECARS)):
        with contextlib.suppress(OSError):
            total += p.stat().st_size
    return total


def stats(path: Path) -> dict[str, Any]:
    rows = entries(path)
    created = [r["created"] for r in rows if r["created"]]
    return {
        "file": str(path),
        "entries": len(rows),
        "disk_bytes": disk_size(path),
        "binary_bytes": sum(r["size"] or 0 for r in rows),
        "stored_bytes": sum(r["stored"] or 0 for r in rows),
        "kernel_files": dict(Counter(r["file"] for r in rows).most_common()),
        "fingerprints": dict(Counter(r["fingerprint"] for r in rows)),
        "versions": dict(Counter(r["version"] or "unknown" for r in rows)),
        "oldest": min(created) if created else None,
        "newest": max(created) if created else None,
    }


def _current_hashes(backend: str) -> dict[str, str | None]:
    """sha256 of each kernel source of ``backend`` (with its headers), by file name with extension."""
    try:
        cls = backends.backend_class(backend)
    except MiopyError:
        return {}
    out: dict[str, str | None] = {}
    folder = KERNEL_ROOT / cls.kernel_dir
    import hashlib

    for path in folder.glob(f"*{cls.kernel_ext}"):
        with contextlib.suppress(OSError):
            out[path.name] = hashlib.sha256(expand_includes(path.read_text()).encode()).hexdigest()
    return out


def current_fingerprints() -> dict[tuple[str, str], str]:
    """(db basename, backend) -> compiler fingerprint of each device here."""
    out = {}
    for name in backends.NAMES:
        if backends.unavailable_reason(name) is not None:
            continue
        with contextlib.suppress(MiopyError):
            info = backends.create(name).info
            out[(info.db_basename, name)] = info.fingerprint
    return out


def stale_reasons(
    row: dict[str, Any],
    hashes: dict[str, str | None],
    fingerprint: str | None,
    older_than: float | None,
    other_versions: bool,
    now: float,
) -> list[str]:
    why = []
    current = hashes.get(row["file"])
    if hashes and current is None:
        why.append("kernel file gone")
    elif current is not None and current != row["source_hash"]:
        why.append("kernel source changed")
    if fingerprint is not None and row["fingerprint"] != fingerprint:
        why.append("another compiler")
    if older_than is not None and row["created"] and now - row["created"] > older_than:
        why.append("older than asked")
    if other_versions and row["version"] != config.VERSION:
        why.append(f"miopy {row['version'] or 'before 0.1.0 tracking'}")
    return why


def _compact(path: Path) -> str | None:
    """VACUUM the file (after deletes it keeps its size otherwise); why not, or None."""
    try:
        conn = sqlite3.connect(path, timeout=10, isolation_level=None)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return str(exc)
    return None


def prune(
    older_than: float | None = None, other_versions: bool = False, dry_run: bool = False
) -> dict[str, Any]:
    """Delete stale entries: a changed or removed kernel source, another compiler fingerprint for a
    device here, a stored binary that fails its integrity check (a miss for every run anyway),
    older than ``older_than`` seconds, or (``other_versions``) another miopy version,
    with the cache folders of other versions. Sizes before and after."""
    now = time.time()
    fingerprints = current_fingerprints()
    report: dict[str, Any] = {"files": [], "removed_folders": [], "dry_run": dry_run}
    before = after = 0
    for path in files():
        backend = backend_of(path)
        base = path.name[: -len(".ukdb")].rpartition(".")[0]
        hashes = _current_hashes(backend)
        rows = entries(path)
        broken = damaged(path)
        doomed = {}
        for row in rows:
            why = stale_reasons(
                row, hashes, fingerprints.get((base, backend)), older_than, other_versions, now
            )
            if row["id"] in broken:
                why.append("damaged binary")
            if why:
                doomed[row["id"]] = why
        size = disk_size(path)
        before += size
        if doomed and not dry_run:
            db = _open(path)
            try:
                ids = list(doomed)
                statements = [
                    (f"DELETE FROM kern_db WHERE id IN ({','.join('?' * len(chunk))})", chunk)
                    for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500))
                ]
                if not db.write(statements):
                    raise ToolError(
                        f"{path}: could not delete from it (read-only or in use); nothing removed"
                    )
            finally:
                db.close()
            note = _compact(path)
            if note:
                report.setdefault("notes", []).append(f"{path}: not compacted ({note})")
        after += size if dry_run else disk_size(path)
        reasons = Counter(r for why in doomed.values() for r in why)
        report["files"].append(
            {"file": str(path), "entries": len(rows), "removed": len(doomed), "reasons": dict(reasons)}
        )
    if other_versions and config._env("CUSTOM_CACHE_DIR") is None:
        root = config.cache_dir().parent
        with contextlib.suppress(OSError):
            for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
                if folder.name == config.VERSION:
                    continue
                size = sum(disk_size(f) for f in folder.glob("*.ukdb"))
                before += size
                report["removed_folders"].append(str(folder))
                if not dry_run:
                    _remove_cache_files(folder)
                    with contextlib.suppress(OSError):
                        folder.rmdir()
                else:
                    after += size
    report["bytes_before"], report["bytes_after"] = before, after
    return report


def _remove_cache_files(folder: Path) -> list[Path]:
    removed = []
    for path in sorted(folder.iterdir()):
        name = path.name
        if (".ukdb" in name) and (path.is_file() or path.is_symlink()):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
    return removed


def clear() -> dict[str, Any]:
    """Delete every kernel cache file of this version (with sidecars and moved-aside corrupt copies)."""
    folder = config.cache_dir()
    if not folder.is_dir():
        return {"folder": str(folder), "removed": [], "bytes_before": 0}
    before = sum(p.stat().st_size for p in folder.iterdir() if ".ukdb" in p.name and p.is_file())
    removed = _remove_cache_files(folder)
    return {"folder": str(folder), "removed": [str(p) for p in removed], "bytes_before": before}
