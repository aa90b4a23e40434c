"""``reduce``, ``reducefp16``, ``reducefp64`` (and miopy's ``reducebfp16``): MIOpenDriver's
reduction driver. x = U[0, 1) with lens -D (any rank up to 5; fewer than 4 are padded with trailing
lengths of 1), reduced over -R; y starts at 0.2 (it is blended when beta != 0). With -I 1 (MIN, MAX,
AMAX) alpha and beta are forced to 1 and 0, as MIOpenDriver does. -C (compute type) is accepted:
miopy accumulates fp32, fp16 and bf16 in fp32, fp64 in fp64."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from miopy.driver import family, harness
from miopy.driver.cli import Flag
from miopy.errors import BadParm
from miopy.problem.reduce import ReduceOp, ReduceProblem
from miopy.reference.common import store_logical
from miopy.reference.reduce import reference as reduce_ref
from miopy.reference.tolerance import reduce_tolerance
from miopy.tensor import DataType, TensorDesc

FLAGS: list[Flag] = [
    Flag("D", "DimLengths", "100,60,16,240", "input lengths, comma separated", str),
    Flag("R", "DimsToReduce", "0,2", "reduced dimensions, comma separated", str),
    Flag("O", "ReduceOp", "0", "0 add, 1 mul, 2 min, 3 max, 4 amax, 5 avg, 6 norm1, 7 norm2", str),
    Flag("C", "CompType", 1, "0 half, 1 float, 6 double (accepted; see the module doc)"),
    Flag("N", "NanPropagation", 0, "1: NaN wins min, max, amax"),
    Flag("I", "IndicesUsed", "0", "1: int32 indices (min, max, amax)", str),
    Flag("A", "alpha", 1.0, "alpha", float),
    Flag("B", "beta", 0.0, "beta", float),
    Flag("F", "forw", 1, "unused (forward only)"),
    Flag("L", "layout", "", "NCHW or NHWC (NCDHW or NDHWC for 5-d)", str),
    *family.COMMON,
]
TOLERANCE = {DataType.FP32: 1.5e-4, DataType.FP64: 1.5e-4, DataType.FP16: 6e-4, DataType.BF16: 5e-3}


def _label(long: str) -> str:
    return family.label(FLAGS, long)


def _ints(long: str, text: str) -> list[int]:
    try:
        return [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise BadParm(f"{_label(long)}={text!r}: expected integers separated by commas") from None


def build_problem(values: dict[str, Any], dtype: DataType | str) -> ReduceProblem:
    lens = _ints("DimLengths", values["DimLengths"])
    if not 1 <= len(lens) <= 5:
        raise BadParm(f"{_label('DimLengths')}={values['DimLengths']!r}: miopy takes 1 to 5 lengths")
    lens = lens + [1] * (4 - len(lens))
    dims = _ints("DimsToReduce", values["DimsToReduce"])
    op = _ints("ReduceOp", values["ReduceOp"])[:1] or [0]  # MIOpen reads "0,2" as 0
    if op[0] not in range(8):
        raise BadParm(f"{_label('ReduceOp')}={values['ReduceOp']!r}: expected 0 to 7")
    indices = bool((_ints("IndicesUsed", values["IndicesUsed"])[:1] or [0])[0])
    if values["CompType"] not in (0, 1, 6):
        raise BadParm(f"{_label('CompType')}={values['CompType']}: expected 0, 1 or 6")
    if values["NanPropagation"] not in (0, 1):
        raise BadParm(f"{_label('NanPropagation')}={values['NanPropagation']}: expected 0 or 1")
    if indices and not ReduceOp(op[0]).has_indices:
        raise BadParm(f"{_label('IndicesUsed')}=1: only min (2), max (3) and amax (4) give indices")
    alpha, beta = (1.0, 0.0) if indices else (values["alpha"], values["beta"])
    x = TensorDesc(dtype, lens, layout=family.layout(FLAGS, values, len(lens) - 2))
    for d in dims:
        if not 0 <= d < len(lens):
            raise BadParm(f"{_label('DimsToReduce')}={values['DimsToReduce']!r}: no dimension {d}")
    return ReduceProblem(op[0], x, dims, indices, bool(values["NanPropagation"]), alpha, beta)


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    dtype = DataType.parse(dtype_name)
    sub = {"FP32": "reduce", "FP16": "reducefp16", "BF16": "reducebfp16", "FP64": "reducefp64"}[dtype.value]

    def build(values):
        p = build_problem(values, dtype)
        given = {"x": family.uniform(p.x, 0, 0.0, 1.0), "y": store_logical(np.full(p.y.lens, 0.2), p.y, 0.0)}
        if p.indices:
            given["indices"] = np.zeros(p.y.element_space, np.int32)
        saved = {r: a.copy() for r, a in given.items()}

        def tolerance(problem, solution):
            # MIOpenDriver's threshold, widened by the shared length rule for very long sums
            base = TOLERANCE[problem.dtype]
            if problem.op is ReduceOp.NORM2 and problem.dtype is DataType.FP32:
                base = 1.8e-3
            return reduce_tolerance(problem, base)

        case = harness.Case(
            p,
            "Reduction",
            "ReduceTensor()",
            "dump_reduce_out_gpu.bin",
            reference=lambda problem, _: reduce_ref(problem, saved),
            tolerance=tolerance,
            solution_flag=_label("solution"),
        )
        return [(case, given)]

    return family.run_family(sub, argv, out, FLAGS, build)


__all__ = ["FLAGS", "build_problem", "run"]
