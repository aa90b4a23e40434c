"""Variants of the one-pass group norm kernels (GroupNormFwdRows / GroupNormBwdRows on NCHW,
GroupNormFwdNhwc on channels-last data) timed next to every other applicable solver and PyTorch,
through norms.py's group norm cases: a row's loads all issued before any is used (GN_BATCH 1 in
kernels/common/norm.h) and the 16-byte accesses' cache hints (common/vec.h's VEC_LD_HINT /
VEC_ST_HINT). Not yet timed on a GPU when written. The strided fallbacks are left out.

    python benchmarks/gn_sweep.py [norms.py's options, e.g. --dtypes fp16]
"""

from __future__ import annotations

import sys

import norms

from miopy.solvers.norm.gn_nhwc import GroupNormFwdNhwc
from miopy.solvers.norm.solvers import GroupNormBwdRows, GroupNormFwdRows

DEFINES = [
    {"GN_BATCH": 1},
    {"GN_BATCH": 1, "VEC_LD_HINT": 1, "VEC_ST_HINT": 1},
    {"VEC_LD_HINT": 1, "VEC_ST_HINT": 1},
]


def _variant(base, defines: dict):
    name = "X" + base.name.removeprefix("GroupNorm") + "".join(f"_{k}{v}" for k, v in defines.items())
    return type(name, (type(base),), {"name": name, "variant": {"defines": defines}})()


VARIANTS = [
    _variant(b, d) for b in (GroupNormFwdRows(), GroupNormBwdRows(), GroupNormFwdNhwc()) for d in DEFINES
]
_solvers_for = norms.solvers_for


def solvers_for(problem):
    found = [s for s in _solvers_for(problem) if not s.name.endswith("Strided")]
    return found + [v for v in VARIANTS if getattr(problem, "primitive", None) == "groupnorm"]


norms.solvers_for = solvers_for

_gn_case = norms.gn_case


def gn_case(*args, **kwargs) -> dict:
    """norms.gn_case, printing every solver's time too."""
    row = _gn_case(*args, **kwargs)
    for r in sorted(row["all"], key=lambda r: r["us"]):
        ok = "" if r["err"] <= 1.0 else f"  WRONG (err {r['err']:.2g})"
        print(f"    {row['case']:>32}: {r['solver']:48s} {r['us']:8.2f} us{ok}", flush=True)
    return row


norms.gn_case = gn_case

if __name__ == "__main__":
    sys.argv[1:] = ["--only", "gn", *sys.argv[1:]]
    sys.exit(norms.main())
