"""``layernorm``, ``layernormfp16``, ``layernormbfp16``: MIOpenDriver's layer norm driver.

``-X`` gives x's lengths (any rank; miopy also takes ``,strides`` after them), ``-o`` the first
normalised dim (statistics over dims o.. for every index of dims ..o-1), ``-e`` epsilon, ``-m 0``
no weight and bias (MIOpen's ELEMENTWISE_AFFINE as its driver uses it) or ``-m 1`` weight and bias
of lens dims[o:]. ``-F 1`` forward (y, mean, rstd), as MIOpenDriver; miopy adds ``-F 2`` backward
(dx and, with ``-m 1``, dweight and dbias; mean and rstd are x's own, as a forward pass writes
them) and ``-F 0`` forward then backward on the forward's mean and rstd.

Inputs: x, weight and bias uniform in [0, 1) (MIOpenDriver's), dy in [-1, 1). Verification is
MIOpen's rms_range per output, stopping at the first failure: y, then mean, then rstd (backward:
dx, dweight, dbias), under 1.5e-6 (fp32), 8.2e-3 (fp16), 6.56e-2 (bf16); dweight and dbias, sums
over every row, also allow the rounding of such a sum (2^-24 sqrt(rows), twice). Unlike
MIOpenDriver, a failed verification exits 3 and a bad flag 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from miopy.driver import harness
from miopy.driver.cli import (
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    Flag,
    command_line,
    parse_flags,
    print_flags,
    wants_help,
)
from miopy.errors import BadParm
from miopy.problem.layernorm import GroupNormProblem, LayerNormProblem
from miopy.problem.nd import NdDesc
from miopy.problem.passes import Pass
from miopy.reference.common import rms_range, store_logical, view
from miopy.reference.layernorm import norm_reference, reference
from miopy.reference.tolerance import BASE, FP32_ROUNDOFF
from miopy.tensor import DataType, from_storage

SUBCOMMAND = {DataType.FP32: "layernorm", DataType.FP16: "layernormfp16", DataType.BF16: "layernormbfp16"}

# The flags every norm driver shares after its shape flags.
COMMON_FLAGS: list[Flag] = [
    Flag("e", "eps", 1e-5, "epsilon", float),
    Flag("m", "mode", 0, "0 no weight and bias, 1 weight and bias"),
    Flag("F", "forw", 1, "1 forward; 2 backward (miopy); 0 forward then backward"),
    Flag("i", "iter", 10, "iterations"),
    Flag("V", "verify", 1, "verify against the CPU reference"),
    Flag("t", "time", 0, "print the kernel time (device events)"),
    Flag("w", "wall", 0, "1: wall-clock time too; 2: with a warm-up run first"),
    Flag("S", "solution", "-1", "<0 Find API; 0 immediate mode; N or a name: that solver", str),
    Flag("C", "verification_cache", "", "directory caching reference results", str),
    Flag("d", "dump_output", 0, "dump output buffers to files"),
]

FLAGS: list[Flag] = [
    Flag("X", "input", "100x3x32x32", "x lengths (any rank), optionally ,strides", str),
    Flag("o", "normalized_dim", 3, "normalise over dims o.. (0 <= o < rank)"),
    *COMMON_FLAGS,
]


def labeller(flags: list[Flag]) -> Callable[[str], str]:
    by_long = {f.long: f for f in flags}
    return lambda long: by_long[long].label


_label = labeller(FLAGS)


def passes(values: dict[str, Any], label: Callable[[str], str]) -> list[Pass]:
    forw = values["forw"]
    if forw not in (0, 1, 2):
        raise BadParm(
            f"{label('forw')}={forw}: expected 1 (forward), 2 (backward) or 0 (forward then backward)"
        )
    return {0: [Pass.FORWARD, Pass.BACKWARD], 1: [Pass.FORWARD], 2: [Pass.BACKWARD]}[forw]


def parse_input(text: str, dtype: DataType) -> NdDesc:
    """``AxBxC[,strides]`` (strides ``x``- or ``,``-separated) -> NdDesc; BadParm names -X."""
    head, _, rest = str(text).strip().partition(",")
    try:
        lens = [int(v) for v in head.lower().split("x")]
        strides = [int(v) for v in rest.lower().replace("x", ",").split(",") if v.strip()] or None
    except ValueError:
        raise BadParm(
            f"{_label('input')}={text}: expected lengths such as 100x3x32x32, optionally ,strides"
        ) from None
    try:
        return NdDesc(dtype, lens, strides)
    except BadParm as exc:
        raise BadParm(f"{_label('input')}={text}: {exc}") from None


def reraise(exc: BadParm, values: dict[str, Any], label: Callable[[str], str], fields: dict[str, str]):
    """A problem's BadParm (``field=value: why``) as the flag's error."""
    field, _, why = str(exc).partition(": ")
    long = fields.get(field.split("=", 1)[0])
    if long is None:
        return exc
    return BadParm(f"{label(long)}={values[long]}: {why}")


_FIELDS = {"normalized_dim": "normalized_dim", "epsilon": "eps", "mode": "mode"}


def build_problem(values: dict[str, Any], dtype: DataType | str, direction: Pass | str) -> LayerNormProblem:
    """The problem a command line describes; bad values raise BadParm naming the flag."""
    dtype = DataType.parse(dtype)
    x = parse_input(values["input"], dtype)
    try:
        return LayerNormProblem(x, values["normalized_dim"], values["eps"], values["mode"], direction)
    except BadParm as exc:
        raise reraise(exc, values, _label, _FIELDS) from None


def problem_from_args(argv: list[str]) -> LayerNormProblem:
    """``[subcommand, flags...]`` -> the problem (the inverse of ``LayerNormProblem.driver_args``);
    ``-F 0`` gives the forward one."""
    by_name = {v: k for k, v in SUBCOMMAND.items()}
    sub, rest = (argv[0], argv[1:]) if argv and argv[0] in by_name else ("layernorm", argv)
    values = parse_flags(rest, FLAGS)
    return build_problem(values, by_name[sub], passes(values, _label)[0])


# ---- inputs and verification (layer norm and group norm alike) -----------------------------------
def inputs(problem: LayerNormProblem | GroupNormProblem, stats: dict[str, np.ndarray] | None = None):
    """Stored inputs: x, weight, bias in [0, 1), dy in [-1, 1); backward's mean and rstd from
    ``stats`` (the forward pass's stored outputs) or, without, x's own rounded to the data type."""
    rng = np.random.default_rng(harness.SEED)
    t = problem.tensors()
    x = rng.random(problem.x.lens)
    wl = problem.weight_desc.lens
    weight, bias = rng.random(wl), rng.random(wl)
    out = {"x": store_logical(x, t["x"], fill=0.0)}
    if problem.affine:
        out["weight"] = store_logical(weight, t["weight"], fill=0.0)
        if problem.direction is Pass.FORWARD:
            out["bias"] = store_logical(bias, t["bias"], fill=0.0)
    if problem.direction is Pass.FORWARD:
        return out
    out["dy"] = store_logical(rng.uniform(-1, 1, problem.x.lens), t["dy"], fill=0.0)
    if stats is not None:
        out.update(mean=stats["mean"], rstd=stats["rstd"])
        return out
    fwd = type(problem).parse(problem.key().replace("_B_", "_F_", 1))
    logical = from_storage(view(out["x"], t["x"]), t["x"].dtype).astype(np.float64)
    own = norm_reference(fwd, {"x": logical, "weight": weight, "bias": bias})
    out.update(mean=store_logical(own["mean"], t["mean"]), rstd=store_logical(own["rstd"], t["rstd"]))
    return out


def tolerance(problem: LayerNormProblem | GroupNormProblem, role: str) -> float:
    """MIOpen's layer norm / group norm threshold; a weight gradient (a sum over every key) may
    also carry that sum's fp32 rounding."""
    tol = BASE[problem.dtype]
    if role in ("dweight", "dbias"):
        terms = problem.x.element_count // problem.weight_desc.element_count
        tol = max(tol, 2 * FP32_ROUNDOFF * math.sqrt(terms))
    return tol


def errors(problem, host: dict[str, np.ndarray], ref: dict[str, np.ndarray]):
    """(role, rms_range error, tolerance) for each output, in verification order."""
    t = problem.tensors()
    for role in problem.outputs:
        got = from_storage(view(host[role], t[role]), t[role].dtype)
        yield role, rms_range(got, ref[role]), tolerance(problem, role)


def _layernorm_check(problem: LayerNormProblem, host, ref) -> tuple[bool, list[str]]:
    """MIOpenDriver's lines, stopping at the first failure."""
    title = f"{problem.direction.title} LayerNorm"
    lines = []
    for role, err, tol in errors(problem, host, ref):
        name = title if role in ("y", "dx") else f"{title} {role}"
        if not (math.isfinite(err) and err <= tol):
            if role == "mean":  # MIOpenDriver's spelling
                name = f"{problem.direction.title} Layernorm mean"
            return False, [*lines, f"{name} FAILED: {err:g} > {tol:g}"]
        lines.append(f"{name} Verifies OK on CPU reference ({err:g} < {tol:g})")
    return True, lines


def time_lines(title: str, fmt: str) -> Callable[[list[float], int], list[str]]:
    """MIOpenDriver's kernel time: the mean of the runs after the first (the first alone for
    ``-i 1``)."""

    def lines(times: list[float], iters: int) -> list[str]:
        kept = times[1:] if len(times) > 1 else times
        avg = float(sum(kept) / len(kept))
        return [f"GPU Kernel Time {title} Elapsed: {avg:{fmt}} ms"]

    return lines


def case(problem: LayerNormProblem) -> harness.Case:
    title = f"{problem.direction.title} LayerNorm"
    return harness.Case(
        problem,
        title,
        title,
        f"dump_layernorm_{'fwd' if problem.direction is Pass.FORWARD else 'bwd'}_out_gpu.bin",
        reference=reference,
        tolerance=lambda p, s: BASE[p.dtype],
        solution_flag=_label("solution"),
        what=problem.direction.title,
        time_lines=time_lines(title, "g"),
        check=_layernorm_check,
    )


def run_passes(handle, problems, make_case, values: dict[str, Any], out: TextIO) -> bool:
    """Each pass in turn; a backward pass after a forward one reads its mean and rstd."""
    ok, kept = True, {}
    for problem in problems:
        given = inputs(problem, kept if "mean" in kept else None)
        if problem.direction is Pass.BACKWARD and "x" in kept:
            given["x"] = kept["x"]
        result: dict[str, np.ndarray] = {}
        ok = harness.run_case(handle, make_case(problem), values, given, out, keep=result) and ok
        out.flush()
        if problem.direction is Pass.FORWARD:
            kept = {"x": given["x"], "mean": result["mean"], "rstd": result["rstd"]}
    return ok


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    dtype = DataType.parse(dtype_name)
    sub = SUBCOMMAND[dtype]
    if wants_help(argv):
        print_flags(sub, FLAGS, out)
        return EXIT_OK
    print(command_line(sub, argv), file=out)
    out.flush()
    values = parse_flags(argv, FLAGS)
    harness.check_common(values, _label)
    problems = [build_problem(values, dtype, p) for p in passes(values, _label)]
    from miopy.handle import Handle

    ok = run_passes(Handle(), problems, case, values, out)
    return EXIT_OK if ok else EXIT_VERIFY_FAILED


__all__ = [
    "FLAGS",
    "build_problem",
    "inputs",
    "parse_input",
    "passes",
    "problem_from_args",
    "run",
    "tolerance",
]
