"""The 1x1 ResNet-50 cases where miopy and cuDNN tie: miopy's wgmma implicit-GEMM solvers (forward,
backward data, backward weights) against cuDNN, and find's ranking against a race on the caller's
tensors, on an sm_90 GPU.

``--cases`` (dtype:<layer><direction>): a sample of each wgmma solver's search space (its default
first, then the warp-specialized / stream-K / 256-row 4-stage configs forward and backward data,
the in-kernel-sum or unsplit configs backward weights, at most ``--most``), built in parallel,
each timed once (L2 flushed, ``--runs`` runs, median); the fastest ``--finalists`` are checked
against cuDNN's result and raced against it and classic cuBLAS in ``--rounds`` interleaved rounds.

``--find`` (same syntax): a NORMAL find on the case's tensors (L2 flushed, as benchmarks/conv.py
runs it), its times per solver, then its four fastest solutions and cuDNN raced on the caller's
tensors: where find's order and the race's differ, find picked by noise.

    python3 benchmarks/wgmma_1x1_probe.py [--cases fp16:11F,...] [--find bf16:7F,...] [--json f]
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
WGMMA = {"F": "ConvWgmmaFwdNhwc", "B": "ConvWgmmaBwdNhwc", "W": "ConvWgmmaWrwNhwc"}
CLASSIC = {"F": "GemmFwd1x1_0_1", "B": "GemmBwd1x1_stride1", "W": "GemmWrw1x1_stride1"}
TYPES = {"fp16": "float16", "bf16": "bfloat16"}


def case_of(spec: str, lines: list[str]):
    dtype, _, rest = spec.partition(":")
    number, d = int(rest[:-1]), rest[-1]
    problem = bench.layer_problem(lines[number - 1], dtype, "NHWC", d)
    return bench.Case(problem, getattr(torch, TYPES[dtype]), True), d


def sample(solver, handle, view, d: str, most: int) -> list[dict]:
    space = list(solver.search_space(handle, view))
    if d == "W":
        keep = [c for c in space if c.get("fix") or c["parts"] == 1]
    else:
        keep = [c for c in space if c["stages"] == 4 and (c["ws"] or c["bm"] == 256)]
        keep.sort(key=lambda c: -c.get("sk", 0))  # stream-K first
    default = solver.default_config(handle, view)
    out = [default] + [c for c in keep if c != default]
    return out[:most]


def race(backend, fns: dict, rounds: int, runs: int) -> dict[str, list[float]]:
    for fn in fns.values():
        fn()
    return bench.interleaved_samples(lambda fn: backend.device_time_ms(fn, runs, True) * 1e3, fns, rounds)


def line(name: str, samples: list[float], ref: float) -> str:
    med = statistics.median(samples)
    return f"    {name:40s} {med:7.2f} [{min(samples):.2f}-{max(samples):.2f}] {med / ref:.3f}x"


def probe_wgmma(spec: str, args, handle, lines: list[str]) -> dict:
    from miopy.engine.bench import compile_all
    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name

    case, d = case_of(spec, lines)
    problem = case.problem
    view = problem.solver_view()
    backend = handle.backend
    solver = by_name(WGMMA[d])
    why = solver.is_applicable(handle, view)
    if why:
        print(f"{spec}: {solver.name} not applicable ({why})", flush=True)
        return {"case": spec, "error": why}
    tensors = case.miopy_tensors()
    t0 = time.perf_counter()
    configs = sample(solver, handle, view, d, args.most)
    sols = compile_all(handle, [make_solution(handle, problem, solver, c) for c in configs])
    built_s = time.perf_counter() - t0
    once = []
    for sol in sols:
        fn = (lambda s: lambda: s.run(handle, tensors))(sol)
        try:
            once.append((backend.device_time_ms(fn, args.runs, True) * 1e3, sol, fn))
        except Exception as exc:  # report, go on
            print(f"    {spec} {sol.config} failed: {exc}", flush=True)
    once.sort(key=lambda t: t[0])
    torch_fn = case.torch_fn()
    ref = torch_fn()
    fns = {"cudnn": torch_fn}
    classic = by_name(CLASSIC[d])
    if classic.is_applicable(handle, view) is None:
        csol = make_solution(handle, problem, classic)
        fns["cublas"] = lambda: csol.run(handle, tensors)
    errs = {}
    for _us, sol, fn in once[: args.finalists]:
        fn()
        torch.cuda.synchronize()
        name = json.dumps(sol.config, separators=(",", ":"))
        errs[name] = bench.rel_err(case.out, ref)
        fns[name] = fn
    samples = race(backend, fns, args.rounds, 40)
    cud = statistics.median(samples["cudnn"])
    print(
        f"{spec}: {len(sols)} wgmma configs built in {built_s:.1f}s; single samples "
        f"{once[0][0]:.2f}-{once[-1][0]:.2f} us; default {solver.default_config(handle, view)}",
        flush=True,
    )
    for name, s in samples.items():
        print(line(name, s, cud) + (f" err {errs[name]:.1e}" if name in errs else ""), flush=True)
    return {
        "case": spec,
        "samples_us": samples,
        "errs": errs,
        "single_us": [(us, sol.config) for us, sol, _ in once],
    }


def probe_find(spec: str, args, handle, lines: list[str]) -> dict:
    from miopy.engine.find import FindOptions, find_solutions

    case, d = case_of(spec, lines)
    backend = handle.backend
    found = find_solutions(handle, case.problem, FindOptions(), tensors=case.find_tensors())
    tensors = case.miopy_tensors()
    torch_fn = case.torch_fn()
    fns = {"cudnn": torch_fn}
    names = {}
    for sol in found[:4]:
        name = sol.solver + (" " + json.dumps(sol.config, separators=(",", ":")) if sol.config else "")
        names[name[:60]] = sol.time_ms * 1e3
        fns[name[:60]] = (lambda s: lambda: s.run(handle, tensors))(sol)
    samples = race(backend, fns, args.rounds, 40)
    cud = statistics.median(samples["cudnn"])
    print(f"{spec}: find's order and times, then the race on the caller's tensors", flush=True)
    for name, s in samples.items():
        print(line(name, s, cud) + (f"  find {names[name]:.2f}" if name in names else ""), flush=True)
    return {"case": spec, "find_us": names, "samples_us": samples}


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default=os.path.join(here, "resnet50.txt"))
    ap.add_argument("--cases", default="fp16:11F,fp16:11B,fp16:13B,fp16:7F,fp16:13W")
    ap.add_argument("--find", default="")
    ap.add_argument("--most", type=int, default=30)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--finalists", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    began = time.perf_counter()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    os.environ.setdefault("MIOPY_FIND_MODE", "NORMAL")
    os.environ.setdefault("MIOPY_BENCH_FLUSH_L2", "1")
    import miopy

    handle = miopy.Handle("cuda")
    lines = bench.read_workload(args.workload)
    results = []
    jobs = [(probe_find, s) for s in args.find.split(",") if s.strip()]
    jobs += [(probe_wgmma, s) for s in args.cases.split(",") if s.strip()]
    for fn, spec in jobs:
        if time.perf_counter() - began > args.budget_s:
            print(f"# budget spent, skipping from {spec}", flush=True)
            break
        try:
            results.append(fn(spec.strip(), args, handle, lines))
        except Exception as exc:  # report and go on
            print(f"{spec}: {type(exc).__name__}: {exc}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
    print(f"# {time.perf_counter() - began:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
