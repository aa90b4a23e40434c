"""miopy against cuDNN (through PyTorch), side by side in one process on the same tensors.

For every layer of a workload file (miopy-driver lines, default benchmarks/resnet50.txt), every
data type / layout and every direction asked for: miopy's find (NORMAL mode) picks a solution on
the layer's tensors, then miopy's solution and cuDNN (``cudnn.benchmark = True``, TF32 off unless
``--tf32``) are timed by the same device timer (runs back to back behind a spin kernel, the L2
cache flushed before each run unless ``--no-flush``; find then flushes too, MIOPY_BENCH_FLUSH_L2,
so it ranks candidates as they are compared here). The outputs are compared too.

The two sides are timed in ``--rounds`` interleaved rounds (miopy, cuDNN, miopy, ...; a slow spell
of the device hits both): each cell is the median of each side's round times with their range,
and a verdict: "faster" or "slower" only where the two ranges do not overlap, else "within noise".

Printed: one table per data type and layout (cuDNN µs / miopy µs, their ratio, miopy's solver,
and the share of the layer's floor each reaches: the larger of flops over the matrix rate and
bytes over the copy rate), then totals and geomeans per direction. ``--json`` keeps every figure.

    python3 benchmarks/conv.py [--workload FILE] [--dtypes fp16,bf16,fp32] [--directions FBW]
        [--layouts fp16:NHWC,bf16:NHWC,fp32:NCHW] [--layers 1,2,4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:  # torch first: imported after CuPy / cuda-bindings, torch 2.11 fails to register its own ops
    import torch
except ImportError:  # pragma: no cover - the benchmark needs torch
    torch = None

from timing import interleaved_samples, runs_for, spread, verdict  # noqa: E402

from miopy.driver.conv import problem_from_args  # noqa: E402
from miopy.problem.conv import ConvProblem  # noqa: E402

# Ceilings measured on an H200 (a device-to-device copy; an 8192^3 product on random data).
COPY_TBS = 4.27
MATRIX_TFLOPS = {"fp16": 790.0, "bf16": 790.0, "fp32": 60.0, "tf32": 400.0}
DEFAULT_LAYOUTS = {"fp16": "NHWC", "bf16": "NHWC", "fp32": "NCHW"}
_LAYOUT_FLAGS = {"-I", "-O", "-f", "--in_layout", "--out_layout", "--fil_layout", "-F", "--forw"}


def read_workload(path: str) -> list[str]:
    lines = []
    with open(path) as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if line:
                lines.append(line)
    return lines


def layer_problem(line: str, dtype: str, layout: str, direction: str) -> ConvProblem:
    """The driver line's problem in ``dtype``, every tensor in ``layout``, one direction."""
    tokens = shlex.split(line)
    if tokens and not tokens[0].startswith("-"):
        tokens = tokens[1:]  # conv / convfp16 / convbfp16: the data type comes from --dtypes
    kept, i = [], 0
    while i < len(tokens):
        if tokens[i] in _LAYOUT_FLAGS:
            i += 2
            continue
        kept.append(tokens[i])
        i += 1
    kept += ["-I", layout, "-O", layout, "-f", layout]
    return problem_from_args(kept, dtype, direction)


def describe(problem: ConvProblem) -> str:
    n, c, *sp = problem.x.lens
    k, _, *fil = problem.w.lens
    s = problem.conv.strides[0]
    return f"{c}x{'x'.join(map(str, sp))}->{k} {'x'.join(map(str, fil))}" + (f" s{s}" if s > 1 else "")


def floor_us(problem: ConvProblem, dtype: str, tf32: bool) -> float:
    rate = MATRIX_TFLOPS["tf32" if (dtype == "fp32" and tf32) else dtype]
    compute = problem.flops() / (rate * 1e12) * 1e6
    memory = (problem.bytes_read() + problem.bytes_written()) / (COPY_TBS * 1e12) * 1e6
    return max(compute, memory)


class Case:
    """One layer, data type, layout and direction: torch tensors shared by both sides."""

    def __init__(self, problem: ConvProblem, torch_dtype, channels_last: bool):
        self.problem = problem
        conv = problem.conv
        self.stride, self.pad = list(conv.strides), list(problem.pads)
        self.dilation, self.groups = list(conv.dilations), conv.groups
        fmt = torch.channels_last if channels_last else torch.contiguous_format

        def make(lens):
            return (torch.rand(*lens, device="cuda") * 2 - 1).to(torch_dtype).contiguous(memory_format=fmt)

        self.x, self.w, self.dy = make(problem.x.lens), make(problem.w.lens), make(problem.y.lens)
        self.out = {
            "F": torch.empty_like(self.dy),
            "B": torch.empty_like(self.x),
            "W": torch.empty_like(self.w),
        }[problem.direction.value]

    def miopy_tensors(self) -> dict:
        d = self.problem.direction.value
        return {
            "x": self.out if d == "B" else self.x,
            "w": self.out if d == "W" else self.w,
            "y": self.out if d == "F" else self.dy,
        }

    def find_tensors(self) -> dict:
        return {"x": self.x, "w": self.w, "y": self.dy}

    def torch_fn(self):
        d = self.problem.direction.value
        x, w, dy = self.x, self.w, self.dy
        args = (self.stride, self.pad, self.dilation, False, [0] * len(self.stride), self.groups)
        if d == "F":
            return lambda: torch.nn.functional.conv2d(
                x, w, None, self.stride, self.pad, self.dilation, self.groups
            )
        mask = [d == "B", d == "W", False]
        conv_backward = torch.ops.aten.convolution_backward
        index = 0 if d == "B" else 1
        return lambda: conv_backward(dy, x, w, None, *args, mask)[index]


def rel_err(got, ref) -> float:
    got, ref = got.float(), ref.float()
    den = float(torch.linalg.vector_norm(ref)) or 1.0
    return float(torch.linalg.vector_norm(got - ref)) / den


def run_case(handle, case: Case, flush: bool, runs_target_ms: float, rounds: int) -> dict:
    from miopy.engine.find import FindOptions, find_solutions

    problem = case.problem
    found = find_solutions(handle, problem, FindOptions(), tensors=case.find_tensors())
    solution = found[0]
    tensors = case.miopy_tensors()
    backend = handle.backend
    torch_fn = case.torch_fn()
    ref = torch_fn()  # cudnn.benchmark picks its algorithm here
    solution.run(handle, tensors)
    torch.cuda.synchronize()
    err = rel_err(case.out, ref)

    def miopy_fn():
        solution.run(handle, tensors)

    runs = runs_for(runs_target_ms, solution.time_ms or 1.0)
    ms = interleaved_samples(  # miopy, cuDNN, miopy, cuDNN, ...: each side's medians per round
        lambda fn: backend.device_time_ms(fn, runs, flush), {"miopy": miopy_fn, "cudnn": torch_fn}, rounds
    )
    ours, theirs = ([v * 1e3 for v in ms[k]] for k in ("miopy", "cudnn"))
    return {
        "solver": solution.solver,
        "config": solution.config,
        "find_ms": {s.solver: s.time_ms for s in found},
        "miopy_us": spread(ours)[0],
        "cudnn_us": spread(theirs)[0],
        "miopy_samples_us": ours,
        "cudnn_samples_us": theirs,
        "verdict": verdict(ours, theirs),
        "err": err,
    }


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default=os.path.join(here, "resnet50.txt"))
    ap.add_argument("--dtypes", default="fp16,bf16,fp32")
    ap.add_argument("--layouts", default="", help="dtype:LAYOUT,... (default fp16/bf16 NHWC, fp32 NCHW)")
    ap.add_argument("--directions", default="FBW")
    ap.add_argument("--layers", default="", help="1-based line numbers of the workload to run (default all)")
    ap.add_argument("--tf32", action="store_true", help="let cuDNN use TF32 for fp32 (miopy never does)")
    ap.add_argument("--no-flush", action="store_true", help="keep the L2 cache warm between runs")
    ap.add_argument("--target-ms", type=float, default=10.0, help="device time of one timed batch of runs")
    ap.add_argument(
        "--rounds", type=int, default=7, help="interleaved rounds (miopy, cuDNN, ...): medians and spread"
    )
    ap.add_argument("--json", default="", help="write every figure here")
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args(argv)

    if torch is None or not torch.cuda.is_available():
        print("benchmarks/conv.py needs PyTorch with a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    os.environ.setdefault("MIOPY_FIND_MODE", "NORMAL")

    import miopy

    layouts = dict(DEFAULT_LAYOUTS)
    combos = []
    for spec in filter(None, args.layouts.split(",")):
        dtype, _, layout = spec.partition(":")
        combos.append((dtype.strip(), layout.strip().upper()))
    if not combos:
        combos = [(d.strip(), layouts[d.strip()]) for d in args.dtypes.split(",") if d.strip()]
    lines = read_workload(args.workload)
    picked = [int(v) for v in args.layers.split(",") if v.strip()] or list(range(1, len(lines) + 1))
    handle = miopy.Handle(args.backend)
    torch_dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    flush = not args.no_flush
    if flush:  # find ranks the candidates under the conditions they are compared in
        os.environ.setdefault("MIOPY_BENCH_FLUSH_L2", "1")
    print(
        f"# {handle}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
        f"L2 flush {'on' if flush else 'off'} (find: {os.environ.get('MIOPY_BENCH_FLUSH_L2') or 'off'}); "
        f"TF32 for cuDNN {'on' if args.tf32 else 'off'}"
    )
    print(
        f"# each cell: cuDNN us / miopy us = miopy/cuDNN, medians of {args.rounds} interleaved rounds, "
        "[lowest-highest] of each side; floor: share of the layer's floor each reaches; "
        "verdict: faster/slower when the two ranges do not overlap, else within noise"
    )
    results = []
    began = time.perf_counter()
    for dtype, layout in combos:
        rows = []
        for number in picked:
            line = lines[number - 1]
            for d in args.directions:
                problem = layer_problem(line, dtype, layout, d)
                case = Case(problem, torch_dtypes[dtype], layout in ("NHWC", "NDHWC"))
                try:
                    r = run_case(handle, case, flush, args.target_ms, args.rounds)
                except Exception as exc:  # report and go on: one failing case must not hide the rest
                    r = {"error": f"{type(exc).__name__}: {exc}"}
                r.update(
                    layer=number,
                    shape=describe(problem),
                    dtype=dtype,
                    layout=layout,
                    direction=d,
                    floor_us=floor_us(problem, dtype, args.tf32),
                )
                rows.append(r)
                results.append(r)
                del case
                _print_row(r)
        _print_summary(dtype, layout, rows, args.directions)
    print(f"# {time.perf_counter() - began:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


def _print_row(r: dict) -> None:
    head = f"{r['dtype']} {r['layout']} L{r['layer']:<2} {r['shape']:<22} {r['direction']}"
    if "error" in r:
        print(f"{head}  ERROR {r['error']}", flush=True)
        return
    ratio = r["miopy_us"] / r["cudnn_us"]
    floor = r["floor_us"]
    _, clo, chi = spread(r["cudnn_samples_us"])
    _, mlo, mhi = spread(r["miopy_samples_us"])
    print(
        f"{head}  {r['cudnn_us']:8.2f} [{clo:.2f}-{chi:.2f}] / {r['miopy_us']:8.2f} [{mlo:.2f}-{mhi:.2f}] "
        f"= {ratio:5.3f}x {r['verdict']:<12}  "
        f"floor {floor / r['cudnn_us']:4.0%} / {floor / r['miopy_us']:4.0%}  "
        f"err {r['err']:.1e}  {r['solver']}{' ' + json.dumps(r['config']) if r['config'] else ''}",
        flush=True,
    )


def _print_summary(dtype: str, layout: str, rows: list[dict], directions: str) -> None:
    print(f"## {dtype} {layout}: totals (us) and geomean miopy/cuDNN")
    print(
        "| direction | cuDNN total | miopy total | total ratio | geomean ratio | floor share cuDNN / miopy |"
    )
    print("|---|---|---|---|---|---|")
    for d in directions:
        ok = [r for r in rows if r["direction"] == d and "error" not in r]
        if not ok:
            continue
        tc, tm = sum(r["cudnn_us"] for r in ok), sum(r["miopy_us"] for r in ok)
        tf = sum(r["floor_us"] for r in ok)
        g = geomean([r["miopy_us"] / r["cudnn_us"] for r in ok])
        failed = sum(1 for r in rows if r["direction"] == d and "error" in r)
        note = f" ({failed} failed)" if failed else ""
        print(
            f"| {d}{note} | {tc:.0f} | {tm:.0f} | {tm / tc:.2f} | {g:.2f} | {tf / tc:.0%} / {tf / tm:.0%} |"
        )
    ones = [r for r in rows if "error" not in r and " 1x1" in r["shape"]]
    slow = [r for r in ones if r["miopy_us"] > r["cudnn_us"]]
    print(
        "1x1 cases whose median is above cuDNN's: "
        + (
            ", ".join(
                f"L{r['layer']} {r['direction']} {r['miopy_us'] / r['cudnn_us']:.3f}x ({r['verdict']})"
                for r in slow
            )
            or "none"
        )
    )
    beyond = [f"L{r['layer']} {r['direction']}" for r in ones if r["verdict"] == "slower"]
    print("1x1 cases slower than cuDNN beyond the spread: " + (", ".join(beyond) or "none"))
    print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
