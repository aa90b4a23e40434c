"""Every activation and pooling case of a ResNet-50 training step (forward and backward, batch 32)
on a GPU, miopy next to PyTorch in one process, as a share of the device-to-device copy rate
measured in the same run. fp16 runs channels-last (NHWC), fp32 runs NCHW.

Both sides are timed the same way: device events around ITERS back-to-back launches queued up
behind a sleep kernel (the GPU never waits for the host), rotating over enough input sets that
they do not sit in L2, median of REPS such loops. Every applicable miopy solver is checked against
PyTorch's result and timed, tunable ones in every config; the fastest ("tuned", what find with
tuning would pick) and immediate mode's default are reported; goals apply to the default. Bandwidth counts the
bytes each side must move at least (miopy's problem.bytes(): reads plus writes, the max-pool index
as uint8); "% copy" divides it by the rate of a 1 GiB device-to-device copy, "% same-size copy"
by that of a copy moving the same number of bytes. Needs torch, cupy and cuda-bindings.

    python benchmarks/activ_pool.py [--dtypes fp16,fp32] [--json out.json]

Goals (issue 7): every activation >= 85 % of copy, max pool 3x3/s2 forward >= 70 %, no case
slower than PyTorch. Exit status 1 when a result is wrong; goals missed are only reported.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F

from miopy.engine.candidates import make_solution
from miopy.engine.find import get_solutions
from miopy.handle import Handle
from miopy.problem.activation import ActivationDesc, ActivationProblem
from miopy.problem.pooling import PoolingDesc, PoolingProblem
from miopy.solution import InvokeArgs
from miopy.solvers import solvers_for
from miopy.tensor import TensorDesc

BATCH = 32
# (C, H=W, ReLUs of this shape in one forward pass) of ResNet-50 v1.5 (torchvision)
RELUS = [
    (64, 112, 1),
    (64, 56, 6),
    (256, 56, 3),
    (128, 56, 1),
    (128, 28, 7),
    (512, 28, 4),
    (256, 28, 1),
    (256, 14, 11),
    (1024, 14, 6),
    (512, 14, 1),
    (512, 7, 5),
    (2048, 7, 3),
]
# (name, C, H=W, window, stride, pad, mode)
POOLS = [("maxpool 3x3/s2", 64, 112, 3, 2, 1, "max"), ("global avgpool 7x7", 2048, 7, 7, 1, 0, "avg")]
SOLVERS = [*solvers_for("activ"), *solvers_for("pool")]
ITERS, REPS = 40, 5
TUNE = True  # time tunable solvers in every config of their search space (--no-tune: default only)
L2_BYTES = 60 << 20  # a little more than the H200's L2
TORCH_DTYPE = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}
TOL = {"fp16": 2e-3, "fp32": 1e-5, "bf16": 1.6e-2}


def device_us(fns, iters: int = ITERS) -> float:
    """Median over REPS of the mean device time of ``iters`` launches, cycling through ``fns``."""
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        torch.cuda._sleep(20_000_000)  # ~10 ms: the host queues every launch before the GPU starts
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(iters):
            fns[i % len(fns)]()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / iters)
    return statistics.median(times)


def copy_rate(nbytes: int) -> float:
    """Bytes moved (read + written) per microsecond by a device-to-device copy of ``nbytes``."""
    sets = max(2, math.ceil(2 * L2_BYTES / nbytes))
    src = [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(min(sets, 64))]
    dst = [torch.empty_like(s) for s in src]
    us = device_us([functools.partial(d.copy_, s) for d, s in zip(dst, src)])
    return 2 * nbytes / us


def invoker(handle, solution):
    """``fn(tensors by role)`` running ``solution`` through the handle's invoker cache."""
    inv = handle.prepare_invoker(solution)

    def call(tensors, workspace=None):
        inv(InvokeArgs(tensors, workspace))

    return call


def torch_tensor(lens, dtype: str, layout: str, fill=None) -> torch.Tensor:
    t = torch.empty(lens, dtype=TORCH_DTYPE[dtype], device="cuda")
    if layout == "NHWC":
        t = t.to(memory_format=torch.channels_last)
    if fill == "uniform":
        t.uniform_(-2, 2)
    elif fill == "grad":
        t.uniform_(-0.5, 0.5)
    elif fill is not None:
        t.fill_(fill)
    return t


def n_sets(bytes_per_set: int) -> int:
    return max(2, min(32, math.ceil(2 * L2_BYTES / bytes_per_set)))


def close(got: torch.Tensor, want: torch.Tensor, dtype: str) -> float:
    got, want = got.double(), want.double()
    err = ((got - want).abs() / want.abs().clamp_min(1.0)).max().item()
    return err if math.isfinite(err) else float("inf")


def best_of_ours(handle, problem, make_args, check) -> dict:
    """Check and time every applicable solver (tunable ones in every config of their search space)
    on the argument sets ``make_args()`` returns. ``best``: the fastest (what find with tuning
    picks); ``default``: immediate mode's first solution (first solver, default config)."""
    rows = []
    args = make_args()
    first = get_solutions(handle, problem)[0]
    for solver in SOLVERS:
        if solver.is_applicable(handle, problem) is not None:
            continue
        view = problem.solver_view()
        default = solver.default_config(handle, view) if solver.tunable else None
        configs = [default]
        if solver.tunable and TUNE:
            configs += [c for c in solver.search_space(handle, view) if c != default]
        for cfg in configs:
            sol = make_solution(handle, problem, solver, cfg)
            inv = invoker(handle, sol)
            err = check(inv, args[0])
            us = device_us([functools.partial(inv, a, None) for a in args])
            label = solver.name if cfg is None else f"{solver.name}{cfg}"
            is_default = solver.name == first.solver and cfg == default
            rows.append({"solver": label, "us": us, "err": err, "default": is_default})
    ok = [r for r in rows if r["err"] <= 1.0]
    dflt = [r for r in ok if r["default"]]
    return {
        "best": min(ok, key=lambda r: r["us"]) if ok else None,
        "default": dflt[0] if dflt else None,
        "all": rows,
    }


def activ_case(handle, dtype: str, layout: str, c: int, hw: int, direction: str) -> dict:
    lens = (BATCH, c, hw, hw)
    desc = TensorDesc(dtype, lens, layout=layout)
    problem = ActivationProblem.create(ActivationDesc("RELU"), desc, direction)
    nbytes = problem.bytes()
    sets = n_sets(nbytes)
    be = handle.backend
    xs = [torch_tensor(lens, dtype, layout, "uniform") for _ in range(sets)]
    if direction == "F":
        ys = [torch.empty_like(x) for x in xs]
        torch_us = device_us([functools.partial(F.relu, x) for x in xs])
        # like for like: torch writing the same rotating outputs as ours (as called, the caching
        # allocator hands F.relu the block it just freed, whose lines may still sit in L2)
        outs = [torch.empty_like(x) for x in xs]
        relu_out = torch.ops.aten.relu.out
        torch_out_us = device_us([functools.partial(relu_out, x, out=o) for x, o in zip(xs, outs)])

        def make_args():
            return [{"x": be.wrap(x), "y": be.wrap(y)} for x, y in zip(xs, ys)]

        def check(inv, a):
            ys[0].fill_(float("nan"))
            inv(a, None)
            torch.cuda.synchronize()
            return close(ys[0], F.relu(xs[0]), dtype) / TOL[dtype]

    else:
        ys = [F.relu(x) for x in xs]
        dys = [torch_tensor(lens, dtype, layout, "grad") for _ in range(sets)]
        dxs = [torch.empty_like(x) for x in xs]
        tb = torch.ops.aten.threshold_backward
        torch_us = device_us([functools.partial(tb, dy, y, 0) for dy, y in zip(dys, ys)])
        outs = [torch.empty_like(x) for x in xs]
        tbo = torch.ops.aten.threshold_backward.grad_input
        torch_out_us = device_us(
            [functools.partial(tbo, dy, y, 0, grad_input=o) for dy, y, o in zip(dys, ys, outs)]
        )

        def make_args():
            return [
                {"x": be.wrap(x), "y": be.wrap(y), "dy": be.wrap(dy), "dx": be.wrap(dx)}
                for x, y, dy, dx in zip(xs, ys, dys, dxs)
            ]

        def check(inv, a):
            dxs[0].fill_(float("nan"))
            inv(a, None)
            torch.cuda.synchronize()
            return close(dxs[0], tb(dys[0], ys[0], 0), dtype) / TOL[dtype]

    ours = best_of_ours(handle, problem, make_args, check)
    case = {"case": f"relu {c}x{hw}x{hw}", "bytes": nbytes, "torch_us": torch_us}
    return {**case, "torch_out_us": torch_out_us, **ours}


def pool_case(handle, dtype: str, layout: str, pool, direction: str) -> dict:
    name, c, hw, k, s, p, mode = pool
    lens = (BATCH, c, hw, hw)
    x_desc = TensorDesc(dtype, lens, layout=layout)
    pdesc = PoolingDesc(mode, (k, k), (s, s), (p, p))
    problem = PoolingProblem.create(pdesc, x_desc, direction)
    fwd = PoolingProblem.create(pdesc, x_desc, "F")
    nbytes = problem.bytes()
    sets = n_sets(nbytes)
    be = handle.backend
    xs = [torch_tensor(lens, dtype, layout, "uniform") for _ in range(sets)]
    if mode == "max":

        def torch_fwd(x):
            return torch.ops.aten.max_pool2d_with_indices(x, [k, k], [s, s], [p, p])

        def torch_bwd(dy, x, idx):
            return torch.ops.aten.max_pool2d_with_indices_backward(
                dy, x, [k, k], [s, s], [p, p], [1, 1], False, idx
            )

    else:

        def torch_fwd(x):
            return F.adaptive_avg_pool2d(x, 1), None

        def torch_bwd(dy, x, idx):
            return torch.ops.aten._adaptive_avg_pool2d_backward(dy, x)

    outs = [torch_fwd(x) for x in xs]
    ylens = fwd.y.lens
    ys = [torch_tensor(ylens, dtype, layout) for _ in range(sets)]
    index = fwd.index
    idx_bufs = (
        [torch.zeros(index.element_count, dtype=torch.uint8, device="cuda") for _ in range(sets)]
        if index
        else []
    )

    def args_fwd(i):
        a = {"x": be.wrap(xs[i]), "y": be.wrap(ys[i])}
        if index:
            a["index"] = be.wrap(idx_bufs[i])
        return a

    if direction == "F":
        torch_us = device_us([functools.partial(torch_fwd, x) for x in xs])

        def make_args():
            return [args_fwd(i) for i in range(sets)]

        def check(inv, a):
            ys[0].fill_(float("nan"))
            inv(a, None)
            torch.cuda.synchronize()
            return close(ys[0], outs[0][0], dtype) / TOL[dtype]

    else:
        # the index our forward pass leaves, and torch's own indices, feed the two backward passes
        fsol = make_solution(handle, fwd, next(sv for sv in SOLVERS if sv.is_applicable(handle, fwd) is None))
        finv = invoker(handle, fsol)
        for i in range(sets):
            finv(args_fwd(i), None)
        dys = [torch_tensor(ylens, dtype, layout, "grad") for _ in range(sets)]
        dxs = [torch.empty_like(x) for x in xs]
        torch_us = device_us([functools.partial(torch_bwd, dy, x, o[1]) for dy, x, o in zip(dys, xs, outs)])

        def make_args():
            out = []
            for i in range(sets):
                a = {"dy": be.wrap(dys[i]), "dx": be.wrap(dxs[i])}
                if index:
                    a["index"] = be.wrap(idx_bufs[i])
                out.append(a)
            return out

        def check(inv, a):
            dxs[0].fill_(float("nan"))
            inv(a, None)
            torch.cuda.synchronize()
            return close(dxs[0], torch_bwd(dys[0], xs[0], outs[0][1]), dtype) / TOL[dtype]

    ours = best_of_ours(handle, problem, make_args, check)
    return {"case": f"{name} {c}x{hw}x{hw}", "bytes": nbytes, "torch_us": torch_us, **ours}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp16,fp32")
    ap.add_argument("--json", default="")
    ap.add_argument("--no-tune", action="store_true", help="tunable solvers in their default config only")
    args = ap.parse_args()
    global TUNE
    TUNE = not args.no_tune
    handle = Handle("cuda")
    print(
        f"device: {handle.info.name}, {handle.info.compute_units} SMs; torch {torch.__version__}", flush=True
    )
    big = copy_rate(1 << 30)
    print(f"device-to-device copy of 1 GiB: {big / 1e3:.0f} GB/s (read + write)", flush=True)
    results = []
    wrong = []
    for dtype in args.dtypes.split(","):
        layout = "NHWC" if dtype in ("fp16", "bf16") else "NCHW"
        cases = [("activ", (c, hw, count)) for c, hw, count in RELUS] + [("pool", pool) for pool in POOLS]
        for kind, spec in cases:
            for direction in ("F", "B"):
                if kind == "activ":
                    row = activ_case(handle, dtype, layout, spec[0], spec[1], direction)
                    row["per_pass"] = spec[2]
                else:
                    row = pool_case(handle, dtype, layout, spec, direction)
                    row["per_pass"] = 1
                row.update(dtype=dtype, layout=layout, kind=kind, direction=direction)
                same = copy_rate(max(row["bytes"] // 2, 1 << 20))
                best = row["best"]
                row["copy_big"] = big
                row["copy_same"] = same
                row["torch_pct"] = 100 * row["bytes"] / row["torch_us"] / big
                if best is None:
                    wrong.append(f"{dtype} {row['case']} {direction}: {row['all']}")
                    print(f"{dtype} {row['case']:>28} {direction}: WRONG {row['all']}", flush=True)
                    results.append(row)
                    continue
                row["ours_pct"] = 100 * row["bytes"] / best["us"] / big
                row["ours_pct_same"] = 100 * row["bytes"] / best["us"] / same
                dflt = row["default"] or best
                row["default_pct"] = 100 * row["bytes"] / dflt["us"] / big
                print(
                    f"{dtype} {layout} {row['case']:>28} {direction}: ours {best['us']:8.2f} us "
                    f"{row['bytes'] / best['us'] / 1e3:6.0f} GB/s {row['ours_pct']:5.1f}% copy "
                    f"({row['ours_pct_same']:5.1f}% same-size) [{best['solver']}] | default "
                    f"{dflt['us']:8.2f} us [{dflt['solver']}] | torch "
                    f"{row['torch_us']:8.2f} us {row['torch_pct']:5.1f}% "
                    f"(out=: {row.get('torch_out_us', float('nan')):.2f} us) | "
                    f"x{row['torch_us'] / dflt['us']:4.2f}",
                    flush=True,
                )
                print("    all: " + ", ".join(f"{r['solver']}={r['us']:.2f}" for r in row["all"]), flush=True)
                results.append(row)
    print(
        "\n| dtype | case | dir | bytes | miopy default us | default solver | miopy tuned us | % copy "
        "| % same-size copy | tuned solver | torch us | % copy | torch out= us | speed-up (default) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    misses = []
    for r in results:
        b = r["best"]
        if b is None:
            continue
        d = r["default"] or b
        print(
            f"| {r['dtype']} | {r['case']} | {r['direction']} | {r['bytes'] / 1e6:.1f} MB | {d['us']:.2f} | "
            f"{d['solver']} | {b['us']:.2f} | {r['ours_pct']:.0f} | {r['ours_pct_same']:.0f} | "
            f"{b['solver']} | {r['torch_us']:.2f} | {r['torch_pct']:.0f} | "
            f"{r.get('torch_out_us', float('nan')):.2f} | {r['torch_us'] / d['us']:.2f} |"
        )
        goal = (
            85
            if r["kind"] == "activ"
            else (70 if r["case"].startswith("maxpool") and r["direction"] == "F" else 0)
        )
        if r["default_pct"] < goal:
            misses.append(
                f"{r['dtype']} {r['case']} {r['direction']}: {r['default_pct']:.0f}% of copy < {goal}%"
            )
        torch_like = min(r["torch_us"], r.get("torch_out_us", r["torch_us"]))
        if d["us"] > torch_like:
            misses.append(
                f"{r['dtype']} {r['case']} {r['direction']}: slower than torch "
                f"({d['us']:.2f} > {torch_like:.2f} us, immediate mode's default)"
            )
    for dtype in args.dtypes.split(","):
        sel = [r for r in results if r["dtype"] == dtype and r["best"]]
        if sel:
            ours = sum((r["default"] or r["best"])["us"] * r["per_pass"] for r in sel)
            theirs = sum(r["torch_us"] * r["per_pass"] for r in sel)
            print(
                f"{dtype}: one training step's activations and pooling: miopy {ours:.0f} us, "
                f"torch {theirs:.0f} us"
            )
    print("goals missed:" if misses else "all goals met", *misses, sep="\n  ")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    if wrong:
        print("WRONG RESULTS:", *wrong, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
