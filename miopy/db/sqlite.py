"""One SQLite file shared by many processes; every DB in miopy goes through ``SqliteFile``.

Trouble never reaches the caller, and each kind is said once: a corrupt user file is moved aside
and the rows that can still be read are copied into a fresh one; a file that cannot be written (a
read-only folder, a full disk) is still read; a file or folder that fails the trust checks of
``trust`` is not used; an unusable one turns the object into a no-op (reads miss, writes drop)."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from miopy import log
from miopy.db import salvage, trust

_log = log.get("miopy.db")

BUSY_TIMEOUT_S = 60.0
# Anything smaller cannot hold a database page; MIOpen treats such files (Git-LFS pointers) as absent.
MIN_SYSTEM_FILE_BYTES = 512

_BUSY, _CORRUPT = {5, 6}, {11, 26}  # SQLITE_BUSY/LOCKED, SQLITE_CORRUPT/NOTADB
# SQLITE_PERM, READONLY, IOERR, CANTOPEN, FULL: a write that the file system refused.
_UNWRITABLE = {3, 8, 10, 14, 13}
_warned: set[tuple[str, str]] = set()
# Connections inherited through fork() must not be closed (or collected) in the child: closing one
# can checkpoint or unlock the parent's file. They are parked here instead.
_inherited: list[sqlite3.Connection] = []
_T = TypeVar("_T")

Statement = tuple[str, Sequence[Any]]


class _Corrupt(Exception):
    pass


@contextlib.contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: BEGIN IMMEDIATE, COMMIT on success (if still open), ROLLBACK on error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        if conn.in_transaction:
            conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def warn_path(path: Path, kind: str, message: str) -> None:
    """Warn once per process for ``kind`` of trouble with ``path``, whatever the details say."""
    if (kind, str(path)) not in _warned:
        _warned.add((kind, str(path)))
        _log.warning(message)


def system_file_present(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size >= MIN_SYSTEM_FILE_BYTES
    except OSError:
        return False


def _error_kind(exc: sqlite3.Error) -> str:
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc).lower()
    if primary in _BUSY or "locked" in text or "busy" in text:
        return "busy"
    if primary in _CORRUPT or "malformed" in text or "not a database" in text:
        return "corrupt"
    if primary in _UNWRITABLE or "readonly" in text or "disk is full" in text or "disk i/o" in text:
        return "unwritable"
    return "other"


@contextlib.contextmanager
def _dir_lock(directory: Path) -> Iterator[None]:
    """An exclusive flock on the directory, so that only one process moves a corrupt file aside."""
    try:
        import fcntl

        fd = os.open(directory, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Column names of ``table`` in order, [] when it does not exist."""
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})").fetchall()]


@functools.cache
def _schema_columns(schema_sql: str) -> dict[str, list[str]]:
    """The columns each table of ``schema_sql`` has when freshly created."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(schema_sql)
        names = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", schema_sql, re.IGNORECASE)
        return {name: _columns(conn, name) for name in names}
    finally:
        conn.close()


def _uri(path: Path) -> str:
    return Path(os.path.abspath(path)).as_uri()


# Writes of find and perf records through any SqliteFile of this process, counted: what was
# chosen from those records in memory (immediate mode's choices, see miopy.engine.find) is only
# reused while the count is unchanged.
RECORD_COMPONENTS = frozenset({"perf_db", "find_db"})
records_written = 0


class SqliteFile:
    """``component`` names this user of the file in its ``meta`` table, so that several DBs with
    their own schemas and versions can share one file. ``readonly`` files (system DBs) are opened
    immutable and are never repaired; a missing one, or one under 512 bytes, reads as empty."""

    def __init__(
        self,
        path: Path,
        component: str,
        schema_sql: str,
        schema_version: int,
        readonly: bool = False,
        migrations: dict[int, str] | None = None,
    ):
        self.path = Path(path)
        # migrations[v]: the SQL script that turns version v of this component's tables into v + 1.
        self.migrations = dict(migrations or {})
        self.component = component
        self.schema_sql = schema_sql
        self.schema_version = schema_version
        self.readonly = readonly
        self._tables = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", schema_sql, re.IGNORECASE)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._ident: tuple[int, int] | None = None
        self._disabled = False
        self._writes_off = False  # opened for reading only, or a write was refused: reads go on

    # ---- public ------------------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read, or [] when the file is absent or unusable."""
        result = self._run(lambda conn: conn.execute(sql, params).fetchall())
        return result if result is not None else []

    def write(self, statements: Sequence[Statement]) -> bool:
        """Run ``statements`` as one transaction; False when the write was dropped."""
        if self.readonly:
            return False
        global records_written
        if self.component in RECORD_COMPONENTS:
            records_written += 1  # before and after: a reader between them sees a change either way
        try:
            return self._run(lambda conn: self._transaction(conn, statements), writing=True) is not None
        finally:
            if self.component in RECORD_COMPONENTS:
                records_written += 1

    @property
    def usable(self) -> bool:
        with self._lock:
            return self._connection() is not None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()
            self._conn = None

    # ---- running statements ----------------------------------------------------------------------
    def _run(self, action: Callable[[sqlite3.Connection], _T], writing: bool = False) -> _T | None:
        with self._lock:
            if not writing and not self.readonly and self._conn is None and not self._exists():
                return None  # nothing to read: the file is made by the first write, not by a read
            for attempt in range(2):
                conn = self._connection()
                if conn is None or (writing and self._writes_off):
                    return None
                try:
                    return self._retry_busy(lambda c=conn: action(c))
                except sqlite3.DatabaseError as exc:
                    kind = _error_kind(exc)
                    if kind == "corrupt" and not self.readonly and not self._writes_off and attempt == 0:
                        self._move_aside(str(exc))
                        continue
                    if writing and kind == "unwritable":
                        self._stop_writing(exc)  # a full disk: what is there is still good to read
                        return None
                    self._give_up(exc)
                    return None
        return None

    @staticmethod
    def _transaction(conn: sqlite3.Connection, statements: Sequence[Statement]) -> bool:
        with _immediate(conn):
            for sql, params in statements:
                conn.execute(sql, params)
        return True

    def _retry_busy(self, step: Callable[[], _T]) -> _T:
        # busy_timeout covers most waits; some (WAL recovery, journal-mode changes) return BUSY at
        # once, so keep trying with jittered back-off until the same deadline.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        delay = 0.005
        while True:
            try:
                return step()
            except sqlite3.OperationalError as exc:
                if _error_kind(exc) != "busy" or time.monotonic() > deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)

    def _stop_writing(self, exc: BaseException) -> None:
        self._writes_off = True
        warn_path(self.path, "unwritable", f"cannot write {self.path} ({exc}); only reading it")

    def _give_up(self, exc: BaseException) -> None:
        if self.readonly:
            warn_path(self.path, "unusable", f"cannot read {self.path} ({exc}); ignoring it")
        else:
            warn_path(self.path, "unusable", f"cannot use {self.path} ({exc}); continuing without it")
        self._disabled = True
        self.close()

    # ---- opening -----------------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection | None:
        if self._conn is not None and self._pid != os.getpid():
            _inherited.append(self._conn)
            self._conn = None
        if self._conn is None and not self._disabled:
            for attempt in range(2):
                try:
                    self._conn = self._open_readonly() if self.readonly else self._open()
                    self._pid = os.getpid()
                    break
                except trust.Untrusted as exc:
                    warn_path(exc.path, "untrusted", f"refusing {exc}; running without the state kept there")
                    self._disabled = True
                    break
                except _Corrupt as exc:
                    if self.readonly or attempt == 1:
                        self._give_up(exc)
                        break
                    self._move_aside(str(exc))
                except (OSError, sqlite3.DatabaseError) as exc:
                    self._conn = None if self.readonly else self._open_for_reading(exc)
                    if self._conn is None:
                        self._give_up(exc)
                    else:
                        self._pid = os.getpid()
                    break
        return self._conn

    def _connect(self, target: str, uri: bool) -> sqlite3.Connection:
        return sqlite3.connect(
            target, uri=uri, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )

    def _open_readonly(self) -> sqlite3.Connection | None:
        if not system_file_present(self.path):
            self._disabled = True
            return None
        trust.system_dir(self.path.parent)
        trust.check_file(self.path, system=True)
        # immutable: installed files do not change under us, and a plain read-only open of a
        # WAL-mode file would leave -wal/-shm files in the system directory (or fail there).
        conn = self._connect(f"{_uri(self.path)}?mode=ro&immutable=1", uri=True)
        try:
            found = self._version(conn)
        except BaseException:
            conn.close()
            raise
        if found != self.schema_version:
            conn.close()
            warn_path(
                self.path,
                "version",
                f"{self.path}: {self.component} schema version {found}, "
                f"expected {self.schema_version}; ignoring it",
            )
            self._disabled = True
            return None
        return conn

    def _open(self) -> sqlite3.Connection | None:
        trust.private_dir(self.path.parent)
        # The header is left to SQLite (SQLITE_NOTADB): opening and closing the file ourselves would
        # drop the POSIX locks that this process's other connections to it hold.
        existed = trust.check_user_file(self.path) and self._stat()
        if not existed:
            trust.create_private_file(self.path)  # SQLite gives its -wal and -shm the same mode
        conn = self._connect(str(self.path), uri=False)
        try:
            if not existed:
                self._stat()
            if existed:
                check = self._retry_busy(lambda: conn.execute("PRAGMA quick_check(1)").fetchall())
                if check != [("ok",)]:
                    raise _Corrupt(f"quick_check: {check[0][0] if check else 'no answer'}")
            self._retry_busy(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchall())
            conn.execute("PRAGMA synchronous=NORMAL")
            if self._ensure_schema(conn):
                return conn
            self._disabled = True
        except sqlite3.DatabaseError as exc:
            conn.close()
            # A file that is damaged past its header fails here, in whichever statement reads it first.
            if _error_kind(exc) == "corrupt":
                raise _Corrupt(str(exc)) from exc
            raise
        except BaseException:
            conn.close()
            raise
        conn.close()
        return None

    def _open_for_reading(self, why: BaseException) -> sqlite3.Connection | None:
        """After a failed read-write open (a read-only folder, a full disk): the existing file, read
        only, or None. Tried with SQLite's -shm first, then immutable where it cannot create one."""
        try:
            if not trust.check_user_file(self.path) or os.path.getsize(self.path) == 0:
                return None
        except (OSError, trust.Untrusted):
            return None
        for mode in ("mode=ro", "mode=ro&immutable=1"):
            conn = None
            try:
                conn = self._connect(f"{_uri(self.path)}?{mode}", uri=True)
                if self._retry_busy(lambda c=conn: self._schema_is_current(c)):
                    self._writes_off = True
                    warn_path(self.path, "unwritable", f"cannot write {self.path} ({why}); only reading it")
                    return conn
            except sqlite3.DatabaseError:
                pass
            if conn is not None:
                conn.close()
        return None

    def _exists(self) -> bool:
        """Whether anything (even a link, which the trust checks then refuse) is at the path."""
        return os.path.lexists(self.path)

    def _stat(self) -> bool:
        """Remember which file we open, so that a repair can tell if someone replaced it meanwhile."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._ident = None
            return False
        self._ident = (st.st_dev, st.st_ino)
        return True

    def _version(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute("SELECT version FROM meta WHERE component = ?", (self.component,)).fetchone()
        return row[0] if row else None

    def _ensure_schema(self, conn: sqlite3.Connection) -> bool:
        if self._retry_busy(lambda: self._schema_is_current(conn)):
            return True
        return self._retry_busy(lambda: self._update_schema(conn))

    def _schema_is_current(self, conn: sqlite3.Connection) -> bool:
        try:
            found = self._version(conn)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return False
            raise
        return found == self.schema_version and not self._damaged_tables(conn)

    def _damaged_tables(self, conn: sqlite3.Connection) -> list[str]:
        """This component's tables that are missing or whose columns differ from the schema."""
        expected = _schema_columns(self.schema_sql)
        return [t for t in self._tables if _columns(conn, t) != expected[t]]

    def _update_schema(self, conn: sqlite3.Connection) -> bool:
        with _immediate(conn):
            conn.execute("CREATE TABLE IF NOT EXISTS meta (component TEXT PRIMARY KEY, version INTEGER)")
            found = self._version(conn)
            if found is not None and found > self.schema_version:
                conn.execute("ROLLBACK")  # nothing to keep; _immediate sees no transaction
                warn_path(
                    self.path,
                    "version",
                    f"{self.path}: {self.component} schema version {found} "
                    f"is newer than {self.schema_version}; continuing without it",
                )
                return False
            afresh = found is None
            if found is not None and found < self.schema_version and not self._migrate(conn, found):
                # No conversion from that version: its records are stale caches. Other components
                # in the file keep theirs.
                _log.warning(
                    "%s: %s schema version %s is older than %s; starting it afresh",
                    self.path,
                    self.component,
                    found,
                    self.schema_version,
                )
                for table in self._tables:
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                afresh = True
            damaged = self._damaged_tables(conn)
            present = [t for t in damaged if _columns(conn, t)]
            if damaged and not afresh:
                # Said current (or just converted) but a table is missing or has other columns:
                # rebuild those tables once, here, rather than failing on every statement.
                _log.warning(
                    "%s: %s tables %s were damaged (missing or with other columns); recreated them",
                    self.path,
                    self.component,
                    ", ".join(damaged),
                )
            for table in present:
                conn.execute(f"DROP TABLE {table}")
            for statement in self.schema_sql.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (self.component, self.schema_version))
        return True

    def _migrate(self, conn: sqlite3.Connection, found: int) -> bool:
        """Convert this component's tables from version ``found`` in place; False when there is no
        path to the current version (or a table to convert is missing), leaving the tables untouched."""
        steps = range(found, self.schema_version)
        if not all(v in self.migrations for v in steps) or not all(_columns(conn, t) for t in self._tables):
            return False
        for v in steps:
            for statement in self.migrations[v].split(";"):
                if statement.strip():
                    conn.execute(statement)
        _log.info(
            "%s: %s converted from schema version %s to %s",
            self.path,
            self.component,
            found,
            self.schema_version,
        )
        return True

    # ---- repair ------------------------------------------------------------------------------------
    def _move_aside(self, reason: str) -> None:
        """Rename the corrupt file (with its -wal/-shm) aside, unless another process already did."""
        opened = self._ident
        self.close()
        self._ident = None
        try:
            with _dir_lock(self.path.parent):
                try:
                    st = os.stat(self.path)
                except FileNotFoundError:
                    return
                if opened is not None and (st.st_dev, st.st_ino) != opened:
                    return  # someone replaced it since we opened it
                stamp = time.strftime("%Y%m%d-%H%M%S")
                aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{os.getpid()}")
                os.replace(self.path, aside)
                for suffix in ("-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
                saved = self._salvage(aside)
        except (OSError, trust.Untrusted) as exc:
            self._give_up(exc)
            return
        _log.warning("%s is corrupt (%s); moved it to %s; %s", self.path, reason, aside.name, saved)

    def _salvage(self, aside: Path) -> str:
        """Copy what can be read from ``aside`` into a fresh file at ``path``; says what was kept."""
        try:
            conn = self._open()
        except (sqlite3.DatabaseError, _Corrupt) as exc:
            return f"starting afresh (no new file: {exc})"
        if conn is None:
            return "starting afresh"
        src = None
        try:
            src = salvage.open_damaged(aside)
            with _immediate(conn):
                result = salvage.copy_rows(src, conn, skip=set())
        except sqlite3.DatabaseError as exc:
            return f"starting afresh (nothing could be copied: {exc})"
        finally:
            if src is not None:
                src.close()
            conn.close()
        lost = "an unknown number" if result.lost is None else str(result.lost)
        return f"kept {result.kept} readable rows in a fresh file, lost {lost}"
