"""What the layer norm and group norm drivers share: the flags after their shape flags, the
passes ``-F`` selects, inputs, MIOpen's thresholds, MIOpenDriver's verification and time lines,
running forward then backward on the forward's statistics, and the subcommand's entry point. Each
driver (miopy.driver.layernorm, miopy.driver.groupnorm) brings its shape flags, ``build_problem``
and the wording of its lines."""

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
from miopy.problem.passes import Pass
from miopy.reference.common import rms_range, store_logical, view
from miopy.reference.layernorm import norm_reference
from miopy.reference.tolerance import BASE, FP32_ROUNDOFF
from miopy.tensor import DataType, from_storage

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


def labeller(flags: list[Flag]) -> Callable[[str], str]:
    by_long = {f.long: f for f in flags}
    return lambda long: by_long[long].label


def passes(values: dict[str, Any], label: Callable[[str], str]) -> list[Pass]:
    forw = values["forw"]
    if forw not in (0, 1, 2):
        raise BadParm(
            f"{label('forw')}={forw}: expected 1 (forward), 2 (backward) or 0 (forward then backward)"
        )
    return {0: [Pass.FORWARD, Pass.BACKWARD], 1: [Pass.FORWARD], 2: [Pass.BACKWARD]}[forw]


def reraise(exc: BadParm, values: dict[str, Any], label: Callable[[str], str], fields: dict[str, str]):
    """A problem's BadParm (``field=value: why``) as the flag's error."""
    field, _, why = str(exc).partition(": ")
    long = fields.get(field.split("=", 1)[0])
    if long is None:
        return exc
    return BadParm(f"{label(long)}={values[long]}: {why}")


def check_lines(
    problem,
    host,
    ref,
    title: str,
    ok_line: Callable[[str, float, float], str],
    fail_line: Callable[[str, str, float, float], str],
) -> tuple[bool, list[str]]:
    """MIOpenDriver's verification lines for each output in turn, stopping at the first failure:
    ``ok_line(name, err, tol)``, ``fail_line(name, role, err, tol)``; name is ``title`` for y and
    dx, else ``title role``."""
    lines = []
    for role, err, tol in errors(problem, host, ref):
        name = title if role in ("y", "dx") else f"{title} {role}"
        if not (math.isfinite(err) and err <= tol):
            return False, [*lines, fail_line(name, role, err, tol)]
        lines.append(ok_line(name, err, tol))
    return True, lines


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


def time_lines(title: str, fmt: str) -> Callable[[list[float], int], list[str]]:
    """MIOpenDriver's kernel time: the mean of the runs after the first (the first alone for
    ``-i 1``)."""

    def lines(times: list[float], iters: int) -> list[str]:
        kept = times[1:] if len(times) > 1 else times
        avg = float(sum(kept) / len(kept))
        return [f"GPU Kernel Time {title} Elapsed: {avg:{fmt}} ms"]

    return lines


def norm_case(problem, kind: str, reference, check, time_fmt: str, solution_label: str) -> harness.Case:
    """The harness case of one pass of a ``kind`` ("LayerNorm", "GroupNorm") driver."""
    title = f"{problem.direction.title} {kind}"
    return harness.Case(
        problem,
        title,
        title,
        f"dump_{kind.lower()}_{'fwd' if problem.direction is Pass.FORWARD else 'bwd'}_out_gpu.bin",
        reference=reference,
        tolerance=lambda p, s: BASE[p.dtype],
        solution_flag=solution_label,
        what=problem.direction.title,
        time_lines=time_lines(title, time_fmt),
        check=check,
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


def problem_from_args(argv: list[str], subcommands: dict[DataType, str], flags: list[Flag], build_problem):
    """``[subcommand, flags...]`` -> the problem (the inverse of the problem's ``driver_args``);
    ``-F 0`` gives the forward one."""
    by_name = {v: k for k, v in subcommands.items()}
    default = subcommands[DataType.FP32]
    sub, rest = (argv[0], argv[1:]) if argv and argv[0] in by_name else (default, argv)
    values = parse_flags(rest, flags)
    return build_problem(values, by_name[sub], passes(values, labeller(flags))[0])


def run_driver(
    dtype_name: str,
    argv: list[str],
    out: TextIO,
    subcommands: dict[DataType, str],
    flags: list[Flag],
    build_problem,
    make_case,
) -> int:
    """A norm subcommand: help, the command line, flags, every pass ``-F`` selects, exit status."""
    dtype = DataType.parse(dtype_name)
    sub = subcommands[dtype]
    if wants_help(argv):
        print_flags(sub, flags, out)
        return EXIT_OK
    print(command_line(sub, argv), file=out)
    out.flush()
    values = parse_flags(argv, flags)
    label = labeller(flags)
    harness.check_common(values, label)
    problems = [build_problem(values, dtype, p) for p in passes(values, label)]
    from miopy.handle import Handle

    ok = run_passes(Handle(), problems, make_case, values, out)
    return EXIT_OK if ok else EXIT_VERIFY_FAILED


__all__ = [
    "COMMON_FLAGS",
    "check_lines",
    "errors",
    "inputs",
    "labeller",
    "norm_case",
    "passes",
    "problem_from_args",
    "reraise",
    "run_driver",
    "run_passes",
    "time_lines",
    "tolerance",
]
