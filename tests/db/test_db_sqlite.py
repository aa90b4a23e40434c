"""SqliteFile on its own: schema versions, shared files, and two repairers racing."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from miopy.db.sqlite import SqliteFile

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v TEXT);"
PUT = "INSERT OR REPLACE INTO t VALUES (?, ?)"


def open_file(path: Path, version: int = 2, component: str = "t", schema: str = SCHEMA) -> SqliteFile:
    return SqliteFile(path, component, schema, version)


def test_write_and_query(tmp_path):
    db = open_file(tmp_path / "a.db")
    assert db.write([(PUT, ("a", "1")), (PUT, ("b", "2"))])
    assert db.query("SELECT k, v FROM t ORDER BY k") == [("a", "1"), ("b", "2")]
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT component, version FROM meta").fetchall() == [("t", 2)]


def test_a_failed_statement_rolls_the_whole_write_back(tmp_path, warned):
    db = open_file(tmp_path / "a.db")
    assert not db.write([(PUT, ("a", "1")), ("INSERT INTO nowhere VALUES (1)", ())])
    assert len(warned()) == 1
    assert open_file(tmp_path / "a.db").query("SELECT * FROM t") == []


def test_components_share_a_file(tmp_path):
    one = open_file(tmp_path / "a.db", component="one")
    two = open_file(tmp_path / "a.db", component="two", schema="CREATE TABLE IF NOT EXISTS u (x INTEGER);")
    assert one.write([(PUT, ("a", "1"))])
    assert two.write([("INSERT INTO u VALUES (7)", ())])
    assert one.query("SELECT v FROM t") == [("1",)]
    assert two.query("SELECT x FROM u") == [(7,)]


def test_older_schema_starts_afresh_and_keeps_other_components(tmp_path, warned):
    path = tmp_path / "a.db"
    other = open_file(path, component="other", schema="CREATE TABLE IF NOT EXISTS u (x INTEGER);")
    assert other.write([("INSERT INTO u VALUES (7)", ())])
    assert open_file(path, version=1).write([(PUT, ("old", "1"))])
    newer = open_file(path, version=2)
    assert newer.query("SELECT * FROM t") == []
    assert newer.write([(PUT, ("new", "1"))])
    assert other.query("SELECT x FROM u") == [(7,)]
    assert len([w for w in warned() if "older" in w]) == 1


def test_newer_schema_is_left_alone(tmp_path, warned):
    path = tmp_path / "a.db"
    open_file(path, version=3).write([(PUT, ("future", "1"))])
    old = open_file(path, version=2)
    assert old.query("SELECT * FROM t") == []
    assert not old.write([(PUT, ("x", "1"))])
    assert not old.usable
    assert len(warned()) == 1
    assert open_file(path, version=3).query("SELECT * FROM t") == [("future", "1")]


def test_second_repairer_leaves_the_new_file_alone(tmp_path, warned):
    path = tmp_path / "a.db"
    path.write_bytes(b"garbage" * 100)
    first, second = open_file(path), open_file(path)
    second._stat()  # both saw the garbage file before either repaired it
    assert first.write([(PUT, ("a", "1"))])
    second._move_aside("seen at the same time")
    assert second.query("SELECT v FROM t") == [("1",)]
    assert len(list(tmp_path.glob("a.db.corrupt-*"))) == 1
    assert len([w for w in warned() if "corrupt" in w]) == 1


def test_missing_readonly_file_reads_nothing(tmp_path, warned):
    db = SqliteFile(tmp_path / "none.db", "t", SCHEMA, 2, readonly=True)
    assert db.query("SELECT * FROM t") == []
    assert not db.write([(PUT, ("a", "1"))])
    assert warned() == []
    assert not os.path.exists(tmp_path / "none.db")
