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

# (local, work-groups per SM, register steps, streamed steps in flight, most shared-memory steps)
FWD = [(512, 2, 1, 4, 0), (256, 4, 1, 4, 64), (512, 2, 1, 2, 64)]
BWD = [(256, 2, 2, 4, 64), (256, 2, 1, 4, 64)]  # (512, 1, 2, 4, 0): BnBwdGridL2


def _variant(base: type, shape: tuple[int, ...]):
    name = "X" + base.name.removeprefix("Bn") + "_" + "_".join(map(str, shape))
    return type(name, (base,), {"name": name, "shape": shape})()


VARIANTS = [_variant(BnFwdTrainingGrid, s) for s in FWD] + [_variant(BnBwdGrid, s) for s in BWD]
_solvers_for = norms.solvers_for


def solvers_for(problem):
    found = [s for s in _solvers_for(problem) if not s.name.endswith("Strided")]
    return found + [v for v in VARIANTS if getattr(problem, "primitive", None) == "bnorm"]


norms.solvers_for = solvers_for

if __name__ == "__main__":
    sys.argv[1:] = ["--only", "bn", "--dtypes", "fp16", "--bn-directions", "TB", *sys.argv[1:]]
    sys.exit(norms.main())
