"""Reference layer norm, forward and backward, in float64 (see miopy.problem.layernorm); group
norm reuses it by viewing x as (N, G, C/G * spatial)."""

from __future__ import annotations

import numpy as np

from miopy.problem.layernorm import GroupNormProblem, LayerNormProblem
from miopy.problem.passes import Pass
from miopy.reference.common import store_logical, view
from miopy.tensor import from_storage


def _rows(problem, a: np.ndarray) -> np.ndarray:
    """x as (keys, reduction) rows."""
    if isinstance(problem, GroupNormProblem):
        return a.reshape(a.shape[0] * problem.num_groups, -1)
    return a.reshape(int(np.prod(a.shape[: problem.normalized_dim], dtype=np.int64)), -1)


def _w_rows(problem, w: np.ndarray, x_shape) -> np.ndarray:
    """The weight broadcast to x's rows."""
    if isinstance(problem, GroupNormProblem):
        full = np.broadcast_to(w.reshape(1, -1, *([1] * (len(x_shape) - 2))), x_shape)
        return _rows(problem, np.ascontiguousarray(full))
    return np.broadcast_to(w.reshape(1, -1), _rows(problem, np.empty(x_shape, np.int8)).shape)


def norm_reference(problem, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    x = np.asarray(t["x"], np.float64)
    rows = _rows(problem, x)
    stat_shape = problem.stat_desc.lens
    w = _w_rows(problem, np.asarray(t["weight"], np.float64), x.shape) if problem.affine else 1.0
    if problem.direction is Pass.FORWARD:
        mean = rows.mean(axis=1, keepdims=True)
        var = ((rows - mean) ** 2).mean(axis=1, keepdims=True)
        rstd = 1.0 / np.sqrt(var + problem.epsilon)
        y = (rows - mean) * rstd
        if problem.affine:
            y = y * w + _w_rows(problem, np.asarray(t["bias"], np.float64), x.shape)
        return {"y": y.reshape(x.shape), "mean": mean.reshape(stat_shape), "rstd": rstd.reshape(stat_shape)}
    dy = _rows(problem, np.asarray(t["dy"], np.float64))
    mean = np.asarray(t["mean"], np.float64).reshape(-1, 1)
    rstd = np.asarray(t["rstd"], np.float64).reshape(-1, 1)
    xhat = (rows - mean) * rstd
    g = dy * w
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    out = {"dx": dx.reshape(x.shape)}
    if problem.affine:
        wl = problem.weight_desc.lens
        if isinstance(problem, GroupNormProblem):
            full = (dy * xhat).reshape(x.shape), dy.reshape(x.shape)
            axes = (0, *range(2, x.ndim))
            out["dweight"] = full[0].sum(axis=axes).reshape(wl)
            out["dbias"] = full[1].sum(axis=axes).reshape(wl)
        else:
            out["dweight"] = (dy * xhat).sum(axis=0).reshape(wl)
            out["dbias"] = dy.sum(axis=0).reshape(wl)
    return out


def _logical(desc, flat):
    return from_storage(view(flat, desc), desc.dtype).astype(np.float64)


def reference(problem, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    descs = problem.tensors()
    return norm_reference(problem, {r: _logical(descs[r], buffers[r]) for r in problem.inputs})


def random_buffers(problem, rng: np.random.Generator, offset: float = 0.0) -> dict[str, np.ndarray]:
    """Inputs random; backward's mean and rstd are those of x (as the forward pass wrote them)."""
    descs = problem.tensors()
    x = rng.uniform(0, 1, problem.x.lens) + offset
    values = {"x": x, "dy": rng.uniform(-1, 1, problem.x.lens)}
    wl = problem.weight_desc.lens
    values.update(weight=rng.uniform(-1, 1, wl), bias=rng.uniform(-1, 1, wl))
    if problem.direction is Pass.BACKWARD:
        fwd = type(problem).parse(problem.key().replace("_B_", "_F_", 1))
        stats = norm_reference(fwd, {"x": x, "weight": values["weight"], "bias": values["bias"]})
        values.update(mean=stats["mean"], rstd=stats["rstd"])
    out = {}
    for role, desc in descs.items():
        if role in problem.inputs:
            out[role] = store_logical(values[role], desc)
        else:
            out[role] = store_logical(np.full(desc.lens, np.nan), desc)
    return out


def samples() -> list[LayerNormProblem]:
    """Packed and strided inputs, with and without weights, several normalised dims."""
    from miopy.problem.nd import NdDesc

    out = []
    for d in "FB":
        out.append(LayerNormProblem(NdDesc("fp32", (4, 3, 5, 6)), 2, 1e-5, 1, d))
        out.append(LayerNormProblem(NdDesc("fp16", (6, 40)), 1, 1e-5, 0, d))
        out.append(LayerNormProblem(NdDesc("bf16", (3, 16)), 0, 1e-5, 1, d))
        out.append(LayerNormProblem(NdDesc("fp32", (3, 4, 5), (40, 10, 2)), 1, 1e-5, 1, d))
        # dense, but the normalised dims in another memory order (weights numbered differently)
        out.append(LayerNormProblem(NdDesc("fp32", (2, 3, 4), (12, 1, 3)), 1, 1e-5, 1, d))
    return out


__all__ = ["norm_reference", "random_buffers", "reference", "samples"]
