"""Which kernels cuDNN and miopy run for a convolution, and where the time between them goes.

For each layer / data type / direction: miopy's find picks a solution (NORMAL mode, as
benchmarks/conv.py), then

* the PyTorch profiler lists every kernel each side launches per call (name, launch shape, mean
  duration on the device over ``--calls`` calls, the L2 flushed before each call outside the
  profiled work: its memset is left out of the list);
* the time of one call as benchmarks/conv.py measures it (event pair around the call, L2 flushed
  before it, median of runs; best of ``--rounds`` interleaved rounds) for cuDNN, miopy's run
  captured into a CUDA graph (MIOPY_GRAPH_SINGLE_LIBRARY=1 and MIOPY_GRAPH_SINGLE_LAUNCH=1) and
  miopy's calls made directly (no graph: a lone library call's default), so a launch cost of the
  graph shows as the difference of the last two.

    python3 benchmarks/conv_kernels.py --dtypes fp16,bf16 --layers 2 --directions FBW
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import conv as bench  # noqa: E402  (benchmarks/conv.py: torch first, then miopy)

torch = bench.torch


def kernels_of(backend, fn, calls: int) -> list[tuple[str, float, float]]:
    """(kernel or memset name, mean µs, launches per call) of everything on the device while
    ``fn`` runs ``calls`` times, each call after an L2 flush (the flush is listed too: a memset
    of twice the L2, once per call)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    backend.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            backend.flush_l2()
            fn()
        backend.synchronize()
    per: dict = defaultdict(list)
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        per[ev.name].append(ev.time_range.elapsed_us())
    return [
        (name, sum(v) / len(v), len(v) / calls) for name, v in sorted(per.items(), key=lambda kv: -sum(kv[1]))
    ]


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default=os.path.join(here, "resnet50.txt"))
    ap.add_argument("--layers", default="2")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--directions", default="FBW")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=60)
    args = ap.parse_args(argv)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    os.environ.setdefault("MIOPY_FIND_MODE", "NORMAL")
    os.environ.setdefault("MIOPY_BENCH_FLUSH_L2", "1")
    import miopy
    from miopy.engine.find import FindOptions, find_solutions

    handle = miopy.Handle("cuda")  # runs as CUDA graphs, whatever the defaults
    handle.backend.graph_single_library = handle.backend.graph_single_launch = True
    direct = miopy.Handle("cuda")  # the same solutions, library calls launched without a graph
    direct.backend.graph_single_library = direct.backend.graph_single_launch = False
    backend = handle.backend
    lines = bench.read_workload(args.workload)
    types = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    for dtype in args.dtypes.split(","):
        layout = bench.DEFAULT_LAYOUTS[dtype]
        for number in (int(v) for v in args.layers.split(",")):
            for d in args.directions:
                problem = bench.layer_problem(lines[number - 1], dtype, layout, d)
                case = bench.Case(problem, types[dtype], layout == "NHWC")
                found = find_solutions(handle, problem, FindOptions(), tensors=case.find_tensors())
                sol = found[0]
                tensors = case.miopy_tensors()
                torch_fn = case.torch_fn()
                torch_fn()

                def ours(s=sol, t=tensors):
                    s.run(handle, t)

                def ours_direct(s=sol, t=tensors):
                    s.run(direct, t)

                tag = f"{dtype} L{number} {bench.describe(problem)} {d}"
                print(f"{tag}: {sol.solver} {sol.config}", flush=True)
                best = {"cudnn": float("inf"), "graph": float("inf"), "direct": float("inf")}
                fns = {"cudnn": torch_fn, "graph": ours, "direct": ours_direct}
                for fn in fns.values():
                    fn()
                for _ in range(args.rounds):
                    for name, fn in fns.items():
                        best[name] = min(best[name], backend.device_time_ms(fn, args.runs, True) * 1e3)
                print(
                    f"    event-timed (flushed, best of {args.rounds}): cuDNN {best['cudnn']:.2f} us, "
                    f"miopy graph {best['graph']:.2f} ({best['graph'] / best['cudnn']:.3f}x), "
                    f"miopy direct {best['direct']:.2f} ({best['direct'] / best['cudnn']:.3f}x)",
                    flush=True,
                )
                for name, fn in (("cuDNN", torch_fn), ("miopy", ours_direct)):
                    for kname, us, per_call in kernels_of(backend, fn, args.calls):
                        print(f"    {name}: x{per_call:.2f} {us:7.2f} us  {kname[:220]}", flush=True)
                del case
    return 0


if __name__ == "__main__":
    sys.exit(main())
