"""``activ``, ``activfp16`` (and ``activbfp16``): MIOpenDriver's activation driver.

``-F 0`` runs forward then backward (on the forward's y), ``1`` forward, ``2`` backward with
y = 0, as MIOpenDriver. Inputs: x uniform in (-2, 2) (nudged off the kinks of POWER and
CLIPPED_RELU), dy in (-0.5, 0.5). Verification is MIOpenDriver's: an element fails when its error
exceeds 80 epsilon of the data type both absolutely and relatively. Unlike MIOpenDriver, a bad
flag or a failed verification exits non-zero. miopy adds ``-D`` (depth: 5-D tensors),
``-L`` (layout), ``-S``/``-s`` (solution choice, tuning), ``-C``, ``-o`` as for conv."""

from __future__ import annotations

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
from miopy.problem.activation import ActivationDesc, ActivationMode, ActivationProblem
from miopy.problem.passes import Pass
from miopy.reference.activ import reference
from miopy.reference.common import store_logical, view
from miopy.tensor import LAYOUTS_2D, LAYOUTS_3D, DataType, TensorDesc, from_storage

SUBCOMMAND = {DataType.FP32: "activ", DataType.FP16: "activfp16", DataType.BF16: "activbfp16"}

FLAGS: list[Flag] = [
    Flag("n", "batchsize", 100, "mini-batch size"),
    Flag("c", "in_channels", 3, "channels"),
    Flag("D", "in_d", 0, "depth (> 0: a 5-D tensor)"),
    Flag("H", "in_h", 32, "height"),
    Flag("W", "in_w", 32, "width"),
    Flag("L", "layout", "", "NCHW, NHWC (4-D), NCDHW, NDHWC (5-D)", str),
    Flag(
        "m",
        "mode",
        "3",
        "0 PASTHRU 1 LOGISTIC 2 TANH 3 RELU 4 SOFTRELU 5 ABS 6 POWER 7 CLIPPED_RELU "
        "8 LEAKY_RELU 9 ELU (code or name)",
        str,
    ),
    Flag("A", "alpha", 1.0, "activation alpha", float),
    Flag("B", "beta", 1.0, "activation beta", float),
    Flag("G", "gamma", 1.0, "activation gamma", float),
    Flag("F", "forw", 0, "0 forward and backward, 1 forward, 2 backward (y = 0)"),
    Flag("i", "iter", 10, "iterations"),
    Flag("V", "verify", 1, "verify against the CPU reference"),
    Flag("t", "time", 0, "print the kernel time (device events)"),
    Flag("w", "wall", 0, "1: wall-clock time too; 2: with a warm-up run first"),
    Flag("S", "solution", "-1", "<0 Find API; 0 immediate mode; N or a name: that solver", str),
    Flag("s", "search", 0, "1: tune"),
    Flag("C", "verification_cache", "", "directory caching reference results", str),
    Flag("o", "dump_output", 0, "dump output buffers to files"),
]
_BY_LONG = {f.long: f for f in FLAGS}
_EPS = {DataType.FP32: 2.0**-23, DataType.FP16: 2.0**-10, DataType.BF16: 2.0**-7}
_NAMES = {
    Pass.FORWARD: ("fwd-activ", "dump_fwd_out_gpu.bin"),
    Pass.BACKWARD: ("bwd-activ", "dump_bwd_din_gpu.bin"),
}


def _label(long: str) -> str:
    return _BY_LONG[long].label


def _bad(long: str, value: Any, why: str) -> BadParm:
    return BadParm(f"{_label(long)}={value}: {why}")


def passes(values: dict[str, Any]) -> list[Pass]:
    forw = values["forw"]
    if forw not in (0, 1, 2):
        raise _bad("forw", forw, "expected 0 (forward and backward), 1 (forward) or 2 (backward)")
    return {0: [Pass.FORWARD, Pass.BACKWARD], 1: [Pass.FORWARD], 2: [Pass.BACKWARD]}[forw]


def build_problem(values: dict[str, Any], dtype: DataType | str, direction: Pass | str) -> ActivationProblem:
    """The problem a command line describes; bad values raise BadParm naming the flag."""
    dtype = DataType.parse(dtype)
    longs = ("batchsize", "in_channels", *(("in_d",) if values["in_d"] else ()), "in_h", "in_w")
    for long in longs:
        if values[long] < 1:
            raise _bad(long, values[long], "must be positive")
    lens = tuple(values[long] for long in longs)
    valid = LAYOUTS_3D if len(lens) == 5 else LAYOUTS_2D
    layout = str(values["layout"]).strip().upper() or valid[0]
    if layout not in valid:
        raise _bad("layout", values["layout"], f"expected {' or '.join(valid)} for a {len(lens)}-d tensor")
    try:
        mode = ActivationMode.parse(str(values["mode"]))
        desc = ActivationDesc(mode, values["alpha"], values["beta"], values["gamma"])
    except BadParm as exc:
        field = str(exc).split("=", 1)[0]
        long = field if field in _BY_LONG else "mode"
        raise _bad(long, values[long], str(exc).split(": ", 1)[-1]) from None
    return ActivationProblem.create(desc, TensorDesc(dtype, lens, layout=layout), direction)


def _x_values(desc: ActivationDesc, lens: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """x in (-2, 2), away from where the mode's branches meet (the CPU and the device may round
    such a point to different sides)."""
    x = rng.uniform(-2, 2, lens)
    kinks = {
        ActivationMode.POWER: [-desc.alpha / desc.beta] if desc.beta else [],
        ActivationMode.CLIPPED_RELU: [0.0, desc.alpha],
    }.get(desc.mode, [0.0])
    for kink in kinks:
        near = np.abs(x - kink) < 1e-2
        x[near] = kink + np.where(x[near] >= kink, 1e-2, -1e-2)
    return x


def inputs(problem: ActivationProblem, y: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Stored x, y, dy (backward): x and dy random; y as given (the forward's), else 0."""
    rng = np.random.default_rng(harness.SEED)
    t = problem.tensors()
    out = {"x": store_logical(_x_values(problem.desc, problem.lens, rng), t["x"], fill=0.0)}
    if problem.direction is Pass.BACKWARD:
        out["y"] = y if y is not None else store_logical(np.zeros(problem.lens), t["y"], fill=0.0)
        out["dy"] = store_logical(rng.uniform(-0.5, 0.5, problem.lens), t["dy"], fill=0.0)
    return out


def check(
    problem: ActivationProblem, host: dict[str, np.ndarray], ref: dict[str, np.ndarray]
) -> tuple[bool, list[str]]:
    """MIOpenDriver's rule: the first element whose error exceeds 80 eps both absolutely and
    relatively (or is not finite) fails."""
    role = problem.outputs[0]
    desc = problem.tensors()[role]
    got = from_storage(view(host[role], desc), desc.dtype).astype(np.float64).ravel()
    want = np.asarray(ref[role], np.float64).ravel()
    tol = 80 * _EPS[problem.dtype]
    diff = np.abs(got - want)
    rel = diff / np.maximum(np.finfo(np.float64).eps, np.abs(want))
    bad = ((diff > tol) & (rel > tol)) | ~np.isfinite(got) | ~np.isfinite(want)
    title = problem.direction.title
    if not bad.any():
        return True, [f"{title} Activation Verifies on CPU and GPU"]
    i = int(np.argmax(bad))
    t = problem.tensors()
    x = from_storage(view(host["x"], t["x"]), t["x"].dtype).ravel()[i]
    if problem.direction is Pass.FORWARD:
        line = f"Difference in neuron layer: {diff[i]:g} too large at {i} x = {x:g}  c_v = {want[i]:g} vs "
    else:
        dy = from_storage(view(host["dy"], t["dy"]), t["dy"].dtype).ravel()[i]
        y = from_storage(view(host["y"], t["y"]), t["y"].dtype).ravel()[i]
        line = (
            f"Difference in neuron back-propagation: {diff[i]:g} too large at {i} dy = {dy:g} x = {x:g} "
            f"y = {y:g}  c_v = {want[i]:g} vs "
        )
    return False, [
        line + f"g_val = {got[i]:g} tolerance = {tol:g}",
        f"{title} Activation verification FAILED",
    ]


def _time_lines(problem: ActivationProblem, times: list[float], iters: int) -> list[str]:
    """MIOpenDriver's minimum and average (iterations after the first) kernel times and stats."""
    title = problem.direction.title
    kept = times[1:] if len(times) > 1 else times
    low, avg = min(times), float(sum(kept) / len(kept))
    t = problem.tensors()
    read = sum(t[r].element_count * t[r].dtype.itemsize for r in problem.inputs)
    written = sum(t[r].element_count * t[r].dtype.itemsize for r in problem.outputs)
    gbs = (read + written) / low / 1e6 if low > 0 else 0.0
    return [
        f"GPU Kernel Min Time {title} Activation Elapsed: {low:f} ms",
        f"GPU Kernel Avg Time {title} Activation Elapsed: {avg:f} ms, for {iters} iterations.",
        "stats: name, bytesRead, bytesWritten, GB/s, timeMs",
        f"stats: {_NAMES[problem.direction][0]}, {read}, {written}, {gbs:.3f}, {avg:f}",
    ]


def case(problem: ActivationProblem) -> harness.Case:
    title = problem.direction.title
    return harness.Case(
        problem,
        f"{title} Activation",
        f"{title} Activation",
        _NAMES[problem.direction][1],
        reference=reference,
        tolerance=lambda p, s: 80 * _EPS[p.dtype],
        solution_flag=_label("solution"),
        what=title,
        time_lines=lambda times, iters: _time_lines(problem, times, iters),
        wall_line=lambda ms, iters: (
            f"Wall-clock Time {title} GPU Activation Elapsed: {ms:f} ms, for {iters} iterations."
        ),
        check=check,
    )


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    dtype = DataType.parse(dtype_name)
    sub = SUBCOMMAND[dtype]
    values = begin(sub, argv, FLAGS, out)
    if values is None:
        return EXIT_OK
    harness.check_common(values, _label)
    problems = [build_problem(values, dtype, p) for p in passes(values)]
    from miopy.handle import Handle

    handle = Handle()
    ok = True
    kept: dict[str, np.ndarray] = {}
    for problem in problems:
        given = inputs(problem, kept.get("y"))
        ok = harness.run_case(handle, case(problem), values, given, out, keep=kept) and ok
        out.flush()
    return EXIT_OK if ok else EXIT_VERIFY_FAILED


__all__ = ["FLAGS", "build_problem", "check", "inputs", "passes", "run"]
