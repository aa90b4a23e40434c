"""``bnorm``, ``bnormfp16``, ``bnormfp16fp32``, ``bnormbfp16fp32`` (and ``bnormbfp16``):
MIOpenDriver's batch norm driver.

``-F 1`` training forward (``-s 1`` writes saved mean / inverse variance, ``-r 1`` updates the
running mean / variance), ``-F 2`` inference forward (``-r 1`` from estimated statistics, ``-r 0``
from the batch's own), ``-F 0 -b 1`` backward (``-s 1`` from saved statistics, else recomputed);
``-F 0 -b 0`` is training. epsilon is MIOpenDriver's 1e-3 and the exponential-average factor 1
(what its first iteration uses); miopy adds ``--epsilon`` and ``--exp_avg_factor`` to change them.
``-A``/``-B`` are accepted and ignored, as in MIOpenDriver.

Inputs: x, scale, bias uniform in (-1, 1); dy, running and estimated means in (-1, 1) and
variances in (0.5, 1.5); the saved statistics given to backward are x's own. Verification:
MIOpen's rms_range per output, under 1e-4 (fp32), 5e-4 (fp16), 4e-3 (bf16: its rounding alone is
about 1e-3 of a value) for forward and backward alike (MIOpenDriver allows 1000 times more
backward). Unlike MIOpenDriver a failed verification exits 3 and a bad flag 1."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from miopy.driver import harness
from miopy.driver.cli import (
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    Flag,
    begin,
    parse_flags,
)
from miopy.errors import BadParm
from miopy.problem.bnorm import SUBCOMMANDS, BatchNormProblem, BnPass
from miopy.reference.bnorm import random_values, reference
from miopy.reference.common import rms_range, store_logical, view
from miopy.tensor import LAYOUTS_2D, LAYOUTS_3D, DataType, TensorDesc, from_storage

FLAGS: list[Flag] = [
    Flag("n", "batchsize", 32, "mini-batch size"),
    Flag("c", "in_channels", 3, "channels"),
    Flag("D", "in_d", 0, "depth (> 0: a 5-D tensor)"),
    Flag("H", "in_h", 32, "height"),
    Flag("W", "in_w", 32, "width"),
    Flag("L", "layout", "", "NCHW, NHWC (4-D), NCDHW, NDHWC (5-D)", str),
    Flag("F", "forw", 0, "0 off (training unless -b 1), 1 training, 2 inference"),
    Flag("b", "back", 0, "1: backward (with -F 0)"),
    Flag("m", "mode", 0, "0 per-activation, 1 spatial"),
    Flag("s", "save", 0, "training: write saved mean / inverse variance; backward: use them"),
    Flag("r", "run", 0, "training: update running statistics; inference: use estimated ones"),
    Flag("A", "alpha", 1.0, "ignored (as MIOpenDriver)", float),
    Flag("B", "beta", 0.0, "ignored (as MIOpenDriver)", float),
    Flag("e", "epsilon", 1e-3, "epsilon (miopy; MIOpenDriver fixes 1e-3)", float),
    Flag("M", "exp_avg_factor", 1.0, "exponential-average factor of the running statistics (miopy)", float),
    Flag("i", "iter", 1, "iterations"),
    Flag("V", "verify", 1, "verify against the CPU reference"),
    Flag("t", "time", 0, "print the kernel time (device events)"),
    Flag("w", "wall", 0, "1: wall-clock time too; 2: with a warm-up run first"),
    Flag("P", "printconv", 1, "unused (as MIOpenDriver)"),
    Flag("S", "solution", "-1", "<0 Find API; 0 immediate mode; N or a name: that solver", str),
    Flag("C", "verification_cache", "", "directory caching reference results", str),
    Flag("o", "dump_output", 0, "dump output buffers to files"),
]
_BY_LONG = {f.long: f for f in FLAGS}
_DTYPES = {name: pair for pair, name in SUBCOMMANDS.items()}
TOLERANCE = {DataType.FP32: 1e-4, DataType.FP16: 5e-4, DataType.BF16: 4e-3}
_WHAT = {
    "running_mean": "running mean",
    "running_var": "running variance",
    "saved_mean": "saved mean",
    "saved_inv_var": "saved inverse variance",
}


def _label(long: str) -> str:
    return _BY_LONG[long].label


def _bad(long: str, value: Any, why: str) -> BadParm:
    return BadParm(f"{_label(long)}={value}: {why}")


def plan(values: dict[str, Any], out: TextIO | None = None) -> BnPass:
    """The pass a command line runs (MIOpenDriver's -F / -b rules)."""
    forw, back = values["forw"], values["back"]
    if forw not in (0, 1, 2):
        raise _bad("forw", forw, "expected 0, 1 (training) or 2 (inference)")
    if back not in (0, 1):
        raise _bad("back", back, "expected 0 or 1")
    if back and forw:
        if out is not None:
            print("Warning: Deactivate forward to run backward on Batch Norm.", file=out)
            print("Running forward only.", file=out)
        back = 0
    if back:
        return BnPass.BACKWARD
    return BnPass.INFERENCE if forw == 2 else BnPass.TRAINING


def build_problem(values: dict[str, Any], subcommand: str, direction: BnPass) -> BatchNormProblem:
    """The problem a command line describes; bad values raise BadParm naming the flag."""
    dtype, pdtype = _DTYPES[subcommand]
    longs = ("batchsize", "in_channels", *(("in_d",) if values["in_d"] else ()), "in_h", "in_w")
    for long in longs:
        if values[long] < 1:
            raise _bad(long, values[long], "must be positive")
    lens = tuple(values[long] for long in longs)
    valid = LAYOUTS_3D if len(lens) == 5 else LAYOUTS_2D
    layout = str(values["layout"]).strip().upper() or valid[0]
    if layout not in valid:
        raise _bad(
            "layout", values["layout"], f"Invalid Layout Parameter Value (expected {' or '.join(valid)})"
        )
    if values["mode"] not in (0, 1):
        raise _bad("mode", values["mode"], "expected 0 (per-activation) or 1 (spatial)")
    for long in ("save", "run"):
        if values[long] not in (0, 1):
            raise _bad(long, values[long], "expected 0 or 1")
    save, run = bool(values["save"]), bool(values["run"])
    if direction is BnPass.INFERENCE and not run:
        direction, save = BnPass.TRAINING, False  # inference from the batch's own statistics
    try:
        return BatchNormProblem(
            values["mode"],
            direction,
            TensorDesc(dtype, lens, layout=layout),
            param_dtype=pdtype,
            save=save and direction is not BnPass.INFERENCE,
            running=run and direction is BnPass.TRAINING,
            epsilon=values["epsilon"],
            exp_avg_factor=values["exp_avg_factor"],
        )
    except BadParm as exc:
        field = str(exc).split("=", 1)[0]
        if field in _BY_LONG:
            raise _bad(field, values[field], str(exc).split(": ", 1)[-1]) from None
        raise


def problem_from_args(argv: list[str]) -> BatchNormProblem:
    """``[subcommand, flags...]`` -> the problem (the inverse of ``BatchNormProblem.driver_args``)."""
    sub, rest = (argv[0], argv[1:]) if argv and argv[0] in _DTYPES else ("bnorm", argv)
    values = parse_flags(rest, FLAGS)
    return build_problem(values, sub, plan(values))


def inputs(problem: BatchNormProblem) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(harness.SEED)
    values = random_values(problem, rng)
    t = problem.tensors()
    return {r: store_logical(values[r], t[r], fill=0.0) for r in problem.inputs}


def check(problem: BatchNormProblem, host: dict[str, np.ndarray], ref: dict[str, np.ndarray]):
    """MIOpenDriver's lines: each output's rms_range under the data type's tolerance."""
    t = problem.tensors()
    tol = TOLERANCE[problem.dtype]
    lines, ok = [], True

    def err(role: str) -> float:
        got = from_storage(view(host[role], t[role]), t[role].dtype)
        return rms_range(got, ref[role])

    if problem.direction is BnPass.BACKWARD:
        for role in ("dx", "dscale", "dbias"):
            e = err(role)
            if e <= tol:
                lines.append(f"Backwards prop batch norm verification passed on {role} ({e:g})")
            else:
                ok = False
                lines.append(f"Backwards prop batch norm verification FAILED on {role}: {e:g}")
        if ok:
            lines.append("Backwards Prop Batch Norm Verifies on CPU and GPU.")
        return ok, lines
    for role in problem.outputs[1:]:
        e = err(role)
        if e <= tol:
            lines.append(f"Forward train batch norm verification passed on {_WHAT[role]} ({e:g})")
        else:
            ok = False
            lines.append(f"Forward train batch norm verification FAILED on {_WHAT[role]}: {e:g}")
    e = err("y")
    if e <= tol:
        lines.append(f"Forward batch norm verification passed on output ({e:g})")
    else:
        ok = False
        lines.append(f"Forward batch norm verification FAILED on output: {e:g}")
    if ok:
        lines.append("Forward Batch Norm Verifies on CPU and GPU.")
    return ok, lines


def _time_lines(problem: BatchNormProblem, times: list[float], iters: int) -> list[str]:
    low = min(times)
    kept = times[1:] if len(times) > 1 else times
    avg = float(sum(kept) / len(kept))
    t = problem.tensors()
    read = sum(t[r].nbytes for r in problem.inputs)
    written = sum(t[r].nbytes for r in problem.outputs)
    gbs = (read + written) / low / 1e6 if low > 0 else 0.0
    if problem.direction is BnPass.BACKWARD:
        return [
            f"stats: bnormb, 0, {read}, {written}, 0, {gbs:.3f}, {low:f}",
            f"GPU Kernel Min Time Backwards Batch Normalization Elapsed: {low:f} ms",
            f"GPU Kernel Avg Time Backwards Batch Normalization Elapsed: {avg:f} ms, for {iters} iterations.",
        ]
    return [
        f"GPU Kernel Min Time Forward Batch Normalization Elapsed: {low:f} ms",
        f"GPU Kernel Avg Time Forward Batch Normalization Elapsed: {avg:f} ms, for {iters} iterations.",
        f"stats: bnormf, 0, {read}, {written}, 0, {gbs:.3f}, {low:f}",
    ]


def case(problem: BatchNormProblem) -> harness.Case:
    backward = problem.direction is BnPass.BACKWARD
    title = "Backwards Batch Normalization" if backward else "Forward Batch Normalization"
    return harness.Case(
        problem,
        title,
        "Backwards Prop Batch Norm" if backward else "Forward Batch Norm",
        "dump_bnorm_bwd_dx_gpu.bin" if backward else "dump_bnorm_fwd_out_gpu.bin",
        reference=reference,
        tolerance=lambda p, s: TOLERANCE[p.dtype],
        solution_flag=_label("solution"),
        what="Backward" if backward else "Forward",
        time_lines=lambda times, iters: _time_lines(problem, times, iters),
        wall_line=lambda ms, iters: f"Wall-clock Time {title} Elapsed: {ms:f} ms, for {iters} iterations.",
        check=check,
    )


def run(subcommand: str, argv: list[str], out: TextIO) -> int:
    values = begin(subcommand, argv, FLAGS, out)
    if values is None:
        return EXIT_OK
    harness.check_common(values, _label)
    problem = build_problem(values, subcommand, plan(values, out))
    if problem.running and problem.exp_avg_factor != 1.0 and values["verify"] and values["iter"] > 1:
        raise _bad(
            "exp_avg_factor",
            values["exp_avg_factor"],
            "with -r 1 and -i > 1 each run updates the running statistics again; verify with -i 1",
        )
    from miopy.handle import Handle

    handle = Handle()
    ok = harness.run_case(handle, case(problem), values, inputs(problem), out)
    out.flush()
    return EXIT_OK if ok else EXIT_VERIFY_FAILED


__all__ = ["FLAGS", "build_problem", "check", "inputs", "plan", "problem_from_args", "run"]
