"""The packed ReLU kernels in compile-time variants, next to PyTorch, on a GPU: cache hints of the
16-byte loads and stores (VEC_LD_HINT / VEC_ST_HINT, kernels/common/vec.h), ReLU on the bits of
16-bit data (ACTIV_RAW, kernels/common/activ.h) and a few launch geometries, each checked against
torch and timed like benchmarks/activ_pool.py (rotating inputs and outputs, queue kept full);
then immediate mode's default, the two fastest variants and torch (its out= kernel) again in
interleaved rounds, the best of each. ``--ncu`` instead runs one case's kernels once each (the
default, ``--ncu-variant`` and torch's) for Nsight Compute to profile.

    python3 benchmarks/activ_probe.py [--dtypes fp16,fp32] [--only 256x56] [--directions FB]
    ncu --clock-control none --metrics ... python3 benchmarks/activ_probe.py --ncu fp16,256,56,B
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import activ_pool as ap  # noqa: E402  (torch first)

torch = ap.torch
# activ_pool's timer with a shorter hold (about 2 ms, time enough to queue 40 launches): many variants
ap.device_us = ap.Timer(iters=ap.ITERS, reps=ap.REPS, sleep_cycles=4_000_000)
GEOMETRIES = (
    {"local": 512, "unroll": 1},
    {"local": 256, "unroll": 1},
    {"local": 128, "unroll": 1},
    {"local": 256, "unroll": 2},
    {"local": 128, "unroll": 2},
)
LD_HINTS, ST_HINTS = (0, 1, 2, 3), (0, 1)


def variants(dtype: str) -> list[dict]:
    raws = (0, 1) if dtype != "fp32" else (0,)
    return [
        {"VEC_LD_HINT": ld, "VEC_ST_HINT": st, "ACTIV_RAW": raw}
        for ld, st, raw in itertools.product(LD_HINTS, ST_HINTS, raws)
    ]


def with_defines(sol, extra: dict):
    """The solution with ``extra`` defines added to its one kernel."""
    from miopy.solution import KernelSpec

    (launch,) = sol.program.steps
    spec = launch.spec
    new = KernelSpec(spec.file, spec.name, {**dict(spec.defines), **extra}, spec.global_size, spec.local_size)
    program = dataclasses.replace(sol.program, steps=(dataclasses.replace(launch, spec=new),))
    # a config of its own: the handle caches invokers by (problem, solver, config)
    return dataclasses.replace(sol, program=program, config={**(sol.config or {}), **extra})


def setup(handle, dtype: str, c: int, hw: int, direction: str):
    """(problem, argument sets, torch calls (rotate), check(invoker) -> error / tolerance)."""
    from miopy.problem.activation import ActivationDesc, ActivationProblem
    from miopy.tensor import TensorDesc

    layout = "NHWC" if dtype != "fp32" else "NCHW"
    lens = (ap.BATCH, c, hw, hw)
    desc = TensorDesc(dtype, lens, layout=layout)
    problem = ActivationProblem.create(ActivationDesc("RELU"), desc, direction)
    sets = ap.n_sets(problem.bytes())
    be = handle.backend
    xs = [ap.torch_tensor(lens, dtype, layout, "uniform") for _ in range(sets)]
    outs = [torch.empty_like(x) for x in xs]
    if direction == "F":
        ys = [torch.empty_like(x) for x in xs]
        cmo = torch.ops.aten.clamp_min.out
        torch_rot = [functools.partial(cmo, x, 0, out=o) for x, o in zip(xs, outs)]
        args = [{"x": be.wrap(x), "y": be.wrap(y)} for x, y in zip(xs, ys)]
        out, want = ys[0], torch.nn.functional.relu(xs[0])
        HOT_CALLS["F"] = [functools.partial(torch.nn.functional.relu, x) for x in xs]
    else:
        ys = [torch.nn.functional.relu(x) for x in xs]
        dys = [ap.torch_tensor(lens, dtype, layout, "grad") for _ in range(sets)]
        dxs = [torch.empty_like(x) for x in xs]
        tbo = torch.ops.aten.threshold_backward.grad_input
        torch_rot = [functools.partial(tbo, dy, y, 0, grad_input=o) for dy, y, o in zip(dys, ys, outs)]
        args = [
            {"x": be.wrap(x), "y": be.wrap(y), "dy": be.wrap(dy), "dx": be.wrap(dx)}
            for x, y, dy, dx in zip(xs, ys, dys, dxs)
        ]
        out, want = dxs[0], torch.ops.aten.threshold_backward(dys[0], ys[0], 0)
        tb = torch.ops.aten.threshold_backward
        HOT_CALLS["B"] = [functools.partial(tb, dy, y, 0) for dy, y in zip(dys, ys)]

    def check(inv) -> float:
        out.fill_(float("nan"))
        inv(args[0], None)
        torch.cuda.synchronize()
        return ap.close(out, want, dtype) / ap.TOL[dtype]

    return problem, args, torch_rot, check


def solver_for(direction: str):
    from miopy.solvers import by_name

    return by_name("ActivFwdPacked" if direction == "F" else "ActivBwdPacked", "activ")


def probe_case(handle, dtype: str, c: int, hw: int, direction: str) -> dict:
    from miopy.engine.candidates import make_solution

    problem, args, torch_rot, check = setup(handle, dtype, c, hw, direction)
    solver = solver_for(direction)
    view = problem.solver_view()
    default_cfg = solver.default_config(handle, view)
    timed = []
    for geom in GEOMETRIES:
        base = make_solution(handle, problem, solver, geom)
        for extra in variants(dtype):
            inv = ap.invoker(handle, with_defines(base, extra))
            err = check(inv)
            if err > 1.0:
                print(f"    WRONG {geom} {extra}: {err:.2f}", flush=True)
                continue
            us = ap.device_us([functools.partial(inv, a, None) for a in args])
            timed.append((us, geom, extra, inv))
    timed.sort(key=lambda t: t[0])
    default_inv = ap.invoker(handle, make_solution(handle, problem, solver, default_cfg))
    sides = {"default": [functools.partial(default_inv, a, None) for a in args], "torch": torch_rot}
    for i, (_, _, _, inv) in enumerate(timed[:2]):
        sides[f"v{i}"] = [functools.partial(inv, a, None) for a in args]
    rounds = ap.interleaved(sides)
    best = {k: min(v) for k, v in rounds.items()}
    row = {
        "case": f"{dtype} relu {c}x{hw}x{hw} {direction}",
        "torch": best["torch"],
        "default": best["default"],
        "v0": (best["v0"], timed[0][1], timed[0][2]),
        "v1": (best["v1"], timed[1][1], timed[1][2]),
        "rounds": rounds,
    }
    print(
        f"{row['case']:>32}: torch {best['torch']:.2f}  default {best['default']:.2f} "
        f"({best['default'] / best['torch']:.3f}x)  best {best['v0']:.2f} "
        f"({best['v0'] / best['torch']:.3f}x) "
        f"{timed[0][1]} {timed[0][2]}  2nd {best['v1']:.2f} {timed[1][1]} {timed[1][2]}",
        flush=True,
    )
    by_variant: dict = {}
    for us, _geom, extra, _ in timed:
        key = (extra["VEC_LD_HINT"], extra["VEC_ST_HINT"], extra["ACTIV_RAW"])
        by_variant.setdefault(key, us)
    print(
        "    per variant (ld, st, raw) best over geometries: "
        + ", ".join(f"{k}={v:.2f}" for k, v in sorted(by_variant.items(), key=lambda kv: kv[1])),
        flush=True,
    )
    return row


def config_case(handle, dtype: str, c: int, hw: int, direction: str) -> dict:
    """Every geometry of the packed solver's search space with every cache-hint setting
    (STREAM_HINTS; find searches only TUNED_STREAMS), and the default with ACTIV_RAW 2 (the
    integer ReLU mask), timed under both output policies (rotate: every launch its own output;
    hot: one output buffer); then the default, the two fastest of each policy and torch again in
    ROUNDS interleaved rounds: side -> times."""
    from miopy.engine.candidates import make_solution

    problem, args, torch_rot, check = setup(handle, dtype, c, hw, direction)
    out_role = "y" if direction == "F" else "dx"
    hot = [{**a, out_role: args[0][out_role]} for a in args]
    torch_hot = torch_hot_calls(args, direction)
    solver = solver_for(direction)
    view = problem.solver_view()
    default_cfg = solver.default_config(handle, view)
    from miopy.solvers.activ.elementwise import STREAM_HINTS

    geometries = {(c["local"], c["unroll"]) for c in solver.search_space(handle, view)}
    space = [{"local": lo, "unroll": u, "stream": st} for lo, u in sorted(geometries) for st in STREAM_HINTS]
    sols = {str(cfg): make_solution(handle, problem, solver, cfg) for cfg in space}
    default = make_solution(handle, problem, solver, default_cfg)
    if dtype != "fp32":
        sols["default raw2"] = with_defines(default, {"ACTIV_RAW": 2})
    timed = {}
    for label, sol in sols.items():
        inv = ap.invoker(handle, sol)
        err = check(inv)
        if err > 1.0:
            print(f"    WRONG {label}: {err:.2f}", flush=True)
            continue
        rot_fns = [functools.partial(inv, a, None) for a in args]
        hot_fns = [functools.partial(inv, a, None) for a in hot]
        timed[label] = (ap.device_us(rot_fns), ap.device_us(hot_fns), rot_fns, hot_fns)
    by_rot = sorted(timed, key=lambda k: timed[k][0])
    by_hot = sorted(timed, key=lambda k: timed[k][1])
    dinv = ap.invoker(handle, default)
    sides = {
        "torch rotate": torch_rot,
        "torch hot": torch_hot,
        "default rotate": [functools.partial(dinv, a, None) for a in args],
        "default hot": [functools.partial(dinv, a, None) for a in hot],
    }
    extra = ["default raw2"] if "default raw2" in timed else []
    for label in dict.fromkeys(by_rot[:2] + by_hot[:2] + extra):
        sides[f"{label} rotate"] = timed[label][2]
        sides[f"{label} hot"] = timed[label][3]
    rounds = ap.interleaved(sides)
    case = f"{dtype} relu {c}x{hw}x{hw} {direction}"
    print(f"{case}: default {default_cfg}", flush=True)
    for policy in ("rotate", "hot"):
        t = median(rounds[f"torch {policy}"])
        line = ", ".join(
            f"{k[: -len(policy) - 1]} {median(v):.2f} ({median(v) / t:.3f}x, {min(v):.2f}-{max(v):.2f})"
            for k, v in rounds.items()
            if k.endswith(policy) and not k.startswith("torch")
        )
        tr = rounds[f"torch {policy}"]
        print(f"    {policy}: torch {t:.2f} ({min(tr):.2f}-{max(tr):.2f}); {line}", flush=True)
    print(
        "    sweep rotate/hot: " + ", ".join(f"{k}={timed[k][0]:.2f}/{timed[k][1]:.2f}" for k in by_rot),
        flush=True,
    )
    return {"case": case, "rounds": rounds, "sweep": {k: v[:2] for k, v in timed.items()}}


def median(v):
    return sorted(v)[len(v) // 2]


def torch_hot_calls(args, direction: str):
    """torch's allocating calls (the caching allocator hands back the block just freed) on the
    inputs of ``args``."""
    del args
    return HOT_CALLS[direction]


HOT_CALLS: dict = {}


def ncu_case(handle, spec: str, variant: str) -> None:
    """Each kernel once (after a warm-up) for Nsight Compute: default, variant, torch."""
    from miopy.engine.candidates import make_solution

    dtype, c, hw, direction = spec.split(",")
    problem, args, torch_rot, check = setup(handle, dtype, int(c), int(hw), direction)
    solver = solver_for(direction)
    view = problem.solver_view()
    default = make_solution(handle, problem, solver, solver.default_config(handle, view))
    extra = dict(kv.split("=") for kv in variant.split(";") if kv)
    geom = {k: int(extra.pop(k)) for k in ("local", "unroll") if k in extra}
    base = make_solution(handle, problem, solver, geom or None)
    other = with_defines(base, {k: int(v) for k, v in extra.items()})
    for sol in (default, other):
        inv = ap.invoker(handle, sol)
        assert check(inv) <= 1.0
        inv(args[1], None)
    torch_rot[1]()
    torch.cuda.synchronize()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dtypes", default="fp16,fp32")
    p.add_argument("--directions", default="FB")
    p.add_argument("--only", default="")
    p.add_argument("--ncu", default="", help="dtype,C,HW,direction: run once for Nsight Compute")
    p.add_argument("--ncu-variant", default="VEC_LD_HINT=2;VEC_ST_HINT=1;ACTIV_RAW=1")
    p.add_argument(
        "--configs",
        default="",
        help="dtype,C,HW,direction;...: every solver config under both output policies, then rounds",
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--settle-l2", action="store_true", help="read more than the L2 before each timed loop (timing.Timer)"
    )
    args = p.parse_args()
    if args.settle_l2:
        ap.device_us = dataclasses.replace(ap.device_us, settle_l2=True)
    from miopy.handle import Handle

    handle = Handle("cuda")
    if args.ncu:
        ncu_case(handle, args.ncu, args.ncu_variant)
        return 0
    if args.configs:
        ap.ROUNDS = args.rounds
        for spec in filter(None, args.configs.split(";")):
            dtype, c, hw, direction = spec.split(",")
            config_case(handle, dtype, int(c), int(hw), direction)
        return 0
    only = [o for o in args.only.split(",") if o]
    rows = []
    for dtype in args.dtypes.split(","):
        for c, hw, _ in ap.RELUS:
            if only and not any(o == f"{c}x{hw}" for o in only):
                continue
            for direction in args.directions:
                rows.append(probe_case(handle, dtype, c, hw, direction))
    slower = [r["case"] for r in rows if r["default"] > r["torch"]]
    print(f"default slower than torch (best of rounds): {len(slower)} of {len(rows)}: {slower}")
    best_slower = [r["case"] for r in rows if r["v0"][0] > r["torch"]]
    print(f"best variant slower than torch: {len(best_slower)} of {len(rows)}: {best_slower}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
