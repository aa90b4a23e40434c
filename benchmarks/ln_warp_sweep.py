"""Variants of the team-per-row layer norm (solvers/norm/ln_warp.py) timed next to every other
applicable solver and PyTorch, through norms.py's layer norm cases (BERT rows, fp16 and fp32,
forward and backward): work items a work-group, work-groups an SM (backward's persistent grid),
the largest team, and the 16-byte accesses' cache hints (common/vec.h's VEC_LD_HINT /
VEC_ST_HINT). The strided fallbacks are left out.

    python benchmarks/ln_warp_sweep.py [norms.py's options, e.g. --dtypes fp16]
"""

from __future__ import annotations

import sys

import norms

from miopy.solvers.norm.ln_warp import LayerNormBwdWarp, LayerNormFwdWarp

# relative to the defaults (ln_warp.FWD_DEFINES: evict-first loads and stores; ln_warp.BWD_SHAPE)
FWD = [
    # ptxas: 66 registers at (256, 1): 3 work-groups an SM; (256, 4): 62 (fp16) / 56 (fp32), no spills
    {"min_blocks": 4},
    {"group": 128},
    {"defines": {}},
    {"group": 128, "defines": {}},
    {"team_most": 16},
]
BWD = [
    {"group": 256, "min_blocks": 2},
    {"group": 128, "min_blocks": 4},
    {"defines": {"VEC_LD_HINT": 1, "VEC_ST_HINT": 1}},
    # the column sums in shared memory (fewer registers, more resident warps; not yet timed)
    {"group": 128, "min_blocks": 4, "defines": {"LNW_ACC_SHARED": 1}},
    {"group": 128, "min_blocks": 6, "defines": {"LNW_ACC_SHARED": 1}},
    {"group": 64, "min_blocks": 12, "defines": {"LNW_ACC_SHARED": 1}},
]


def _variant(base: type, variant: dict):
    tag = "_".join(f"{k}{v}" for k, v in variant.items() if k != "defines")
    if "defines" in variant:
        tag += "".join(f"_{k}{v}" for k, v in variant["defines"].items()) or "_plain"
    name = "X" + base.name.removeprefix("LayerNorm") + "_" + tag.strip("_")
    return type(name, (base,), {"name": name, "variant": variant})()


VARIANTS = [_variant(LayerNormFwdWarp, v) for v in FWD] + [_variant(LayerNormBwdWarp, v) for v in BWD]
_solvers_for = norms.solvers_for


def solvers_for(problem):
    found = [s for s in _solvers_for(problem) if not s.name.endswith("Strided")]
    return found + [v for v in VARIANTS if getattr(problem, "primitive", None) == "layernorm"]


norms.solvers_for = solvers_for

_ln_case = norms.ln_case


def ln_case(*args, **kwargs) -> dict:
    """norms.ln_case, printing every solver's time too."""
    row = _ln_case(*args, **kwargs)
    for r in sorted(row["all"], key=lambda r: r["us"]):
        ok = "" if r["err"] <= 1.0 else f"  WRONG (err {r['err']:.2g})"
        print(f"    {row['case']:>24}: {r['solver']:44s} {r['us']:8.2f} us{ok}", flush=True)
    return row


norms.ln_case = ln_case

if __name__ == "__main__":
    sys.argv[1:] = ["--only", "ln", *sys.argv[1:]]
    sys.exit(norms.main())
