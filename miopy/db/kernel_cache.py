"""Compiled kernel binaries: the read-only kernel packages (``<base>.kdb`` in MIOPY_SYSTEM_DB_PATH,
then in MIOPY_KDB_PATH where ``miopy kernels install`` puts them, then in the ``miopy_kernels``
folder of an installed kernel wheel; without any, the package of the same architecture with the
nearest CU count), then the user ``<base>.<backend>.ukdb``."""

from __future__ import annotations

import hashlib
import time
import zlib
from dataclasses import dataclass

from miopy import config, log
from miopy.db import system_files
from miopy.db.sqlite import SqliteFile

_log = log.get("miopy.db")

# Version 2 added when each entry was made and by which miopy version (``miopy cache``).
SCHEMA_VERSION = 2
# MIOpen's kern_db, with the key split into the columns our KernelKey names.
SCHEMA = """
CREATE TABLE IF NOT EXISTS kern_db (
    id INTEGER PRIMARY KEY,
    kernel_file TEXT NOT NULL,
    kernel_name TEXT NOT NULL,
    kernel_args TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    kernel_blob BLOB NOT NULL,
    kernel_hash TEXT NOT NULL,
    uncompressed_size INTEGER NOT NULL,
    created REAL NOT NULL DEFAULT 0,
    miopy_version TEXT NOT NULL DEFAULT '',
    UNIQUE (kernel_file, kernel_name, kernel_args, source_hash, fingerprint)
);
"""
MIGRATIONS = {
    1: """
ALTER TABLE kern_db ADD COLUMN created REAL NOT NULL DEFAULT 0;
ALTER TABLE kern_db ADD COLUMN miopy_version TEXT NOT NULL DEFAULT '';
"""
}
KEY_COLUMNS = ("kernel_file", "kernel_name", "kernel_args", "source_hash", "fingerprint")
_KEY_WHERE = " AND ".join(f"{c} = ?" for c in KEY_COLUMNS)


@dataclass(frozen=True)
class KernelKey:
    file: str  # kernel file name with extension, e.g. "conv_naive.cl"
    name: str  # kernel function name
    options: str  # full compile options string
    source_hash: str  # sha256 of the source with its includes
    fingerprint: str  # compiler/driver fingerprint

    def columns(self) -> tuple[str, str, str, str, str]:
        return (self.file, self.name, self.options, self.source_hash, self.fingerprint)


# At most this many bytes of package binaries are read ahead into memory (``prefetch``).
PREFETCH_MAX_BYTES = 64 << 20


class KernelCache:
    """``hits`` and ``misses`` count get() answers, for tests and logs; ``prefetched`` counts
    package binaries read ahead (``prefetch``)."""

    def __init__(
        self, db_basename: str, backend_name: str, arch: str | None = None, compute_units: int | None = None
    ):
        self.db_basename = db_basename
        self.backend_name = backend_name
        self.arch = arch
        self.compute_units = compute_units
        self.hits = 0
        self.misses = 0
        self._dbs: tuple[SqliteFile, ...] | None = None  # packages..., then the user cache (last)
        self._ahead: dict[tuple[str, ...], bytes] = {}  # key columns -> binary, read by prefetch
        self.prefetched = 0

    def package_paths(self) -> list:
        """The kernel packages this cache reads, in order (at most one per folder)."""
        folders = system_files.package_folders()
        found = system_files.exact_kdbs(self.db_basename, folders)
        if found or self.arch is None or self.compute_units is None:
            return found
        near = system_files.nearest_kdb(self.arch, self.compute_units, folders)
        return [] if near is None else [near]

    def _files(self) -> tuple[SqliteFile, ...]:
        # Made on first use, so that MIOPY_DISABLE_CACHE=1 never touches a file.
        if self._dbs is None:
            packages = self.package_paths()
            wanted = f"{self.db_basename}.kdb"
            looked = ", ".join(str(f) for f in system_files.package_folders())
            if not packages:
                log.warn_once_per_user(
                    _log,
                    f"kdb {self.db_basename} {self.backend_name}",
                    f"Missing system database file: {wanted} Performance may degrade",
                )
                _log.info("looked for %s in %s", wanted, looked)
            elif packages[0].name != wanted:
                log.warn_once(
                    _log,
                    f"Missing system database file: {wanted} (looked in {looked}); using {packages[0]}, "
                    "the same architecture with the nearest CU count",
                )
            user = config.cache_dir() / f"{self.db_basename}.{self.backend_name}.ukdb"
            self._dbs = (
                *(SqliteFile(p, "kern_db", SCHEMA, SCHEMA_VERSION, readonly=True) for p in packages),
                SqliteFile(user, "kern_db", SCHEMA, SCHEMA_VERSION, migrations=MIGRATIONS),
            )
        return self._dbs

    def prefetch(self, fingerprint: str, files: tuple[SqliteFile, ...] | None = None) -> int:
        """Read this compiler's binaries from the kernel packages into memory now, checked as
        get() checks them, up to PREFETCH_MAX_BYTES: a handle runs this on a set-up thread (SQLite,
        zlib and sha256 leave Python's lock to other threads) so that the first iteration's get()
        takes them from memory. Each is dropped from memory when get() hands it out; those never
        asked for stay until the cache goes. ``files``: the packages (default: this cache's).
        Returns how many were read."""
        if config.disable_cache():
            return 0
        packages = files if files is not None else self._files()[:-1]
        total = count = 0
        columns = ", ".join((*KEY_COLUMNS, "kernel_blob", "kernel_hash", "uncompressed_size"))
        sql = f"SELECT {columns} FROM kern_db WHERE fingerprint = ?"
        for db in packages:
            for *key, blob, digest, size in db.query(sql, (fingerprint,)):
                if not isinstance(size, int) or total + size > PREFETCH_MAX_BYTES:
                    continue
                key = tuple(key)
                if key in self._ahead:
                    continue  # an earlier package's entry wins, as in get()
                binary = unpack(blob, digest, size)
                if binary is not None:
                    self._ahead[key] = binary
                    total, count = total + size, count + 1
        self.prefetched += count
        return count

    def take_ahead(self, key: KernelKey) -> None:
        """A hit for ``key`` served from what was read ahead, already loaded by the caller (a
        handle's set-up thread loads the binaries ``prefetch`` read): the binary leaves memory."""
        self._ahead.pop(key.columns(), None)
        self.hits += 1

    def get(self, key: KernelKey) -> bytes | None:
        if config.disable_cache():
            self.misses += 1
            return None
        if self._ahead:
            binary = self._ahead.pop(key.columns(), None)
            if binary is not None:
                self.hits += 1
                return binary
        for db in self._files():
            sql = f"SELECT kernel_blob, kernel_hash, uncompressed_size FROM kern_db WHERE {_KEY_WHERE}"
            for blob, digest, size in db.query(sql, key.columns()):
                binary = unpack(blob, digest, size)
                if binary is not None:
                    self.hits += 1
                    return binary
                # put() replaces the bad entry once the caller has rebuilt the kernel.
                log.warn_once(
                    _log,
                    f"{db.path}: bad entry for {key.file}/{key.name} (hash or size mismatch); a miss",
                )
        self.misses += 1
        return None

    def put(self, key: KernelKey, binary: bytes) -> None:
        if config.disable_cache():
            return
        user = self._files()[-1]
        user.write([entry_statement(key, binary)])

    def close(self) -> None:
        for db in self._dbs or ():
            db.close()


INSERT = (
    "INSERT OR REPLACE INTO kern_db (kernel_file, kernel_name, kernel_args, source_hash, fingerprint, "
    "kernel_blob, kernel_hash, uncompressed_size, created, miopy_version) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def entry_statement(key: KernelKey, binary: bytes) -> tuple[str, tuple]:
    """The INSERT that stores ``binary`` under ``key`` (compressed, with its hash and size)."""
    digest = hashlib.sha256(binary).hexdigest()
    row = (zlib.compress(binary, 6), digest, len(binary), time.time(), config.VERSION)
    return INSERT, (*key.columns(), *row)


def unpack(blob: bytes, digest: str, size: int) -> bytes | None:
    """The binary stored as ``blob``, or None when it fails its integrity check (it does not
    decompress, or its size or sha256 differ from those stored beside it)."""
    try:
        binary = zlib.decompress(blob)
    except (zlib.error, TypeError):
        return None
    if len(binary) != size or hashlib.sha256(binary).hexdigest() != digest:
        return None
    return binary
