"""``miopy info`` and ``miopy cache``: on PoCL, without any GPU, and on damaged files."""

from __future__ import annotations

import hashlib
import sqlite3
import time

from miopy import backends, config
from miopy.backends.base import KERNEL_ROOT, expand_includes
from miopy.db.kernel_cache import SCHEMA_VERSION, KernelCache, KernelKey


def test_info_names_backends_devices_paths_and_environment(ocl, dirs, tool, tool_json):
    data = tool_json("info")
    assert data["miopy_version"] == config.VERSION
    assert set(data["backends"]) == set(backends.NAMES)
    assert data["backends"]["opencl"] == "available"
    device = next(d for d in data["devices"] if d["backend"] == "opencl")
    assert device["db_basename"] == ocl.db_basename and device["compute_units"] == ocl.info.compute_units
    assert device["kernel_package"] is None
    written = {entry["path"] for entry in data["paths"].values()}
    assert {str(dirs["cache"]), str(dirs["db"]), str(dirs["system"]), str(dirs["kdb"])} <= written
    assert data["environment"]["MIOPY_KDB_PATH"] == str(dirs["kdb"])
    code, out, _ = tool("info")
    assert code == 0 and "opencl: available" in out and ocl.db_basename in out


def test_info_without_any_backend(monkeypatch, tool):
    monkeypatch.setattr(backends, "unavailable_reason", lambda name: f"{name} is not here")
    code, out, err = tool("info")
    assert code == 0 and "cuda: unavailable: cuda is not here" in out and "devices:\n  none" in out


def test_module_entry_point(run_module):
    done = run_module("info", "--json")
    assert done.returncode == 0 and '"miopy_version"' in done.stdout
    done = run_module("cache", "bogus")
    assert done.returncode == 2 and "Traceback" not in done.stderr


def _current_hash(file: str) -> str:
    return hashlib.sha256(expand_includes((KERNEL_ROOT / "opencl" / file).read_text()).encode()).hexdigest()


def _fill(base: str = "gfx_test_4") -> KernelCache:
    cache = KernelCache(base, "opencl")
    good = KernelKey("activ.cl", "good", "-DA=1", _current_hash("activ.cl"), "pocl x")
    cache.put(good, b"good binary" * 10)
    cache.put(KernelKey("activ.cl", "changed", "-DA=2", "0" * 64, "pocl x"), b"stale" * 10)
    cache.put(KernelKey("gone.cl", "gone", "", "1" * 64, "pocl x"), b"gone" * 10)
    cache.put(KernelKey("activ.cl", "old", "-DA=3", _current_hash("activ.cl"), "pocl x"), b"old" * 10)
    cache.close()
    path = config.cache_dir() / f"{base}.opencl.ukdb"
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE kern_db SET created = ?, miopy_version = '0.0.1' WHERE kernel_name = 'old'",
        (time.time() - 40 * 86400,),
    )
    conn.commit()
    conn.close()
    return cache


def test_cache_list_stats_prune_clear(tool, tool_json):
    _fill()
    rows = tool_json("cache", "list")
    assert sorted(r["name"] for r in rows) == ["changed", "gone", "good", "old"]
    assert all(r["size"] > 0 for r in rows)
    code, out, _ = tool("cache", "list")
    assert code == 0 and "activ.cl good [-DA=1]" in out and "age" in out
    (stats,) = tool_json("cache", "stats")
    assert stats["entries"] == 4 and stats["versions"] == {config.VERSION: 3, "0.0.1": 1}
    dry = tool_json("cache", "prune", "--dry-run")
    assert dry["files"][0]["removed"] == 2
    assert len(tool_json("cache", "list")) == 4  # a dry run changes nothing
    report = tool_json("cache", "prune")
    assert report["files"][0]["reasons"] == {"kernel source changed": 1, "kernel file gone": 1}
    assert sorted(r["name"] for r in tool_json("cache", "list")) == ["good", "old"]
    report = tool_json("cache", "prune", "--older-than", "30")
    assert report["files"][0]["removed"] == 1
    assert [r["name"] for r in tool_json("cache", "list")] == ["good"]
    assert tool_json("cache", "prune", "--not-this-version")["files"][0]["removed"] == 0
    code, out, _ = tool("cache", "clear")
    assert code == 0 and "removed" in out
    assert tool_json("cache", "list") == []


def test_cache_prune_removes_damaged_binaries(tool, tool_json):
    """An entry whose binary fails its integrity check (bytes flipped on disk, a size or hash that
    no longer matches) is reported and removed; intact ones stay, and get() still reads them."""
    import zlib

    cache = _fill()
    path = config.cache_dir() / "gfx_test_4.opencl.ukdb"
    conn = sqlite3.connect(path)
    blob = bytearray(conn.execute("SELECT kernel_blob FROM kern_db WHERE kernel_name = 'good'").fetchone()[0])
    blob[len(blob) // 2] ^= 0xFF  # one flipped byte: no longer the compressed binary
    conn.execute("UPDATE kern_db SET kernel_blob = ? WHERE kernel_name = 'good'", (bytes(blob),))
    # 'old' decompresses, but to something else than its stored hash says
    other = zlib.compress(b"old" * 10 + b"!")
    conn.execute("UPDATE kern_db SET kernel_blob = ? WHERE kernel_name = 'old'", (other,))
    conn.commit()
    conn.close()
    dry = tool_json("cache", "prune", "--dry-run")
    assert dry["files"][0]["reasons"]["damaged binary"] == 2
    code, out, _ = tool("cache", "prune")
    assert code == 0 and "2 damaged binary" in out
    assert tool_json("cache", "list") == []  # the other two were stale: nothing is left
    cache = KernelCache("gfx_test_4", "opencl")
    fresh = KernelKey("activ.cl", "fresh", "", _current_hash("activ.cl"), "pocl x")
    cache.put(fresh, b"fresh binary")
    cache.close()
    assert tool_json("cache", "prune")["files"][0]["removed"] == 0
    assert KernelCache("gfx_test_4", "opencl").get(fresh) == b"fresh binary"


def test_cache_prune_other_versions(tool_json):
    _fill()
    report = tool_json("cache", "prune", "--not-this-version")
    assert report["files"][0]["reasons"]["miopy 0.0.1"] == 1


def test_cache_on_a_damaged_file(tool, warned_messages):
    config.cache_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    (config.cache_dir() / "gfx_bad_4.opencl.ukdb").write_bytes(b"this is not SQLite" * 100)
    for args in (("cache", "list"), ("cache", "stats"), ("cache", "prune")):
        code, out, err = tool(*args)
        assert code == 0, err
    assert any("corrupt" in m for m in warned_messages())


def test_info_into_a_closed_pipe_exits_quietly():
    """``miopy info | head``: the reader is gone before miopy writes (``true`` reads nothing and
    exits at once, long before Python has started); exit 0, nothing on stderr."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        f"{sys.executable} -m miopy info | true; exit ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=300,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_bad_duration_is_one_line(tool):
    code, _, err = tool("cache", "prune", "--older-than", "soon")
    assert code == 1 and err.startswith("miopy: --older-than='soon'")


def test_version_1_cache_is_converted(tool_json):
    path = config.cache_dir() / "gfx_old_4.opencl.ukdb"
    config.cache_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    conn = sqlite3.connect(path)
    conn.executescript(
        """CREATE TABLE meta (component TEXT PRIMARY KEY, version INTEGER);
        INSERT INTO meta VALUES ('kern_db', 1);
        CREATE TABLE kern_db (id INTEGER PRIMARY KEY, kernel_file TEXT NOT NULL, kernel_name TEXT NOT NULL,
            kernel_args TEXT NOT NULL, source_hash TEXT NOT NULL, fingerprint TEXT NOT NULL,
            kernel_blob BLOB NOT NULL, kernel_hash TEXT NOT NULL, uncompressed_size INTEGER NOT NULL,
            UNIQUE (kernel_file, kernel_name, kernel_args, source_hash, fingerprint));"""
    )
    import zlib

    blob = b"v1 binary"
    conn.execute(
        "INSERT INTO kern_db VALUES (1, 'activ.cl', 'k', '', 'h', 'f', ?, ?, ?)",
        (zlib.compress(blob), hashlib.sha256(blob).hexdigest(), len(blob)),
    )
    conn.commit()
    conn.close()
    (row,) = tool_json("cache", "list")
    assert row["name"] == "k" and row["created"] == 0 and row["version"] == ""
    assert KernelCache("gfx_old_4", "opencl").get(KernelKey("activ.cl", "k", "", "h", "f")) == blob
    assert SCHEMA_VERSION == 2
