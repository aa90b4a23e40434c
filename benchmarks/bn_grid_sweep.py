"""Variants of the persistent-grid batch norm (solvers/norm/bn_grid.py) timed next to every other
applicable solver and PyTorch, through norms.py's batch norm cases (fp16 channels-last, training
forward and backward): work items, work-groups per SM, steps held in registers, streamed steps in
flight and steps held in shared memory. The strided fallbacks are left out (milliseconds).

    python benchmarks/bn_grid_sweep.py [norms.py's options, e.g. --shapes 6]
"""

from __future__ import annotations

import sys

import norms

from miopy.solvers.norm.bn_grid import BnBwdGrid, BnFwdTrainingGrid

# (local, work-groups per SM, register steps, streamed steps in flight, most shared-memory steps),
# and defines added to the kernel's (e.g. BNG_ASYNC 0: phase 1's shared-memory steps through
# registers; the H200 profile of 32x64x112x112 read x in 14.1 us so against 15.9 by cp.async)
FWD = [
    ((512, 2, 1, 4, 64), {"BNG_ASYNC": 0}),
    ((512, 2, 1, 8, 64), {"BNG_ASYNC": 0}),
    ((512, 2, 1, 8, 64), {}),
    ((256, 4, 1, 4, 64), {"BNG_ASYNC": 0}),
]
BWD = [((512, 1, 2, 4, 64), {"BNG_ASYNC": 0}), ((512, 1, 2, 8, 0), {})]  # (512, 1, 2, 4, 0): BnBwdGridL2


def _variant(base: type, shape: tuple[int, ...], defines: dict):
    tag = "_".join(map(str, shape)) + "".join(f"_{k}{v}" for k, v in defines.items())
    name = "X" + base.name.removeprefix("Bn") + "_" + tag
    return type(name, (base,), {"name": name, "shape": shape, "defines": defines or None})()


VARIANTS = [_variant(BnFwdTrainingGrid, *v) for v in FWD] + [_variant(BnBwdGrid, *v) for v in BWD]
_solvers_for = norms.solvers_for


def solvers_for(problem):
    found = [s for s in _solvers_for(problem) if not s.name.endswith("Strided")]
    return found + [v for v in VARIANTS if getattr(problem, "primitive", None) == "bnorm"]


norms.solvers_for = solvers_for

_bn_case = norms.bn_case


def bn_case(*args, **kwargs) -> dict:
    """norms.bn_case, printing every solver's time too."""
    row = _bn_case(*args, **kwargs)
    for r in sorted(row["all"], key=lambda r: r["us"]):
        ok = "" if r["err"] <= 1.0 else f"  WRONG (err {r['err']:.2g})"
        print(f"    {row['case']:>32}: {r['solver']:48s} {r['us']:8.2f} us{ok}", flush=True)
    return row


norms.bn_case = bn_case

if __name__ == "__main__":
    sys.argv[1:] = ["--only", "bn", "--dtypes", "fp16", "--bn-directions", "TB", *sys.argv[1:]]
    sys.exit(norms.main())
