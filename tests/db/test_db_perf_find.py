from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from miopy import config
from miopy.db.find_db import FindDb, FindRecord
from miopy.db.perf_db import PerfDb

BASE, BACKEND = "gfx_test_4", "cuda"
KEY = "1-16-16-3x3-8-16-16-1-1x1-1x1-1x1-0-NCHW-FP32-F"


def udb(dirs: dict[str, Path]) -> Path:
    return dirs["user"] / f"{BASE}.{BACKEND}.udb"


def make_system_db(dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, fill) -> None:
    """Write through the DB classes into a scratch user dir and install the file as the system .db."""
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(dirs["system"] / "build"))
    perf, find = PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
    fill(perf, find)
    perf.close()
    find.close()
    shutil.copy(dirs["system"] / "build" / f"{BASE}.{BACKEND}.udb", dirs["system"] / f"{BASE}.db")
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(dirs["user"]))


def test_perf_round_trip(db_env):
    db = PerfDb(BASE, BACKEND)
    assert db.load(KEY, "ConvDirectNaiveFwd") is None
    db.store(KEY, "ConvDirectNaiveFwd", {"tile": 16, "vec": np.int64(4)})
    db.store(KEY, "ConvWinograd", {"variant": "f2x3"})
    again = PerfDb(BASE, BACKEND)
    assert again.load(KEY, "ConvDirectNaiveFwd") == {"tile": 16, "vec": 4}
    assert again.records(KEY) == {
        "ConvDirectNaiveFwd": {"tile": 16, "vec": 4},
        "ConvWinograd": {"variant": "f2x3"},
    }
    again.remove(KEY, "ConvWinograd")
    assert list(again.records(KEY)) == ["ConvDirectNaiveFwd"]
    again.remove(KEY)
    assert again.records(KEY) == {}


def test_perf_user_wins_over_system(db_env, monkeypatch):
    def fill(perf, find):
        perf.store(KEY, "A", {"tile": 8})
        perf.store(KEY, "B", {"tile": 8})

    make_system_db(db_env, monkeypatch, fill)
    db = PerfDb(BASE, BACKEND)
    assert db.load(KEY, "A") == {"tile": 8}
    db.store(KEY, "A", {"tile": 32})
    assert db.load(KEY, "A") == {"tile": 32}
    assert db.records(KEY) == {"A": {"tile": 32}, "B": {"tile": 8}}
    db.remove(KEY)  # DB_CLEAN drops the user records only
    assert db.load(KEY, "A") == {"tile": 8}


def test_record_of_another_version_is_returned(db_env, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(config, "VERSION", "0.0.1")
        PerfDb(BASE, BACKEND).store(KEY, "A", {"tile": 8})
    assert PerfDb(BASE, BACKEND).load(KEY, "A") == {"tile": 8}
    with sqlite3.connect(udb(db_env)) as conn:
        assert conn.execute("SELECT version FROM perf_db").fetchall() == [("0.0.1",)]


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_ill_formed_perf_record_is_a_miss(db_env, warned, text):
    db = PerfDb(BASE, BACKEND)
    db.store(KEY, "A", {"tile": 8})
    with sqlite3.connect(udb(db_env)) as conn:
        conn.execute("UPDATE perf_db SET params = ?", (text,))
    assert db.load(KEY, "A") is None
    assert db.records(KEY) == {}
    assert len(warned()) == 1


def test_unstorable_config_is_dropped(db_env, warned):
    db = PerfDb(BASE, BACKEND)
    db.store(KEY, "A", {"tile": object()})
    assert db.load(KEY, "A") is None
    assert len(warned()) == 1


RANKED = [
    FindRecord("ConvWinograd", 0.05, 4096, "miopenConvolutionFwdAlgoWinograd", {"variant": "f2x3"}),
    FindRecord("ConvDirectNaiveFwd", 0.5, 0, "miopenConvolutionFwdAlgoDirect", None),
    FindRecord("GemmFwd1x1", 0.2, 1 << 20, "miopenConvolutionFwdAlgoGEMM", {"split": 2}),
]


def test_find_round_trip_keeps_ranking(db_env):
    db = FindDb(BASE, BACKEND)
    assert db.load(KEY) is None
    db.store(KEY, RANKED)
    assert FindDb(BASE, BACKEND).load(KEY) == RANKED
    db.store(KEY, RANKED[1:])
    assert db.load(KEY) == RANKED[1:]
    db.remove(KEY)
    assert db.load(KEY) is None


def test_find_user_list_wins_whole(db_env, monkeypatch):
    make_system_db(db_env, monkeypatch, lambda perf, find: find.store(KEY, RANKED))
    db = FindDb(BASE, BACKEND)
    assert db.load(KEY) == RANKED
    db.store(KEY, RANKED[2:])
    assert db.load(KEY) == RANKED[2:]


def test_system_records_are_read_in_one_query(db_env, monkeypatch):
    """A network's first iteration asks the system file about each of its problems: its rows
    are read once, on first use, and every answer comes from them (the user file still first)."""
    other = KEY.replace("-F", "-B")

    def fill(perf, find):
        find.store(KEY, RANKED)
        find.store(other, RANKED[1:2])
        perf.store(KEY, "A", {"tile": 8})
        perf.store(KEY, "B", {"tile": 4})
        perf.store(other, "A", {"tile": 2})

    make_system_db(db_env, monkeypatch, fill)
    find, perf = FindDb(BASE, BACKEND), PerfDb(BASE, BACKEND)
    asked = []
    for db in (find._system, perf._system):
        real = db.query
        monkeypatch.setattr(db, "query", lambda *a, real=real: asked.append(a[0]) or real(*a))
    for _ in range(2):
        assert find.load(KEY) == RANKED and find.load(other) == RANKED[1:2]
        assert find.load("1-2-3") is None and find.load(KEY, primitive="activ") is None
        assert perf.load(KEY, "A") == {"tile": 8} and perf.load(KEY, "C") is None
        assert perf.records(KEY) == {"A": {"tile": 8}, "B": {"tile": 4}}
        assert perf.load(other, "A") == {"tile": 2} and perf.records("1-2-3") == {}
    assert len(asked) == 2  # one query of each table
    find.store(other, RANKED[2:])
    perf.store(KEY, "A", {"tile": 16})
    assert find.load(other) == RANKED[2:] and perf.load(KEY, "A") == {"tile": 16}


def test_perf_and_find_share_the_user_file(db_env):
    PerfDb(BASE, BACKEND).store(KEY, "A", {"tile": 8})
    FindDb(BASE, BACKEND).store(KEY, RANKED)
    with sqlite3.connect(udb(db_env)) as conn:
        assert conn.execute("SELECT count(*) FROM perf_db").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM find_db").fetchone() == (3,)


def test_disabled_find_db(db_env, monkeypatch):
    FindDb(BASE, BACKEND).store(KEY, RANKED)
    monkeypatch.setenv("MIOPY_DEBUG_DISABLE_FIND_DB", "1")
    db = FindDb(BASE, BACKEND)
    assert db.load(KEY) is None
    db.store(KEY, RANKED[:1])
    db.remove(KEY)
    monkeypatch.delenv("MIOPY_DEBUG_DISABLE_FIND_DB")
    assert db.load(KEY) == RANKED


def test_ill_formed_find_record_is_a_miss(db_env, warned):
    db = FindDb(BASE, BACKEND)
    db.store(KEY, RANKED)
    with sqlite3.connect(udb(db_env)) as conn:
        conn.execute("UPDATE find_db SET params = '{' WHERE rank = 2")
    assert db.load(KEY) is None
    assert len(warned()) == 1


def test_unwritable_user_dir(db_env, monkeypatch, warned, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(blocker / "miopy"))
    perf, find = PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
    perf.store(KEY, "A", {"tile": 8})
    find.store(KEY, RANKED)
    assert perf.load(KEY, "A") is None
    assert find.load(KEY) is None
    assert len(warned()) == 1


V1_SCHEMA = """
CREATE TABLE meta (component TEXT PRIMARY KEY, version INTEGER);
INSERT INTO meta VALUES ('perf_db', 1), ('find_db', 1);
CREATE TABLE perf_db (
    problem_key TEXT NOT NULL, solver TEXT NOT NULL, params TEXT NOT NULL, version TEXT NOT NULL,
    PRIMARY KEY (problem_key, solver)
);
CREATE TABLE find_db (
    problem_key TEXT NOT NULL, rank INTEGER NOT NULL, solver TEXT NOT NULL, time_ms REAL NOT NULL,
    workspace INTEGER NOT NULL, algorithm TEXT NOT NULL, params TEXT, version TEXT NOT NULL,
    PRIMARY KEY (problem_key, rank)
);
"""


def write_v1_file(path: Path) -> None:
    """A user file as miopy 0.1.0 wrote it before the primitive joined the keys."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(V1_SCHEMA)
        conn.execute("INSERT INTO perf_db VALUES (?, 'A', '{\"tile\": 8}', '0.1.0')", (KEY,))
        for rank, rec in enumerate(RANKED):
            params = None if rec.config is None else json.dumps(rec.config)
            row = (KEY, rank, rec.solver, rec.time_ms, rec.workspace, rec.algorithm, params, "0.1.0")
            conn.execute("INSERT INTO find_db VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
    conn.close()


def test_version_1_file_is_converted_in_place(db_env, warned):
    write_v1_file(udb(db_env))
    perf, find = PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
    assert perf.load(KEY, "A") == {"tile": 8}
    assert perf.load(KEY, "A", primitive="conv") == {"tile": 8}
    assert perf.load(KEY, "A", primitive="pool") is None
    assert find.load(KEY) == RANKED
    assert find.load(KEY, primitive="activ") is None
    assert warned() == []
    with sqlite3.connect(udb(db_env)) as conn:
        assert conn.execute("SELECT component, version FROM meta ORDER BY component").fetchall() == [
            ("find_db", 2),
            ("perf_db", 2),
        ]
        assert conn.execute("SELECT DISTINCT primitive FROM find_db").fetchall() == [("conv",)]
        assert conn.execute("SELECT primitive, solver FROM perf_db").fetchall() == [("conv", "A")]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"meta", "perf_db", "find_db"}
    conn.close()
    perf.store(KEY, "B", {"tile": 4})
    assert PerfDb(BASE, BACKEND).records(KEY) == {"A": {"tile": 8}, "B": {"tile": 4}}


def test_primitives_keep_their_own_records(db_env):
    perf, find = PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
    perf.store(KEY, "A", {"tile": 8})
    perf.store(KEY, "A", {"tile": 2}, primitive="pool")
    find.store(KEY, RANKED)
    find.store(KEY, RANKED[:1], primitive="pool")
    assert perf.load(KEY, "A") == {"tile": 8}
    assert perf.load(KEY, "A", primitive="pool") == {"tile": 2}
    assert perf.records(KEY, primitive="pool") == {"A": {"tile": 2}}
    assert find.load(KEY) == RANKED and find.load(KEY, primitive="pool") == RANKED[:1]
    perf.remove(KEY, primitive="pool")
    find.remove(KEY, primitive="pool")
    assert perf.load(KEY, "A", primitive="pool") is None and perf.load(KEY, "A") == {"tile": 8}
    assert find.load(KEY, primitive="pool") is None and find.load(KEY) == RANKED
    perf.remove(KEY, "A")
    assert perf.records(KEY) == {}


@pytest.mark.parametrize("damage", ["DROP TABLE find_db", "DROP TABLE perf_db"])
def test_damaged_schema_is_repaired_once(db_env, warned, damage):
    PerfDb(BASE, BACKEND).store(KEY, "A", {"tile": 8})
    FindDb(BASE, BACKEND).store(KEY, RANKED)
    with sqlite3.connect(udb(db_env)) as conn:
        conn.execute(damage)  # meta still says the component is current
    conn.close()
    for _ in range(2):
        perf, find = PerfDb(BASE, BACKEND), FindDb(BASE, BACKEND)
        perf.store(KEY, "B", {"tile": 4})
        find.store(KEY, RANKED[:2], primitive="pool")
        assert perf.load(KEY, "B") == {"tile": 4}
        assert find.load(KEY, primitive="pool") == RANKED[:2]
        perf.close()
        find.close()
    # The untouched component keeps its rows; the damaged one was recreated, said once.
    if "find_db" in damage:
        assert PerfDb(BASE, BACKEND).load(KEY, "A") == {"tile": 8}
    else:
        assert FindDb(BASE, BACKEND).load(KEY) == RANKED
    assert len(warned()) == 1 and "damaged" in warned()[0], warned()


@pytest.mark.parametrize(
    "column, value",
    [("time_ms", -1.0), ("time_ms", float("inf")), ("time_ms", "fast"), ("workspace", -4), ("solver", "")],
)
def test_nonsense_find_record_is_ignored_once(db_env, warned, column, value):
    db = FindDb(BASE, BACKEND)
    db.store(KEY, RANKED)
    with sqlite3.connect(udb(db_env)) as conn:
        conn.execute(f"UPDATE find_db SET {column} = ? WHERE rank = 0", (value,))
    conn.close()
    for _ in range(2):
        assert FindDb(BASE, BACKEND).load(KEY) == RANKED[1:]
    assert len(warned()) == 1 and "ignoring a record" in warned()[0], warned()
