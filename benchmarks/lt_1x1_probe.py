"""Where a cuBLASLt 1x1 solution stands against cuDNN: every candidate of the solver's search space
(cuBLASLt's heuristic picks in the column- and row-major formulations, and the variations of the
best picks: split-K, swizzle, cluster shape, custom option, stages) timed on the device with the
L2 flushed before each run, like benchmarks/conv.py; then the fastest few, the heuristics' first
pick and cuDNN timed again in interleaved rounds (best of each), so the ratio printed is not the
winner's luck of one sample. ``--wide L,D;...`` also times, for those cases, every algorithm id
with every tile and stage count the library lists (cuda_libs.LtGemm.every_algorithm).

    python3 benchmarks/lt_1x1_probe.py [--layers 2,4,8] [--dtypes fp16,bf16] [--directions FBW]
        [--wide 2F,8F,13B] [--wide-limit 1500] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import conv as bench  # noqa: E402  (benchmarks/conv.py: torch first, then miopy)

torch = bench.torch
SOLVERS = {"F": "GemmLtFwd1x1", "B": "GemmLtBwd1x1", "W": "GemmLtWrw1x1"}
ROUNDS = 3


def time_us(backend, fn, runs: int = 40) -> float:
    """One flushed median of ``runs`` runs (µs)."""
    return backend.device_time_ms(fn, runs, True) * 1e3


def label(cfg: dict, heuristic: list[tuple]) -> str:
    from miopy.backends.cuda_libs import ALGO_FIELDS

    values = tuple(cfg[f] for f in ALGO_FIELDS)
    where = f"h{heuristic.index((cfg['order'], values))}" if (cfg["order"], values) in heuristic else "var"
    return f"{cfg['order']}/{where} " + " ".join(f"{f}={cfg[f]}" for f in ALGO_FIELDS)


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default=os.path.join(here, "resnet50.txt"))
    ap.add_argument("--layers", default="2,4,5,7,8,10,11,13")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--directions", default="FBW")
    ap.add_argument("--wide", default="", help="cases (layer and direction, e.g. 2F,13B) to enumerate widely")
    ap.add_argument("--wide-limit", type=int, default=1500)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    import miopy
    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name
    from miopy.solvers.conv.gemm_lt import config_of

    handle = miopy.Handle("cuda")
    backend = handle.backend
    lines = bench.read_workload(args.workload)
    types = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    wide = {w.strip() for w in args.wide.split(",") if w.strip()}
    results = []
    print("case | cuDNN | heuristic #0 | best (config) | #candidates: col/row | kinds of the 5 fastest")
    for dtype in args.dtypes.split(","):
        layout = bench.DEFAULT_LAYOUTS[dtype]
        for number in (int(v) for v in args.layers.split(",")):
            for direction in args.directions:
                problem = bench.layer_problem(lines[number - 1], dtype, layout, direction)
                case = bench.Case(problem, types[dtype], layout == "NHWC")
                solver = by_name(SOLVERS[direction])
                view = problem.solver_view()
                tag = f"{dtype} L{number} {direction}"
                if solver.is_applicable(handle, view) is not None:
                    print(f"{tag} | not applicable", flush=True)
                    continue
                heuristic = []
                for order in ("col", "row"):
                    gemm = solver._gemm(view, order)
                    if gemm is not None:
                        heuristic += [(order, config) for config in gemm.picks()]
                tensors = case.miopy_tensors()
                torch_fn = case.torch_fn()
                torch_fn()
                configs = solver.search_space(handle, view)
                if wide and f"{number}{direction}" in wide:
                    gemm = solver._gemm(view, "col")
                    extra = [config_of("col", a) for a in gemm.every_algorithm(args.wide_limit)]
                    configs += [c for c in extra if c not in configs]
                timed = []
                for cfg in configs:
                    sol = make_solution(handle, problem, solver, cfg)

                    def run(s=sol, t=tensors):
                        s.run(handle, t)

                    try:
                        timed.append((time_us(backend, run), cfg, run))
                    except Exception as exc:  # report, go on
                        print(f"{tag}: {cfg} failed: {exc}", flush=True)
                timed.sort(key=lambda t: t[0])
                default = solver.default_config(handle, view)
                h0 = next(t for t in timed if t[1] == default)
                finalists = {"cudnn": torch_fn, "h0": h0[2]}
                for i, (_, _cfg, run) in enumerate(timed[:4]):
                    finalists[f"top{i}"] = run
                best = {name: float("inf") for name in finalists}
                for _ in range(ROUNDS):
                    for name, fn in finalists.items():
                        best[name] = min(best[name], time_us(backend, fn, 60))
                top = min((k for k in best if k.startswith("top")), key=lambda k: best[k])
                top_cfg = timed[int(top[3:])][1]
                cudnn = best["cudnn"]
                n_col = sum(1 for c in configs if c["order"] == "col")
                kinds = ", ".join(f"{t[0]:.2f} {label(t[1], heuristic)}" for t in timed[:5])
                print(
                    f"{tag} | {cudnn:.2f} | {best['h0']:.2f} {best['h0'] / cudnn:.3f}x | {best[top]:.2f} "
                    f"{best[top] / cudnn:.3f}x ({label(top_cfg, heuristic)}) | "
                    f"{n_col}/{len(configs) - n_col}",
                    flush=True,
                )
                print(f"    fastest: {kinds}", flush=True)
                results.append(
                    {
                        "case": tag,
                        "cudnn_us": cudnn,
                        "h0_us": best["h0"],
                        "best_us": best[top],
                        "best": top_cfg,
                        "candidates": len(configs),
                        "fastest": [(t[0], t[1]) for t in timed[:8]],
                    }
                )
                del case
    below = [r for r in results if r["best_us"] <= r["cudnn_us"]]
    print(f"best candidate <= cuDNN in {len(below)} of {len(results)} cases")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
