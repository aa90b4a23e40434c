"""Compiled kernel binaries: the read-only system ``<base>.kdb``, then the user ``<base>.<backend>.ukdb``."""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

from miopy import config, log
from miopy.db.sqlite import SqliteFile, system_file_present

_log = log.get("miopy.db")

SCHEMA_VERSION = 1
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
    UNIQUE (kernel_file, kernel_name, kernel_args, source_hash, fingerprint)
);
"""
_KEY_WHERE = "kernel_file = ? AND kernel_name = ? AND kernel_args = ? AND source_hash = ? AND fingerprint = ?"


@dataclass(frozen=True)
class KernelKey:
    file: str  # kernel file name with extension, e.g. "conv_naive.cl"
    name: str  # kernel function name
    options: str  # full compile options string
    source_hash: str  # sha256 of the source with its includes
    fingerprint: str  # compiler/driver fingerprint

    def columns(self) -> tuple[str, str, str, str, str]:
        return (self.file, self.name, self.options, self.source_hash, self.fingerprint)


class KernelCache:
    """``hits`` and ``misses`` count get() answers, for tests and logs."""

    def __init__(self, db_basename: str, backend_name: str):
        self.db_basename = db_basename
        self.backend_name = backend_name
        self.hits = 0
        self.misses = 0
        self._dbs: tuple[SqliteFile, SqliteFile] | None = None  # (system, user)

    def _files(self) -> tuple[SqliteFile, SqliteFile]:
        # Made on first use, so that MIOPY_DISABLE_CACHE=1 never touches a file.
        if self._dbs is None:
            system = config.system_db_dir() / f"{self.db_basename}.kdb"
            if not system_file_present(system):
                log.warn_once_per_user(
                    _log,
                    f"kdb {self.db_basename} {self.backend_name}",
                    f"Missing system database file: {self.db_basename}.kdb Performance may degrade",
                )
            user = config.cache_dir() / f"{self.db_basename}.{self.backend_name}.ukdb"
            self._dbs = (
                SqliteFile(system, "kern_db", SCHEMA, SCHEMA_VERSION, readonly=True),
                SqliteFile(user, "kern_db", SCHEMA, SCHEMA_VERSION),
            )
        return self._dbs

    def get(self, key: KernelKey) -> bytes | None:
        if config.disable_cache():
            self.misses += 1
            return None
        for db in self._files():
            sql = f"SELECT kernel_blob, kernel_hash, uncompressed_size FROM kern_db WHERE {_KEY_WHERE}"
            for blob, digest, size in db.query(sql, key.columns()):
                binary = _unpack(blob, digest, size)
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
        user = self._files()[1]
        blob = zlib.compress(binary, 6)
        sql = (
            "INSERT OR REPLACE INTO kern_db (kernel_file, kernel_name, kernel_args, source_hash, "
            "fingerprint, kernel_blob, kernel_hash, uncompressed_size) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        )
        user.write([(sql, (*key.columns(), blob, hashlib.sha256(binary).hexdigest(), len(binary)))])

    def close(self) -> None:
        for db in self._dbs or ():
            db.close()


def _unpack(blob: bytes, digest: str, size: int) -> bytes | None:
    try:
        binary = zlib.decompress(blob)
    except (zlib.error, TypeError):
        return None
    if len(binary) != size or hashlib.sha256(binary).hexdigest() != digest:
        return None
    return binary
