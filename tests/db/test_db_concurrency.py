from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

WORKERS, COUNT = 8, 50
REPO = Path(__file__).resolve().parents[2]


def test_many_processes_write_at_once(db_env):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env["MIOPY_USER_DB_PATH"] = env["MIOPY_CUSTOM_CACHE_DIR"]  # kernels, perf and find in one directory
    worker = Path(__file__).with_name("_concurrent_worker.py")
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(w), str(COUNT)], env=env, stderr=subprocess.PIPE, text=True
        )
        for w in range(WORKERS)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "cannot use" not in err and "corrupt" not in err, err
    tables = {"gfx_mp.opencl.ukdb": ["kern_db"], "gfx_mp.opencl.udb": ["perf_db", "find_db"]}
    for name, names in tables.items():
        with sqlite3.connect(db_env["cache"] / name) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            counts = [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in names]
        assert (
            counts == [WORKERS * COUNT]
            if names == ["kern_db"]
            else [WORKERS * COUNT, WORKERS * COUNT // 5 * 3]
        )
