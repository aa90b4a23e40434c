"""Issue 10's primitives on the OpenCL backend (PoCL on the CPU), each against a plain OpenCL buffer
copy moving the same bytes in the same run: the CPU mode of benchmarks/misc_prims.py and
benchmarks/norms.py, at small shapes (the same networks' shapes with a smaller batch).

Every case: batch norm (training forward with running statistics, inference forward, backward),
LRN across 5 channels and within a 5x5 window (forward with the scale it keeps, backward), softmax
(the accurate, fast and log algorithms over rows, forward and backward; channel mode over the
channels of each pixel), layer norm and group norm (forward, backward), tensor ops (a residual
add, a broadcast bias), reductions (sum over H,W; sum over C channels-last; max over N,H,W),
activations (ReLU and logistic, forward and backward) and pooling (max 3x3/2 with its index,
average 2x2/2, forward and backward), in fp32 and bf16 (NCHW) and fp16 (NHWC where the layout
matters). Each applicable solver is checked once against the NumPy
reference, then timed; the fastest is reported. Bytes are what the call must move
(problem.bytes(): reads plus writes); the copy reference copies half of them from one buffer to
another (clEnqueueCopyBuffer, so it moves the same bytes). Timing: benchmarks/timing.py's Timer on
an OpenCL clock (queue profiling events; a user event holds the queue while the host enqueues,
as the sleep kernel does on a GPU), cycling through enough input sets to leave the caches.

    python benchmarks/prims_pocl.py [--dtypes fp32,fp16,bf16] [--quick] [--json out.json]
        [--only bn,lrn,softmax,ln,gn,tensorop,reduce,activ,pool] [--cases SUBSTR,...] [--rounds N]

``--rounds N`` measures every case N times, the call and its copy in turn each time, and keeps
the best of each (the host is shared: a slow spell then hits both sides). The load average is
printed with the table.

Goal (issue 10): every primitive within 3x the time of the copy ("x copy" <= 3). Wrong results
make the exit status 1; goals missed are only reported.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import sys
from typing import Any

# the references' BLAS calls must not leave a thread pool spinning next to PoCL's threads while
# they are timed (OpenBLAS's idle threads busy-wait: 5% of a profiled run's CPU samples)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from timing import Timer, n_sets

from miopy.engine.candidates import make_solution
from miopy.handle import Handle
from miopy.problem.activation import ActivationDesc, ActivationProblem
from miopy.problem.bnorm import BatchNormProblem
from miopy.problem.layernorm import GroupNormProblem, LayerNormProblem
from miopy.problem.lrn import LRNProblem
from miopy.problem.nd import NdDesc, channels_last_strides
from miopy.problem.pooling import PoolingDesc, PoolingProblem
from miopy.problem.reduce import ReduceProblem
from miopy.problem.softmax import SoftmaxProblem
from miopy.problem.tensorop import TensorOpProblem
from miopy.reference.common import rms_range, store_logical, view
from miopy.reference.tolerance import BASE, reduce_tolerance
from miopy.solution import InvokeArgs
from miopy.solvers import solvers_for
from miopy.tensor import TensorDesc, from_storage

GOAL = 3.0  # at most this many times the copy's time
CACHE_BYTES = 64 << 20  # input sets together cover twice this (the host's last-level cache share)
SETS_MOST = 8
EPS = 1e-5
TIMER = Timer(iters=10, reps=5, sleep_cycles=0)
QUICK_TIMER = Timer(iters=4, reps=3, sleep_cycles=0)


class OpenCLClock:
    """timing.Clock on an OpenCL queue with profiling: markers are the events; ``sleep`` gates the
    queue on a user event that ``wait`` opens, so every launch is enqueued before the first runs."""

    def __init__(self, backend: Any) -> None:
        import pyopencl as cl

        self._cl = cl
        self._backend = backend
        self._gate = None

    def synchronize(self) -> None:
        self._open()
        self._backend.queue.finish()

    def sleep(self, cycles: int) -> None:
        self._open()
        cl = self._cl
        self._gate = cl.UserEvent(self._backend.ctx)
        cl.enqueue_barrier(self._backend.queue, wait_for=[self._gate])

    def mark(self) -> Any:
        return self._cl.enqueue_marker(self._backend.queue)

    def wait(self, event: Any) -> None:
        self._open()
        event.wait()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return (end.profile.end - start.profile.end) * 1e-6

    def flush_l2(self) -> None:  # the input sets leave the caches instead
        pass

    def copy_pair(self, nbytes: int):
        be = self._backend
        src, dst = be.alloc(nbytes), be.alloc(nbytes)
        self._cl.enqueue_fill_buffer(be.queue, src, np.uint8(1), 0, nbytes)
        return functools.partial(be.copy, dst, src, nbytes)

    def _open(self) -> None:
        if self._gate is not None:
            self._gate.set_status(self._cl.command_execution_status.COMPLETE)
            self._gate = None


# ---- cases: (kind, name, problem) ------------------------------------------------------------------
def bn_problems(dtype: str, quick: bool):
    layout = "NHWC" if dtype == "fp16" else "NCHW"
    shapes = [(8, 64, 56), (8, 256, 14)]
    for n, c, hw in shapes[:1] if quick else shapes:
        x = TensorDesc(dtype, (n, c, hw, hw), layout=layout)
        for d, name in (("T", "train fwd"), ("I", "infer fwd"), ("B", "bwd")):
            p = BatchNormProblem(
                "SPATIAL", d, x, param_dtype="fp32", save=d != "I", running=d == "T", epsilon=EPS
            )
            yield "bn", f"bn {name} {n}x{c}x{hw}x{hw} {layout}", p


def lrn_problems(dtype: str, quick: bool):
    layout = "NHWC" if dtype == "fp16" else "NCHW"
    x = TensorDesc(dtype, (8, 96, 27, 27), layout=layout)
    yield (
        "lrn",
        f"LRN across 5 fwd 8x96x27x27 {layout}",
        LRNProblem.create(x, "cross", 5, 1e-4, 0.75, 1.0, "F", True),
    )
    yield (
        "lrn",
        f"LRN across 5 bwd 8x96x27x27 {layout}",
        LRNProblem.create(x, "cross", 5, 1e-4, 0.75, 1.0, "B"),
    )
    if quick:
        return
    for d, name in (("F", "fwd"), ("B", "bwd")):
        p = LRNProblem.create(x, "within", 5, 1e-4, 0.75, 1.0, d, d == "F")
        yield "lrn", f"LRN within 5x5 {name} 8x96x27x27 {layout}", p


def softmax_problems(dtype: str, quick: bool):
    desc = TensorDesc(dtype, (12 * 128, 128, 1, 1))  # attention scores of 12 heads, 128 tokens
    for d, name in (("F", "fwd"), ("B", "bwd")):
        yield "softmax", f"softmax {name} 1536x128", SoftmaxProblem.create(desc, d, "accurate", "channel")
    if quick:
        return
    for algo in ("fast", "log"):
        for d, name in (("F", "fwd"), ("B", "bwd")):
            p = SoftmaxProblem.create(desc, d, algo, "channel")
            yield "softmax", f"softmax {algo} {name} 1536x128", p
    layout = "NHWC" if dtype == "fp16" else "NCHW"
    pixels = TensorDesc(dtype, (8, 64, 28, 28), layout=layout)  # over C at every pixel
    for d, name in (("F", "fwd"), ("B", "bwd")):
        p = SoftmaxProblem.create(pixels, d, "accurate", "channel")
        yield "softmax", f"softmax channel {name} 8x64x28x28 {layout}", p


def ln_problems(dtype: str, quick: bool):
    for d, name in (("F", "fwd"), ("B", "bwd")):
        yield "ln", f"ln {name} 2048x768", LayerNormProblem(NdDesc(dtype, (2048, 768)), 1, EPS, 1, d)


def gn_problems(dtype: str, quick: bool):
    lens = (4, 256, 28, 28)
    for layout in ("NCHW",) if quick else ("NCHW", "NHWC"):
        strides = channels_last_strides(lens) if layout == "NHWC" else None
        for d, name in (("F", "fwd"), ("B", "bwd")):
            p = GroupNormProblem(NdDesc(dtype, lens, strides), 32, EPS, 1, d)
            yield "gn", f"gn {name} 4x256x28x28 g32 {layout}", p


def tensorop_problems(dtype: str, quick: bool):
    layout = "NHWC" if dtype == "fp16" else "NCHW"
    lens = (8, 256, 28, 28)
    specs = (("add (residual)", lens), ("add bias 1x256x1x1", (1, 256, 1, 1)))
    for name, blens in specs[:1] if quick else specs:
        c = TensorDesc(dtype, lens, layout=layout)
        b = TensorDesc(dtype, blens, layout=layout)
        yield "tensorop", f"{name} 8x256x28x28 {layout}", TensorOpProblem("add", c, b, c)


def reduce_problems(dtype: str, quick: bool):
    lens = (8, 256, 28, 28)
    specs = (
        ("sum over HxW", "add", "NCHW", (2, 3)),
        ("sum over C", "add", "NHWC", (1,)),
        ("max over N,H,W", "max", "NHWC", (0, 2, 3)),
    )
    for name, op, layout, dims in (specs[0], specs[2]) if quick else specs:
        p = ReduceProblem(op, TensorDesc(dtype, lens, layout=layout), dims)
        yield "reduce", f"{name} 8x256x28x28 {layout}", p


def activ_problems(dtype: str, quick: bool):
    layout = "NHWC" if dtype == "fp16" else "NCHW"
    x = TensorDesc(dtype, (8, 256, 28, 28), layout=layout)
    modes = ("relu", "logistic")
    for mode in modes[:1] if quick else modes:
        for d, name in (("F", "fwd"), ("B", "bwd")):
            p = ActivationProblem.create(ActivationDesc(mode), x, d)
            yield "activ", f"{mode} {name} 8x256x28x28 {layout}", p


def pool_problems(dtype: str, quick: bool):
    layout = "NHWC" if dtype == "fp16" else "NCHW"
    x = TensorDesc(dtype, (8, 64, 56, 56), layout=layout)
    specs = (
        ("max 3x3/2", PoolingDesc("max", (3, 3), (2, 2), (1, 1))),
        ("avg 2x2/2", PoolingDesc("avg", (2, 2), (2, 2))),
    )
    for name, desc in specs[:1] if quick else specs:
        for d, dname in (("F", "fwd"), ("B", "bwd")):
            yield "pool", f"pool {name} {dname} 8x64x56x56 {layout}", PoolingProblem.create(desc, x, d)


MAKERS = {
    "bn": bn_problems,
    "lrn": lrn_problems,
    "softmax": softmax_problems,
    "ln": ln_problems,
    "gn": gn_problems,
    "tensorop": tensorop_problems,
    "reduce": reduce_problems,
    "activ": activ_problems,
    "pool": pool_problems,
}


# ---- measuring ------------------------------------------------------------------------------------
def host_buffers(problem, rng) -> dict[str, np.ndarray]:
    """The primitive's own random buffers where its reference module has them (statistics and
    scales must be positive), else uniform in (-1, 1); outputs that are not inputs start as NaN."""
    ref = importlib.import_module(f"miopy.reference.{problem.primitive}")
    make = getattr(ref, "random_buffers", None)
    if make is not None:
        return make(problem, rng)
    out = {}
    for role, desc in problem.tensors().items():
        values = rng.uniform(-1, 1, desc.lens)
        if role in problem.outputs and role not in problem.inputs:
            values[...] = np.nan
        out[role] = store_logical(values, desc)
    return out


def tolerance(problem) -> float:
    if problem.primitive == "reduce":
        return reduce_tolerance(problem) * 4
    return BASE[problem.dtype] * 4


def check(handle, problem, call, base: dict[str, np.ndarray], dev: dict[str, Any]) -> float:
    """Run ``call`` once on fresh copies of ``base``; the worst output error over its tolerance."""
    be = handle.backend
    for role, arr in base.items():
        _upload_into(be, dev[role], arr)
    call(dev)
    be.synchronize()
    ref = importlib.import_module(f"miopy.reference.{problem.primitive}")
    expected = ref.reference(problem, {r: b.copy() for r, b in base.items()})
    descs = problem.tensors()
    worst = 0.0
    for role, want in expected.items():
        got = np.empty_like(base[role])
        be.download(dev[role], got)
        got = view(got, descs[role])
        if np.issubdtype(np.asarray(want).dtype, np.integer):
            worst = max(worst, 0.0 if np.array_equal(got, want) else np.inf)
            continue
        err = rms_range(from_storage(got, descs[role].dtype), want)
        worst = max(worst, err / tolerance(problem) if np.isfinite(err) else np.inf)
    return worst


def _upload_into(be, buffer, array: np.ndarray) -> None:
    import pyopencl as cl

    cl.enqueue_copy(be.queue, buffer, np.ascontiguousarray(array))


def measure(handle, timer: Timer, kind: str, name: str, problem, rng, rounds: int = 1) -> dict:
    """Every applicable solver checked once, then timed ``rounds`` times, each time next to a copy
    of the same bytes; the best time of each side."""
    be = handle.backend
    sets = n_sets(problem.bytes(), SETS_MOST, CACHE_BYTES)
    hosts = [host_buffers(problem, rng) for _ in range(sets)]
    devs = [{r: be.upload(a) for r, a in h.items()} for h in hosts]
    calls = {}
    rows = []
    for solver in solvers_for(problem):
        if solver.is_applicable(handle, problem.solver_view()) is not None:
            continue
        sol = make_solution(handle, problem, solver)
        inv = handle.prepare_invoker(sol)
        ws = be.alloc(sol.workspace) if sol.workspace else None

        def call(dev, inv=inv, ws=ws):
            inv(InvokeArgs(dev, ws))

        err = check(handle, problem, call, hosts[0], devs[0])
        rows.append({"solver": solver.name, "us": math.inf, "err": err})
        calls[solver.name] = [functools.partial(call, d) for d in devs]
    half = max(problem.bytes() // 2, 1)
    copy_us = math.inf
    for _ in range(rounds):
        for r in rows:
            r["us"] = min(r["us"], timer(calls[r["solver"]]))
        copy_us = min(copy_us, problem.bytes() / timer.copy_rate(half, CACHE_BYTES))
    ok = [r for r in rows if r["err"] <= 1.0]
    return {
        "kind": kind,
        "case": name,
        "dtype": problem.dtype.value.lower(),
        "bytes": problem.bytes(),
        "copy_us": copy_us,
        "best": min(ok, key=lambda r: r["us"]) if ok else None,
        "all": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp32,fp16,bf16")
    ap.add_argument("--only", default=",".join(MAKERS), help="which primitives: " + ", ".join(MAKERS))
    ap.add_argument("--quick", action="store_true", help="fewer launches and cases: a smoke run")
    ap.add_argument("--cases", default="", help="only cases whose name holds one of these substrings")
    ap.add_argument("--rounds", type=int, default=1, help="best of this many timings of each side")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    kinds = [k for k in args.only.split(",") if k]
    unknown = [k for k in kinds if k not in MAKERS]
    if unknown:
        ap.error(f"--only: unknown {unknown}; expected some of {list(MAKERS)}")
    handle = Handle("opencl")
    clock = OpenCLClock(handle.backend)
    timer = QUICK_TIMER if args.quick else TIMER
    timer = Timer(timer.iters, timer.reps, timer.sleep_cycles, clock=clock)
    print(f"device: {handle.info.name} ({handle.info.compute_units} compute units)", flush=True)
    load_before = os.getloadavg()
    wanted = [c for c in args.cases.split(",") if c]
    rng = np.random.default_rng(0)
    results, wrong, misses = [], [], []
    print(f"{'case':44s} {'dtype':5s} {'MB':>6s} {'miopy us':>9s} {'copy us':>8s} {'x copy':>6s}  solver")
    for dtype in args.dtypes.split(","):
        for kind in kinds:
            for kind_, name, problem in MAKERS[kind](dtype, args.quick):
                if wanted and not any(w in name for w in wanted):
                    continue
                row = measure(handle, timer, kind_, name, problem, rng, args.rounds)
                results.append(row)
                best = row["best"]
                if best is None:
                    wrong.append(row)
                    print(f"{name:44s} {dtype:5s} WRONG: {row['all']}", flush=True)
                    continue
                row["x_copy"] = best["us"] / row["copy_us"]
                print(
                    f"{name:44s} {dtype:5s} {row['bytes'] / 1e6:6.1f} {best['us']:9.0f} "
                    f"{row['copy_us']:8.0f} {row['x_copy']:6.2f}  {best['solver']}",
                    flush=True,
                )
                if row["x_copy"] > GOAL:
                    misses.append(f"{dtype} {name}: {row['x_copy']:.1f}x the copy > {GOAL:.0f}x")
    load = (*load_before, *os.getloadavg())
    print(
        f"\nload average (1, 5, 15 min) before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
        f"after: {load[3]:.1f} {load[4]:.1f} {load[5]:.1f}; best of {args.rounds} round(s)"
    )
    print("\n| dtype | case | bytes | miopy us | copy us (same bytes) | x copy | % copy | solver |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        b = r["best"]
        if b is not None:
            print(
                f"| {r['dtype']} | {r['case']} | {r['bytes'] / 1e6:.1f} MB | {b['us']:.0f} | "
                f"{r['copy_us']:.0f} | {r['x_copy']:.2f} | {100 / r['x_copy']:.0f} | {b['solver']} |"
            )
    print("goals missed:" if misses else "all goals met", *misses, sep="\n  ")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    if wrong:
        print("WRONG RESULTS:", *(f"{r['dtype']} {r['case']}: {r['all']}" for r in wrong), sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
