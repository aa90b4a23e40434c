from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from miopy.db.kernel_cache import KernelCache, KernelKey

BASE, BACKEND = "gfx_test_4", "opencl"
MISSING = f"Missing system database file: {BASE}.kdb Performance may degrade"


def key(i: int = 0, **changes: str) -> KernelKey:
    fields = dict(
        file="conv_naive.cl",
        name=f"k{i}",
        options="-DX=1 -cl-std=CL2.0",
        source_hash="s" * 64,
        fingerprint="pocl 6.0",
    )
    fields.update(changes)
    return KernelKey(**fields)


def user_file(dirs: dict[str, Path]) -> Path:
    return dirs["cache"] / f"{BASE}.{BACKEND}.ukdb"


def fill(cache: KernelCache, count: int, size: int = 4096) -> dict[KernelKey, bytes]:
    entries = {key(i): os.urandom(size) for i in range(count)}
    for k, binary in entries.items():
        cache.put(k, binary)
    return entries


def test_hit_miss_and_persistence(db_env):
    cache = KernelCache(BASE, BACKEND)
    assert cache.get(key()) is None
    cache.put(key(), b"binary" * 100)
    assert cache.get(key()) == b"binary" * 100
    assert (cache.hits, cache.misses) == (1, 1)
    cache.close()
    again = KernelCache(BASE, BACKEND)
    assert again.get(key()) == b"binary" * 100
    assert user_file(db_env).is_file()


@pytest.mark.parametrize("field", ["file", "name", "options", "source_hash", "fingerprint"])
def test_every_key_field_counts(field):
    cache = KernelCache(BASE, BACKEND)
    cache.put(key(), b"one")
    assert cache.get(key(**{field: "other"})) is None


@pytest.mark.parametrize("column, value", [("kernel_hash", "0" * 64), ("kernel_blob", b"not zlib")])
def test_bad_entry_is_a_miss_then_rewritten(db_env, warned, column, value):
    cache = KernelCache(BASE, BACKEND)
    cache.put(key(), b"good")
    with sqlite3.connect(user_file(db_env)) as conn:
        conn.execute(f"UPDATE kern_db SET {column} = ?", (value,))
    assert cache.get(key()) is None
    assert cache.get(key()) is None
    assert len(warned()) == 2  # the missing system file, and the bad entry once
    cache.put(key(), b"good")
    assert cache.get(key()) == b"good"


def corrupt_garbage(path: Path) -> dict[KernelKey, bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a database\n" * 200)
    return {}


def corrupt_truncated(path: Path) -> dict[KernelKey, bytes]:
    """What was written before the cut (the first entries) is salvaged."""
    cache = KernelCache(BASE, "other")
    entries = fill(cache, 100)
    cache.close()
    made = path.with_name(f"{BASE}.other.ukdb")
    data = made.read_bytes()
    assert not Path(f"{made}-wal").exists()
    path.write_bytes(data[: len(data) // 2])
    return {key(): entries[key()]}


@pytest.mark.parametrize("damage", [corrupt_garbage, corrupt_truncated])
def test_corrupt_file_is_moved_aside_and_recreated(db_env, caplog, warned, damage):
    path = user_file(db_env)
    salvaged = damage(path)
    caplog.clear()
    cache = KernelCache(BASE, BACKEND)
    assert cache.get(key()) == salvaged.get(key())
    cache.put(key(), b"fresh")
    assert cache.get(key()) == b"fresh"
    moved = [w for w in warned() if "corrupt" in w]
    assert len(moved) == 1, warned()
    assert len(list(path.parent.glob(f"{path.name}.corrupt-*-{os.getpid()}"))) == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


@pytest.mark.parametrize("under_file", [False, True])
def test_unwritable_location_runs_without_persistence(db_env, monkeypatch, warned, tmp_path, under_file):
    blocker = tmp_path / "a_file"
    blocker.write_text("in the way")
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(blocker / "sub" if under_file else blocker))
    cache = KernelCache(BASE, BACKEND)
    for _ in range(3):
        cache.put(key(), b"lost")
        assert cache.get(key()) is None
    assert len([w for w in warned() if "continuing without it" in w]) == 1
    assert KernelCache(BASE, BACKEND).get(key()) is None
    assert len([w for w in warned() if "continuing without it" in w]) == 1
    assert blocker.read_text() == "in the way"


def test_disable_cache_touches_nothing(db_env, monkeypatch, warned):
    monkeypatch.setenv("MIOPY_DISABLE_CACHE", "1")
    cache = KernelCache(BASE, BACKEND)
    cache.put(key(), b"x")
    assert cache.get(key()) is None
    assert not db_env["cache"].exists()
    assert warned() == []


def test_missing_system_file_warns_once(warned):
    for _ in range(2):
        cache = KernelCache(BASE, BACKEND)
        cache.get(key())
        cache.put(key(), b"x")
        cache.get(key())
    assert warned() == [MISSING]


def test_tiny_system_file_counts_as_absent(db_env, warned):
    db_env["system"].mkdir()
    (db_env["system"] / f"{BASE}.kdb").write_text("version https://git-lfs.github.com/spec/v1\n")
    assert KernelCache(BASE, BACKEND).get(key()) is None
    assert warned() == [MISSING]


def test_system_file_is_asked_first(db_env, monkeypatch, caplog, warned, tmp_path):
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(tmp_path / "build"))
    builder = KernelCache(BASE, BACKEND)
    entries = fill(builder, 5)
    builder.close()
    db_env["system"].mkdir()
    shutil.copy(tmp_path / "build" / f"{BASE}.{BACKEND}.ukdb", db_env["system"] / f"{BASE}.kdb")
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(db_env["cache"]))
    caplog.clear()
    cache = KernelCache(BASE, BACKEND)
    for k, binary in entries.items():
        assert cache.get(k) == binary
    assert cache.hits == 5
    assert warned() == []
    # Read-only and immutable: nothing is written beside the system file.
    assert sorted(p.name for p in db_env["system"].iterdir()) == [f"{BASE}.kdb"]


def test_corrupt_system_file_is_ignored(db_env, warned):
    db_env["system"].mkdir()
    (db_env["system"] / f"{BASE}.kdb").write_bytes(b"\0garbage" * 200)
    cache = KernelCache(BASE, BACKEND)
    cache.put(key(), b"x")
    assert cache.get(key()) == b"x"
    assert cache.get(key()) == b"x"
    assert len(warned()) == 1
    assert (db_env["system"] / f"{BASE}.kdb").read_bytes() == b"\0garbage" * 200


def test_prefetch_reads_a_package_ahead_and_get_hands_it_out_once(db_env, monkeypatch, warned, tmp_path):
    """A handle reads its package's binaries ahead (KernelCache.prefetch, on a set-up thread):
    get() then answers from memory what it would have read, the same bytes; entries of another
    compiler, damaged ones and those over the size cap are left to get()'s own reading."""
    import sqlite3 as sq

    from miopy.db import kernel_cache

    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(tmp_path / "build"))
    builder = KernelCache(BASE, BACKEND)
    entries = fill(builder, 4)
    other = key(9, fingerprint="another compiler")
    builder.put(other, b"other" * 50)
    builder.close()
    db_env["system"].mkdir()
    package = db_env["system"] / f"{BASE}.kdb"
    shutil.copy(tmp_path / "build" / f"{BASE}.{BACKEND}.ukdb", package)
    conn = sq.connect(package)
    conn.execute("UPDATE kern_db SET kernel_hash = ? WHERE kernel_name = 'k3'", ("0" * 64,))  # damaged
    conn.commit()
    conn.close()
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(db_env["cache"]))
    monkeypatch.setattr(kernel_cache, "PREFETCH_MAX_BYTES", 2 * 4096 + 10)  # room for two
    cache = KernelCache(BASE, BACKEND)
    assert cache.prefetch("pocl 6.0") == 2 and cache.prefetched == 2
    ahead = set(cache._ahead)
    assert ahead <= {k.columns() for k in entries} and key(3).columns() not in ahead
    for k, binary in list(entries.items())[:3]:
        assert cache.get(k) == binary  # from memory or, past the cap, from the file
    assert cache._ahead == {} and cache.hits == 3
    assert cache.get(key(3)) is None and cache.misses == 1  # the damaged entry: a miss, as before
    assert cache.get(other) == b"other" * 50  # another compiler's: read when asked
