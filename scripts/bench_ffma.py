"""The FFMA implicit-GEMM solvers (ConvIgemmFfmaFwd/Bwd/Wrw: fp32 on the CUDA cores) against cuDNN
(true fp32, TF32 off) and against the solver immediate mode ran before them (the first other
applicable one in registry order: the 3xTF32 implicit GEMMs on the 3x3 layers) on the 13
ResNet-50 layers at batch 32, on a GPU. Each solution is checked against cuDNN's output before it
is timed (relative L2 error printed); registers, spills and resident blocks per SM are read from
the built kernel. With ``--sweep`` a few more FFMA configs on the 3x3 layers. Timing is
scripts/bench_igemm.py's (device events around back-to-back launches over rotating inputs).

    python scripts/bench_ffma.py [--layers 1,3,6] [--layouts NCHW,NHWC] [--directions FBW]
        [--sweep] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_igemm import check_and_time, device_us, handle_next_to_cudnn, kernel_facts  # noqa: E402

from miopy.engine.bench import compile_all  # noqa: E402
from miopy.engine.candidates import applicable, make_solution  # noqa: E402
from miopy.problem.conv import ConvDesc, ConvProblem  # noqa: E402
from miopy.solvers.conv.implicit_gemm_ffma import (  # noqa: E402
    ConvIgemmFfmaBwd,
    ConvIgemmFfmaFwd,
    ConvIgemmFfmaWrw,
    ffma_config,
    grid_blocks,
    smem_bytes,
)
from miopy.tensor import TensorDesc  # noqa: E402

BATCH, SETS, ITERS = 32, 2, 30
# (C, H=W, K, filter, stride, pad): benchmarks/resnet50.txt
LAYERS = [
    (3, 224, 64, 7, 2, 3),
    (64, 56, 64, 1, 1, 0),
    (64, 56, 64, 3, 1, 1),
    (64, 56, 256, 1, 1, 0),
    (256, 56, 128, 1, 1, 0),
    (128, 28, 128, 3, 1, 1),
    (128, 28, 512, 1, 1, 0),
    (512, 28, 256, 1, 1, 0),
    (256, 14, 256, 3, 1, 1),
    (256, 14, 1024, 1, 1, 0),
    (1024, 14, 512, 1, 1, 0),
    (512, 7, 512, 3, 1, 1),
    (512, 7, 2048, 1, 1, 0),
]
SOLVERS = {"F": ConvIgemmFfmaFwd(), "B": ConvIgemmFfmaBwd(), "W": ConvIgemmFfmaWrw()}
SWEEP = [
    ffma_config(128, 128, 8, 8, 8),
    ffma_config(128, 128, 16, 8, 8),
    ffma_config(128, 64, 8, 8, 8),
    ffma_config(64, 128, 8, 8, 8),
    ffma_config(256, 64, 8, 8, 8),
    ffma_config(64, 64, 8, 8, 8),
    ffma_config(128, 64, 8, 8, 4),
    ffma_config(64, 64, 8, 4, 4),
]


def grad(dy, x, w, stride: int, pad: int, direction: str):
    """cuDNN's dx ("B") or dw ("W"), every tensor as given."""
    mask = [direction == "B", direction == "W", False]
    out = torch.ops.aten.convolution_backward(
        dy, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, mask
    )
    return out[0] if mask[0] else out[1]


def problem_of(li: int, layout: str, direction: str) -> ConvProblem:
    c, hw, k, f, st, pad = LAYERS[li - 1]
    return ConvProblem.create(
        TensorDesc("fp32", (BATCH, c, hw, hw), layout=layout),
        TensorDesc("fp32", (k, c, f, f), layout=layout),
        ConvDesc((pad, pad), (st, st)),
        direction,
    )


def plan(handle, li: int, layout: str, direction: str, sweep: bool) -> list:
    """The FFMA solutions of a case (the default config first; with ``sweep`` more on the 3x3
    layers), then the first other applicable solver's (immediate mode's choice before FFMA)."""
    problem = problem_of(li, layout, direction)
    solver = SOLVERS[direction]
    view = problem.conv_view()
    default = solver.default_config(handle, view)
    configs = [default]
    if sweep and LAYERS[li - 1][3] == 3:
        configs += [
            {**cfg, "split_k": s}
            for cfg in SWEEP
            for s in (1, 2, 4, 8, 16, 32)
            if solver.is_valid_config(handle, view, {**cfg, "split_k": s})
            and {**cfg, "split_k": s} != default
            and (s == 1 or grid_blocks(view, cfg) * s <= 8 * handle.info.compute_units)
            and (s > 1 or direction != "W" or grid_blocks(view, cfg) >= handle.info.compute_units)
        ][:12]
    names = {x.name for x in SOLVERS.values()}
    other = [s for s in applicable(handle, problem) if s.name not in names][0]
    return [make_solution(handle, problem, solver, cfg) for cfg in configs] + [
        make_solution(handle, problem, other)
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default=",".join(str(i + 1) for i in range(len(LAYERS))))
    ap.add_argument("--layouts", default="NCHW,NHWC")
    ap.add_argument("--directions", default="FBW")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    handle = handle_next_to_cudnn()
    be = handle.backend
    plans = {}  # every solution first, built in one parallel pass
    for li in map(int, args.layers.split(",")):
        for layout in args.layouts.split(","):
            for direction in args.directions:
                plans[li, layout, direction] = plan(handle, li, layout, direction, args.sweep)
    compile_all(handle, [s for sols in plans.values() for s in sols])
    results = []
    for li in map(int, args.layers.split(",")):
        c, hw, k, f, st, pad = LAYERS[li - 1]
        out_hw = (hw + 2 * pad - f) // st + 1
        flops = 2.0 * BATCH * out_hw * out_hw * k * c * f * f
        for layout in args.layouts.split(","):
            fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
            xs = [torch.randn(BATCH, c, hw, hw, device="cuda").to(memory_format=fmt) for _ in range(SETS)]
            w = (torch.randn(k, c, f, f, device="cuda") / (c * f * f) ** 0.5).to(memory_format=fmt)
            dys = [
                torch.randn(BATCH, k, out_hw, out_hw, device="cuda").to(memory_format=fmt)
                for _ in range(SETS)
            ]
            for direction in args.directions:
                solver = SOLVERS[direction]
                if direction == "F":
                    calls = [functools.partial(F.conv2d, x, w, stride=st, padding=pad) for x in xs]
                    ins = [{"x": be.wrap(x), "w": be.wrap(w)} for x in xs]
                    out_role = "y"
                elif direction == "B":
                    calls = [
                        functools.partial(grad, dys[i], xs[i], w, st, pad, direction) for i in range(SETS)
                    ]
                    ins = [{"y": be.wrap(dys[i]), "w": be.wrap(w)} for i in range(SETS)]
                    out_role = "x"
                else:
                    calls = [
                        functools.partial(grad, dys[i], xs[i], w, st, pad, direction) for i in range(SETS)
                    ]
                    ins = [{"x": be.wrap(xs[i]), "y": be.wrap(dys[i])} for i in range(SETS)]
                    out_role = "w"
                refs = [call().contiguous(memory_format=fmt) for call in calls]  # as the problem lies
                cudnn = device_us(calls, iters=ITERS)
                outs = [torch.empty_like(r) for r in refs]
                sets = [{**ins[i], out_role: be.wrap(outs[i])} for i in range(SETS)]
                *sols, other = plans[li, layout, direction]
                view = sols[0].problem.conv_view()

                def facts(sol, view=view, name=solver.name):
                    if sol.solver != name:
                        return {"solver": sol.solver}
                    return {
                        "solver": sol.solver,
                        "blocks": grid_blocks(view, sol.config) * sol.config["split_k"],
                        **kernel_facts(handle, sol, smem_bytes(sol.config)),
                    }

                timer = functools.partial(device_us, iters=ITERS)
                rows = check_and_time(handle, [*sols, other], sets, outs, refs, flops, facts, timer)
                ffma_rows, other_row = rows[:-1], rows[-1]
                best = min(ffma_rows, key=lambda r: r["us"])
                entry = {
                    "layer": li, "shape": f"C{c} {hw}x{hw} K{k} {f}x{f}/{st}", "layout": layout,
                    "direction": direction, "cudnn_us": cudnn, "default": ffma_rows[0], "best": best,
                    "other": other_row, "all": ffma_rows,
                }  # fmt: skip
                results.append(entry)
                d, o = ffma_rows[0], other_row
                print(
                    f"L{li:<2} {direction} {layout} {entry['shape']:>22} cuDNN {cudnn:8.1f} us | "
                    "FFMA default "
                    f"{d['us']:8.1f} us {d['tflops']:5.1f} TF x{d['us'] / cudnn:5.2f} err {d['err']:.1e} "
                    f"regs {d.get('regs')} occ {d.get('blocks_per_sm')} {json.dumps(d['config'])} | "
                    f"best {best['us']:8.1f} {json.dumps(best['config'])} | {o['solver']} {o['us']:8.1f} us "
                    f"x{o['us'] / cudnn:5.2f}",
                    flush=True,
                )
                if len(ffma_rows) > 1:
                    for r in ffma_rows:
                        print(
                            f"     sweep {r['us']:8.1f} us {r['tflops']:5.1f} TF err {r['err']:.1e} "
                            f"regs {r.get('regs')} occ {r.get('blocks_per_sm')} {json.dumps(r['config'])}"
                        )
                del refs, outs
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
