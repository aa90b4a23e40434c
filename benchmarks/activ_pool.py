"""Every activation and pooling case of a ResNet-50 training step (forward and backward, batch 32)
on a GPU, miopy next to PyTorch in one process, as a share of the device-to-device copy rate
measured in the same run. fp16 runs channels-last (NHWC), fp32 runs NCHW.

Timing (benchmarks/timing.py): device events around ITERS back-to-back launches queued up behind
a sleep kernel (the queue is full, the GPU never waits for the host), cycling over enough input
sets that they do not sit in L2, median of REPS such loops. Both sides run under the same two
output policies, and each is compared with torch under the same one:
  rotate: every launch writes its own preallocated output (miopy's solutions; torch through its
          out= kernels: clamp_min.out, threshold_backward.grad_input, max_pool2d_with_indices.out,
          ...), so outputs miss L2 like the inputs;
  hot:    every launch writes the same output buffer (what torch's caching allocator does when a
          result is freed before the next call: its lines may still sit in L2), miopy given one
          output buffer.
Every applicable miopy solver is checked against PyTorch's result and timed, tunable ones in every
config (``--quick``: activations in their default config only); the fastest ("tuned", what find
with tuning would pick) and immediate mode's default are reported; goals apply to the default.
The default and torch are then timed again in ROUNDS interleaved rounds (``--rounds``) under both
policies: the figures are the medians of those rounds, with each side's range; a case counts as
faster or slower than torch only where the two ranges do not overlap.

Bytes: what each operation must move at least (miopy's problem.bytes(): every input read once,
every output written once, the max-pool index as uint8). "% copy" divides bytes/time by the rate of
a 1 GiB device-to-device copy; "% same-size" by that of a copy moving the same number of bytes
(rotating buffers, timed the same way): the fastest a kernel moving those bytes has run here.

    python benchmarks/activ_pool.py [--dtypes fp16,fp32] [--quick] [--only maxpool,relu 64x]
                                    [--json out.json]

Goals (issue 7): every activation >= 85 % of the same-size copy, max pool 3x3/s2 forward >= 70 %
of the 1 GiB copy rate, no case slower than PyTorch under either policy. Exit status 1 when a
result is wrong; goals missed are only reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys

import timing
import torch
import torch.nn.functional as F
from timing import Timer, spread, verdict

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
ROUNDS = 7  # interleaved rounds of the default against torch
TUNE = True  # time tunable solvers in every config of their search space
TUNE_ACTIV = True  # --quick: activations in their default config only
TORCH_DTYPE = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}
TOL = {"fp16": 2e-3, "fp32": 1e-5, "bf16": 1.6e-2}
NAN = float("nan")

device_us = Timer(iters=ITERS, reps=REPS, sleep_cycles=20_000_000)
copy_rate = device_us.copy_rate
n_sets = functools.partial(timing.n_sets, most=32)


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


def close(got: torch.Tensor, want: torch.Tensor, dtype: str) -> float:
    got, want = got.double(), want.double()
    err = ((got - want).abs() / want.abs().clamp_min(1.0)).max().item()
    return err if math.isfinite(err) else float("inf")


def best_of_ours(handle, problem, make_args, check, out_roles: tuple, tune: bool, torch_sides: dict) -> dict:
    """Check and time every applicable solver (with ``tune``, tunable ones in every config of their
    search space) on the argument sets ``make_args()`` returns, each writing its own output
    (policy "rotate"). ``best``: the fastest (what find with tuning picks); ``default``: immediate
    mode's first solution (first solver, default config), also timed with every launch writing the
    same ``out_roles`` buffers ("hot": ``default["hot_us"]``). The default and torch (``torch_sides``:
    policy -> calls, or None where torch has no such kernel) are timed in ROUNDS interleaved rounds:
    ``rounds`` keeps every time, ``*_us`` the best."""
    rows = []
    rounds: dict = {}
    args = make_args()
    first = get_solutions(handle, problem)[0]
    for solver in SOLVERS:
        if solver.is_applicable(handle, problem) is not None:
            continue
        view = problem.solver_view()
        default = solver.default_config(handle, view) if solver.tunable else None
        configs = [default]
        if solver.tunable and tune:
            configs += [c for c in solver.search_space(handle, view) if c != default]
        elif solver.name != first.solver and not tune:
            continue  # untuned: immediate mode's choice only
        for cfg in configs:
            sol = make_solution(handle, problem, solver, cfg)
            inv = invoker(handle, sol)
            err = check(inv, args[0])
            us = device_us([functools.partial(inv, a, None) for a in args])
            label = solver.name if cfg is None else f"{solver.name}{cfg}"
            is_default = solver.name == first.solver and cfg == default
            row = {"solver": label, "us": us, "err": err, "default": is_default}
            if is_default:
                hot = [{**a, **{r: args[0][r] for r in out_roles}} for a in args]
                sides = {
                    "ours rotate": [functools.partial(inv, a, None) for a in args],
                    "ours hot": [functools.partial(inv, a, None) for a in hot],
                }
                rounds = interleaved({**sides, **torch_rounds_sides(torch_sides)})
                row["us"], row["hot_us"] = med(rounds["ours rotate"]), med(rounds["ours hot"])
            rows.append(row)
    if not rounds:
        rounds = interleaved(torch_rounds_sides(torch_sides))
    ok = [r for r in rows if r["err"] <= 1.0]
    dflt = [r for r in ok if r["default"]]
    return {
        "best": min(ok, key=lambda r: r["us"]) if ok else None,
        "default": dflt[0] if dflt else None,
        "all": rows,
        "rounds": rounds,
        "torch_rot_us": med(rounds.get("torch rotate", [NAN])),
        "torch_hot_us": med(rounds.get("torch hot", [NAN])),
    }


def med(samples: list) -> float:
    return spread(samples)[0]


def torch_rounds_sides(torch_sides: dict) -> dict:
    return {f"torch {policy}": fns for policy, fns in torch_sides.items() if fns}


def interleaved(sides: dict) -> dict:
    """Each side timed once per round, ROUNDS rounds, sides interleaved (a slow spell of the device
    hits every side): side -> list of times."""
    out: dict = {name: [] for name in sides}
    for _ in range(ROUNDS):
        for name, fns in sides.items():
            out[name].append(device_us(fns))
    return out


def compare(rounds: dict, policy: str, side: str = "ours") -> str | None:
    """timing.verdict of ``side`` against torch under ``policy`` (faster / slower where the
    rounds' ranges do not overlap, else within noise); None where either side is missing."""
    ours, theirs = rounds.get(f"{side} {policy}"), rounds.get(f"torch {policy}")
    return verdict(ours, theirs) if ours and theirs else None


def range_of(rounds: dict, name: str) -> str:
    got = rounds.get(name)
    if not got:
        return "-"
    m, lo, hi = spread(got)
    return f"{m:.2f} [{lo:.2f}-{hi:.2f}]"


def activ_case(handle, dtype: str, layout: str, c: int, hw: int, direction: str) -> dict:
    lens = (BATCH, c, hw, hw)
    desc = TensorDesc(dtype, lens, layout=layout)
    problem = ActivationProblem.create(ActivationDesc("RELU"), desc, direction)
    nbytes = problem.bytes()
    sets = n_sets(nbytes)
    be = handle.backend
    xs = [torch_tensor(lens, dtype, layout, "uniform") for _ in range(sets)]
    outs = [torch.empty_like(x) for x in xs]  # torch's rotating outputs
    if direction == "F":
        ys = [torch.empty_like(x) for x in xs]
        # hot: the caching allocator hands F.relu the block it just freed; rotate: clamp_min's
        # structured out= kernel (relu.out is a generated wrapper: relu, then a copy)
        torch_hot = [functools.partial(F.relu, x) for x in xs]
        cmo = torch.ops.aten.clamp_min.out
        torch_rot = [functools.partial(cmo, x, 0, out=o) for x, o in zip(xs, outs)]
        cmo(xs[0], 0, out=outs[0])
        assert torch.equal(outs[0], F.relu(xs[0]))

        def make_args():
            return [{"x": be.wrap(x), "y": be.wrap(y)} for x, y in zip(xs, ys)]

        def check(inv, a):
            ys[0].fill_(NAN)
            inv(a, None)
            torch.cuda.synchronize()
            return close(ys[0], F.relu(xs[0]), dtype) / TOL[dtype]

        out_role = ("y",)
    else:
        ys = [F.relu(x) for x in xs]
        dys = [torch_tensor(lens, dtype, layout, "grad") for _ in range(sets)]
        dxs = [torch.empty_like(x) for x in xs]
        tb = torch.ops.aten.threshold_backward
        torch_hot = [functools.partial(tb, dy, y, 0) for dy, y in zip(dys, ys)]
        tbo = torch.ops.aten.threshold_backward.grad_input
        torch_rot = [functools.partial(tbo, dy, y, 0, grad_input=o) for dy, y, o in zip(dys, ys, outs)]

        def make_args():
            return [
                {"x": be.wrap(x), "y": be.wrap(y), "dy": be.wrap(dy), "dx": be.wrap(dx)}
                for x, y, dy, dx in zip(xs, ys, dys, dxs)
            ]

        def check(inv, a):
            dxs[0].fill_(NAN)
            inv(a, None)
            torch.cuda.synchronize()
            return close(dxs[0], tb(dys[0], ys[0], 0), dtype) / TOL[dtype]

        out_role = ("dx",)
    sides = {"rotate": torch_rot, "hot": torch_hot}
    ours = best_of_ours(handle, problem, make_args, check, out_role, TUNE and TUNE_ACTIV, sides)
    return {"case": f"relu {c}x{hw}x{hw}", "bytes": nbytes, **ours}


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
    ylens = fwd.y.lens
    if mode == "max":
        ks, ss, ps, dil = [k, k], [s, s], [p, p], [1, 1]

        def torch_fwd(x):
            return torch.ops.aten.max_pool2d_with_indices(x, ks, ss, ps)

        def torch_fwd_out(x, o):
            return torch.ops.aten.max_pool2d_with_indices.out(
                x, ks, ss, ps, dil, False, out=o[0], indices=o[1]
            )

        def torch_bwd(dy, x, idx):
            return torch.ops.aten.max_pool2d_with_indices_backward(dy, x, ks, ss, ps, dil, False, idx)

        def torch_bwd_out(dy, x, idx, o):
            return torch.ops.aten.max_pool2d_with_indices_backward.grad_input(
                dy, x, ks, ss, ps, dil, False, idx, grad_input=o
            )

    else:

        def torch_fwd(x):
            return F.adaptive_avg_pool2d(x, 1), None

        def torch_fwd_out(x, o):
            return torch.ops.aten.adaptive_avg_pool2d.out(x, [1, 1], out=o[0])

        def torch_bwd(dy, x, idx):
            return torch.ops.aten._adaptive_avg_pool2d_backward(dy, x)

        torch_bwd_out = None  # only a generated out= wrapper (the op, then a copy): not timed

    outs = [torch_fwd(x) for x in xs]
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
        torch_hot = [functools.partial(torch_fwd, x) for x in xs]
        touts = [(torch.empty_like(o[0]), None if o[1] is None else torch.empty_like(o[1])) for o in outs]
        torch_rot = [functools.partial(torch_fwd_out, x, o) for x, o in zip(xs, touts)]

        def make_args():
            return [args_fwd(i) for i in range(sets)]

        def check(inv, a):
            ys[0].fill_(NAN)
            inv(a, None)
            torch.cuda.synchronize()
            return close(ys[0], outs[0][0], dtype) / TOL[dtype]

        out_role = ("y", "index") if index else ("y",)
    else:
        # the index our forward pass leaves, and torch's own indices, feed the two backward passes
        fsol = make_solution(handle, fwd, next(sv for sv in SOLVERS if sv.is_applicable(handle, fwd) is None))
        finv = invoker(handle, fsol)
        for i in range(sets):
            finv(args_fwd(i), None)
        dys = [torch_tensor(ylens, dtype, layout, "grad") for _ in range(sets)]
        dxs = [torch.empty_like(x) for x in xs]
        torch_hot = [functools.partial(torch_bwd, dy, x, o[1]) for dy, x, o in zip(dys, xs, outs)]
        torch_rot = None
        if torch_bwd_out is not None:
            touts = [torch.empty_like(x) for x in xs]
            torch_rot = [
                functools.partial(torch_bwd_out, dy, x, o[1], t) for dy, x, o, t in zip(dys, xs, outs, touts)
            ]

        def make_args():
            out = []
            for i in range(sets):
                a = {"dy": be.wrap(dys[i]), "dx": be.wrap(dxs[i])}
                if index:
                    a["index"] = be.wrap(idx_bufs[i])
                out.append(a)
            return out

        def check(inv, a):
            dxs[0].fill_(NAN)
            inv(a, None)
            torch.cuda.synchronize()
            return close(dxs[0], torch_bwd(dys[0], xs[0], outs[0][1]), dtype) / TOL[dtype]

        out_role = ("dx",)
    sides = {"rotate": torch_rot, "hot": torch_hot}
    ours = best_of_ours(handle, problem, make_args, check, out_role, TUNE, sides)
    return {"case": f"{name} {c}x{hw}x{hw}", "bytes": nbytes, **ours}


def goal_of(row: dict) -> tuple[float, str]:
    """(percent, which copy rate) the issue asks of this case's default."""
    if row["kind"] == "activ":
        return 85.0, "same"
    if row["case"].startswith("maxpool") and row["direction"] == "F":
        return 70.0, "big"
    return 0.0, "big"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp16,fp32")
    ap.add_argument("--json", default="")
    ap.add_argument("--no-tune", action="store_true", help="every solver in its default config only")
    ap.add_argument("--quick", action="store_true", help="activations: immediate mode's default only")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names to run")
    ap.add_argument("--rounds", type=int, default=0, help="interleaved rounds against torch (default 7)")
    ap.add_argument(
        "--settle-l2", action="store_true", help="read more than the L2 before each timed loop (timing.Timer)"
    )
    args = ap.parse_args()
    global TUNE, TUNE_ACTIV, ROUNDS, device_us
    TUNE = not args.no_tune
    TUNE_ACTIV = not args.quick
    ROUNDS = args.rounds or ROUNDS
    if args.settle_l2:
        device_us = dataclasses.replace(device_us, settle_l2=True)
    only = [o for o in args.only.split(",") if o]
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
            label = f"relu {spec[0]}x{spec[1]}x{spec[1]}" if kind == "activ" else f"{spec[0]} {spec[1]}x"
            if only and not any(o in label for o in only):
                continue
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
                if best is None:
                    wrong.append(f"{dtype} {row['case']} {direction}: {row['all']}")
                    print(f"{dtype} {row['case']:>28} {direction}: WRONG {row['all']}", flush=True)
                    results.append(row)
                    continue
                dflt = row["default"] or best
                row["pct_big"] = 100 * row["bytes"] / dflt["us"] / big
                row["pct_same"] = 100 * row["bytes"] / dflt["us"] / same
                row["torch_pct_big"] = 100 * row["bytes"] / row["torch_rot_us"] / big
                print(
                    f"{dtype} {layout} {row['case']:>28} {direction}: default {dflt['us']:8.2f} us "
                    f"{row['pct_big']:5.1f}% copy {row['pct_same']:5.1f}% same-size [{dflt['solver']}] "
                    f"hot {dflt.get('hot_us', NAN):.2f} | tuned {best['us']:.2f} [{best['solver']}] | "
                    f"torch rotate {row['torch_rot_us']:.2f} hot {row['torch_hot_us']:.2f} us",
                    flush=True,
                )
                print("    all: " + ", ".join(f"{r['solver']}={r['us']:.2f}" for r in row["all"]), flush=True)
                print(
                    "    rounds (median [range]): "
                    + ", ".join(f"{k} {range_of(row['rounds'], k)}" for k in row["rounds"]),
                    flush=True,
                )
                results.append(row)
    print(
        f"\n(medians of {ROUNDS} interleaved rounds, [lowest-highest]; verdict: faster / slower where "
        "the ranges do not overlap, = within noise)"
    )
    print(
        "| dtype | case | dir | MB | miopy us (rotate) | % copy | % same-size | torch us (rotate) "
        "| miopy us (hot) | torch us (hot) | speed-up rotate | speed-up hot | verdict rotate / hot "
        "| default solver | tuned us |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    misses, notes = [], []
    short = {"faster": "faster", "slower": "SLOWER", "within noise": "=", None: "-"}
    for r in results:
        b = r["best"]
        if b is None:
            continue
        d = r["default"] or b
        hot = d.get("hot_us", NAN)
        rr = r["rounds"]
        verdicts = " / ".join(short[compare(rr, p)] for p in ("rotate", "hot"))
        print(
            f"| {r['dtype']} | {r['case']} | {r['direction']} | {r['bytes'] / 1e6:.1f} | "
            f"{range_of(rr, 'ours rotate')} | {r['pct_big']:.0f} | {r['pct_same']:.0f} | "
            f"{range_of(rr, 'torch rotate')} | {range_of(rr, 'ours hot')} | {range_of(rr, 'torch hot')} | "
            f"{r['torch_rot_us'] / d['us']:.3f} | {r['torch_hot_us'] / hot:.3f} | {verdicts} | "
            f"{d['solver']} | {b['us']:.2f} |"
        )
        goal, base = goal_of(r)
        pct = r["pct_same"] if base == "same" else r["pct_big"]
        tag = f"{r['dtype']} {r['case']} {r['direction']}"
        if pct < goal:
            misses.append(f"{tag}: {pct:.0f}% of the {base} copy rate < {goal:.0f}%")
        for policy in ("rotate", "hot"):
            said = compare(rr, policy)
            ranges = f"ours {range_of(rr, 'ours ' + policy)}, torch {range_of(rr, 'torch ' + policy)}"
            if said == "slower":
                misses.append(f"{tag}: slower than torch ({policy}: {ranges})")
            elif said == "within noise":
                notes.append(f"{tag}: {policy} {ranges}")
    for dtype in args.dtypes.split(","):
        sel = [r for r in results if r["dtype"] == dtype and r["best"]]
        if sel:
            ours = sum((r["default"] or r["best"]).get("hot_us", NAN) * r["per_pass"] for r in sel)
            theirs = sum(r["torch_hot_us"] * r["per_pass"] for r in sel)
            print(
                f"{dtype}: one training step's activations and pooling (hot outputs): miopy {ours:.0f} us, "
                f"torch {theirs:.0f} us"
            )
    print("goals missed:" if misses else "all goals met", *misses, sep="\n  ")
    if notes:
        print("not faster than torch beyond the rounds' spread (the ranges overlap):", *notes, sep="\n  ")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    if wrong:
        print("WRONG RESULTS:", *wrong, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
