"""``lrn``, ``lrnfp16`` (and miopy's ``lrnbfp16``): MIOpenDriver's LRN driver.

-F 0 runs forward (keeping the scale workspace) then backward, 1 forward, 2 backward. x = U(-1, 1),
dy = 0.001 * U(-0.5, 0.5); backward reads the y and scale the forward pass leaves (computed by the
reference when -F 2). Verification: rms_range under MIOpen's 1.5e-4 (forward) and 6e-5 (backward),
with fp16/bf16 rounding of the stored result allowed for."""

from __future__ import annotations

from typing import Any, TextIO

from miopy.driver import family, harness
from miopy.driver.cli import Flag
from miopy.errors import BadParm
from miopy.problem.lrn import LRNProblem
from miopy.problem.passes import Pass
from miopy.reference.common import store_logical, view
from miopy.reference.lrn import lrn_forward
from miopy.reference.lrn import reference as lrn_ref
from miopy.tensor import DataType, TensorDesc, from_storage

FLAGS: list[Flag] = [
    Flag("n", "batchsize", 100, "mini-batch size"),
    Flag("c", "in_channels", 3, "channels"),
    Flag("H", "in_h", 32, "height"),
    Flag("W", "in_w", 32, "width"),
    Flag("N", "lrnN", 5, "window size"),
    Flag("A", "alpha", 0.001, "alpha", float),
    Flag("B", "beta", 0.75, "beta", float),
    Flag("K", "lrnK", 1.0, "k", float),
    Flag("m", "mode", "cross", "within or cross", str),
    Flag("F", "forw", 0, "0 forward and backward, 1 forward, 2 backward"),
    Flag("P", "printconv", 1, "unused"),
    Flag("L", "layout", "", "NCHW or NHWC (miopy)", str),
    *family.COMMON,
]
FWD_TOL, BWD_TOL = 1.5e-4, 6e-5
STORE_TOL = {DataType.FP32: 0.0, DataType.FP16: 8.2e-3, DataType.BF16: 6.6e-2}


def _label(long: str) -> str:
    return family.label(FLAGS, long)


def build_problems(values: dict[str, Any], dtype: DataType | str) -> list[LRNProblem]:
    mode = str(values["mode"]).strip().lower()
    if mode not in ("within", "cross"):
        raise BadParm(f"{_label('mode')}={values['mode']!r}: Incorrect LRN Mode (expected within or cross)")
    if values["forw"] not in (0, 1, 2):
        raise BadParm(f"{_label('forw')}={values['forw']}: expected 0 (both), 1 (forward) or 2 (backward)")
    if values["lrnN"] < 1:
        raise BadParm(f"{_label('lrnN')}={values['lrnN']}: must be positive")
    values = dict(values, in_d=0)
    lens = family.nchw_lens(FLAGS, values)
    x = TensorDesc(dtype, lens, layout=family.layout(FLAGS, values, 2))
    dirs = {0: "FB", 1: "F", 2: "B"}[values["forw"]]
    args = (mode, values["lrnN"], values["alpha"], values["beta"], values["lrnK"])
    return [LRNProblem.create(x, *args, d, d == "F" and "B" in dirs) for d in dirs]


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    dtype = DataType.parse(dtype_name)
    sub = {"FP32": "lrn", "FP16": "lrnfp16", "BF16": "lrnbfp16"}[dtype.value]

    def build(values):
        problems = build_problems(values, dtype)
        x = problems[0].x
        data = {"x": family.uniform(x, 0, -1.0, 1.0), "dy": family.uniform(x, 1, -0.0005, 0.0005)}
        fwd = LRNProblem.create(x, *(getattr(problems[0], a) for a in ("mode", "n", "alpha", "beta", "k")))
        y, scale = lrn_forward(fwd, from_storage(view(data["x"], x), x.dtype))
        data["y"], data["scale"] = store_logical(y, x, 0.0), store_logical(scale, x, 0.0)
        data["dx"] = family.uniform(x, 2, 0.0, 0.0)
        cases = []
        for p in problems:
            name = f"{p.direction.title} LRN"
            tol = (FWD_TOL if p.direction is Pass.FORWARD else BWD_TOL) + STORE_TOL[p.dtype]
            cases.append(
                (
                    harness.Case(
                        p,
                        name,
                        name,
                        f"dump_lrn_{'fwd' if p.direction is Pass.FORWARD else 'bwd'}_gpu.bin",
                        reference=lrn_ref,
                        tolerance=lambda q, s, tol=tol: tol,
                        solution_flag=_label("solution"),
                        what=p.direction.title,
                    ),
                    {r: data[r].copy() for r in p.tensors()},
                )
            )
        return cases

    return family.run_family(sub, argv, out, FLAGS, build)


__all__ = ["FLAGS", "build_problems", "run"]
