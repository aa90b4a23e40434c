"""Does find's cuBLASLt search pick the config that is fastest on the caller's tensors? For each
1x1 case: the search as a NORMAL find runs it (engine.tune on the case's tensors, L2 flushed),
every first sample kept; then the ``--top`` fastest first samples, the search's winner, cuDNN and
classic cuBLAS raced in ``--rounds`` interleaved rounds, each config twice: on the caller's
tensors (``@caller``, as benchmarks/conv.py times it) and on private copies of them (``@copy``,
as find timed before it used the inputs in place).

    python3 benchmarks/lt_1x1_race.py [--cases fp16:11F,bf16:7F,...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import conv as bench  # noqa: E402  (benchmarks/conv.py: torch first, then miopy)

torch = bench.torch
LT = {"F": "GemmLtFwd1x1", "B": "GemmLtBwd1x1", "W": "GemmLtWrw1x1"}
CLASSIC = {"F": "GemmFwd1x1_0_1", "B": "GemmBwd1x1_stride1", "W": "GemmWrw1x1_stride1"}
TYPES = {"fp16": "float16", "bf16": "bfloat16"}


def short(cfg: dict) -> str:
    return (
        f"{cfg['order']} id{cfg['id']} t{cfg['tile']} s{cfg['stages']} c{cfg['custom']} g{cfg['cluster']} "
        f"k{cfg['splitk']}/{cfg['reduction']} sw{cfg['swizzle']}"
    )


def race_case(spec: str, args, handle, lines: list[str]) -> dict:
    from miopy.engine import bench as engine_bench
    from miopy.engine import tune
    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name

    dtype, _, rest = spec.partition(":")
    number, d = int(rest[:-1]), rest[-1]
    problem = bench.layer_problem(lines[number - 1], dtype, "NHWC", d)
    case = bench.Case(problem, getattr(torch, TYPES[dtype]), True)
    backend = handle.backend
    solver = by_name(LT[d])
    first: list[tuple[str, float]] = []
    original = engine_bench.median_time

    def recording(handle_, solution, prepared, **kw):
        ms = original(handle_, solution, prepared, **kw)
        first.append((json.dumps(solution.config, sort_keys=True), ms))
        return ms

    t0 = time.perf_counter()
    engine_bench.median_time = recording
    try:
        tuned = tune.tune(handle, problem, [solver], tensors=case.find_tensors())
    finally:
        engine_bench.median_time = original
    search_s = time.perf_counter() - t0
    winner = json.dumps(tuned[solver.name][0], sort_keys=True)
    n = len({k for k, _ in first})
    firsts = first[:n]  # the first pass: one sample per config, in search order
    rank = {k: i for i, (k, _) in enumerate(sorted(firsts, key=lambda p: p[1]))}
    first_ms = dict(firsts)
    picked = [k for k, _ in sorted(firsts, key=lambda p: p[1])[: args.top]]
    if winner not in picked:
        picked.append(winner)
    tensors = case.miopy_tensors()
    torch_fn = case.torch_fn()
    fns = {"cudnn": torch_fn}
    classic = by_name(CLASSIC[d])
    view = problem.solver_view()
    if classic.is_applicable(handle, view) is None:
        csol = make_solution(handle, problem, classic)
        fns["cublas"] = lambda: csol.run(handle, tensors)
    os.environ["MIOPY_FIND_COPY_INPUTS"] = "1"
    try:
        copies = engine_bench.device_args(handle, make_solution(handle, problem, solver), case.find_tensors())
    finally:
        del os.environ["MIOPY_FIND_COPY_INPUTS"]
    for key in picked:
        sol = make_solution(handle, problem, solver, json.loads(key))
        fns[key + "@caller"] = (lambda s: lambda: s.run(handle, tensors))(sol)
        invoker = handle.prepare_invoker(sol)
        args_ = engine_bench._with_workspace(handle, sol, copies)
        fns[key + "@copy"] = engine_bench._run_fn(handle, sol, invoker, args_)
    for fn in fns.values():
        fn()
    samples = bench.interleaved_samples(
        lambda fn: backend.device_time_ms(fn, args.runs, True) * 1e3, fns, args.rounds
    )
    med = {k: statistics.median(v) for k, v in samples.items()}
    cud = med["cudnn"]
    print(
        f"{spec}: {n} configs searched in {search_s:.1f}s; cuDNN {cud:.2f} us, classic "
        f"{med.get('cublas', float('nan')):.2f} ({med.get('cublas', float('nan')) / cud:.3f}x)",
        flush=True,
    )
    print("    config                                         first(rank)  @caller        @copy", flush=True)
    for key in sorted(picked, key=lambda k: med[k + "@caller"]):
        c, p = med[key + "@caller"], med[key + "@copy"]
        mark = " <- find's winner" if key == winner else ""
        print(
            f"    {short(json.loads(key)):46s} {first_ms[key] * 1e3:6.2f} ({rank[key]:3d})  "
            f"{c:6.2f} {c / cud:.3f}x  {p:6.2f} {p / cud:.3f}x{mark}",
            flush=True,
        )
    return {"case": spec, "winner": winner, "first_ms": first_ms, "samples_us": samples, "search_s": search_s}


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default=os.path.join(here, "resnet50.txt"))
    ap.add_argument("--cases", default="fp16:11F,bf16:7F")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    began = time.perf_counter()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    os.environ.setdefault("MIOPY_BENCH_FLUSH_L2", "1")
    import miopy

    handle = miopy.Handle("cuda")
    lines = bench.read_workload(args.workload)
    results = []
    for spec in (s.strip() for s in args.cases.split(",") if s.strip()):
        if time.perf_counter() - began > args.budget_s:
            print(f"# budget spent, skipping from {spec}", flush=True)
            break
        try:
            results.append(race_case(spec, args, handle, lines))
        except Exception as exc:  # report and go on
            print(f"{spec}: {type(exc).__name__}: {exc}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
    print(f"# {time.perf_counter() - began:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
