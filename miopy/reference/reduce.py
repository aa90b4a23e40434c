"""Reference reductions in float64, with MIOpen's indices (row-major over the reduced dimensions,
first occurrence) and NaN rules (see miopy/problem/reduce.py)."""

from __future__ import annotations

import numpy as np

from miopy.problem.reduce import ReduceOp, ReduceProblem
from miopy.reference.common import view
from miopy.tensor import TensorDesc, from_storage


def _compare(problem: ReduceProblem, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value, index) of MIN / MAX / AMAX over the reduced dims (kept dims keep their lens)."""
    dims = problem.dims
    keep = [a for a in range(x.ndim) if a not in dims]
    rows = np.transpose(x, keep + list(dims)).reshape([x.shape[a] for a in keep] + [-1])
    op = problem.op
    v = np.abs(rows) if op is ReduceOp.AMAX else rows
    nan = np.isnan(v)
    worst = np.inf if op is ReduceOp.MIN else -np.inf
    clean = np.where(nan, worst, v)
    index = np.argmin(clean, axis=-1) if op is ReduceOp.MIN else np.argmax(clean, axis=-1)
    value = np.take_along_axis(clean, index[..., None], axis=-1)[..., 0]
    all_nan = nan.all(axis=-1)
    index = np.where(all_nan, 0, index)
    value = np.where(all_nan, 0.0 if op is ReduceOp.AMAX else worst, value)
    if problem.nan_propagation:
        any_nan = nan.any(axis=-1)
        index = np.where(any_nan, np.argmax(nan, axis=-1), index)
        value = np.where(any_nan, np.nan, value)
    out_shape = problem.y.lens
    return value.reshape(out_shape), index.reshape(out_shape).astype(np.int32)


def reduce_reference(
    problem: ReduceProblem, x: np.ndarray, y_old: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Expected y (and indices) from x (and y, when beta != 0) in logical shape, float64."""
    x = np.asarray(x, np.float64)
    axes = problem.dims
    op = problem.op
    out = {}
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        if op.has_indices:
            r, index = _compare(problem, x)
            if problem.indices:
                out["indices"] = index
        elif op is ReduceOp.ADD:
            r = x.sum(axis=axes, keepdims=True)
        elif op is ReduceOp.MUL:
            r = x.prod(axis=axes, keepdims=True)
        elif op is ReduceOp.AVG:
            r = x.mean(axis=axes, keepdims=True)
        elif op is ReduceOp.NORM1:
            r = np.abs(x).sum(axis=axes, keepdims=True)
        else:
            r = np.sqrt((x * x).sum(axis=axes, keepdims=True))
        y = problem.alpha * r
        if problem.beta != 0:
            y = y + problem.beta * np.asarray(y_old, np.float64)
    out["y"] = y
    return out


def reference(problem: ReduceProblem, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    x = from_storage(view(buffers["x"], problem.x), problem.dtype)
    y_old = from_storage(view(buffers["y"], problem.y), problem.dtype) if problem.beta != 0 else None
    return reduce_reference(problem, x, y_old)


def samples() -> list[ReduceProblem]:
    """Problems that, together, every reduction solver takes."""
    out = []
    for op, dtype, lens, layout, dims, idx, beta in (
        ("add", "fp32", (2, 3, 4, 5), "NCHW", (2, 3), False, 0.0),  # rows
        ("max", "fp16", (2, 3, 4, 5), "NHWC", (1,), True, 0.0),  # rows, C innermost
        ("amax", "bf16", (2, 3, 4, 5), "NCHW", (0, 2), True, 0.0),  # generic
        ("norm2", "fp64", (3, 4, 5, 6), "NCHW", (0, 1, 2, 3), False, 0.5),  # rows, everything
        ("min", "fp64", (3, 4, 2, 5), "NHWC", (0, 1), True, 0.0),  # generic, fp64 indices
        ("mul", "fp32", (3, 2, 2, 3), "NCHW", (1, 2), False, 0.0),  # generic
        ("avg", "fp16", (2, 3, 4, 5), "NCHW", (1, 2, 3), False, -1.0),
        ("norm1", "fp32", (2, 3, 4, 5, 6), "NDHWC", (4,), False, 0.0),
        ("max", "fp16", (4, 3, 5, 6), "NHWC", (0, 2, 3), True, 0.0),  # columns (per channel)
        ("avg", "fp32", (9, 3, 2, 5), "NCHW", (0,), False, 0.25),  # columns (over the batch)
        ("max", "fp32", (2, 3, 4, 8), "NCHW", (2, 3), True, 0.0),  # rows of 16-byte vectors
        ("add", "bf16", (2, 3, 2, 16), "NCHW", (3,), False, 0.5),  # rows of 16-byte vectors
        ("min", "fp16", (5, 16, 3, 7), "NHWC", (0, 2, 3), True, 0.0),  # columns, 16-byte vectors
        ("norm2", "fp32", (37, 4, 3, 2), "NCHW", (0,), False, 0.0),  # columns, 16-byte vectors
    ):
        x = TensorDesc(dtype, lens, layout=layout)
        out.append(ReduceProblem(op, x, dims, idx, op == "max", 1.5 if not idx else 1.0, beta))
    return out


__all__ = ["reduce_reference", "reference", "samples"]
