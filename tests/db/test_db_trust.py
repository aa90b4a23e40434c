"""The kernel cache holds code that miopy runs: private folders and files, no planted files or links."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from miopy.db.find_db import FindDb, FindRecord
from miopy.db.kernel_cache import KernelCache, KernelKey
from miopy.db.perf_db import PerfDb

BASE, BACKEND = "gfx_trust", "opencl"
KEY = KernelKey("conv.cl", "k", "-DN=1", "h", "fp")
UKDB = f"{BASE}.{BACKEND}.ukdb"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def use_everything() -> None:
    cache, perf, find = KernelCache(BASE, BACKEND), PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
    cache.put(KEY, b"binary")
    perf.store("p", "Solver", {"tile": 8})
    find.store("p", [FindRecord("Solver", 0.5, 0, "algo")])
    assert cache.get(KEY) == b"binary" and perf.load("p", "Solver") == {"tile": 8}
    # Leave them open: the -wal and -shm files exist while a connection is open.


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_folders_0700_and_files_0600_whatever_the_umask(db_env, monkeypatch, umask):
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(db_env["cache"] / "deep" / "er"))
    old = os.umask(umask)
    try:
        use_everything()
    finally:
        os.umask(old)
    folders = [db_env["cache"], db_env["cache"] / "deep", db_env["cache"] / "deep" / "er", db_env["user"]]
    assert [mode(f) for f in folders] == [0o700] * 4
    files = [p for folder in folders for p in folder.iterdir() if p.is_file()]
    assert len(files) >= 4 and any(p.name.endswith("-wal") for p in files)  # both DB files, -wal, -shm
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}


def test_existing_loose_file_is_tightened(db_env):
    db_env["cache"].mkdir(mode=0o700)
    path = db_env["cache"] / UKDB
    sqlite3.connect(path).close()
    path.chmod(0o666)
    KernelCache(BASE, BACKEND).put(KEY, b"binary")
    assert mode(path) == 0o600


def plant_cache(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A valid .ukdb with an entry for KEY, as another user would plant it in ``folder``."""
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(tmp_path / "builder"))
    builder = KernelCache(BASE, BACKEND)
    builder.put(KEY, b"evil code")
    builder.close()
    folder.mkdir(exist_ok=True)
    os.replace(tmp_path / "builder" / UKDB, folder / UKDB)
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(folder))


@pytest.mark.parametrize("how", ["world_writable", "group_writable", "other_owner"])
def test_untrusted_folder_is_refused(db_env, monkeypatch, tmp_path, warned, how):
    folder = tmp_path / "shared"
    plant_cache(folder, tmp_path, monkeypatch)
    if how == "other_owner":
        if os.geteuid() != 0:
            pytest.skip("only root can make a folder of another user")
        os.chown(folder, 65534, 65534)
        folder.chmod(0o755)
    else:
        folder.chmod(0o777 if how == "world_writable" else 0o770)
    before = (folder / UKDB).read_bytes()
    for _ in range(2):
        cache = KernelCache(BASE, BACKEND)
        assert cache.get(KEY) is None  # the planted binary is never handed out
        cache.put(KEY, b"mine")
        assert cache.get(KEY) is None
    refused = [w for w in warned() if "refusing" in w]
    assert len(refused) == 1 and str(folder) in refused[0], warned()
    assert (folder / UKDB).read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == [UKDB]


@pytest.mark.parametrize("at", ["", "-wal", "-journal"])
def test_planted_dangling_symlink_creates_nothing(db_env, tmp_path, warned, at):
    db_env["cache"].mkdir(mode=0o700)
    target = tmp_path / "victim" / "target"
    target.parent.mkdir()
    if at:
        first = KernelCache(BASE, BACKEND)
        first.put(KEY, b"binary")  # a real DB file first; closing removes its -wal
        first.close()
    (db_env["cache"] / f"{UKDB}{at}").symlink_to(target)
    for _ in range(2):
        cache = KernelCache(BASE, BACKEND)
        cache.put(KEY, b"binary")
        assert cache.get(KEY) is None
        cache.close()
    assert not target.exists() and list(target.parent.iterdir()) == []
    refused = [w for w in warned() if "refusing" in w and "symbolic link" in w]
    assert len(refused) == 1, warned()


def test_symlinked_system_db_is_not_followed(db_env, tmp_path, monkeypatch, warned):
    plant_cache(tmp_path / "elsewhere", tmp_path, monkeypatch)
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(db_env["cache"]))
    db_env["system"].mkdir()
    (db_env["system"] / f"{BASE}.kdb").symlink_to(tmp_path / "elsewhere" / UKDB)
    assert KernelCache(BASE, BACKEND).get(KEY) is None
    assert len([w for w in warned() if "refusing" in w]) == 1, warned()


def test_world_writable_system_folder_is_refused(db_env, tmp_path, monkeypatch, warned):
    plant_cache(tmp_path / "elsewhere", tmp_path, monkeypatch)
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(db_env["cache"]))
    db_env["system"].mkdir()
    os.replace(tmp_path / "elsewhere" / UKDB, db_env["system"] / f"{BASE}.kdb")
    assert KernelCache(BASE, BACKEND).get(KEY) == b"evil code"  # trusted where only we can write
    db_env["system"].chmod(0o777)
    assert KernelCache(BASE, BACKEND).get(KEY) is None
    assert len([w for w in warned() if "refusing" in w]) == 1, warned()
