"""A deeper search than the cuBLASLt 1x1 solvers' own, case by case, to learn which kinds of
candidate beat cuDNN where find's search space does not (benchmarks/lt_1x1_probe.py times that
space alone).

For every case: cuBLASLt candidates in groups (``space``: the solver's search space; ``tiles``:
every tile the algorithm lists around the best distinct picks of each formulation; ``stages``:
every stage count around them; ``wide``: every algorithm id x tile x stage count, for the cases
named by ``--wide``), each timed once (flushed, ``--runs`` runs, median); then combinations of
custom option, cluster shape and swizzle around the two fastest (``pairs2``); then the fastest
``--finalists``, the best of ``space``, the classic cuBLAS solver and cuDNN in ``--rounds``
interleaved rounds (medians). Kernel names of cuDNN's call and of the winner (PyTorch profiler).

    python3 benchmarks/lt_1x1_hunt.py [--cases fp16:2B,bf16:13B,...] [--budget-s 250] [--json f]
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
from conv_kernels import kernels_of  # noqa: E402

torch = bench.torch
LT = {"F": "GemmLtFwd1x1", "B": "GemmLtBwd1x1", "W": "GemmLtWrw1x1"}
CLASSIC = {"F": "GemmFwd1x1_0_1", "B": "GemmBwd1x1_stride1", "W": "GemmWrw1x1_stride1"}
ALL = [f"{t}:{n}{d}" for t in ("fp16", "bf16") for n in (2, 4, 5, 7, 8, 10, 11, 13) for d in "FBW"]


def neighbours(gemm, config: tuple, what: str) -> list[tuple]:
    """Configs around ``config``: every tile, every stage count, or (custom, cluster, swizzle)."""
    from miopy.backends import cuda_libs as cl

    base = dict(zip(cl.ALGO_FIELDS, config, strict=True))
    algo = gemm._init(base["id"])
    if algo is None:
        return []
    if what == "tiles":
        out = [{**base, "tile": t} for t in cl._cap_list(algo, cl._CAP_TILE_IDS)]
    elif what == "stages":
        out = [{**base, "stages": s} for s in cl._cap_list(algo, cl._CAP_STAGES_IDS)]
    else:
        customs = range(min(cl._cap(algo, cl._CAP_CUSTOM_MAX), 7) + 1)
        swz = [0, 1] if cl._cap(algo, cl._CAP_SWIZZLE) else [base["swizzle"]]
        out = [
            {**base, "custom": c, "cluster": g, "swizzle": s}
            for c in customs
            for g in (base["cluster"], *cl.CLUSTER_SHAPES)
            for s in swz
        ]
    return [tuple(v[f] for f in cl.ALGO_FIELDS) for v in out]


def hunt(spec: str, args, handle, lines: list[str], wide: bool) -> dict:
    """One case: every group timed once, the finalists raced against cuDNN, kernel names."""
    from miopy.backends.cuda_libs import ALGO_FIELDS
    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name
    from miopy.solvers.conv.gemm_lt import config_of

    backend = handle.backend
    types = {"fp16": torch.float16, "bf16": torch.bfloat16}
    dtype, _, rest = spec.partition(":")
    number, d = int(rest[:-1]), rest[-1]
    problem = bench.layer_problem(lines[number - 1], dtype, "NHWC", d)
    case = bench.Case(problem, types[dtype], True)
    view = problem.solver_view()
    solver = by_name(LT[d])
    tensors = case.miopy_tensors()
    torch_fn = case.torch_fn()
    torch_fn()

    def fn_of(sol, t=tensors):
        return lambda: sol.run(handle, t)

    def once(fn) -> float:
        return backend.device_time_ms(fn, args.runs, True) * 1e3

    timed: dict[tuple, tuple[float, str, dict, object]] = {}  # (order, config) -> (us, kind, cfg, fn)

    def add(order: str, config: tuple, kind: str) -> None:
        if (order, config) in timed:
            return
        gemm = solver._gemm(view, order)
        algo = gemm.resolve(config) if gemm is not None else None
        if algo is None:
            return
        cfg = config_of(order, algo)
        try:
            fn = fn_of(make_solution(handle, problem, solver, cfg))
            timed[(order, config)] = (once(fn), kind, cfg, fn)
        except Exception as exc:  # report, go on
            print(f"    {spec} {cfg} failed: {exc}", flush=True)

    t0 = time.perf_counter()
    for cfg in solver.search_space(handle, view):
        add(cfg["order"], tuple(cfg[f] for f in ALGO_FIELDS), "space")
    space_keys = set(timed)
    for order in ("col", "row"):
        gemm = solver._gemm(view, order)
        if gemm is None:
            continue
        bases = list(dict.fromkeys(gemm.picks()))[:3]
        for what in ("tiles", "stages"):
            for base in bases:
                for config in neighbours(gemm, base, what):
                    add(order, config, what)
        if wide and order == "col":
            for algo in gemm.every_algorithm(1500):
                add(order, algo.config, "wide")
    ranked = sorted(timed.items(), key=lambda kv: kv[1][0])
    for (order, config), _ in ranked[:2]:
        gemm = solver._gemm(view, order)
        for c in neighbours(gemm, config, "pairs"):
            add(order, c, "pairs2")
    ranked = sorted(timed.items(), key=lambda kv: kv[1][0])
    search_s = time.perf_counter() - t0
    finalists = {"cudnn": torch_fn}
    classic = by_name(CLASSIC[d])
    if classic.is_applicable(handle, view) is None:
        finalists["cublas"] = fn_of(make_solution(handle, problem, classic))
    best_space = min(space_keys, key=lambda k: timed[k][0])
    finalists["space"] = timed[best_space][3]
    names = {"space": best_space}
    for i, (key, _) in enumerate([kv for kv in ranked if kv[0] != best_space][: args.finalists]):
        finalists[f"top{i}"] = timed[key][3]
        names[f"top{i}"] = key
    for fn in finalists.values():
        fn()
    samples = {k: [] for k in finalists}
    for _ in range(args.rounds):
        for name, fn in finalists.items():
            samples[name].append(backend.device_time_ms(fn, 60, True) * 1e3)
    med = {k: statistics.median(v) for k, v in samples.items()}
    lt_names = [k for k in med if k in names]
    winner = min(lt_names, key=lambda k: med[k])
    cud = med["cudnn"]

    def desc(name: str) -> str:
        us, kind, cfg, _ = timed[names[name]]
        fields = " ".join(f"{f}={cfg[f]}" for f in ALGO_FIELDS)
        return f"{kind} {cfg['order']} {fields}"

    print(
        f"{spec:10s} n={len(timed):4d} ({search_s:4.1f}s) cuDNN {cud:6.2f} [{min(samples['cudnn']):.2f}-"
        f"{max(samples['cudnn']):.2f}] | cublas {med.get('cublas', float('nan')):6.2f} "
        f"{med.get('cublas', float('nan')) / cud:.3f}x | space {med['space']:6.2f} {med['space'] / cud:.3f}x "
        f"| best {med[winner]:6.2f} {med[winner] / cud:.3f}x [{min(samples[winner]):.2f}-"
        f"{max(samples[winner]):.2f}] ({winner}: {desc(winner)})",
        flush=True,
    )
    for name in sorted(lt_names, key=lambda k: med[k]):
        print(f"    {name:6s} {med[name]:6.2f} {med[name] / cud:.3f}x  {desc(name)}", flush=True)
    kinds = {}
    for (_, _), (_us, kind, _, _) in ranked[:12]:
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"    kinds among the 12 fastest single samples: {kinds}", flush=True)
    kern = {}
    for name, fn in (("cuDNN", torch_fn), ("winner", finalists[winner]), ("space", finalists["space"])):
        kern[name] = [(k[:160], round(us, 2), round(per, 2)) for k, us, per in kernels_of(backend, fn, 5)]
        kern[name] = [k for k in kern[name] if "memset" not in k[0].lower() and "fill" not in k[0].lower()]
        print(f"    {name}: " + "; ".join(f"{k} {us}us x{per}" for k, us, per in kern[name]), flush=True)
    return {
        "case": spec,
        "median_us": med,
        "samples_us": samples,
        "winner": winner,
        "configs": {n: timed[names[n]][2] for n in lt_names},
        "kinds": {n: timed[names[n]][1] for n in lt_names},
        "kernels": kern,
        "n": len(timed),
    }


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default=os.path.join(here, "resnet50.txt"))
    ap.add_argument("--cases", default=",".join(ALL), help="dtype:<layer><direction>,...")
    ap.add_argument("--wide", default="", help="cases (as --cases) that also get every algorithm")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--finalists", type=int, default=6)
    ap.add_argument("--budget-s", type=float, default=250.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    began = time.perf_counter()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    import miopy

    handle = miopy.Handle("cuda")
    lines = bench.read_workload(args.workload)
    wide = {w.strip() for w in args.wide.split(",") if w.strip()}
    results = []
    for spec in (s.strip() for s in args.cases.split(",") if s.strip()):
        if time.perf_counter() - began > args.budget_s:
            print(f"# budget spent, skipping from {spec}", flush=True)
            break
        results.append(hunt(spec, args, handle, lines, spec in wide))
        if args.json:  # after every case: a run cut short keeps what it learnt
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
    print(f"# {time.perf_counter() - began:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
