"""``tensorop`` (and miopy's ``tensoropfp16`` / ``tensoropbfp16``): MIOpenDriver's tensor op driver.

C = op(alpha1 * A, alpha2 * B) + beta * C (-o 2 add, 3 mul, 4 min, 5 max), or -o 0 set / 1 scale
C with -v, run -i times on the same C. A, B, C are U(-2, 2). MIOpen's reference ignores alpha1 and
alpha2; miopy verifies the real formula, repeated as often as the run was. miopy adds --layout,
-D (5-d) and --b_lens (B broadcast: each length 1 or C's)."""

from __future__ import annotations

from typing import Any, TextIO

from miopy.driver import family, harness
from miopy.driver.cli import Flag
from miopy.errors import BadParm
from miopy.problem.tensorop import TensorOp, TensorOpProblem
from miopy.reference.common import view
from miopy.reference.tensorop import tensorop_reference
from miopy.reference.tolerance import BASE
from miopy.tensor import DataType, TensorDesc, from_storage

FLAGS: list[Flag] = [
    Flag("n", "batchsize", 64, "mini-batch size"),
    Flag("c", "in_channels", 3, "channels"),
    Flag("D", "in_d", 0, "depth (0: 2-d)"),
    Flag("H", "in_h", 32, "height"),
    Flag("W", "in_w", 32, "width"),
    Flag("o", "tensor_op", 0, "0 set, 1 scale, 2 add, 3 mul, 4 min, 5 max"),
    Flag("v", "tensor_val", 1.0, "value of set / scale", float),
    Flag("A", "alpha1", 1.0, "alpha1", float),
    Flag("B", "alpha2", 1.0, "alpha2", float),
    Flag("G", "beta", 0.0, "beta", float),
    Flag("F", "forw", 1, "unused (forward only)"),
    Flag("L", "layout", "", "NCHW or NHWC (NCDHW or NDHWC with -D)", str),
    Flag("M", "b_lens", "", "B's lens, comma separated (each 1 or C's); default C's", str),
    *family.COMMON,
]


def _label(long: str) -> str:
    return family.label(FLAGS, long)


def build_problem(values: dict[str, Any], dtype: DataType | str) -> TensorOpProblem:
    if values["tensor_op"] not in range(6):
        raise BadParm(
            f"{_label('tensor_op')}={values['tensor_op']}: expected 0-5 (set, scale, add, mul, min, max)"
        )
    op = TensorOp(values["tensor_op"])
    lens = family.nchw_lens(FLAGS, values)
    layout = family.layout(FLAGS, values, len(lens) - 2)
    c = TensorDesc(dtype, lens, layout=layout)
    if not op.binary:
        return TensorOpProblem(op, y=c, value=values["tensor_val"])
    blens = lens
    if values["b_lens"]:
        try:
            blens = tuple(int(v) for v in values["b_lens"].split(","))
        except ValueError:
            raise BadParm(
                f"{_label('b_lens')}={values['b_lens']!r}: expected integers separated by commas"
            ) from None
        if len(blens) != len(lens):
            raise BadParm(f"{_label('b_lens')}={values['b_lens']!r}: expected {len(lens)} lengths")
    b = TensorDesc(dtype, blens, layout=layout)
    return TensorOpProblem(op, c, b, c, values["alpha1"], values["alpha2"], values["beta"])


def _stats(problem: TensorOpProblem, ms: float) -> list[str]:
    t = problem.tensors()
    read = sum(t[r].element_count * t[r].dtype.itemsize for r in problem.inputs)
    written = problem.out.element_count * problem.dtype.itemsize
    gbs = (read + written) / ms / 1e6 if ms > 0 else 0.0
    return [
        "stats: name, bytesRead, bytesWritten, GB/s, timeMs",
        f"stats: tensor op, {read}, {written}, {gbs:.3f}, {ms:f}",
    ]


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    dtype = DataType.parse(dtype_name)
    sub = {"FP32": "tensorop", "FP16": "tensoropfp16", "BF16": "tensoropbfp16"}[dtype.value]

    def build(values):
        problem = build_problem(values, dtype)
        repeat = family.kept_runs(values)

        def reference(p, _):
            # c (or y) is read and written in place: the harness's copy holds the result by now
            descs = p.tensors()
            logical = {r: from_storage(view(inputs[r], descs[r]), p.dtype) for r in p.inputs}
            return {p.outputs[0]: tensorop_reference(p, logical, repeat)}

        inputs = {r: family.uniform(d, i, -2.0, 2.0) for i, (r, d) in enumerate(problem.tensors().items())}
        given = {r: a.copy() for r, a in inputs.items()}
        case = harness.Case(
            problem,
            "Tensor Op",
            "Tensor Op",
            "dump_tensorop_gpu.bin",
            reference=reference,
            tolerance=lambda p, s: BASE[p.dtype] * 4,
            stats=lambda ms: _stats(problem, ms),
            solution_flag=_label("solution"),
        )
        return [(case, given)]

    return family.run_family(sub, argv, out, FLAGS, build)


__all__ = ["FLAGS", "build_problem", "run"]
