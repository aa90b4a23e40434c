"""Run one implicit-GEMM solution a few times, for a profiler (Nsight Compute) to catch one launch:

    ncu --clock-control none --kernel-name regex:'igemm_(fwd|bwd|wrw)$' --launch-skip 2 \\
        --launch-count 1 python scripts/profile_igemm.py --layer 12 --direction F --dtype fp16

The layer is a 1-based line of benchmarks/resnet50.txt in NHWC; ``--config`` (JSON) replaces the
solver's default (the perf DB's record where there is one). Needs a CUDA GPU."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SOLVERS = {"F": "ConvIgemmFwdNhwc", "B": "ConvIgemmBwdNhwc", "W": "ConvIgemmWrwNhwc"}
FLAG = {"F": 1, "B": 2, "W": 4}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", type=int, default=12)
    ap.add_argument("--direction", choices=list(SOLVERS), default="F")
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    ap.add_argument("--config", default="", help="JSON config (default: the solver's choice)")
    ap.add_argument("--solver", default="", help="a solver's name (default: the direction's ConvIgemm*Nhwc)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from conv import read_workload

    from miopy.engine import bench
    from miopy.engine.candidates import make_solution
    from miopy.handle import Handle
    from miopy.solvers import by_name
    from miopy.tool import workload

    line = read_workload(str(ROOT / "benchmarks" / "resnet50.txt"))[args.layer - 1]
    prefix = {"fp16": "convfp16", "bf16": "convbfp16"}[args.dtype]
    text = line.replace("conv ", f"{prefix} ", 1) + f" -I NHWC -O NHWC -f NHWC -F {FLAG[args.direction]}"
    problem = workload.problems_from_line(text)[0]
    handle = Handle("cuda")
    solver = by_name(args.solver or SOLVERS[args.direction], "conv")
    solution = make_solution(handle, problem, solver, json.loads(args.config) if args.config else None)
    prepared = bench.device_args(handle, solution, None)
    print(f"{problem.solver_view().key()} {solver.name} {solution.config}", flush=True)
    for _ in range(args.runs):
        bench.median_time(handle, solution, prepared, runs=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
