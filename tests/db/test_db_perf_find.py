from __future__ import annotations

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
