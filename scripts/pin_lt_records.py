"""Rewrite the GemmLtWrw1x1Nchw records of a perf/find DB file (a shipped system DB) that name
their cuBLASLt algorithm by an index into the heuristics' list so that they name it by its
attribute values (``{"mode": m, "algo": [id, tile, stages, ...]}``): the same algorithm, which a
fresh process then rebuilds and checks (cublasLtMatmulAlgoCheck) without asking the heuristics
(about a millisecond a product). Run on the GPU the records were made on (the index means what
that library's heuristics answered there); records it cannot pin stay as they are.

    python3 scripts/pin_lt_records.py miopy/data/sm_9084.db [--dry-run]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
SOLVER = "GemmLtWrw1x1Nchw"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    from tune_igemm_db import has_table, seal

    from miopy.handle import Handle
    from miopy.problem.conv import ConvProblem
    from miopy.solvers import by_name

    handle = Handle("cuda")
    solver = by_name(SOLVER, "conv")
    work = Path(tempfile.mkdtemp(prefix="miopy-pin-")) / args.db.name
    shutil.copyfile(args.db, work)
    pinned = kept = 0
    with contextlib.closing(sqlite3.connect(work)) as conn:
        for table in ("perf_db", "find_db"):
            if not has_table(conn, table):
                continue
            rows = conn.execute(
                f"SELECT rowid, problem_key, params FROM {table} WHERE primitive = 'conv' AND solver = ?",
                (SOLVER,),
            ).fetchall()
            for rowid, key, params in rows:
                config = json.loads(params) if params else None
                if not isinstance(config, dict) or type(config.get("algo")) is not int:
                    continue
                view = ConvProblem.parse(key).solver_view()
                new = solver.pin(handle, view, config)
                if new is None or not solver.is_valid_config(handle, view, new):
                    print(f"{table} {key}: {params} kept (cannot pin it here)")
                    kept += 1
                    continue
                print(f"{table} {key}: {params} -> {json.dumps(new, sort_keys=True)}")
                conn.execute(
                    f"UPDATE {table} SET params = ? WHERE rowid = ?", (json.dumps(new, sort_keys=True), rowid)
                )
                pinned += 1
        conn.commit()
    print(f"{pinned} records pinned by attributes, {kept} kept as they were")
    if not args.dry_run and pinned:
        seal(work, args.db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
