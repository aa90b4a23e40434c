"""Persistent state: the kernel cache, the perf DB and the find DB, all SQLite through ``SqliteFile``."""

from miopy.db.find_db import FindDb, FindRecord
from miopy.db.kernel_cache import KernelCache, KernelKey
from miopy.db.perf_db import PerfDb

__all__ = ["FindDb", "FindRecord", "KernelCache", "KernelKey", "PerfDb"]
