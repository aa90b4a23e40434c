"""Put the find records of a benchmark run into the system DB that the package installs
(``miopy/data/<arch>_<cu>.db``), so that immediate mode on that device ranks solvers the way a
NORMAL find on it did, with no find of the user's own.

    MIOPY_USER_DB_PATH=/tmp/run python benchmarks/conv.py ...     # on the device: finds, L2 flushed
    python scripts/ship_find_db.py /tmp/run/sm_9084.cuda.udb --command "benchmarks/conv.py ..."

Each problem's ranked list in the source replaces the system file's list for that problem (lists
of other problems are kept); perf records of the source are added where the system file has none
for that solver and problem (the tuned records already shipped win), except for the solvers named
in ``--replace-perf``, whose records in the source replace the shipped ones (configs that find
itself searched, as the cuBLASLt solvers' are: the list and the perf record then agree). A record
of what was added is appended to ``<basename>.txt`` beside the DB. Runs anywhere (no GPU
needed): it only moves SQLite rows."""

from __future__ import annotations

import argparse
import datetime
import itertools
import shutil
import sqlite3
import sys
from pathlib import Path

from tune_igemm_db import has_table, seal

ROOT = Path(__file__).resolve().parents[1]
FIND_COLUMNS = "primitive, problem_key, rank, solver, time_ms, workspace, algorithm, params, version"
PERF_COLUMNS = "primitive, problem_key, solver, params, version"


def base_of(source: Path) -> str:
    """``sm_9084`` of ``sm_9084.cuda.udb``."""
    name = source.name
    if not name.endswith(".cuda.udb"):
        raise SystemExit(f"ship_find_db: {source}: expected a CUDA user DB, <basename>.cuda.udb")
    return name.removesuffix(".cuda.udb")


def ship(
    source: Path, out_dir: Path, replace_perf: frozenset[str] = frozenset()
) -> tuple[Path, list[str], str]:
    """Merge ``source``'s find lists (and missing perf records) into ``out_dir/<base>.db``;
    returns the file, one line per problem shipped and a note on the perf records replaced."""
    base = base_of(source)
    dst = out_dir / f"{base}.db"
    if not dst.is_file():
        raise SystemExit(f"ship_find_db: {dst} does not exist (ship the tuned perf DB first)")
    tmp = dst.with_suffix(".new")
    tmp.unlink(missing_ok=True)
    shutil.copy(dst, tmp)
    lines = []
    with sqlite3.connect(f"file:{source}?mode=ro", uri=True) as src, sqlite3.connect(tmp) as new:
        rows = src.execute(
            f"SELECT {FIND_COLUMNS} FROM find_db ORDER BY primitive, problem_key, rank"
        ).fetchall()
        perf = (
            src.execute(f"SELECT {PERF_COLUMNS} FROM perf_db").fetchall() if has_table(src, "perf_db") else []
        )
        for (primitive, key), group in itertools.groupby(rows, key=lambda r: (r[0], r[1])):
            new.execute("DELETE FROM find_db WHERE primitive = ? AND problem_key = ?", (primitive, key))
            best, *rest = group  # ordered by rank
            lines.append(f"{primitive} {key}: {best[3]} {best[4] * 1e3:.1f} us first of {1 + len(rest)}")
        new.executemany(f"INSERT INTO find_db ({FIND_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        kept = [r for r in perf if r[2] not in replace_perf]
        replaced = [r for r in perf if r[2] in replace_perf]
        new.executemany(f"INSERT OR IGNORE INTO perf_db ({PERF_COLUMNS}) VALUES (?, ?, ?, ?, ?)", kept)
        new.executemany(f"INSERT OR REPLACE INTO perf_db ({PERF_COLUMNS}) VALUES (?, ?, ?, ?, ?)", replaced)
        names = ", ".join(sorted({r[2] for r in replaced}))
        note = f"{len(replaced)} perf records replaced ({names})\n" if replaced else ""
        new.commit()
    src.close()
    new.close()  # a connection's `with` commits but leaves it open
    seal(tmp, dst)
    return dst, lines, note


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="the user DB a find run wrote: <basename>.cuda.udb")
    ap.add_argument("--out", default=str(ROOT / "miopy" / "data"))
    ap.add_argument("--command", default="", help="how the source was made, for the record")
    ap.add_argument("--device", default="", help="the device it ran on, for the record")
    ap.add_argument(
        "--replace-perf", default="", help="comma-separated solvers whose perf records in the source win"
    )
    args = ap.parse_args()
    source = Path(args.source)
    if not source.is_file():
        print(f"ship_find_db: {source}: no such file", file=sys.stderr)
        return 1
    replace = frozenset(s.strip() for s in args.replace_perf.split(",") if s.strip())
    dst, lines, note = ship(source, Path(args.out), replace)
    record = dst.with_suffix(".txt")
    now = datetime.datetime.now(datetime.UTC)
    text = record.read_text() if record.exists() else ""
    text += (
        f"\nFind DB: {len(lines)} ranked lists added {now:%Y-%m-%d %H:%M} UTC from a NORMAL find"
        f"{' on ' + args.device if args.device else ''}"
        f"{' by' if args.command else ''}\n"
        f"{'  ' + args.command + chr(10) if args.command else ''}"
        "(each problem's solvers timed by find with the L2 flushed; immediate mode ranks by these)\n"
        + note
        + "\n"
        + "".join(f"{line}\n" for line in lines)
    )
    record.write_text(text)
    print(f"wrote {len(lines)} find lists into {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
