"""Reference batch normalisation in float64 (MIOpen's formulas; see miopy.problem.bnorm)."""

from __future__ import annotations

import numpy as np

from miopy.problem.bnorm import BatchNormMode, BatchNormProblem, BnPass
from miopy.reference.common import store_logical, view
from miopy.tensor import TensorDesc, from_storage


def _axes(problem: BatchNormProblem) -> tuple[int, ...]:
    rank = len(problem.x.lens)
    return (0, *range(2, rank)) if problem.mode is BatchNormMode.SPATIAL else (0,)


def batch_stats(problem: BatchNormProblem, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, biased variance), keepdims, float64, two-pass."""
    x = np.asarray(x, np.float64)
    axes = _axes(problem)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return mean, var


def bnorm_reference(problem: BatchNormProblem, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Expected outputs by role from logical float inputs."""
    x = np.asarray(t["x"], np.float64)
    eps = problem.epsilon
    axes = _axes(problem)
    n = problem.reduction_count
    scale = np.asarray(t["scale"], np.float64)
    if problem.direction is BnPass.INFERENCE:
        mean, var = (np.asarray(t[r], np.float64) for r in ("estimated_mean", "estimated_var"))
        return {"y": scale * (x - mean) / np.sqrt(var + eps) + np.asarray(t["bias"], np.float64)}
    if problem.direction is BnPass.TRAINING:
        mean, var = batch_stats(problem, x)
        inv = 1.0 / np.sqrt(var + eps)
        out = {"y": scale * (x - mean) * inv + np.asarray(t["bias"], np.float64)}
        if problem.running:
            f = problem.exp_avg_factor
            unbiased = var * n / (n - 1) if n > 1 else var
            out["running_mean"] = (1 - f) * np.asarray(t["running_mean"], np.float64) + f * mean
            out["running_var"] = (1 - f) * np.asarray(t["running_var"], np.float64) + f * unbiased
        if problem.save:
            out["saved_mean"] = mean
            out["saved_inv_var"] = inv
        return out
    dy = np.asarray(t["dy"], np.float64)
    if problem.save:
        mean, inv = (np.asarray(t[r], np.float64) for r in ("saved_mean", "saved_inv_var"))
    else:
        mean, var = batch_stats(problem, x)
        inv = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * inv
    dbias = dy.sum(axis=axes, keepdims=True)
    dscale = (dy * xhat).sum(axis=axes, keepdims=True)
    dx = scale * inv / n * (n * dy - dbias - xhat * dscale)
    return {"dx": dx, "dscale": dscale, "dbias": dbias}


def _logical(desc: TensorDesc, flat: np.ndarray) -> np.ndarray:
    return from_storage(view(flat, desc), desc.dtype).astype(np.float64)


# ---- the pipeline's reference contract (tests/backend/test_registry.py) -----------------------
def reference(problem: BatchNormProblem, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    descs = problem.tensors()
    given = {r: _logical(descs[r], buffers[r]) for r in problem.inputs}
    return bnorm_reference(problem, given)


def random_values(problem: BatchNormProblem, rng: np.random.Generator, offset: float = 0.0) -> dict:
    """Logical values of every input: x around ``offset``, positive variances, and saved
    statistics that are x's own (as a training pass leaves them)."""
    lens = problem.x.lens
    plens = problem.param.lens
    x = rng.uniform(-1, 1, lens) * rng.uniform(0.5, 2.0) + offset
    mean, var = batch_stats(problem, x)
    values = {
        "x": x,
        "dy": rng.uniform(-1, 1, lens),
        "scale": rng.uniform(-1, 1, plens),
        "bias": rng.uniform(-1, 1, plens),
        "running_mean": rng.uniform(-1, 1, plens),
        "running_var": rng.uniform(0.5, 1.5, plens),
        "estimated_mean": rng.uniform(-1, 1, plens),
        "estimated_var": rng.uniform(0.5, 1.5, plens),
        "saved_mean": mean,
        "saved_inv_var": 1.0 / np.sqrt(var + problem.epsilon),
    }
    return values


def random_buffers(problem: BatchNormProblem, rng: np.random.Generator, offset: float = 0.0) -> dict:
    """Stored buffers for every role; outputs that are not read start as NaN."""
    values = random_values(problem, rng, offset)
    out = {}
    for role, desc in problem.tensors().items():
        if role in problem.inputs:
            out[role] = store_logical(values[role], desc)
        else:
            out[role] = store_logical(np.full(desc.lens, np.nan), desc)
    return out


def samples() -> list[BatchNormProblem]:
    """Small problems that every batch norm solver takes: NCHW (rows) and NHWC / per-activation
    (columns) dense tensors, a strided one, 3-D, mixed precision."""
    out = []
    nchw = TensorDesc("fp32", (3, 5, 4, 6))
    nhwc16 = TensorDesc("fp16", (2, 16, 3, 5), layout="NHWC")
    ndhwc = TensorDesc("bf16", (2, 8, 2, 3, 3), layout="NDHWC")
    strided = TensorDesc("fp32", (2, 3, 4, 5), strides=(100, 30, 6, 1))
    for d in ("T", "I", "B"):
        out.append(BatchNormProblem("SPATIAL", d, nchw, save=d != "I", running=d == "T"))
        out.append(
            BatchNormProblem("SPATIAL", d, nhwc16, param_dtype="fp32", save=d == "T", running=d == "T")
        )
        out.append(BatchNormProblem("PER_ACTIVATION", d, ndhwc, param_dtype="fp32", save=False))
        out.append(BatchNormProblem("SPATIAL", d, strided, save=False, running=d == "T", exp_avg_factor=0.25))
    return out


__all__ = ["batch_stats", "bnorm_reference", "random_buffers", "reference", "samples"]
