"""Helpers every reference and every check shares: logical views of flat stored buffers, storing
logical values, and MIOpen's verification error."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from miopy.tensor import TensorDesc, to_storage


def view(flat: np.ndarray, desc: TensorDesc) -> np.ndarray:
    """The logical (N, C, [D,] H, W) view of a flat buffer holding ``desc``'s elements."""
    flat = np.ascontiguousarray(flat).reshape(-1)
    if flat.size < desc.element_space:
        raise ValueError(f"buffer of {flat.size} elements < element space {desc.element_space}")
    return as_strided(flat, shape=desc.lens, strides=[s * flat.itemsize for s in desc.strides])


def store_logical(values: np.ndarray, desc: TensorDesc, fill: float = np.nan) -> np.ndarray:
    """A flat stored buffer for ``desc`` holding ``values`` (logical shape); gaps hold ``fill``."""
    flat = to_storage(np.full(desc.element_space, fill, dtype=np.float32), desc.dtype)
    view(flat, desc)[...] = to_storage(values, desc.dtype)
    return flat


def rms_range(a: np.ndarray, b: np.ndarray) -> float:
    """MIOpen's verification error: ||a - b||_2 / (sqrt(n) * max(max|a|, max|b|))."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.size == 0:
        return 0.0
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    scale = max(np.max(np.abs(a)), np.max(np.abs(b)))
    if scale == 0:
        return 0.0
    return float(np.linalg.norm(a - b) / (np.sqrt(a.size) * scale))
