"""``groupnorm``, ``groupnormfp16``, ``groupnormbfp16``: MIOpenDriver's group norm driver.

x is N x C x D x H x W (``-D 0``: N x C x H x W; ``-D 0 -H 0``: N x C x W), packed (MIOpen's
only layout); miopy adds ``-L`` for a channels-last layout (NWC, NHWC, NDHWC) or explicit strides.
``-g`` groups divide C; the statistics (mean, rstd: N x G) are over each group's C/G channels and
the spatial dims; ``-m 1`` adds a weight and a bias per channel. ``-F``, inputs, verification and
exit status as the layer norm driver (miopy.driver.layernorm): MIOpenDriver's thresholds
1.5e-6 (fp32), 8.2e-3 (fp16), 6.56e-2 (bf16), checked y, mean, rstd in turn.
"""

from __future__ import annotations

import math
from typing import Any, TextIO

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
from miopy.driver.layernorm import COMMON_FLAGS, errors, labeller, passes, reraise, run_passes, time_lines
from miopy.errors import BadParm
from miopy.problem.layernorm import CHANNELS_FIRST, CHANNELS_LAST, GroupNormProblem
from miopy.problem.nd import NdDesc, channels_last_strides
from miopy.problem.passes import Pass
from miopy.reference.layernorm import reference
from miopy.reference.tolerance import BASE
from miopy.tensor import DataType

SUBCOMMAND = {DataType.FP32: "groupnorm", DataType.FP16: "groupnormfp16", DataType.BF16: "groupnormbfp16"}

FLAGS: list[Flag] = [
    Flag("n", "batchsize", 32, "mini-batch size"),
    Flag("c", "in_channels", 32, "channels"),
    Flag("D", "in_d", 14, "depth (0: a 4-D tensor)"),
    Flag("H", "in_h", 14, "height (0 with -D 0: a 3-D tensor)"),
    Flag("W", "in_w", 14, "width"),
    Flag("g", "num_groups", 4, "groups (divide the channels)"),
    Flag("L", "layout", "", "miopy: NCW/NCHW/NCDHW (default), NWC/NHWC/NDHWC or strides", str),
    *COMMON_FLAGS,
]
_label = labeller(FLAGS)


def _lens(values: dict[str, Any]) -> tuple[int, ...]:
    for long in ("batchsize", "in_channels", "in_d", "in_h", "in_w"):
        if values[long] < 0:
            raise BadParm(f"{_label(long)}={values[long]}: must not be negative")
    for long in ("batchsize", "in_channels", "in_w"):
        if values[long] < 1:
            raise BadParm(f"{_label(long)}={values[long]}: must be positive")
    d, h, w = values["in_d"], values["in_h"], values["in_w"]
    if d and not h:
        raise BadParm(f"{_label('in_h')}=0: must be positive with -D {d}")
    spatial = (d, h, w) if d else (h, w) if h else (w,)
    return (values["batchsize"], values["in_channels"], *spatial)


def build_problem(values: dict[str, Any], dtype: DataType | str, direction: Pass | str) -> GroupNormProblem:
    """The problem a command line describes; bad values raise BadParm naming the flag."""
    dtype = DataType.parse(dtype)
    lens = _lens(values)
    text = str(values["layout"]).strip().upper()
    if text in ("", CHANNELS_FIRST[len(lens)]):
        strides = None
    elif text == CHANNELS_LAST[len(lens)]:
        strides = channels_last_strides(lens)
    else:
        try:
            strides = [int(v) for v in text.replace("X", ",").split(",") if v.strip()]
        except ValueError:
            raise BadParm(
                f"{_label('layout')}={values['layout']}: expected {CHANNELS_FIRST[len(lens)]}, "
                f"{CHANNELS_LAST[len(lens)]} or {len(lens)} strides for a {len(lens)}-d tensor"
            ) from None
    try:
        x = NdDesc(dtype, lens, strides)
    except BadParm as exc:
        raise BadParm(f"{_label('layout')}={values['layout']}: {str(exc).split(': ', 1)[-1]}") from None
    try:
        return GroupNormProblem(x, values["num_groups"], values["eps"], values["mode"], direction)
    except BadParm as exc:
        fields = {"num_groups": "num_groups", "epsilon": "eps", "mode": "mode", "x.lens": "in_w"}
        raise reraise(exc, values, _label, fields) from None


def problem_from_args(argv: list[str]) -> GroupNormProblem:
    """``[subcommand, flags...]`` -> the problem (the inverse of ``GroupNormProblem.driver_args``);
    ``-F 0`` gives the forward one."""
    by_name = {v: k for k, v in SUBCOMMAND.items()}
    sub, rest = (argv[0], argv[1:]) if argv and argv[0] in by_name else ("groupnorm", argv)
    values = parse_flags(rest, FLAGS)
    return build_problem(values, by_name[sub], passes(values, _label)[0])


def _check(problem: GroupNormProblem, host, ref) -> tuple[bool, list[str]]:
    """MIOpenDriver's lines, stopping at the first failure."""
    title = f"{problem.direction.title} GroupNorm"
    lines = []
    for role, err, tol in errors(problem, host, ref):
        name = title if role in ("y", "dx") else f"{title} {role}"
        if not (math.isfinite(err) and err <= tol):
            return False, [*lines, f"{name} FAILED: {err:f}"]
        lines.append(f"{name} Verifies on CPU and GPU (err={err:f})")
    return True, lines


def case(problem: GroupNormProblem) -> harness.Case:
    title = f"{problem.direction.title} GroupNorm"
    return harness.Case(
        problem,
        title,
        title,
        f"dump_groupnorm_{'fwd' if problem.direction is Pass.FORWARD else 'bwd'}_out_gpu.bin",
        reference=reference,
        tolerance=lambda p, s: BASE[p.dtype],
        solution_flag=_label("solution"),
        what=problem.direction.title,
        time_lines=time_lines(title, "f"),
        check=_check,
    )


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


__all__ = ["FLAGS", "build_problem", "problem_from_args", "run"]
