"""Variants of the one-pass group norm kernels (GroupNormFwdRows / GroupNormBwdRows on NCHW,
GroupNormFwdNhwc on channels-last data) timed next to every other applicable solver and PyTorch,
through norms.py's group norm cases: a row's loads all issued before any is used (GN_BATCH 1 in
kernels/common/norm.h), two work-groups an SM (512 work items, GN_MIN_BLOCKS 2) and the 16-byte
accesses' cache hints (common/vec.h's VEC_LD_HINT / VEC_ST_HINT). Not yet timed on a GPU when
written. The strided fallbacks are left out.

    python benchmarks/gn_sweep.py [norms.py's options, e.g. --dtypes fp16]
"""

from __future__ import annotations

import sys

import norms

from miopy.solvers.norm.gn_nhwc import GroupNormFwdNhwc
from miopy.solvers.norm.solvers import GroupNormBwdRows, GroupNormFwdRows

# ptxas (NVRTC, sm_90): the shipped gn_rows_fwd / gn_rows_bwd take 46 / 64 registers at 1024 work
# items, one work-group (one group of 25088 elements) an SM at a time; 512 work items with 2 an SM
# guaranteed take 56 / 64 registers and no spills (fp16: 7 vectors a work item, backward reads dy
# again from L2), so two groups an SM overlap their loads, barriers and stores
VARIANTS_OF = {
    "rows": [
        {"defines": {"GN_BATCH": 1}},
        {"defines": {"GN_BATCH": 1, "VEC_LD_HINT": 1, "VEC_ST_HINT": 1}},
        {"defines": {"VEC_LD_HINT": 1, "VEC_ST_HINT": 1}},
        {"local": 512, "defines": {"GN_MIN_BLOCKS": 2}},
        {"local": 512, "defines": {"GN_MIN_BLOCKS": 2, "GN_BATCH": 1}},
        {"local": 512, "defines": {"GN_MIN_BLOCKS": 2, "GN_BATCH": 1, "VEC_LD_HINT": 1, "VEC_ST_HINT": 1}},
    ],
    "nhwc": [
        {"defines": {"GN_BATCH": 1}},
        {"defines": {"GN_BATCH": 1, "VEC_LD_HINT": 1, "VEC_ST_HINT": 1}},
    ],
}


def _variant(base, variant: dict):
    tag = f"_local{variant['local']}" if "local" in variant else ""
    name = "X" + base.name.removeprefix("GroupNorm") + tag
    name += "".join(f"_{k}{v}" for k, v in variant.get("defines", {}).items())
    return type(name, (type(base),), {"name": name, "variant": variant})()


VARIANTS = [_variant(b, v) for b in (GroupNormFwdRows(), GroupNormBwdRows()) for v in VARIANTS_OF["rows"]]
VARIANTS += [_variant(GroupNormFwdNhwc(), v) for v in VARIANTS_OF["nhwc"]]
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
