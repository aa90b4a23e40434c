"""Helpers the simpler driver families share (tensorop, softmax, lrn, reduce): their common flags,
seeded inputs in a range, the shape flags, and running a list of cases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from miopy.driver import harness
from miopy.driver.cli import (
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    Flag,
    begin,
)
from miopy.errors import BadParm
from miopy.reference.common import store_logical
from miopy.tensor import LAYOUTS_2D, LAYOUTS_3D, TensorDesc

COMMON: list[Flag] = [
    Flag("i", "iter", 10, "iterations"),
    Flag("t", "time", 0, "print the kernel time (device events)"),
    Flag("w", "wall", 0, "1: wall-clock time too; 2: with a warm-up run first"),
    Flag("V", "verify", 1, "verify against the CPU reference"),
    Flag("C", "verification_cache", "", "directory caching reference results", str),
    Flag("S", "solution", "-1", "<0 Find API; 0 immediate mode; N or a name: that solver", str),
    Flag("s", "search", 0, "1: tune (search the perf-config space)"),
]


def label(flags: list[Flag], long: str) -> str:
    return next(f.label for f in flags if f.long == long)


def uniform(desc: TensorDesc, stream: int, low: float, high: float) -> np.ndarray:
    """A stored buffer of ``desc`` holding U(low, high), seeded per ``stream``."""
    rng = np.random.default_rng([harness.SEED, stream])
    values = low + (high - low) * rng.random(desc.lens, dtype=np.float64)
    return store_logical(values, desc, fill=0.0)


def layout(flags: list[Flag], values: dict[str, Any], dims: int, long: str = "layout") -> str:
    text = str(values.get(long, "") or "").strip().upper()
    valid = LAYOUTS_3D if dims == 3 else LAYOUTS_2D
    if not text:
        return valid[0]
    if text not in valid:
        raise BadParm(f"{label(flags, long)}={values[long]}: expected {' or '.join(valid)}")
    return text


def nchw_lens(flags: list[Flag], values: dict[str, Any]) -> tuple[int, ...]:
    """(n, c, [d,] h, w) from -n -c [-D] -H -W (a depth of 0 means 2-d)."""
    dims = [("batchsize", values["batchsize"]), ("in_channels", values["in_channels"])]
    if values.get("in_d", 0):
        dims.append(("in_d", values["in_d"]))
    dims += [("in_h", values["in_h"]), ("in_w", values["in_w"])]
    for long, v in dims:
        if v < 1:
            raise BadParm(f"{label(flags, long)}={v}: must be positive")
    return tuple(v for _, v in dims)


def kept_runs(values: dict[str, Any]) -> int:
    """How many times ``harness.run_case`` runs a solution on the buffers it verifies (-t runs on
    scratch copies; -w and the remaining -i runs on the kept ones)."""
    iters, wall = values.get("iter", 10), values.get("wall", 0)
    ran = iters if values.get("time", 0) else 0
    kept = 0
    if wall:
        kept += iters + (1 if wall == 2 else 0)
        ran += iters
    left = iters - ran
    if left <= 0 and not wall:
        left = 1
    return kept + max(left, 0)


def run_family(
    sub: str,
    argv: list[str],
    out: TextIO,
    flags: list[Flag],
    build: Callable[[dict[str, Any]], list[tuple[harness.Case, dict[str, np.ndarray]]]],
) -> int:
    """Help, the command line, then each (case, its input buffers by role) of ``build(values)``."""
    values = begin(sub, argv, flags, out)
    if values is None:
        return EXIT_OK
    harness.check_common(values, lambda long: label(flags, long))
    cases = build(values)
    from miopy.handle import Handle

    handle = Handle()
    ok = True
    for case, given in cases:
        ok = harness.run_case(handle, case, values, given, out) and ok
        out.flush()
    return EXIT_OK if ok else EXIT_VERIFY_FAILED


__all__ = ["COMMON", "kept_runs", "label", "layout", "nchw_lens", "run_family", "uniform"]
