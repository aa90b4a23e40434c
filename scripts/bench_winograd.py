"""Winograd F(2x2, 3x3) against F(4x4, 3x3) (ConvWinograd{Fwd,Bwd}F{2,4}x3Tf32x3) and cuDNN on
the 3x3 stride-1 layers of a workload (default ResNet-50's L3, L6, L9, L12 at batch 32), fp32,
on a GPU: each solver's default config, F(4x4) also with a few other GEMM tiles, cuDNN (TF32 off)
on the same tensors; every run behind an L2 flush, median of ``--runs`` (benchmarks/conv.py's
device timer and tensors). ``--profile`` adds a per-kernel breakdown (torch profiler) of both
Winograd defaults on each layer: transforms against the 36 / 16 GEMMs.

    python scripts/bench_winograd.py [--layers 3,6,9,12] [--layouts NCHW,NHWC] [--directions FB]
        [--runs 20] [--profile]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import conv as bench  # noqa: E402  (benchmarks/conv.py: layer problems, tensors, cuDNN calls)
import torch  # noqa: E402

from miopy.engine.candidates import make_solution  # noqa: E402
from miopy.handle import Handle  # noqa: E402
from miopy.solvers import by_name  # noqa: E402
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import tile_config  # noqa: E402

# F(4x4) GEMM tiles tried besides its default (bm, bn, bk, warps_m, warps_n, stages)
F4_TILES = [(128, 128, 16, 2, 4, 3), (64, 128, 16, 2, 2, 4), (64, 64, 16, 2, 2, 4), (128, 64, 32, 2, 2, 3)]


def time_us(handle: Handle, fn, runs: int) -> float:
    return handle.backend.device_time_ms(fn, runs, True) * 1e3


def profile(handle: Handle, solution, tensors: dict) -> str:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    solution.run(handle, tensors)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            solution.run(handle, tensors)
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=6)


def candidates(direction: str) -> list[tuple[str, str, dict | None]]:
    """(label, solver, config or None for its default) for one direction."""
    word = "Fwd" if direction == "F" else "Bwd"
    out: list[tuple[str, str, dict | None]] = [
        (f"F{m}", f"ConvWinograd{word}F{m}x3Tf32x3", None) for m in (2, 4)
    ]
    for tile in F4_TILES:
        out.append(("F4 " + "x".join(map(str, tile)), f"ConvWinograd{word}F4x3Tf32x3", tile_config(*tile)))
    return out


def run_layer(handle: Handle, problem, layout: str, runs: int, with_profile: bool) -> str:
    """One line of device times (µs), and the breakdowns when asked for."""
    case = bench.Case(problem, torch.float32, layout == "NHWC")
    tensors = case.miopy_tensors()
    cudnn = case.torch_fn()
    cudnn()  # cudnn.benchmark picks its algorithm here
    cells = [f"cuDNN {time_us(handle, cudnn, runs):.1f}"]
    defaults = {}
    view = problem.conv_view()
    for label, name, config in candidates(problem.direction.value):
        solver = by_name(name)
        if solver.is_applicable(handle, view) or (
            config and not solver.is_valid_config(handle, view, config)
        ):
            continue
        solution = make_solution(handle, problem, solver, config)
        defaults.setdefault(name, solution)
        cells.append(f"{label} {time_us(handle, lambda s=solution: s.run(handle, tensors), runs):.1f}")
    text = " | ".join(cells)
    if with_profile:
        text += "".join(f"\n-- {name}\n{profile(handle, s, tensors)}" for name, s in defaults.items())
    return text


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent.parent / "benchmarks"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default=str(here / "resnet50.txt"))
    ap.add_argument("--layers", default="3,6,9,12", help="1-based lines of the workload")
    ap.add_argument("--layouts", default="NCHW,NHWC")
    ap.add_argument("--directions", default="FB")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    lines = [ln for ln in Path(args.workload).read_text().splitlines() if ln.strip() and ln[0] != "#"]
    handle = Handle("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    for layer in (int(v) for v in args.layers.split(",")):
        for layout in args.layouts.split(","):
            for d in args.directions:
                problem = bench.layer_problem(lines[layer - 1], "fp32", layout, d)
                text = run_layer(handle, problem, layout, args.runs, args.profile)
                print(f"L{layer} {bench.describe(problem)} {layout} {d}: {text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
