"""ConvWgmmaWrwNhwc's configs against cuDNN and the mma.sync ConvIgemmWrwNhwc on the ResNet-50 3x3
layers (batch 32, NHWC, backward weights), on an sm_90 GPU.

Timed as scripts/bench_igemm_bwd.py times (device events around back-to-back launches queued
behind a sleep kernel, rotating input sets, median of repeats); every config is checked against
cuDNN's dw first. ``--configs space`` (the default) tries the solver's search space after its
default config, ``default`` the default alone, ``ws`` its warp-specialised and 5-stage configs
after the default, ``fix`` the default, its twin with the parts summed in the kernel and every
such config of the space in at most 4 blocks per SM, ``rot`` the default, its twin with spread
k-tile starts and every such config of the space (parts summed in the kernel where it has parts
and no clusters) with its twin without. Needs torch, cupy and cuda-bindings.

    python scripts/bench_wgmma_wrw.py [--dtypes fp16] [--layers 0,1,2,3] [--configs space] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from bench_igemm import SETS, check_and_time, cudnn_grad, handle_next_to_cudnn, kernel_facts  # noqa: E402
from bench_igemm_bwd import LAYERS, device_us, make_problem  # noqa: E402

from miopy.engine.bench import compile_all  # noqa: E402
from miopy.engine.candidates import make_solution  # noqa: E402
from miopy.solvers.conv import implicit_gemm_wgmma_wrw as wg  # noqa: E402
from miopy.solvers.conv.implicit_gemm_wrw import ConvIgemmWrwNhwc  # noqa: E402

SOLVER = wg.ConvWgmmaWrwNhwc()
OURS = (SOLVER.name,)
MMA_SYNC = ConvIgemmWrwNhwc()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp16")
    ap.add_argument("--layers", default="0,1,2,3", help="indices into bench_igemm_bwd.LAYERS")
    ap.add_argument("--configs", default="space", choices=["space", "default", "ws", "fix", "rot"])
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    handle = handle_next_to_cudnn()
    jobs = []
    for dtype in args.dtypes.split(","):
        for index in args.layers.split(","):
            layer = LAYERS[int(index)]
            problem = make_problem("W", dtype, layer)
            view = problem.conv_view()
            configs = [SOLVER.default_config(handle, view)]
            if args.configs == "space":
                configs += list(SOLVER.search_space(handle, view))
            elif args.configs == "fix":  # the parts summed in the kernel
                slots = 4 * handle.info.compute_units
                configs.append({**configs[0], "fix": 1})
                configs += [
                    c
                    for c in SOLVER.search_space(handle, view)
                    if c["fix"] and wg.tiles(view, c) * wg.slices(c) <= slots
                ]
            elif args.configs == "rot":  # spread k-tile starts, each next to its twin without
                configs.append({**configs[0], "rot": 1})
                for c in SOLVER.search_space(handle, view):  # parts summed in the kernel
                    if c["rot"] and c["fix"] == int(c["parts"] > 1 and c["cluster"] == 1):
                        configs += [{**c, "rot": 0}, c]
            elif args.configs == "ws":  # the warp-specialised part of the space, and 5 stages
                configs += [c for c in SOLVER.search_space(handle, view) if c["ws"] or c["stages"] == 5]
            unique = []
            for cfg in configs:
                if cfg not in unique and SOLVER.is_valid_config(handle, view, cfg):
                    unique.append(cfg)
            sols = [make_solution(handle, problem, SOLVER, cfg) for cfg in unique]
            sols.append(make_solution(handle, problem, MMA_SYNC))  # today's default, last
            jobs.append((dtype, layer, problem, sols))
    built = {id(s) for s in compile_all(handle, [s for job in jobs for s in job[3]])}
    print(f"built {len(built)} solutions", flush=True)
    results = []
    for dtype, layer, problem, sols in jobs:
        sols = [s for s in sols if id(s) in built]
        c, hw, k, f, stride = layer
        tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        cl = torch.channels_last
        ho = problem.y.lens[2]
        xs = [torch.randn(32, c, hw, hw, device="cuda", dtype=tdt).to(memory_format=cl) for _ in range(SETS)]
        dys = [torch.randn(32, k, ho, ho, device="cuda", dtype=tdt).to(memory_format=cl) for _ in range(SETS)]
        w = torch.zeros(k, c, f, f, device="cuda", dtype=tdt).to(memory_format=cl)
        pairs = zip(xs, dys, strict=True)
        calls = [functools.partial(cudnn_grad, "W", x, dy, w, stride, f // 2) for x, dy in pairs]
        refs = [call() for call in calls]
        cudnn = device_us(calls)
        outs = [torch.empty_like(w) for _ in range(SETS)]
        be = handle.backend
        tensors = [{"x": be.wrap(xs[i]), "w": be.wrap(outs[i]), "y": be.wrap(dys[i])} for i in range(SETS)]
        flops = 2.0 * 32 * ho * ho * k * c * f * f

        def facts(sol):
            if sol.solver != SOLVER.name:
                return {"solver": sol.solver}
            smem = wg.smem_bytes(sol.config)
            blocks = wg.tiles(sol.problem.conv_view(), sol.config) * wg.slices(sol.config)
            return {"solver": sol.solver, "blocks": blocks, "smem": smem, **kernel_facts(handle, sol, smem)}

        rows = check_and_time(handle, sols, tensors, outs, refs, flops, facts, timer=device_us)
        name = f"C{c} {hw}x{hw} K{k} {f}x{f}"
        ours = [r for r in rows if r["solver"] in OURS]
        today = next(r for r in rows if r["solver"] == MMA_SYNC.name)
        ok = [r for r in ours if r["err"] < 2e-2]
        best = min(ok, key=lambda r: r["us"]) if ok else ours[0]
        for r in sorted(ours, key=lambda r: r["us"]):
            print(
                f"  {dtype} {name} {r['solver'][8:]} {json.dumps(r['config'])}: "
                f"{r['us']:7.1f} us {r['tflops']:4.0f} TF "
                f"err {r['err']:.1e} regs {r.get('regs')} local {r.get('local_bytes')} "
                f"occ {r.get('blocks_per_sm')} blocks {r.get('blocks')}"
            )
        d = ours[0]
        print(
            f"{dtype} {name}: cuDNN {cudnn:6.1f} us | "
            f"mma.sync {today['us']:6.1f} us x{today['us'] / cudnn:.2f} | "
            f"wgmma default {d['us']:6.1f} us x{d['us'] / cudnn:.2f} err {d['err']:.1e} | "
            f"best {best['us']:6.1f} us x{best['us'] / cudnn:.2f} "
            f"{best['solver']} {json.dumps(best['config'])}",
            flush=True,
        )
        results.append({"dtype": dtype, "layer": name, "cudnn_us": cudnn, "rows": rows})
        del xs, dys, refs, outs
    for key in ("default", "best"):
        ratios = []
        for e in results:
            ours = [r for r in e["rows"] if r["solver"] in OURS]
            ok = [r for r in ours if r["err"] < 2e-2] or ours
            us = ours[0]["us"] if key == "default" else min(r["us"] for r in ok)
            ratios.append(us / e["cudnn_us"])
        if ratios:
            geo = statistics.geometric_mean(ratios)
            print(f"{key}: geomean ratio to cuDNN {geo:.2f}, worst {max(ratios):.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    wrong = [(e["layer"], r["config"]) for e in results for r in e["rows"] if not r["err"] < 2e-2]
    if wrong:
        print("WRONG RESULTS:", wrong)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
