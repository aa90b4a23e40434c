"""A corrupt user file is moved aside and what can still be read is kept, saying how much."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest

from miopy.db.find_db import FindDb, FindRecord
from miopy.db.kernel_cache import KernelCache, KernelKey
from miopy.db.perf_db import PerfDb

BASE, BACKEND = "gfx_salvage", "cuda"
ROWS = 2000


def leaf_pages(path: Path, table: str) -> list[tuple[int, int]]:
    """(page number, rows on it) of the table's leaf pages."""
    with sqlite3.connect(path) as conn:
        try:
            sql = "SELECT pageno, ncell FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno"
            pages = conn.execute(sql, (table,)).fetchall()
        except sqlite3.OperationalError:
            pytest.skip("this SQLite has no dbstat table to find a page to damage")
    conn.close()
    return pages


def damage_page(path: Path, page: int) -> None:
    with open(path, "r+b") as f:
        f.seek((page - 1) * 4096)
        f.write(b"\xa5" * 4096)


def test_readable_rows_are_kept_and_counted(db_env, warned):
    perf, find = PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
    for i in range(ROWS):
        perf.store(f"problem-{i}", "Solver", {"i": i})
    find.store("p", [FindRecord("Solver", 0.5, 0, "algo")])
    perf.close()
    find.close()
    path = db_env["user"] / f"{BASE}.{BACKEND}.udb"
    pages = leaf_pages(path, "perf_db")
    page, lost = pages[len(pages) // 2]
    damage_page(path, page)

    perf, find = PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
    found = [i for i in range(ROWS) if perf.load(f"problem-{i}", "Solver") == {"i": i}]
    assert len(found) == ROWS - lost
    assert find.load("p") == [FindRecord("Solver", 0.5, 0, "algo")]  # the other DB in the file too
    said = [w for w in warned() if "corrupt" in w]
    assert len(said) == 1, warned()
    kept = int(re.search(r"kept (\d+) readable rows", said[0]).group(1))
    assert kept == ROWS - lost + 1 + 2  # the find record and the two meta rows
    assert f"lost {lost}" in said[0]
    assert len(list(path.parent.glob(f"{path.name}.corrupt-*"))) == 1
    perf.store("new", "Solver", {"i": -1})
    assert PerfDb(BASE, BACKEND).load("new", "Solver") == {"i": -1}


def test_truncated_kernel_cache_keeps_its_first_half(db_env, warned):
    cache = KernelCache(BASE, BACKEND)
    entries = {KernelKey("k.cl", f"k{i}", "", "h", "fp"): os.urandom(4096) for i in range(100)}
    for key, binary in entries.items():
        cache.put(key, binary)
    cache.close()
    path = db_env["cache"] / f"{BASE}.{BACKEND}.ukdb"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    cache = KernelCache(BASE, BACKEND)
    hits = [key for key, binary in entries.items() if cache.get(key) == binary]
    assert 30 <= len(hits) < 100
    said = [w for w in warned() if "corrupt" in w]
    assert len(said) == 1 and f"kept {len(hits) + 1} readable rows" in said[0], said


def test_truncated_small_file_ends(db_env, warned):
    """A damaged b-tree can answer with the same all-NULL row forever; the salvage must end."""
    find = FindDb(BASE, BACKEND)
    for i in range(20):
        find.store(f"p{i}", [FindRecord("Solver", 0.5, 0, "algo" * 50)] * 3)
    find.close()
    path = db_env["user"] / f"{BASE}.{BACKEND}.udb"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    again = FindDb(BASE, BACKEND)
    loaded = [again.load(f"p{i}") for i in range(20)]
    assert all(r is None or r == [FindRecord("Solver", 0.5, 0, "algo" * 50)] * 3 for r in loaded)
    assert len([w for w in warned() if "corrupt" in w]) == 1, warned()
