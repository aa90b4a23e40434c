"""Config sweeps of the fp32 3xTF32 solvers on the layers issue 9 lists as slow, next to cuDNN
(true fp32, TF32 off), on a GPU: the ResNet-50 stem (C = 3, 7x7, stride 2) through
ConvIgemmPadFwdTf32x3, ConvIgemmBwdPhaseTf32x3 and ConvIgemmPadWrwTf32x3 (case ``stem``), and
backward weights of the 3x3 layers 128x28², 256x14², 512x7² through ConvIgemmWrwTf32x3 (case
``wrw``) and ConvWinogradWrwF2x3Tf32x3 (case ``wino``, 64x56² too); NCHW and NHWC, batch 32.
Each config is checked against cuDNN's output (relative L2 error printed) before it is timed;
registers and resident blocks per SM of the GEMM kernel are printed too.

    python scripts/bench_tf32x3_pad.py [--cases stem,wrw,wino] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from bench_igemm import check_and_time, device_us, handle_next_to_cudnn, kernel_facts  # noqa: E402

from miopy.engine.bench import compile_all  # noqa: E402
from miopy.engine.candidates import make_solution  # noqa: E402
from miopy.problem.conv import ConvDesc, ConvProblem  # noqa: E402
from miopy.solvers.conv.implicit_gemm_pad_tf32x3 import (  # noqa: E402
    ConvIgemmPadFwdTf32x3,
    ConvIgemmPadWrwTf32x3,
)
from miopy.solvers.conv.implicit_gemm_phase_tf32x3 import ConvIgemmBwdPhaseTf32x3  # noqa: E402
from miopy.solvers.conv.implicit_gemm_tf32x3 import tile_config  # noqa: E402
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import ConvIgemmWrwTf32x3  # noqa: E402
from miopy.solvers.conv.winograd_wrw_tf32x3 import ConvWinogradWrwF2x3Tf32x3, gemm_problem  # noqa: E402
from miopy.tensor import TensorDesc  # noqa: E402

BATCH, SETS = 32, 2
FWD_SWEEP = [
    tile_config(128, 64, 16, 2, 2, 4),
    tile_config(128, 64, 32, 2, 2, 3),
    tile_config(128, 64, 16, 4, 1, 4),
    tile_config(256, 64, 16, 4, 1, 4),
    tile_config(256, 64, 32, 4, 2, 3),
    tile_config(64, 64, 16, 2, 2, 4),
    tile_config(128, 32, 16, 4, 1, 4),
    tile_config(128, 64, 16, 2, 2, 5),
]
PHASE_SWEEP = [
    tile_config(128, 16, 32, 4, 1, 4),
    tile_config(128, 16, 32, 4, 1, 3),
    tile_config(128, 16, 32, 4, 1, 5),
    tile_config(256, 16, 32, 4, 1, 3),
    tile_config(256, 16, 32, 4, 1, 4),
    tile_config(64, 16, 32, 2, 1, 4),
    tile_config(128, 32, 32, 4, 1, 3),
    tile_config(128, 16, 32, 2, 1, 4),
]
WRW_TILES = [
    tile_config(128, 64, 32, 2, 2, 3),
    tile_config(64, 64, 32, 2, 2, 4),
    tile_config(128, 128, 32, 2, 4, 3),
    tile_config(64, 128, 32, 2, 2, 3),
    tile_config(128, 64, 16, 2, 2, 4),
    tile_config(128, 64, 32, 2, 2, 4),
    tile_config(64, 64, 16, 2, 2, 4),
    tile_config(64, 32, 32, 2, 1, 4),
]
STEM_WRW = [{**t, "split_k": s} for t in WRW_TILES[:4] for s in (32, 64)]
LAYERS_3X3 = [(128, 28, 128), (256, 14, 256), (512, 7, 512)]  # C, H=W, K
WINO_LAYERS = [(64, 56, 64), *LAYERS_3X3]


def fmt(layout: str):
    return torch.channels_last if layout == "NHWC" else torch.contiguous_format


def run(handle, solver, problem, configs, direction, x, w, dy, stride, pad, flops, results, tag) -> None:
    be = handle.backend
    if direction == "F":
        ref = torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)
        cudnn = device_us([lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)])
        ins, out_role = {"x": be.wrap(x), "w": be.wrap(w)}, "y"
    else:
        mask = [direction == "B", direction == "W", False]

        def call():
            return torch.ops.aten.convolution_backward(
                dy, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, mask
            )

        grads = call()
        ref = grads[0] if direction == "B" else grads[1]
        cudnn = device_us([call])
        ins = {"y": be.wrap(dy), "w": be.wrap(w)} if direction == "B" else {"x": be.wrap(x), "y": be.wrap(dy)}
        out_role = "x" if direction == "B" else "w"
    view = problem.conv_view()
    default = solver.default_config(handle, view)
    picks = [default]
    for c in configs:
        if c not in picks and solver.is_valid_config(handle, view, c):
            picks.append(c)
    sols = compile_all(handle, [make_solution(handle, problem, solver, c) for c in picks])
    outs = [torch.empty_like(ref) for _ in range(SETS)]
    sets = [{**ins, out_role: be.wrap(o)} for o in outs]
    gemm_name = "igemm_wrw_tf32x3" if direction == "W" else "igemm_fwd_tf32x3"

    def facts(sol):
        gemm = [s for s in sol.kernels if s.name == gemm_name][0]
        moved = type("S", (), {"kernels": [gemm]})()
        launch = [s for s in sol.program.steps if getattr(s, "spec", None) is gemm]
        smem = launch[0].shared_mem if launch else 0
        try:
            return kernel_facts(handle, moved, smem)
        except Exception as exc:  # noqa: BLE001 - facts are extras
            return {"facts_error": str(exc)[:80]}

    rows = check_and_time(handle, sols, sets, outs, [ref] * SETS, flops, facts)
    for r in rows:
        print(
            f"{tag} {direction} cuDNN {cudnn:7.1f} us | {r['us']:7.1f} us {r['tflops']:5.1f} TF "
            f"x{r['us'] / cudnn:4.2f} err {r['err']:.1e} regs {r.get('regs')} occ {r.get('blocks_per_sm')} "
            f"{json.dumps(r['config'])}",
            flush=True,
        )
    results.append({"tag": tag, "direction": direction, "cudnn_us": cudnn, "rows": rows})


def problem_of(c, hw, k, r, stride, pad, layout, direction) -> ConvProblem:
    return ConvProblem.create(
        TensorDesc("fp32", (BATCH, c, hw, hw), layout=layout),
        TensorDesc("fp32", (k, c, r, r), layout=layout),
        ConvDesc((pad, pad), (stride, stride)),
        direction,
    )


def wino_sweep(handle, results: list) -> None:
    """ConvWinogradWrwF2x3Tf32x3 on WINO_LAYERS: its default, then tiles x splits around its rule."""
    solver = ConvWinogradWrwF2x3Tf32x3()
    for layout in ("NCHW", "NHWC"):
        for c, hw, k in WINO_LAYERS:
            x = torch.randn(BATCH, c, hw, hw, device="cuda").to(memory_format=fmt(layout))
            w = torch.randn(k, c, 3, 3, device="cuda").to(memory_format=fmt(layout))
            dy = torch.randn(BATCH, k, hw, hw, device="cuda").to(memory_format=fmt(layout))
            problem = problem_of(c, hw, k, 3, 1, 1, layout, "W")
            view = problem.conv_view()
            gemm = gemm_problem(view)
            configs = []
            for t in WRW_TILES[:6]:
                split = solver._split_for(handle, gemm, t)
                configs += [{**t, "split_k": s} for s in (split, split * 2, max(1, split // 2))]
            flops = 2.0 * BATCH * hw * hw * k * c * 9
            tag = f"wino {c}x{hw}->{k} {layout}"
            run(handle, solver, problem, configs, "W", x, w, dy, 1, 1, flops, results, tag)
            del x, w, dy


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="stem,wrw")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    handle = handle_next_to_cudnn()
    results: list = []
    cases = args.cases.split(",")
    for layout in ("NCHW", "NHWC"):
        if "stem" in cases:
            x = torch.randn(BATCH, 3, 224, 224, device="cuda").to(memory_format=fmt(layout))
            w = (torch.randn(64, 3, 7, 7, device="cuda") / 147**0.5).to(memory_format=fmt(layout))
            dy = torch.randn(BATCH, 64, 112, 112, device="cuda").to(memory_format=fmt(layout))
            flops = 2.0 * BATCH * 112 * 112 * 64 * 3 * 49
            for direction, solver, sweep in (
                ("F", ConvIgemmPadFwdTf32x3(), FWD_SWEEP),
                ("B", ConvIgemmBwdPhaseTf32x3(), PHASE_SWEEP),
                ("W", ConvIgemmPadWrwTf32x3(), STEM_WRW),
            ):
                problem = problem_of(3, 224, 64, 7, 2, 3, layout, direction)
                tag = f"stem {layout}"
                run(handle, solver, problem, sweep, direction, x, w, dy, 2, 3, flops, results, tag)
            del x, w, dy
        if "wrw" in cases:
            solver = ConvIgemmWrwTf32x3()
            for c, hw, k in LAYERS_3X3:
                x = torch.randn(BATCH, c, hw, hw, device="cuda").to(memory_format=fmt(layout))
                w = torch.randn(k, c, 3, 3, device="cuda").to(memory_format=fmt(layout))
                dy = torch.randn(BATCH, k, hw, hw, device="cuda").to(memory_format=fmt(layout))
                problem = problem_of(c, hw, k, 3, 1, 1, layout, "W")
                view = problem.conv_view()
                base = solver.default_config(handle, view)
                splits = (base["split_k"] // 2, base["split_k"] * 2)
                configs = [{**base, "split_k": s} for s in splits if s >= 1]
                for t in WRW_TILES:
                    split = solver._split_for(handle, view, t)
                    configs += [{**t, "split_k": split}, {**t, "split_k": split * 2}]
                flops = 2.0 * BATCH * hw * hw * k * c * 9
                tag = f"{c}x{hw}->{k} {layout}"
                run(handle, solver, problem, configs, "W", x, w, dy, 1, 1, flops, results, tag)
                del x, w, dy
    if "wino" in cases:
        wino_sweep(handle, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
