"""A DB or cache that cannot be written is still read: a read-only folder, a full disk."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from miopy.db.find_db import FindDb, FindRecord
from miopy.db.kernel_cache import KernelCache, KernelKey
from miopy.db.perf_db import PerfDb

REPO = Path(__file__).resolve().parents[2]
BASE, BACKEND = "gfx_full", "opencl"
KEY = KernelKey("conv.cl", "k", "-DN=1", "h", "fp")
RECORDS = [FindRecord("Solver", 0.5, 0, "algo", {"tile": 4}), FindRecord("Other", 0.7, 16, "algo2")]


def fill() -> None:
    cache, perf, find = KernelCache(BASE, BACKEND), PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
    cache.put(KEY, b"binary")
    perf.store("p", "Solver", {"tile": 8})
    find.store("p", RECORDS)
    for db in (cache, perf, find):
        db.close()


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` read-only for this process: chmod for a user, a read-only bind mount for root."""
    if os.geteuid() != 0:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)
        return
    mount = subprocess.run(
        f"mount --bind '{folder}' '{folder}' && mount -o remount,ro,bind '{folder}'",
        shell=True,
        capture_output=True,
    )
    if mount.returncode != 0:
        subprocess.run(["umount", str(folder)], capture_output=True)
        pytest.skip("running as root without the right to mount: a read-only folder cannot be made")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def test_read_only_folder_is_still_read(db_env, monkeypatch, warned):
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(db_env["cache"]))
    fill()
    with read_only(db_env["cache"]):
        cache, perf, find = KernelCache(BASE, BACKEND), PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
        for _ in range(2):
            assert cache.get(KEY) == b"binary"
            assert perf.load("p", "Solver") == {"tile": 8}
            assert find.load("p") == RECORDS
            cache.put(KernelKey("conv.cl", "new", "", "h", "fp"), b"x")
            perf.store("q", "Solver", {"tile": 2})
            find.store("q", RECORDS[:1])
        assert perf.load("q", "Solver") is None
        for db in (cache, perf, find):
            db.close()
    said = [w for w in warned() if "only reading it" in w]
    assert len(said) == 2, warned()  # the .ukdb and the .udb, once each
    assert not [w for w in warned() if "continuing without it" in w]


def run_worker(db_env, limit: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    worker = Path(__file__).with_name("_state_worker.py")
    done = subprocess.run(
        [sys.executable, str(worker), str(limit)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return {"seen": json.loads(done.stdout), "stderr": done.stderr}


@pytest.mark.parametrize("limit", [0, 256 << 10])
def test_full_disk_still_reads(db_env, limit):
    """RLIMIT_FSIZE makes writes fail as on a full disk: at 0 not even SQLite's -shm can be made,
    at 256 KiB it can, but the WAL cannot take the new records."""
    fill()
    result = run_worker(db_env, limit)
    seen = result["seen"]
    assert seen["kernel"] == "binary"
    assert seen["perf"] == {"tile": 8}
    assert seen["find"] == ["Solver", "Other"]
    assert seen["after_writes"] == ["binary", {"tile": 8}]
    lines = [line for line in result["stderr"].splitlines() if "WARNING" in line]
    unwritable = [line for line in lines if "cannot write" in line]
    assert 1 <= len(unwritable) <= 2 and all("only reading it" in line for line in unwritable), lines
    assert not [line for line in lines if "continuing without it" in line or "corrupt" in line], lines
    # The records written before are intact for the next process.
    assert PerfDb(BASE, BACKEND).load("p", "Solver") == {"tile": 8}
    assert KernelCache(BASE, BACKEND).get(KEY) == b"binary"
