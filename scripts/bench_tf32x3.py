"""The 3xTF32 implicit-GEMM solvers (ConvIgemmFwdTf32x3, ConvIgemmBwdTf32x3) against cuDNN (true
fp32, TF32 off) on the ResNet-50 3x3 layers at batch 32, on a GPU: a sweep of configs per layer
(forward NHWC), then the default config in every direction and layout the solvers take. Each
config is checked against cuDNN's output before it is timed (relative L2 error printed), and
registers, spills and resident blocks per SM are read from the built kernel. Timing is
scripts/bench_igemm.py's (device events around back-to-back launches over rotating inputs).

    python scripts/bench_tf32x3.py [--layers 0,1,2,3] [--configs all|default] [--json out.json]
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
from miopy.engine.candidates import make_solution  # noqa: E402
from miopy.problem.conv import ConvDesc, ConvProblem  # noqa: E402
from miopy.solvers.conv.implicit_gemm_tf32x3 import (  # noqa: E402
    ConvIgemmBwdTf32x3,
    ConvIgemmFwdTf32x3,
    gemm_shape,
    grid_blocks,
    smem_bytes,
    tile_config,
)
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import ConvIgemmWrwTf32x3  # noqa: E402
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import grid_blocks as wrw_blocks  # noqa: E402
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import smem_bytes as wrw_smem  # noqa: E402
from miopy.tensor import TensorDesc  # noqa: E402

BATCH, SETS = 32, 3
LAYERS = [(64, 56, 64), (128, 28, 128), (256, 14, 256), (512, 7, 512)]  # C, H=W, K; 3x3, pad 1
SWEEP = [
    tile_config(128, 128, 32, 2, 4, 3),
    tile_config(128, 128, 32, 2, 2, 3),
    tile_config(128, 128, 32, 2, 2, 4),
    tile_config(128, 128, 16, 2, 4, 4),
    tile_config(128, 64, 32, 4, 2, 3),
    tile_config(128, 64, 32, 2, 2, 3),
    tile_config(128, 64, 32, 2, 2, 4),
    tile_config(128, 64, 32, 2, 2, 2),
    tile_config(128, 64, 16, 2, 2, 4),
    tile_config(128, 32, 32, 4, 1, 3),
    tile_config(64, 64, 16, 2, 2, 4),
    tile_config(64, 128, 32, 2, 2, 3),
    tile_config(64, 64, 32, 2, 2, 4),
    tile_config(64, 64, 32, 2, 2, 3),
    tile_config(256, 128, 32, 4, 2, 3),
    tile_config(128, 256, 32, 2, 4, 3),
    tile_config(64, 64, 32, 2, 2, 4, 2),
    tile_config(64, 64, 32, 2, 2, 4, 4),
    tile_config(128, 64, 32, 4, 2, 3, 2),
    tile_config(128, 128, 32, 2, 4, 3, 2),
]
WRW_SWEEP = [
    {"bm": 64, "bn": 64, "bk": 32, "warps_m": 2, "warps_n": 2, "stages": 4},
    {"bm": 128, "bn": 64, "bk": 32, "warps_m": 2, "warps_n": 2, "stages": 3},
    {"bm": 64, "bn": 128, "bk": 32, "warps_m": 2, "warps_n": 2, "stages": 3},
    {"bm": 128, "bn": 128, "bk": 32, "warps_m": 2, "warps_n": 2, "stages": 3},
]


def tensors(c: int, hw: int, k: int, layout: str):
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    xs = [torch.randn(BATCH, c, hw, hw, device="cuda").to(memory_format=fmt) for _ in range(SETS)]
    w = (torch.randn(k, c, 3, 3, device="cuda") / (c * 9) ** 0.5).to(memory_format=fmt)
    dys = [torch.randn(BATCH, k, hw, hw, device="cuda").to(memory_format=fmt) for _ in range(SETS)]
    return xs, w, dys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="0,1,2,3")
    ap.add_argument("--configs", default="all", choices=["all", "default"])
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    handle = handle_next_to_cudnn()
    be = handle.backend
    results = []
    for li in map(int, args.layers.split(",")):
        c, hw, k = LAYERS[li]
        flops = 2.0 * BATCH * hw * hw * k * c * 9
        for layout in ("NHWC", "NCHW"):
            xs, w, dys = tensors(c, hw, k, layout)
            solvers = (("F", ConvIgemmFwdTf32x3()), ("B", ConvIgemmBwdTf32x3()), ("W", ConvIgemmWrwTf32x3()))
            for direction, solver in solvers:
                problem = ConvProblem.create(
                    TensorDesc("fp32", (BATCH, c, hw, hw), layout=layout),
                    TensorDesc("fp32", (k, c, 3, 3), layout=layout),
                    ConvDesc((1, 1)),
                    direction,
                )
                if direction == "F":
                    refs = [F.conv2d(x, w, padding=1) for x in xs]
                    cudnn = device_us([functools.partial(F.conv2d, x, w, padding=1) for x in xs])
                    ins = [{"x": be.wrap(x), "w": be.wrap(w)} for x in xs]
                    out_role = "y"
                elif direction == "W":
                    refs = [
                        torch.nn.grad.conv2d_weight(xs[i], w.shape, dys[i], padding=1) for i in range(SETS)
                    ]
                    refs = [r.to(memory_format=w_format(layout)) for r in refs]
                    calls = [functools.partial(torch.nn.grad.conv2d_weight, xs[i], w.shape, dys[i], padding=1)
                             for i in range(SETS)]  # fmt: skip
                    cudnn = device_us(calls)
                    ins = [{"x": be.wrap(xs[i]), "y": be.wrap(dys[i])} for i in range(SETS)]
                    out_role = "w"
                else:
                    shape = (BATCH, c, hw, hw)
                    refs = [torch.ops.aten.convolution_backward(
                        dy, xs[0], w, None, (1, 1), (1, 1), (1, 1), False, (0, 0), 1, (True, False, False)
                    )[0] for dy in dys]  # fmt: skip
                    call = functools.partial(torch.nn.grad.conv2d_input, shape, w, padding=1)
                    cudnn = device_us([functools.partial(call, grad_output=dy) for dy in dys])
                    ins = [{"y": be.wrap(dy), "w": be.wrap(w)} for dy in dys]
                    out_role = "x"
                outs = [torch.empty_like(r) for r in refs]
                sets = [{**ins[i], out_role: be.wrap(outs[i])} for i in range(SETS)]
                view = problem.conv_view()
                default = solver.default_config(handle, view)
                configs = [default]
                if args.configs == "all" and direction == "F" and layout == "NHWC":
                    configs += [
                        cfg for cfg in SWEEP if cfg != default and solver.is_valid_config(handle, view, cfg)
                    ]
                if args.configs == "all" and direction == "W" and layout == "NHWC":
                    more = [{**default, "split_k": default["split_k"] * f} for f in (2, 4)]
                    more += [{**default, "split_k": max(1, default["split_k"] // 2)}]
                    more += [{**cfg, "split_k": default["split_k"]} for cfg in WRW_SWEEP]
                    configs += [
                        cfg for cfg in more if cfg != default and solver.is_valid_config(handle, view, cfg)
                    ]
                sols = compile_all(handle, [make_solution(handle, problem, solver, cfg) for cfg in configs])

                def facts(sol, view=view, direction=direction):
                    if direction == "W":
                        blocks = wrw_blocks(view, sol.config) * sol.config["split_k"]
                        return {
                            "blocks": blocks,
                            **kernel_facts_gemm(handle, sol, "igemm_wrw_tf32x3", wrw_smem),
                        }
                    return {
                        "blocks": grid_blocks(gemm_shape(view), sol.config),
                        **kernel_facts_gemm(handle, sol),
                    }

                rows = check_and_time(handle, sols, sets, outs, refs, flops, facts)
                best = min(rows, key=lambda r: r["us"])
                entry = {"layer": f"C{c} {hw}x{hw} K{k}", "layout": layout, "direction": direction,
                         "cudnn_us": cudnn, "default": rows[0], "best": best, "all": rows}  # fmt: skip
                results.append(entry)
                for r in rows:
                    print(
                        f"{direction} {layout} {entry['layer']:>16} cuDNN {cudnn:7.1f} us | "
                        f"{r['us']:7.1f} us {r['tflops']:5.1f} TF x{r['us'] / cudnn:4.2f} err {r['err']:.1e} "
                        f"regs {r.get('regs')} "
                        f"local {r.get('local_bytes')} occ {r.get('blocks_per_sm')} blocks {r['blocks']} "
                        f"{json.dumps(r['config'])}",
                        flush=True,
                    )
                del refs, outs
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def kernel_facts_gemm(handle, solution, name: str = "igemm_fwd_tf32x3", smem=smem_bytes) -> dict:
    """kernel_facts of the solution's GEMM kernel (the NCHW programs launch a transpose first)."""
    gemm = [s for s in solution.kernels if s.name == name][0]
    moved = type("S", (), {"kernels": [gemm]})()
    return kernel_facts(handle, moved, smem(solution.config))


def w_format(layout: str):
    return torch.channels_last if layout == "NHWC" else torch.contiguous_format


if __name__ == "__main__":
    sys.exit(main())
