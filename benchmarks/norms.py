"""Batch norm, layer norm and group norm on a GPU, miopy next to PyTorch in one process, as a share
of the device-to-device copy rate measured in the same run.

- Batch norm: ResNet-50 shapes at batch 32 (fp16 channels-last with fp32 scale / statistics, fp32
  NCHW), spatial: training forward (saved mean / inverse std and running statistics updated),
  inference forward, backward from saved statistics.
- Layer norm: BERT-base rows, 32 x 512 tokens of 768 features and 8192 rows of 1024 (BERT-large
  width), weight and bias, forward (y, mean, rstd) and backward (dx, dweight, dbias).
- Group norm: 32 groups on 32x256x56x56, NCHW and NHWC, weight and bias, forward and backward.

Both sides are timed the same way: device events around ITERS back-to-back launches queued up
behind a sleep kernel (the GPU never waits for the host), rotating over enough input sets that
they do not sit in L2, median of REPS such loops. Every applicable miopy solver is checked against
PyTorch and timed; the fastest is reported (what find would pick). Bandwidth counts the bytes each
side must move at least (miopy's problem.bytes(): reads plus writes); "% copy" divides it by the
rate of a 1 GiB device-to-device copy, "% same-size copy" by that of a copy moving the same number
of bytes. Needs torch, cupy and cuda-bindings.

    python benchmarks/norms.py [--dtypes fp16,fp32] [--only bn,ln,gn] [--bn-directions TIB] [--quick]
                               [--json out.json]

--quick: fewer timed launches, two batch norm shapes, one layer norm shape (a smoke run).
On the CPU (PoCL): benchmarks/prims_pocl.py. "ours/torch" is miopy's time over PyTorch's.

Goal (issue 10): >= 80 % of copy, never slower than PyTorch. Exit status 1 when a result is
wrong; goals missed are only reported.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys

import timing
import torch
import torch.nn.functional as F
from timing import Timer

from miopy.engine.candidates import make_solution
from miopy.handle import Handle
from miopy.problem.bnorm import BatchNormProblem
from miopy.problem.layernorm import GroupNormProblem, LayerNormProblem
from miopy.problem.nd import NdDesc, channels_last_strides
from miopy.solution import InvokeArgs
from miopy.solvers import solvers_for
from miopy.tensor import TensorDesc

BATCH = 32
EPS = 1e-5
# (C, H=W) of the batch norms of ResNet-50 v1.5
BN_SHAPES = [(64, 112), (64, 56), (256, 56), (128, 28), (512, 28), (256, 14), (1024, 14), (512, 7), (2048, 7)]
# (rows, features) of layer norm: BERT-base (batch 32 x 512 tokens, 768) and 8192 rows of 1024
LN_SHAPES = [(BATCH * 512, 768), (8192, 1024)]
# (N, C, H=W, groups) of group norm
GN_SHAPES = [(BATCH, 256, 56, 32)]
ITERS, REPS = 50, 7
TORCH_DTYPE = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}
TOL = {"fp16": 4e-3, "fp32": 2e-5, "bf16": 3e-2}


TIMER = Timer(iters=ITERS, reps=REPS, sleep_cycles=20_000_000)
QUICK_TIMER = Timer(iters=20, reps=3, sleep_cycles=10_000_000)
device_us = TIMER  # main() switches to QUICK_TIMER with --quick


def copy_rate(nbytes: int) -> float:
    return device_us.copy_rate(nbytes)


n_sets = functools.partial(timing.n_sets, most=16)


def err_of(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    e = ((got - want).abs() / want.abs().clamp_min(1.0)).max().item()
    return e if math.isfinite(e) else float("inf")


def best_of_ours(handle, problem, arg_sets, check) -> dict:
    """Check (``check(invoke) -> error / tolerance``) and time every applicable solver."""
    rows = []
    for solver in solvers_for(problem):
        if solver.is_applicable(handle, problem) is not None:
            continue
        sol = make_solution(handle, problem, solver)
        inv = handle.prepare_invoker(sol)
        ws = handle.backend.alloc(sol.workspace) if sol.workspace else None

        def call(a, inv=inv, ws=ws):
            inv(InvokeArgs(a, ws))

        err = check(call)
        us = device_us([functools.partial(call, a) for a in arg_sets])
        rows.append({"solver": solver.name, "us": us, "err": err})
    ok = [r for r in rows if r["err"] <= 1.0]
    return {"best": min(ok, key=lambda r: r["us"]) if ok else None, "all": rows}


def bn_case(handle, dtype: str, c: int, hw: int, direction: str) -> dict:
    layout = "NHWC" if dtype != "fp32" else "NCHW"
    lens = (BATCH, c, hw, hw)
    x_desc = TensorDesc(dtype, lens, layout=layout)
    problem = BatchNormProblem(
        "SPATIAL",
        direction,
        x_desc,
        param_dtype="fp32",
        save=direction != "I",
        running=direction == "T",
        epsilon=EPS,
    )
    be = handle.backend
    sets = n_sets(problem.bytes())
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    td = TORCH_DTYPE[dtype]

    def data():
        return torch.empty(lens, dtype=td, device="cuda").uniform_(-1, 1).contiguous(memory_format=fmt)

    def param(lo=-1.0, hi=1.0):
        return torch.empty(c, dtype=torch.float32, device="cuda").uniform_(lo, hi)

    xs = [data() for _ in range(sets)]
    w, b = param(), param()
    rm, rv = param(), param(0.5, 1.5)
    sm = [x.float().mean(dim=(0, 2, 3)) for x in xs]
    si = [1.0 / torch.sqrt(x.float().var(dim=(0, 2, 3), unbiased=False) + EPS) for x in xs]
    outs = [torch.empty_like(x) for x in xs]
    dys = [data() for _ in range(sets)] if direction == "B" else []
    p4 = (1, c, 1, 1)

    def pv(t):  # a (C,) tensor as the (1, C, 1, 1) parameter miopy expects (same memory)
        return be.wrap(t.view(p4))

    if direction == "T":
        rms = [rm.clone() for _ in range(sets)]
        rvs = [rv.clone() for _ in range(sets)]
        torch_us = device_us(
            [functools.partial(F.batch_norm, x, a, v, w, b, True, 1.0, EPS) for x, a, v in zip(xs, rms, rvs)]
        )
        smo = [torch.empty(c, device="cuda") for _ in range(sets)]
        sio = [torch.empty(c, device="cuda") for _ in range(sets)]
        args = [
            {
                "x": be.wrap(xs[i]),
                "y": be.wrap(outs[i]),
                "scale": pv(w),
                "bias": pv(b),
                "running_mean": pv(rms[i]),
                "running_var": pv(rvs[i]),
                "saved_mean": pv(smo[i]),
                "saved_inv_var": pv(sio[i]),
            }
            for i in range(sets)
        ]

        def check(call):
            outs[0].fill_(float("nan"))
            call(args[0])
            torch.cuda.synchronize()
            want = F.batch_norm(xs[0], None, None, w, b, True, 1.0, EPS)
            return max(err_of(outs[0], want) / TOL[dtype], err_of(sio[0], si[0]) / TOL["fp32"] / 10)

    elif direction == "I":
        torch_us = device_us([functools.partial(F.batch_norm, x, rm, rv, w, b, False, 0.0, EPS) for x in xs])
        args = [
            {
                "x": be.wrap(xs[i]),
                "y": be.wrap(outs[i]),
                "scale": pv(w),
                "bias": pv(b),
                "estimated_mean": pv(rm),
                "estimated_var": pv(rv),
            }
            for i in range(sets)
        ]

        def check(call):
            outs[0].fill_(float("nan"))
            call(args[0])
            torch.cuda.synchronize()
            return err_of(outs[0], F.batch_norm(xs[0], rm, rv, w, b, False, 0.0, EPS)) / TOL[dtype]

    else:
        nbb = torch.ops.aten.native_batch_norm_backward
        torch_us = device_us(
            [
                functools.partial(nbb, dy, x, w, rm, rv, m, i, True, EPS, [True, True, True])
                for dy, x, m, i in zip(dys, xs, sm, si)
            ]
        )
        dws = [torch.empty(c, device="cuda") for _ in range(sets)]
        dbs = [torch.empty(c, device="cuda") for _ in range(sets)]
        args = [
            {
                "x": be.wrap(xs[i]),
                "dy": be.wrap(dys[i]),
                "scale": pv(w),
                "saved_mean": pv(sm[i]),
                "saved_inv_var": pv(si[i]),
                "dx": be.wrap(outs[i]),
                "dscale": pv(dws[i]),
                "dbias": pv(dbs[i]),
            }
            for i in range(sets)
        ]

        def check(call):
            outs[0].fill_(float("nan"))
            call(args[0])
            torch.cuda.synchronize()
            dx, dw, db = nbb(dys[0], xs[0], w, rm, rv, sm[0], si[0], True, EPS, [True, True, True])
            scale = max(1.0, dw.abs().max().item())
            return max(
                err_of(outs[0], dx) / TOL[dtype],
                err_of(dws[0] / scale, dw / scale) / 1e-3,
                err_of(dbs[0] / scale, db / scale) / 1e-3,
            )

    ours = best_of_ours(handle, problem, args, check)
    name = {"T": "bn train fwd", "I": "bn infer fwd", "B": "bn bwd"}[direction]
    return {"case": f"{name} {c}x{hw}x{hw} {layout}", "bytes": problem.bytes(), "torch_us": torch_us, **ours}


def backward_args(be, xs, dys, w, b, means, rstds, outs) -> tuple[list[dict], list, list]:
    """Layer / group norm backward's tensors by role for each input set, with the dweight and
    dbias outputs made here (torch.empty_like the weight and bias)."""
    dws = [torch.empty_like(w) for _ in xs]
    dbs = [torch.empty_like(b) for _ in xs]
    args = [
        {
            "x": be.wrap(x),
            "dy": be.wrap(dy),
            "weight": be.wrap(w),
            "mean": be.wrap(mean),
            "rstd": be.wrap(rstd),
            "dx": be.wrap(out),
            "dweight": be.wrap(dw),
            "dbias": be.wrap(db),
        }
        for x, dy, mean, rstd, out, dw, db in zip(xs, dys, means, rstds, outs, dws, dbs)
    ]
    return args, dws, dbs


def ln_case(handle, dtype: str, rows: int, feats: int, direction: str) -> dict:
    """Layer norm over the last dim of (rows, feats), weight and bias."""
    problem = LayerNormProblem(NdDesc(dtype, (rows, feats)), 1, EPS, 1, direction)
    be = handle.backend
    sets = n_sets(problem.bytes())
    td = TORCH_DTYPE[dtype]

    def data():
        return torch.empty((rows, feats), dtype=td, device="cuda").uniform_(-1, 1)

    xs = [data() for _ in range(sets)]
    w = torch.empty(feats, dtype=td, device="cuda").uniform_(0.5, 1.5)
    b = torch.empty(feats, dtype=td, device="cuda").uniform_(-1, 1)
    nln = torch.ops.aten.native_layer_norm
    # torch's own statistics (fp32 for fp16 data): its backward reads them; miopy keeps x's type
    stats = [nln(x, [feats], w, b, EPS) for x in xs]
    outs = [torch.empty_like(x) for x in xs]
    if direction == "F":
        torch_us = device_us([functools.partial(nln, x, [feats], w, b, EPS) for x in xs])
        means = [torch.empty(rows, dtype=td, device="cuda") for _ in range(sets)]
        rstds = [torch.empty(rows, dtype=td, device="cuda") for _ in range(sets)]
        args = [
            {
                "x": be.wrap(xs[i]),
                "weight": be.wrap(w),
                "bias": be.wrap(b),
                "y": be.wrap(outs[i]),
                "mean": be.wrap(means[i]),
                "rstd": be.wrap(rstds[i]),
            }
            for i in range(sets)
        ]

        def check(call):
            outs[0].fill_(float("nan"))
            call(args[0])
            torch.cuda.synchronize()
            y, m, r = stats[0]
            return max(
                err_of(outs[0], y) / TOL[dtype],
                err_of(means[0], m.view(-1)) / TOL[dtype],
                err_of(rstds[0] / r.view(-1), torch.ones_like(r.view(-1))) / TOL[dtype],
            )

    else:
        nlb = torch.ops.aten.native_layer_norm_backward
        dys = [data() for _ in range(sets)]
        torch_us = device_us(
            [
                functools.partial(nlb, dy, x, [feats], st[1], st[2], w, b, [True, True, True])
                for dy, x, st in zip(dys, xs, stats)
            ]
        )
        means = [st[1].view(-1).to(td) for st in stats]
        rstds = [st[2].view(-1).to(td) for st in stats]
        args, dws, dbs = backward_args(be, xs, dys, w, b, means, rstds, outs)

        def check(call):
            outs[0].fill_(float("nan"))
            call(args[0])
            torch.cuda.synchronize()
            # the reference reads the statistics miopy was given (rounded to the data type)
            dx, dw, db = nlb(
                dys[0], xs[0], [feats], means[0].float().view(-1, 1), rstds[0].float().view(-1, 1),
                w, b, [True, True, True],
            )  # fmt: skip
            scale = max(1.0, dw.float().abs().max().item(), db.float().abs().max().item())
            return max(
                err_of(outs[0], dx) / TOL[dtype],
                err_of(dws[0] / scale, dw / scale) / max(TOL[dtype], 1e-3),
                err_of(dbs[0] / scale, db / scale) / max(TOL[dtype], 1e-3),
            )

    ours = best_of_ours(handle, problem, args, check)
    name = {"F": "ln fwd", "B": "ln bwd"}[direction]
    return {"case": f"{name} {rows}x{feats}", "bytes": problem.bytes(), "torch_us": torch_us, **ours}


def gn_case(handle, dtype: str, layout: str, shape, direction: str) -> dict:
    """Group norm of (N, C, H, W) in ``layout`` (NCHW or NHWC), weight and bias."""
    n, c, hw, groups = shape
    lens = (n, c, hw, hw)
    strides = channels_last_strides(lens) if layout == "NHWC" else None
    problem = GroupNormProblem(NdDesc(dtype, lens, strides), groups, EPS, 1, direction)
    be = handle.backend
    sets = n_sets(problem.bytes())
    td = TORCH_DTYPE[dtype]
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format

    def data():
        return torch.empty(lens, dtype=td, device="cuda").uniform_(-1, 1).contiguous(memory_format=fmt)

    xs = [data() for _ in range(sets)]
    w = torch.empty(c, dtype=td, device="cuda").uniform_(0.5, 1.5)
    b = torch.empty(c, dtype=td, device="cuda").uniform_(-1, 1)
    ngn = torch.ops.aten.native_group_norm
    hxw = hw * hw
    # torch's CUDA group norm runs on NCHW-contiguous data: F.group_norm copies a channels-last
    # input first (counted in its time), its backward reads that copy and converts dy
    xcs = [x.contiguous() for x in xs]
    stats = [ngn(x, w, b, n, c, hxw, groups, EPS) for x in xcs]
    outs = [torch.empty_like(x) for x in xs]
    if direction == "F":
        torch_us = device_us([functools.partial(F.group_norm, x, groups, w, b, EPS) for x in xs])
        means = [torch.empty((n, groups), dtype=td, device="cuda") for _ in range(sets)]
        rstds = [torch.empty((n, groups), dtype=td, device="cuda") for _ in range(sets)]
        args = [
            {
                "x": be.wrap(xs[i]),
                "weight": be.wrap(w),
                "bias": be.wrap(b),
                "y": be.wrap(outs[i]),
                "mean": be.wrap(means[i]),
                "rstd": be.wrap(rstds[i]),
            }
            for i in range(sets)
        ]

        def check(call):
            outs[0].fill_(float("nan"))
            call(args[0])
            torch.cuda.synchronize()
            y, m, r = stats[0]
            return max(
                err_of(outs[0], y) / TOL[dtype],
                err_of(means[0], m.view(n, groups)) / TOL[dtype],
                err_of(rstds[0] / r.view(n, groups), torch.ones_like(rstds[0], dtype=torch.float64))
                / TOL[dtype],
            )

    else:
        ngb = torch.ops.aten.native_group_norm_backward
        dys = [data() for _ in range(sets)]

        def torch_bwd(dy, xc, st):
            return ngb(dy.contiguous(), xc, st[1], st[2], w, n, c, hxw, groups, [True, True, True])

        torch_us = device_us([functools.partial(torch_bwd, *a) for a in zip(dys, xcs, stats)])
        means = [st[1].view(n, groups).to(td) for st in stats]
        rstds = [st[2].view(n, groups).to(td) for st in stats]
        args, dws, dbs = backward_args(be, xs, dys, w, b, means, rstds, outs)

        def check(call):
            outs[0].fill_(float("nan"))
            call(args[0])
            torch.cuda.synchronize()
            # the reference reads the statistics miopy was given, in the type torch expects
            st = stats[0]
            m, r = means[0].to(st[1].dtype), rstds[0].to(st[2].dtype)
            dx, dw, db = torch_bwd(dys[0], xcs[0], (None, m, r))
            scale = max(1.0, dw.float().abs().max().item(), db.float().abs().max().item())
            return max(
                err_of(outs[0], dx) / TOL[dtype],
                err_of(dws[0] / scale, dw / scale) / max(TOL[dtype], 1e-3),
                err_of(dbs[0] / scale, db / scale) / max(TOL[dtype], 1e-3),
            )

    ours = best_of_ours(handle, problem, args, check)
    name = {"F": "gn fwd", "B": "gn bwd"}[direction]
    return {
        "case": f"{name} {n}x{c}x{hw}x{hw} g{groups} {layout}",
        "bytes": problem.bytes(),
        "torch_us": torch_us,
        **ours,
    }


def cases(kinds: set[str], dtype: str, bn_shapes: int, bn_directions: str = "TIB"):
    """(kind, thunk) for every case of ``kinds`` in ``dtype``."""
    if "bn" in kinds:
        for c, hw in BN_SHAPES[:bn_shapes]:
            for direction in bn_directions:
                yield "bn", functools.partial(bn_case, dtype=dtype, c=c, hw=hw, direction=direction)
    if "ln" in kinds:
        for rows, feats in LN_SHAPES:
            for direction in ("F", "B"):
                yield (
                    "ln",
                    functools.partial(ln_case, dtype=dtype, rows=rows, feats=feats, direction=direction),
                )
    if "gn" in kinds:
        for shape in GN_SHAPES:
            for layout in ("NCHW", "NHWC"):
                for direction in ("F", "B"):
                    yield (
                        "gn",
                        functools.partial(
                            gn_case, dtype=dtype, layout=layout, shape=shape, direction=direction
                        ),
                    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp16,fp32")
    ap.add_argument("--only", default="bn,ln,gn", help="bn, ln, gn: which norms")
    ap.add_argument("--json", default="")
    ap.add_argument("--shapes", type=int, default=len(BN_SHAPES), help="first N ResNet-50 batch norm shapes")
    ap.add_argument("--bn-directions", default="TIB", help="batch norm passes (T, I, B)")
    ap.add_argument("--quick", action="store_true", help="fewer launches and shapes: a smoke run")
    args = ap.parse_args()
    global device_us, LN_SHAPES
    if args.quick:
        device_us = QUICK_TIMER
        args.shapes = min(args.shapes, 2)
        LN_SHAPES = LN_SHAPES[-1:]
    kinds = set(args.only.split(","))
    handle = Handle("cuda")
    print(
        f"device: {handle.info.name}, {handle.info.compute_units} SMs; torch {torch.__version__}", flush=True
    )
    big = copy_rate(1 << 30)
    print(f"device-to-device copy of 1 GiB: {big / 1e3:.0f} GB/s (read + write)", flush=True)
    print(
        f"{'case':40s} {'dtype':5s} {'MB':>7s} {'torch us':>9s} {'%copy':>6s} "
        f"{'miopy us':>9s} {'%copy':>6s} {'%same':>6s} {'ours/torch':>10s}  solver"
    )
    results, wrong, misses = [], [], []
    for dtype in args.dtypes.split(","):
        for kind, run_case in cases(kinds, dtype, args.shapes, args.bn_directions):
            row = run_case(handle)
            same = copy_rate(max(row["bytes"] // 2, 1 << 20))
            row.update(dtype=dtype, kind=kind, copy_big=big, copy_same=same)
            best = row["best"]
            torch_pct = 100 * row["bytes"] / row["torch_us"] / big
            row["torch_pct"] = torch_pct
            if best is None:
                wrong.append(row)
                print(f"{row['case']:40s} {dtype:5s} WRONG: {row['all']}", flush=True)
                continue
            pct = 100 * row["bytes"] / best["us"] / big
            pct_same = 100 * row["bytes"] / best["us"] / same
            row.update(miopy_pct=pct, miopy_pct_same=pct_same)
            print(
                f"{row['case']:40s} {dtype:5s} {row['bytes'] / 1e6:7.1f} {row['torch_us']:9.1f} "
                f"{torch_pct:6.1f} "
                f"{best['us']:9.1f} {pct:6.1f} {pct_same:6.1f} {best['us'] / row['torch_us']:10.2f}  "
                f"{best['solver']}",
                flush=True,
            )
            results.append(row)
            if pct < 80:
                misses.append(f"{dtype} {row['case']}: {pct:.0f}% of copy < 80%")
            if best["us"] > row["torch_us"]:
                misses.append(
                    f"{dtype} {row['case']}: slower than torch ({best['us']:.1f} > {row['torch_us']:.1f} us)"
                )
    print(
        "\n| dtype | case | bytes | miopy us | % copy | % same-size copy | solver | torch us | % copy "
        "| ours/torch |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        b = r["best"]
        print(
            f"| {r['dtype']} | {r['case']} | {r['bytes'] / 1e6:.1f} MB | {b['us']:.1f} | "
            f"{r['miopy_pct']:.0f} | "
            f"{r['miopy_pct_same']:.0f} | {b['solver']} | {r['torch_us']:.1f} | {r['torch_pct']:.0f} | "
            f"{b['us'] / r['torch_us']:.2f} |"
        )
    print("goals missed:" if misses else "all goals met", *misses, sep="\n  ")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results + wrong, f, indent=1, default=str)
    if wrong:
        print("WRONG RESULTS:", *(f"{r['dtype']} {r['case']}: {r['all']}" for r in wrong), sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
