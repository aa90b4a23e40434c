"""Copy the rows that can still be read from a corrupt SQLite file into a fresh one.

Tables are scanned in rowid order; where a damaged page stops the scan, the scan resumes at the
first rowid past the damage that can be read (found by probing forward, then bisecting back)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_BATCH = 512
_MAX_ROWID = (1 << 63) - 1


@dataclass
class Salvaged:
    kept: int = 0
    lost: int | None = 0  # None when the damaged file no longer says how many rows it had

    def add(self, kept: int, lost: int | None) -> None:
        self.kept += kept
        self.lost = None if self.lost is None or lost is None else self.lost + lost


def open_damaged(path: Path) -> sqlite3.Connection:
    """A read-only connection to the damaged file (with its -wal when SQLite can still use it)."""
    uri = Path(os.path.abspath(path)).as_uri()
    # Without a -wal there is nothing beyond the file itself: immutable leaves no -shm behind.
    modes = ("mode=ro", "mode=ro&immutable=1") if os.path.exists(f"{path}-wal") else ("mode=ro&immutable=1",)
    for mode in modes:
        conn = sqlite3.connect(f"{uri}?{mode}", uri=True, isolation_level=None)
        try:
            # Reads sqlite_master without parsing the whole schema first, which a damaged file
            # (truncated, say) fails as a whole though most of its tables can still be read.
            conn.execute("PRAGMA writable_schema = 1")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.DatabaseError:
            conn.close()
            if mode.endswith("immutable=1"):
                raise
    raise AssertionError("unreachable")


def copy_rows(src: sqlite3.Connection, dst: sqlite3.Connection, skip: set[str]) -> Salvaged:
    """Copy every table of ``src`` (but ``skip``) into ``dst``, creating tables ``dst`` lacks from
    their definitions in ``src``; rows ``dst`` already has win. Run inside a ``dst`` transaction."""
    result = Salvaged()
    try:
        tables = src.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
    except sqlite3.DatabaseError:
        return Salvaged(0, None)
    for name, sql in tables:
        if name in skip or not sql:
            continue
        columns = _columns(src, name)
        if not columns:
            result.add(0, None)
            continue
        existing = _columns(dst, name)
        if not existing:
            dst.execute(sql)
        elif existing != columns:
            continue  # another version of the table: its rows cannot be copied as they are
        insert = (
            f"INSERT OR IGNORE INTO {name} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        )
        kept = 0
        for row in _readable_rows(src, name, columns):
            try:
                dst.execute(insert, row)
            except sqlite3.IntegrityError:
                continue  # a damaged row (NULL where the schema forbids it): lost
            kept += 1
        total = _row_count(src, name)
        result.add(kept, None if total is None else max(total - kept, 0))
    return result


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    try:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})").fetchall()]
    except sqlite3.DatabaseError:
        return []


def _row_count(src: sqlite3.Connection, table: str) -> int | None:
    """How many rows the table had: count(*) over the table or any of its indexes that is readable."""
    plans = [f"SELECT count(*) FROM {table}"]
    with contextlib.suppress(sqlite3.DatabaseError):
        for (index,) in src.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)
        ):
            plans.append(f"SELECT count(*) FROM {table} INDEXED BY {index}")
    counts = []
    for sql in plans:
        with contextlib.suppress(sqlite3.DatabaseError):
            counts.append(src.execute(sql).fetchone()[0])
    return max(counts) if counts else None


def _readable_rows(src: sqlite3.Connection, table: str, columns: list[str]):
    """The rows that can be read, in rowid order. A damaged b-tree can also answer with rows that
    are not there (rowid 0 over and over, all NULL): a rowid that does not grow counts as damage."""
    batch = f"SELECT rowid, {', '.join(columns)} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT {_BATCH}"
    one = batch.replace(f"LIMIT {_BATCH}", "LIMIT 1")
    point = batch.replace("rowid > ?", "rowid = ?")
    after = -_MAX_ROWID - 1
    while True:
        try:
            rows = _growing(src.execute(batch, (after,)).fetchall(), after)
        except sqlite3.DatabaseError:
            # The batch reaches damage: take its rows one by one up to it, then skip past it.
            while True:
                try:
                    rows = _growing(src.execute(one, (after,)).fetchall(), after)
                except sqlite3.DatabaseError:
                    break
                if not rows:
                    return
                yield rows[0][1:]
                after = rows[0][0]
            resume = _next_readable(src, one, after)
            if resume is None:
                return
            after = resume
            # Seeking past the damage can fail for the first row after it, read directly.
            with contextlib.suppress(sqlite3.DatabaseError):
                yield from (row[1:] for row in _growing(src.execute(point, (after,)).fetchall(), after - 1))
            continue
        if not rows:
            return
        for row in rows:
            yield row[1:]
        after = rows[-1][0]


def _growing(rows: list[tuple[Any, ...]], after: int) -> list[tuple[Any, ...]]:
    """``rows`` (rowid first) unchanged when their rowids are integers that grow past ``after``;
    else a DatabaseError, as for any other damage."""
    last = after
    for row in rows:
        if not isinstance(row[0], int) or row[0] <= last:
            raise sqlite3.DatabaseError(f"rowid {row[0]!r} after {last}: damaged table")
        last = row[0]
    return rows


def _readable(src: sqlite3.Connection, select: str, after: int) -> bool:
    try:
        _growing(src.execute(select, (after,)).fetchall(), after)
        return True
    except sqlite3.DatabaseError:
        return False


def _next_readable(src: sqlite3.Connection, select: str, bad: int) -> int | None:
    """The smallest ``after`` > ``bad`` from which a read succeeds, or None past the last rowid."""
    step, good = 1, None
    while bad + step <= _MAX_ROWID:
        if _readable(src, select, bad + step):
            good = bad + step
            break
        bad, step = bad + step, step * 2
    if good is None:
        return None
    while good - bad > 1:
        mid = (good + bad) // 2
        if _readable(src, select, mid):
            good = mid
        else:
            bad = mid
    return good
