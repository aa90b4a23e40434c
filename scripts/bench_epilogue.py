"""What the fused conv epilogue saves: conv alpha / beta and bias + relu, fused into the
implicit-GEMM kernels' writes against the generic path (a TensorOp after the conv; conv into a
temporary and a blend; conv, bias add and activation as three steps), on ResNet-50 3x3 layers,
forward, batch 32, fp16 NHWC, on the solution immediate mode picks.

Device time per call (benchmarks/timing.py's Timer: launches queued behind a sleep kernel), in
microseconds; the outputs of the two paths are compared too.

    python3 scripts/bench_epilogue.py [--layers 56,28,14] [--dtype fp16]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import torch  # noqa: E402  (before CuPy: torch 2.11 fails to import after it)
from timing import Timer  # noqa: E402

from miopy.engine.find import get_solutions  # noqa: E402
from miopy.handle import Handle  # noqa: E402
from miopy.problem.activation import ActivationDesc, ActivationProblem  # noqa: E402
from miopy.problem.conv import ConvDesc, ConvProblem  # noqa: E402
from miopy.problem.passes import Pass  # noqa: E402
from miopy.problem.tensorop import TensorOp, TensorOpProblem  # noqa: E402
from miopy.solvers.conv.epilogue import Epilogue, scalars  # noqa: E402
from miopy.solvers.conv.scaled import _tensorop, fused_solution, run_scaled  # noqa: E402
from miopy.tensor import TensorDesc  # noqa: E402

# ResNet-50's 3x3 layers at batch 32: (spatial, channels)
LAYERS = {56: (56, 64), 28: (28, 128), 14: (14, 256), 7: (7, 512)}
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def layer(size: int, dtype: str) -> ConvProblem:
    hw, c = LAYERS[size]
    x = TensorDesc(dtype, (32, c, hw, hw), layout="NHWC")
    w = TensorDesc(dtype, (c, c, 3, 3), layout="NHWC")
    return ConvProblem.create(x, w, ConvDesc(pads=(1, 1)), "F", y_layout="NHWC")


def nhwc(lens: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(lens, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)


def measure(h: Handle, timer: Timer, size: int, dtype: str) -> str:
    """One layer's table row: device µs of the conv alone, then unfused / fused for each case."""
    tdt = TORCH_DTYPES[dtype]
    p = layer(size, dtype)
    sol = get_solutions(h, p)[0]
    x, w, y = nhwc(p.x.lens, tdt), nhwc(p.w.lens, tdt), nhwc(p.y.lens, tdt)
    bias = torch.randn(p.y.lens[1], device="cuda").to(tdt)
    ws = torch.empty(max(sol.workspace, 1), dtype=torch.uint8, device="cuda")
    t = {"x": x, "w": w, "y": y}
    relu = ActivationDesc("relu")
    fused_ab = fused_solution(h, sol)
    fused_br = fused_solution(h, sol, Epilogue(bias=True, activation=relu.mode))
    assert fused_ab is not None and fused_br is not None, f"{sol.solver}: no fused epilogue"
    ydesc = p.y
    bias_desc = TensorDesc(dtype, (1, ydesc.lens[1], 1, 1))
    add_problem = TensorOpProblem(
        TensorOp.ADD, a=ydesc, b=bias_desc, c=ydesc, alpha1=1.0, alpha2=1.0, beta=0.0
    )
    add = _tensorop(h, add_problem)
    act = get_solutions(h, ActivationProblem(relu, Pass.FORWARD, x=ydesc, y=ydesc))[0]

    def plain():
        h.run_solution(sol, t, ws)

    def scale(fuse: bool, beta: float):
        return lambda: run_scaled(h, sol, t, ws, 2.0 if beta == 0.0 else 0.5, beta, fuse=fuse)

    def bias_relu_unfused():
        h.run_solution(sol, t, ws)
        h.run_solution(add, {"a": y, "b": bias, "c": y})
        h.run_solution(act, {"x": y, "y": y})

    def bias_relu_fused():
        h.run_solution(fused_br, {**t, "bias": bias}, ws, scalars(1.0, 0.0))

    bias_relu_unfused()  # the two paths agree
    want = y.float().clone()
    y.fill_(float("nan"))
    bias_relu_fused()
    diff = (y.float() - want).abs().max().item()
    us = {
        "conv": timer([plain]),
        "scale_u": timer([scale(False, 0.0)]),
        "scale_f": timer([scale(True, 0.0)]),
        "blend_u": timer([scale(False, 1.5)]),
        "blend_f": timer([scale(True, 1.5)]),
        "br_u": timer([bias_relu_unfused]),
        "br_f": timer([bias_relu_fused]),
    }
    name = f"{p.y.lens[2]}x{p.y.lens[3]} {p.x.lens[1]}->{p.y.lens[1]}"
    return (
        f"| {name} | {sol.solver} | {us['conv']:.1f} | {us['scale_u']:.1f} / {us['scale_f']:.1f} | "
        f"{us['blend_u']:.1f} / {us['blend_f']:.1f} | {us['br_u']:.1f} / {us['br_f']:.1f} | {diff:.3g} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="56,28,14")
    ap.add_argument("--dtype", default="fp16", choices=sorted(TORCH_DTYPES))
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args(argv)
    h = Handle("cuda")
    timer = Timer(iters=args.iters, reps=5, sleep_cycles=20_000_000)
    print("| layer | solver | conv | alpha/beta scale: unfused / fused | blend: unfused / fused |", end="")
    print(" bias+relu: unfused / fused | max diff bias+relu |")
    print("|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.layers.split(",")):
        print(measure(h, timer, size, args.dtype), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
