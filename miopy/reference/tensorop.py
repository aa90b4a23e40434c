"""Reference tensor operations in float64 (the kernels compute in fp32)."""

from __future__ import annotations

import numpy as np

from miopy.problem.tensorop import TensorOp, TensorOpProblem
from miopy.reference.common import view
from miopy.tensor import TensorDesc, from_storage

_BINARY = {TensorOp.ADD: np.add, TensorOp.MUL: np.multiply, TensorOp.MIN: np.fmin, TensorOp.MAX: np.fmax}


def tensorop_reference(problem: TensorOpProblem, t: dict[str, np.ndarray], repeat: int = 1) -> np.ndarray:
    """The output from logical-shape inputs; ``repeat`` applies the call that many times (what
    running it repeatedly on the same buffers leaves when c or y is also read)."""
    p = problem
    if not p.op.binary:
        if p.op is TensorOp.SET:
            return np.full(p.out.lens, p.value)
        return np.asarray(t["y"], np.float64) * p.value**repeat
    a = np.asarray(t["a"], np.float64)
    b = np.broadcast_to(np.asarray(t["b"], np.float64), a.shape)
    r = _BINARY[p.op](p.alpha1 * a, p.alpha2 * b)
    if p.beta == 0:
        return r
    c = np.asarray(t["c"], np.float64)
    for _ in range(repeat):
        c = r + p.beta * c
    return c


def reference(problem: TensorOpProblem, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    descs = problem.tensors()
    logical = {r: from_storage(view(buffers[r], descs[r]), descs[r].dtype) for r in problem.inputs}
    return {problem.outputs[0]: tensorop_reference(problem, logical)}


def samples() -> list[TensorOpProblem]:
    """Problems that, together, every tensorop solver takes."""
    out = []
    for op, dtype, lens, blens, layout, beta in (
        ("add", "fp32", (2, 3, 4, 5), (2, 3, 4, 5), "NCHW", 0.0),
        ("mul", "fp16", (2, 8, 3, 5), (1, 8, 1, 1), "NHWC", 0.5),
        ("min", "bf16", (2, 3, 4, 5), (1, 3, 1, 1), "NCHW", 0.0),
        ("max", "fp32", (1, 2, 3, 4, 5), (1, 1, 3, 4, 1), "NCDHW", -1.0),
        ("add", "fp16", (3, 4, 5, 6), (1, 1, 1, 1), "NCHW", 1.0),
    ):
        a = TensorDesc(dtype, lens, layout=layout)
        out.append(TensorOpProblem(op, a, TensorDesc(dtype, blens, layout=layout), a, 1.5, -0.75, beta))
    strided = TensorDesc("fp32", (2, 3, 4, 5), strides=(80, 20, 5, 1))
    out.append(TensorOpProblem("add", strided, TensorDesc("fp32", (2, 1, 4, 1)), strided, 1, 2, 0.25))
    out.append(TensorOpProblem("set", y=TensorDesc("fp16", (2, 3, 4, 5), layout="NHWC"), value=0.375))
    out.append(TensorOpProblem("scale", y=TensorDesc("bf16", (2, 3, 4, 5)), value=-1.5))
    out.append(TensorOpProblem("scale", y=strided, value=2.0))
    return out


__all__ = ["reference", "samples", "tensorop_reference"]
