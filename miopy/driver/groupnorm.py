"""``groupnorm``, ``groupnormfp16``, ``groupnormbfp16``: MIOpenDriver's group norm driver.

x is N x C x D x H x W (``-D 0``: N x C x H x W; ``-D 0 -H 0``: N x C x W), packed (MIOpen's
only layout); miopy adds ``-L`` for a channels-last layout (NWC, NHWC, NDHWC) or explicit strides.
``-g`` groups divide C; the statistics (mean, rstd: N x G) are over each group's C/G channels and
the spatial dims; ``-m 1`` adds a weight and a bias per channel. ``-F``, inputs, verification and
exit status as the layer norm driver (miopy.driver.layernorm): MIOpenDriver's thresholds
1.5e-6 (fp32), 8.2e-3 (fp16), 6.56e-2 (bf16), checked y, mean, rstd in turn.
"""

from __future__ import annotations

from typing import Any, TextIO

from miopy.driver import norm_family
from miopy.driver.cli import Flag
from miopy.driver.norm_family import COMMON_FLAGS, check_lines, labeller, reraise
from miopy.errors import BadParm
from miopy.problem.layernorm import CHANNELS_FIRST, CHANNELS_LAST, GroupNormProblem
from miopy.problem.nd import NdDesc, channels_last_strides
from miopy.problem.passes import Pass
from miopy.reference.layernorm import reference
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
    return norm_family.problem_from_args(argv, SUBCOMMAND, FLAGS, build_problem)


def _check(problem: GroupNormProblem, host, ref) -> tuple[bool, list[str]]:
    """MIOpenDriver's lines, stopping at the first failure."""
    return check_lines(
        problem,
        host,
        ref,
        f"{problem.direction.title} GroupNorm",
        lambda n, e, t: f"{n} Verifies on CPU and GPU (err={e:f})",
        lambda n, role, e, t: f"{n} FAILED: {e:f}",
    )


def case(problem: GroupNormProblem):
    return norm_family.norm_case(problem, "GroupNorm", reference, _check, "f", _label("solution"))


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    return norm_family.run_driver(dtype_name, argv, out, SUBCOMMAND, FLAGS, build_problem, case)


__all__ = ["FLAGS", "build_problem", "problem_from_args", "run"]
