"""``softmax``, ``softmaxfp16`` (and miopy's ``softmaxbfp16``): MIOpenDriver's softmax driver.

-F 0 runs forward then backward, 1 forward, 2 backward. x = U[0, 1), dy = 0.001 * U(-0.5, 0.5);
backward's y is the softmax of x (as the forward pass leaves it). Verification: rms_range under
MIOpen's 1e-3 (fp32) / 5e-2 (fp16, bf16). miopy adds --layout and -D (5-d)."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from miopy.driver import family, harness
from miopy.driver.cli import Flag
from miopy.errors import BadParm
from miopy.problem.passes import Pass
from miopy.problem.softmax import SoftmaxProblem
from miopy.reference.common import store_logical, view
from miopy.reference.softmax import reference as softmax_ref
from miopy.reference.softmax import softmax_reference
from miopy.tensor import DataType, TensorDesc, from_storage

FLAGS: list[Flag] = [
    Flag("n", "batchsize", 100, "mini-batch size"),
    Flag("c", "in_channels", 3, "channels"),
    Flag("D", "in_d", 0, "depth (0: 2-d)"),
    Flag("H", "in_h", 32, "height"),
    Flag("W", "in_w", 32, "width"),
    Flag("A", "alpha", 1.0, "alpha", float),
    Flag("B", "beta", 0.0, "beta", float),
    Flag("a", "algorithm", 1, "0 fast, 1 accurate, 2 log"),
    Flag("m", "mode", 1, "0 instance (over C, H, W), 1 channel (over C)"),
    Flag("F", "forw", 0, "0 forward and backward, 1 forward, 2 backward"),
    Flag("L", "layout", "", "NCHW or NHWC (NCDHW or NDHWC with -D)", str),
    *family.COMMON,
]
TOLERANCE = {DataType.FP32: 1e-3, DataType.FP16: 5e-2, DataType.BF16: 5e-2}


def _label(long: str) -> str:
    return family.label(FLAGS, long)


def build_problems(values: dict[str, Any], dtype: DataType | str) -> list[SoftmaxProblem]:
    forw = values["forw"]
    if forw not in (0, 1, 2):
        raise BadParm(f"{_label('forw')}={forw}: expected 0 (both), 1 (forward) or 2 (backward)")
    for long, top in (("algorithm", 2), ("mode", 1)):
        if values[long] not in range(top + 1):
            raise BadParm(f"{_label(long)}={values[long]}: expected 0 to {top}")
    lens = family.nchw_lens(FLAGS, values)
    desc = TensorDesc(dtype, lens, layout=family.layout(FLAGS, values, len(lens) - 2))
    dirs = {0: "FB", 1: "F", 2: "B"}[forw]
    return [
        SoftmaxProblem.create(desc, d, values["algorithm"], values["mode"], values["alpha"], values["beta"])
        for d in dirs
    ]


def inputs(problems: list[SoftmaxProblem]) -> dict[str, np.ndarray]:
    """x = U[0, 1), dy = 0.001 * U(-0.5, 0.5), y and dx U[0, 1) (blended when beta != 0); backward
    reads y = the forward softmax of x."""
    desc = problems[0].first
    out = {r: family.uniform(desc, i, 0.0, 1.0) for i, r in enumerate(("x", "y", "dx"))}
    out["dy"] = family.uniform(desc, 3, -0.0005, 0.0005)
    fwd = SoftmaxProblem.create(desc, "F", problems[0].algorithm, problems[0].mode)
    x = from_storage(view(out["x"], desc), desc.dtype)
    out["y_softmax"] = store_logical(softmax_reference(fwd, {"x": x}), desc, fill=0.0)
    return out


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    dtype = DataType.parse(dtype_name)
    sub = {"FP32": "softmax", "FP16": "softmaxfp16", "BF16": "softmaxbfp16"}[dtype.value]

    def build(values):
        problems = build_problems(values, dtype)
        data = inputs(problems)
        cases = []
        for p in problems:
            name = f"{p.direction.title} Softmax"
            given = {r: data[r] for r in p.tensors()}
            if p.direction is Pass.BACKWARD:
                given["y"] = data["y_softmax"]
            saved = {r: a.copy() for r, a in given.items()}

            def reference(problem, _, saved=saved):
                # the output may also be read (beta != 0): use the inputs as they were
                return softmax_ref(problem, saved)

            cases.append(
                (
                    harness.Case(
                        p,
                        name,
                        name,
                        f"dump_{'fwd' if p.direction is Pass.FORWARD else 'bwd'}_out_gpu.bin",
                        reference=reference,
                        tolerance=lambda q, s: TOLERANCE[q.dtype],
                        solution_flag=_label("solution"),
                        what=p.direction.title,
                    ),
                    given,
                )
            )
        return cases

    return family.run_family(sub, argv, out, FLAGS, build)


__all__ = ["FLAGS", "build_problems", "inputs", "run"]
