"""Sweeps of the launch settings of the batch-norm, softmax and reduction solvers on a GPU, next to
PyTorch in one process (benchmarks/norms.py and benchmarks/misc_prims.py time each case): which
apply width, reduction blocks per compute unit, softmax team and loads in flight are fastest.

    python3 scripts/sweep_prims.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import misc_prims  # noqa: E402
import norms  # noqa: E402
import torch  # noqa: E402,F401  (before cupy: torch fails to import after it)

import miopy.solvers.norm.bn_program as bn_program  # noqa: E402
import miopy.solvers.reduce.direct as reduce_direct  # noqa: E402
import miopy.solvers.softmax.direct as softmax_direct  # noqa: E402
from miopy.handle import Handle  # noqa: E402


def line(tag: str, row: dict) -> None:
    mine = {r["solver"]: round(r["us"], 2) for r in row["all"]}
    print(f"{tag:>40}: torch {row['torch_us']:8.2f} us | {mine}", flush=True)


def main() -> None:
    # a fresh Handle for every setting: a handle keeps the invoker it built for a problem and solver
    for au, per_cu in ((4, 4), (2, 4), (8, 4), (4, 2), (4, 8)):
        bn_program.APPLY_VECTORS, bn_program.BLOCKS_PER_CU = au, per_cu
        row = norms.bn_case(Handle("cuda"), "fp16", 64, 112, "T")
        line(f"bn T fp16 NHWC 64x112 au{au} cu{per_cu}", row)
    bn_program.APPLY_VECTORS, bn_program.BLOCKS_PER_CU = 4, 4
    line("bn I fp16 NHWC 64x112 au4", norms.bn_case(Handle("cuda"), "fp16", 64, 112, "I"))
    bn_program.APPLY_VECTORS = 2
    line("bn I fp16 NHWC 64x112 au2", norms.bn_case(Handle("cuda"), "fp16", 64, 112, "I"))
    bn_program.APPLY_VECTORS = 4
    shape = softmax_direct.warp_shape
    for dtype in ("fp16", "fp32"):
        for team in (16, 32):

            def fixed(length: int, vec: int, team: int = team) -> tuple[int, int]:
                chunks = -(-length // vec)
                return team, -(-chunks // team)

            softmax_direct.warp_shape = fixed
            line(f"softmax fwd {dtype} team{team}", misc_prims.softmax_cases(Handle("cuda"), dtype)[0])
    softmax_direct.warp_shape = shape
    misc_prims.quick = True
    for loads in (4, 8, 16):
        reduce_direct.ReduceRowsWarp.LOADS = loads
        for dtype in ("fp16", "fp32"):
            for r in misc_prims.reduce_cases(Handle("cuda"), dtype):
                line(f"{r['case'][:28]} {dtype} loads{loads}", r)


if __name__ == "__main__":
    main()
