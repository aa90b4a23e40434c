"""Every config of the streaming 1x1 solvers (Conv1x1StreamFwd / Bwd / Wrw) on ResNet-50's 1x1
layers at batch 32, timed as find times them (device time, L2 flushed before each run), with the
share of the copy floor each reaches (bytes of x, w and y over COPY_TBPS).

    python3 scripts/bench_gemm1x1.py [--dtype fp16] [--layers 2,4] [--directions F,B,W]"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# ResNet-50's 1x1 layers (benchmarks/resnet50.txt numbering): C, H = W, K
LAYERS = {2: (64, 56, 64), 4: (64, 56, 256), 5: (256, 56, 128), 7: (128, 28, 512), 8: (512, 28, 256),
          10: (256, 14, 1024), 11: (1024, 14, 512), 13: (512, 7, 2048)}  # fmt: skip
COPY_TBPS = 4.27  # the H200's measured copy rate (benchmarks/conv.py's floor)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--layers", default=",".join(map(str, LAYERS)))
    parser.add_argument("--directions", default="F,B,W")
    args = parser.parse_args()
    os.environ.setdefault("MIOPY_BENCH_FLUSH_L2", "1")

    from miopy.engine import bench
    from miopy.engine.candidates import make_solution
    from miopy.handle import Handle
    from miopy.problem.conv import ConvDesc, ConvProblem
    from miopy.solvers.conv.gemm1x1_stream import Conv1x1StreamBwd, Conv1x1StreamFwd, Conv1x1StreamWrw
    from miopy.tensor import TensorDesc

    solvers = {"F": Conv1x1StreamFwd(), "B": Conv1x1StreamBwd(), "W": Conv1x1StreamWrw()}
    handle = Handle("cuda")
    for number in (int(v) for v in args.layers.split(",")):
        c, hw, k = LAYERS[number]
        for direction in args.directions.split(","):
            x = TensorDesc(args.dtype, (32, c, hw, hw), layout="NHWC")
            w = TensorDesc(args.dtype, (k, c, 1, 1), layout="NHWC")
            problem = ConvProblem.create(x, w, ConvDesc(), direction, y_layout="NHWC")
            solver, view = solvers[direction], problem.conv_view()
            why = solver.is_applicable(handle, view)
            if why:
                print(f"L{number} {direction} {solver.name}: not applicable ({why})", flush=True)
                continue
            nbytes = sum(d.nbytes for d in problem.tensors().values())
            configs = solver.search_space(handle, view)
            candidates = [make_solution(handle, problem, solver, cfg) for cfg in configs]
            candidates = bench.compile_all(handle, candidates)
            prepared = bench.device_args(handle, max(candidates, key=lambda s: s.workspace), None)
            for solution in candidates:
                us = bench.median_time(handle, solution, prepared) * 1000
                floor = nbytes / (COPY_TBPS * 1e12) * 1e6
                print(
                    f"L{number} {direction} {args.dtype} {us:8.2f} us  copy floor {floor:6.2f} us "
                    f"({floor / us:4.0%})  {solution.config}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
