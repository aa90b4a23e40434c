"""Tune the implicit-GEMM solvers on the benchmark's layers with miopy's own tuner (engine.tune,
exhaustive over each solver's search space, builds in parallel) and write the winners as a system
perf DB for this device (``miopy/data/<arch>_<cu>.db``, what the package installs) with a text
record of how it was made beside it. Needs a CUDA GPU.

    python scripts/tune_igemm_db.py [--dtypes fp16,bf16] [--layers 3,6,9,12] [--out miopy/data]

The layers are 1-based lines of benchmarks/resnet50.txt, each tuned in NHWC in every direction.
Tuning times with the L2 cache flushed before each run (MIOPY_BENCH_FLUSH_L2=1), as the
benchmark does. The records go to a scratch user DB first; existing records of the output file
for other problems are kept (the new ones win)."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DTYPE_PREFIX = {"fp16": "convfp16", "bf16": "convbfp16"}
IGEMM = ("ConvIgemmFwdNhwc", "ConvIgemmBwdNhwc", "ConvIgemmWrwNhwc")


def workload_lines(layers: list[int]) -> list[str]:
    from conv import read_workload

    lines = read_workload(str(ROOT / "benchmarks" / "resnet50.txt"))
    return [lines[i - 1] for i in layers]


def record_measurements(log_path: Path) -> None:
    """Every config engine.tune's exhaustive search times, one JSON line each in ``log_path``
    (the search itself unchanged; engine.tune builds in parallel for exactly this function, so it
    is replaced under both of its names)."""
    import json

    from miopy.engine import tune as engine_tune

    plain = engine_tune.exhaustive

    def exhaustive(configs, measure):
        def logged(cfg):
            ms = measure(cfg)
            with open(log_path, "a") as f:
                f.write(json.dumps({"config": cfg, "ms": ms}) + "\n")
            return ms

        return plain(configs, logged)

    engine_tune.exhaustive = exhaustive
    engine_tune.STRATEGIES["exhaustive"] = exhaustive


def tune_all(
    dtypes: list[str], layers: list[int], done: Callable[[list[str]], None], log_path: Path | None = None
) -> list[str]:
    """Tune every igemm solver on every problem; returns one summary line per problem (the
    device first), calling ``done`` with the lines so far after each problem."""
    from miopy.engine import bench
    from miopy.engine import tune as engine_tune
    from miopy.engine.candidates import applicable, make_solution
    from miopy.handle import Handle
    from miopy.tool import workload

    handle = Handle("cuda")
    out = [f"device: {handle.info.name}, {handle.info.arch}, {handle.info.compute_units} SMs"]
    print(out[0], flush=True)
    for line in workload_lines(layers):
        for dtype in dtypes:
            text = line.replace("conv ", f"{DTYPE_PREFIX[dtype]} ", 1) + " -I NHWC -O NHWC -f NHWC -F 0"
            for problem in workload.problems_from_line(text):
                solvers = [s for s in applicable(handle, problem) if s.name in IGEMM]
                if not solvers:
                    continue
                solver = solvers[0]
                view = problem.solver_view()
                started = time.monotonic()
                if log_path is not None:
                    with open(log_path, "a") as f:
                        f.write(f"# {view.key()} {solver.name}\n")
                found = engine_tune.tune(handle, problem, [solver])
                seconds = time.monotonic() - started
                default = solver.default_config(handle, view)
                sol = make_solution(handle, problem, solver, default)
                default_ms = bench.median_time(handle, sol, bench.device_args(handle, sol, None), runs=5)
                if solver.name in found:
                    cfg, ms = found[solver.name]
                    row = (
                        f"{view.key()} {solver.name}: default {default_ms * 1e3:.1f} us -> tuned "
                        f"{ms * 1e3:.1f} us ({default_ms / ms:.2f}x) {cfg} [{seconds:.0f} s, "
                        f"{len(list(solver.search_space(handle, view)))} configs]"
                    )
                else:
                    row = f"{view.key()} {solver.name}: nothing ran"
                print(row, flush=True)
                out.append(row)
                done(out)
    return out


def install(user_dir: Path, out_dir: Path, basename: str) -> Path:
    """The scratch user DB's perf records merged into ``out_dir/<basename>.db`` (a plain
    rollback-journal file, as a read-only system DB is opened); the file's find lists are kept
    and tuning's own find records are not shipped."""
    src = user_dir / f"{basename}.cuda.udb"
    dst = out_dir / f"{basename}.db"
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".new")
    tmp.unlink(missing_ok=True)
    with sqlite3.connect(src) as conn, sqlite3.connect(tmp) as new:
        conn.backup(new)
    with sqlite3.connect(tmp) as new:
        if has_table(new, "find_db"):
            new.execute("DELETE FROM find_db")
        if dst.exists():
            new.execute("ATTACH DATABASE ? AS old", (str(dst),))
            new.execute(
                "INSERT OR IGNORE INTO perf_db SELECT primitive, problem_key, solver, params, version "
                "FROM old.perf_db"
            )
            if has_table(new, "find_db"):  # the shipped find lists (scripts/ship_find_db.py) stay
                new.execute("INSERT INTO find_db SELECT * FROM old.find_db")
            new.commit()
            new.execute("DETACH DATABASE old")
        new.commit()
    new.close()  # a connection's `with` commits but leaves it open
    seal(tmp, dst)
    return dst


def seal(tmp: Path, dst: Path) -> None:
    """``tmp`` made a plain rollback-journal file (a system DB is opened read-only: no WAL),
    compacted, and moved over ``dst``."""
    with contextlib.closing(sqlite3.connect(tmp)) as new:
        new.execute("PRAGMA journal_mode=DELETE")
        new.execute("VACUUM")
    shutil.move(tmp, dst)


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchall())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--layers", default="3,6,9,12", help="1-based lines of benchmarks/resnet50.txt")
    ap.add_argument("--out", default=str(ROOT / "miopy" / "data"))
    ap.add_argument("--log", default="", help="also every config's time, as JSON lines, here")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="miopy-tune-"))
    os.environ["MIOPY_USER_DB_PATH"] = str(scratch)
    os.environ["MIOPY_BENCH_FLUSH_L2"] = "1"
    try:  # torch (when there) before cupy: see the benchmarks
        import torch  # noqa: F401
    except ImportError:
        pass
    import miopy
    from miopy.handle import Handle

    started = datetime.datetime.now(datetime.UTC)
    basename = Handle("cuda").db_basename

    record_path = Path(args.out) / f"{basename}.txt"
    earlier = record_path.read_text().splitlines() if record_path.exists() else []

    def done(rows: list[str]) -> None:  # the DB and its record after each problem
        dst = install(scratch, Path(args.out), basename)
        record = [
            f"{dst.name}: miopy's system perf DB for {rows[0].removeprefix('device: ')}",
            f"made {started:%Y-%m-%d %H:%M} UTC by miopy {miopy.__version__} with",
            f"  python scripts/tune_igemm_db.py --dtypes {args.dtypes} --layers {args.layers}",
            "(engine.tune, exhaustive over each implicit-GEMM solver's search space, L2 flushed before",
            "each timed run; the layers are lines of benchmarks/resnet50.txt in NHWC, every direction;",
            "'default' is the solver's default config of that version)",
            "",
            *rows[1:],
        ]
        if earlier:  # the records of earlier runs stay in the DB where not tuned again
            record += ["", "An earlier run into the same file:", *(f"  {line}" for line in earlier)]
        record_path.write_text("\n".join(record) + "\n")

    log_path = Path(args.log) if args.log else None
    if log_path is not None:
        record_measurements(log_path)
    tune_all(args.dtypes.split(","), [int(i) for i in args.layers.split(",")], done, log_path)
    dst = Path(args.out) / f"{basename}.db"
    print(f"wrote {dst}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
