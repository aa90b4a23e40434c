"""Checking a user's array against the TensorDesc it is passed for, before anything launches.

An array is accepted for a descriptor when
- its data type is the descriptor's: float32 (FP32), float16 (FP16), or for BF16 the bf16 bits
  as uint16 or a ``bfloat16`` dtype (ml_dtypes, PyTorch); a 1-D ``uint8`` array is raw bytes and
  only its size is checked;
- its shape is the tensor in memory order (``(N, H, W, C)`` for NHWC, ``(N, C, H, W)`` for NCHW),
  or it is flat (1-D) with at least the descriptor's element space (what a strided tensor needs);
- it is C-contiguous (the descriptor's strides say how elements lie in it), and, when the kernels
  write it, writable.
Device arrays (CuPy, PyTorch, anything with ``dtype`` and ``shape``) get the same type and shape
checks; plain buffers only the size check. Every refusal is BadParm saying what was expected.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from miopy.errors import bad
from miopy.tensor import DataType, TensorDesc

_DTYPES = {
    DataType.FP32: ("float32",),
    DataType.FP16: ("float16",),
    DataType.BF16: ("uint16", "bfloat16"),
    DataType.FP64: ("float64",),
    DataType.INT32: ("int32",),
}


def memory_shape(desc: TensorDesc) -> tuple[int, ...] | None:
    """The lens in memory order (outermost first) of a packed tensor; None when strided. A
    descriptor that is not an image (miopy.problem.nd.NdDesc) says it itself."""
    own = getattr(desc, "memory_shape", None)
    if own is not None:
        return own()
    if not desc.packed:
        return None
    logical = "NCDHW" if len(desc.lens) == 5 else "NCHW"
    return tuple(desc.lens[logical.index(axis)] for axis in desc.layout)


_NAMES: dict[Any, str] = {}  # dtype -> name: NumPy computes ``dtype.name`` at each read


def _dtype_name(dtype: Any) -> str:
    try:
        return _NAMES[dtype]
    except (KeyError, TypeError):  # new, or not hashable
        pass
    name = getattr(dtype, "name", None) or str(dtype)
    name = str(name).rsplit(".", 1)[-1].lower()  # torch.float32 -> float32
    if len(_NAMES) < 256:
        try:
            _NAMES[dtype] = name
        except TypeError:
            pass
    return name


def _expected(desc: TensorDesc) -> str:
    shape = memory_shape(desc)
    flat = f"a flat array of at least {desc.element_space} elements"
    if shape is None:
        return flat
    return f"shape {shape} ({desc.layout} order) or {flat}"


def check_typed(dtype: Any, shape: tuple[int, ...], desc: TensorDesc, field: str) -> None:
    """Data type and shape of an array (host or device) passed for ``desc``."""
    name = _dtype_name(dtype)
    shape = tuple(int(v) for v in shape)
    if name == "uint8" and len(shape) == 1:
        return  # raw bytes: the caller checks the byte count
    # a descriptor that is not a float tensor (e.g. pooling's index) names its own array types
    accepted = getattr(desc, "array_dtypes", None) or _DTYPES[desc.dtype]
    if name not in accepted:
        kind = getattr(desc, "type_name", None) or desc.dtype.value
        raise bad(field, f"{name} array", f"the tensor is {kind}: expected a {' or '.join(accepted)} array")
    if len(shape) == 1:
        if shape[0] < desc.element_space:
            raise bad(field, f"array of {shape[0]} elements", f"expected {_expected(desc)}")
        return
    if shape != memory_shape(desc):
        raise bad(field, f"array of shape {shape}", f"expected {_expected(desc)}")


def check_host(array: np.ndarray, desc: TensorDesc | None, nbytes: int, field: str, output: bool) -> None:
    """A NumPy array given for a tensor: type, shape, size, contiguity, writability."""
    if desc is not None:
        check_typed(array.dtype, array.shape, desc, field)
    if array.nbytes < nbytes:
        raise bad(field, f"array of {array.nbytes} bytes", f"the tensor needs {nbytes} bytes")
    if not array.flags.c_contiguous:
        raise bad(
            field,
            "non-contiguous array",
            "pass a C-contiguous array (the descriptor's strides describe the layout)",
        )
    if output and not array.flags.writeable:
        raise bad(field, "read-only array", "the result is written into it: pass a writable array")


def check_device(obj: Any, desc: TensorDesc | None, field: str) -> None:
    """A device array given for a tensor: type and shape where it has them."""
    if desc is None:
        return
    dtype, shape = getattr(obj, "dtype", None), getattr(obj, "shape", None)
    if dtype is None or shape is None:
        return  # a plain buffer: only its size is checked
    try:
        shape = tuple(shape)
    except TypeError:
        return
    if len(shape) > 1 and shape == tuple(desc.lens) and _same_strides(_element_strides(obj), desc):
        shape = (int(math.prod(shape)),)  # logical shape with the descriptor's strides (torch channels_last)
    check_typed(dtype, shape, desc, field)


def _same_strides(strides: tuple[int, ...] | None, desc: TensorDesc) -> bool:
    """The descriptor's strides, ignoring axes of extent 1 (their stride is arbitrary)."""
    if strides is None or len(strides) != len(desc.strides):
        return False
    return all(a == b for a, b, n in zip(strides, desc.strides, desc.lens) if n > 1)


def _element_strides(obj: Any) -> tuple[int, ...] | None:
    """Strides in elements: torch's ``stride()``, CuPy's byte ``strides`` over the item size."""
    try:
        stride = getattr(obj, "stride", None)
        if callable(stride):
            return tuple(int(v) for v in stride())
        strides, itemsize = getattr(obj, "strides", None), getattr(obj, "itemsize", None)
        if strides is not None and itemsize:
            return tuple(int(v) // int(itemsize) for v in strides)
    except (TypeError, ValueError, RuntimeError):
        pass
    return None


__all__ = ["check_device", "check_host", "check_typed", "memory_shape"]
