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

from typing import Any, TextIO

from miopy.driver import norm_family
from miopy.driver.cli import Flag
from miopy.driver.norm_family import COMMON_FLAGS, check_lines, inputs, labeller, passes, reraise, tolerance
from miopy.errors import BadParm
from miopy.problem.layernorm import LayerNormProblem
from miopy.problem.nd import NdDesc
from miopy.problem.passes import Pass
from miopy.reference.layernorm import reference
from miopy.tensor import DataType

SUBCOMMAND = {DataType.FP32: "layernorm", DataType.FP16: "layernormfp16", DataType.BF16: "layernormbfp16"}

FLAGS: list[Flag] = [
    Flag("X", "input", "100x3x32x32", "x lengths (any rank), optionally ,strides", str),
    Flag("o", "normalized_dim", 3, "normalise over dims o.. (0 <= o < rank)"),
    *COMMON_FLAGS,
]
_label = labeller(FLAGS)


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
    return norm_family.problem_from_args(argv, SUBCOMMAND, FLAGS, build_problem)


def _layernorm_check(problem: LayerNormProblem, host, ref) -> tuple[bool, list[str]]:
    """MIOpenDriver's lines, stopping at the first failure."""

    def fail(name: str, role: str, err: float, tol: float) -> str:
        if role == "mean":  # MIOpenDriver's spelling
            name = f"{problem.direction.title} Layernorm mean"
        return f"{name} FAILED: {err:g} > {tol:g}"

    title = f"{problem.direction.title} LayerNorm"
    return check_lines(
        problem, host, ref, title, lambda n, e, t: f"{n} Verifies OK on CPU reference ({e:g} < {t:g})", fail
    )


def case(problem: LayerNormProblem):
    return norm_family.norm_case(problem, "LayerNorm", reference, _layernorm_check, "g", _label("solution"))


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    return norm_family.run_driver(dtype_name, argv, out, SUBCOMMAND, FLAGS, build_problem, case)


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
