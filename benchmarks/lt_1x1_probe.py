"""Where a cuBLASLt 1x1 solution loses to cuDNN: every candidate algorithm of the case timed on
the device (L2 flushed before each run, like benchmarks/conv.py), the best one replayed as a
CUDA graph and as a direct call, and the candidates cuBLASLt lists with a larger candidate count
and workspace. One line per case, cuDNN first.

    python3 benchmarks/lt_1x1_probe.py [--layers 2,4,8] [--dtypes fp16] [--directions FBW]
        [--more-algos 64] [--more-ws-mb 128]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import conv as bench  # noqa: E402  (benchmarks/conv.py: torch first, then miopy)

torch = bench.torch
SOLVERS = {"F": "GemmLtFwd1x1", "B": "GemmLtBwd1x1", "W": "GemmLtWrw1x1"}


def time_us(backend, fn, runs: int = 40) -> float:
    """The better of two flushed medians, as benchmarks/conv.py."""
    return min(backend.device_time_ms(fn, runs, True), backend.device_time_ms(fn, runs, True)) * 1e3


def candidates_us(handle, case, solver) -> list[tuple[float, dict]]:
    from miopy.engine.candidates import make_solution

    problem = case.problem
    view = problem.solver_view()
    if solver.is_applicable(handle, view) is not None:
        return []
    out = []
    tensors = case.miopy_tensors()
    for cfg in solver.search_space(handle, view):
        sol = make_solution(handle, problem, solver, cfg)
        out.append((time_us(handle.backend, lambda s=sol: s.run(handle, tensors)), cfg))
    return sorted(out, key=lambda t: t[0])


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default=os.path.join(here, "resnet50.txt"))
    ap.add_argument("--layers", default="2,4,5,7,8,10,11,13")
    ap.add_argument("--dtypes", default="fp16")
    ap.add_argument("--directions", default="FBW")
    ap.add_argument("--more-algos", type=int, default=64)
    ap.add_argument("--more-ws-mb", type=int, default=128)
    args = ap.parse_args(argv)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    import miopy
    from miopy.backends import cuda_libs
    from miopy.solvers import by_name
    from miopy.solvers.conv import gemm_lt

    handle = miopy.Handle("cuda")
    backend = handle.backend
    lines = bench.read_workload(args.workload)
    types = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    print("case | cuDNN | best graph (algo) | best direct | #algos | more: best (#algos)")
    for dtype in args.dtypes.split(","):
        layout = bench.DEFAULT_LAYOUTS[dtype]
        for number in (int(v) for v in args.layers.split(",")):
            for direction in args.directions:
                problem = bench.layer_problem(lines[number - 1], dtype, layout, direction)
                case = bench.Case(problem, types[dtype], layout == "NHWC")
                name = SOLVERS[direction]
                if direction == "W" and layout == "NCHW":
                    name = "GemmLtWrw1x1Nchw"
                solver = by_name(name)
                torch_fn = case.torch_fn()
                torch_fn()
                cudnn = time_us(backend, torch_fn)
                found = candidates_us(handle, case, solver)
                if not found:
                    print(f"{dtype} L{number} {direction} | {cudnn:.1f} | not applicable", flush=True)
                    continue
                best_us, best_cfg = found[0]
                modes = {}
                for us, cfg in found:
                    modes.setdefault(cfg.get("mode", "-"), (us, cfg["algo"]))
                if len(modes) > 1:
                    each = ", ".join(f"{m} {us:.1f} ({a})" for m, (us, a) in modes.items())
                    print(f"{dtype} L{number} {direction} | {cudnn:.1f} | by mode: {each}", flush=True)
                from miopy.engine.candidates import make_solution

                sol = make_solution(handle, problem, solver, best_cfg)
                backend.graph_single_library = False
                handle._prepared.clear()
                tensors = case.miopy_tensors()
                direct = time_us(backend, lambda s=sol, t=tensors: s.run(handle, t))
                backend.graph_single_library = True
                handle._prepared.clear()
                saved = cuda_libs.LT_MAX_ALGOS, cuda_libs.LT_WORKSPACE
                cuda_libs.LT_MAX_ALGOS, cuda_libs.LT_WORKSPACE = args.more_algos, args.more_ws_mb << 20
                gemm_lt._lt_gemm.cache_clear()
                more = candidates_us(handle, case, solver)
                cuda_libs.LT_MAX_ALGOS, cuda_libs.LT_WORKSPACE = saved
                gemm_lt._lt_gemm.cache_clear()
                handle._prepared.clear()
                print(
                    f"{dtype} L{number} {direction} | {cudnn:.1f} | {best_us:.1f} ({best_cfg['algo']}) "
                    f"{best_us / cudnn:.3f}x | {direct:.1f} {direct / cudnn:.3f}x | {len(found)} | "
                    f"{more[0][0]:.1f} {more[0][0] / cudnn:.3f}x ({more[0][1]['algo']}/{len(more)})",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
