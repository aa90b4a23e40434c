"""The caller's arrays as miopy sees them: NumPy, PyTorch (CPU or CUDA), CuPy and JAX.

``operand(obj)`` reads an array's kind, device, data type, logical shape and element strides,
and builds what a Handle runs on without copying: a flat 1-D view of the array's memory from its
first element (a Handle takes any buffer at least the descriptor's element space long; the
descriptor's strides say where each element is). The layout comes from the strides: a
channels-last tensor is NHWC to miopy, whatever its shape says, and needs no copy. Only arrays
with zero or negative strides (broadcast, flipped) are copied first.

``empty(like, lens, layout)`` allocates an output of the same kind on the same device, logical
shape ``lens``, memory order ``layout``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from miopy.errors import MiopyError, bad
from miopy.tensor import LAYOUTS_2D, LAYOUTS_3D, DataType, TensorDesc, packed_strides

HOST = ("host", 0)

_DTYPES = {"float32": DataType.FP32, "float16": DataType.FP16, "bfloat16": DataType.BF16}


@dataclass(frozen=True)
class Operand:
    """One array argument: ``kind`` (numpy, torch, cupy, jax), ``device`` (("host", 0) or
    ("cuda", index)), its TensorDesc and ``arg``, the zero-copy buffer a Handle runs on."""

    kind: str
    device: tuple[str, int]
    desc: TensorDesc
    arg: Any
    array: Any

    @property
    def layout(self) -> str:
        return self.desc.layout

    def signature(self) -> tuple:
        """What a cached plan depends on: data type, lens, strides."""
        return (self.desc.dtype.value, self.desc.lens, self.desc.strides)


def _module(name: str) -> Any:
    return sys.modules.get(name)  # only a framework the caller already imported can own the array


def kind_of(obj: Any) -> str | None:
    if isinstance(obj, np.ndarray):
        return "numpy"
    torch = _module("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return "torch"
    cp = _module("cupy")
    if cp is not None and isinstance(obj, cp.ndarray):
        return "cupy"
    jax = _module("jax")
    if jax is not None and isinstance(obj, jax.Array):
        return "jax"
    return None


def _dtype(name: str, field: str) -> DataType:
    name = str(name).rsplit(".", 1)[-1].lower()
    if name not in _DTYPES:
        raise bad(field, f"{name} array", "expected float32, float16 or bfloat16 (miopy's data types)")
    return _DTYPES[name]


def desc_for(dtype: DataType, lens: tuple[int, ...], strides: tuple[int, ...], field: str) -> TensorDesc:
    """The descriptor of an array: a packed layout when the strides are one (size-1 axes, whose
    strides mean nothing, are ignored), else a strided descriptor."""
    layouts = LAYOUTS_3D if len(lens) == 5 else LAYOUTS_2D
    for layout in layouts:
        want = packed_strides(lens, layout)
        if all(n == 1 or s == w for n, s, w in zip(lens, strides, want)):
            return TensorDesc(dtype, lens, layout=layout)
    try:
        return TensorDesc(dtype, lens, strides=strides)
    except MiopyError as exc:
        raise bad(field, f"strides {strides}", f"not a layout miopy can address ({exc})") from None


def _flat(kind: str, array: Any, space: int) -> Any:
    """A 1-D view of ``space`` elements from the array's first element (no copy)."""
    if kind == "numpy":
        if array.dtype.name == "bfloat16":
            array = array.view(np.uint16)
        return np.lib.stride_tricks.as_strided(array, (space,), (array.itemsize,))
    if kind == "torch":
        torch = _module("torch")
        flat = array.as_strided((space,), (1,))
        if array.dtype == torch.bfloat16:
            flat = flat.view(torch.uint16)
        if array.device.type == "cpu":
            return flat.numpy()
        return flat
    cp = _module("cupy")
    return cp.lib.stride_tricks.as_strided(array, (space,), (array.itemsize,))


def _strides(kind: str, array: Any) -> tuple[int, ...]:
    """Element strides (a byte stride that is not a whole element counts as unusable: -1)."""
    if kind == "torch":
        return tuple(int(s) for s in array.stride())
    size = array.itemsize
    return tuple(s // size if s % size == 0 else -1 for s in array.strides)


def _contiguous(kind: str, array: Any) -> Any:
    if kind == "numpy":
        return np.ascontiguousarray(array)
    if kind == "torch":
        return array.contiguous()
    return _module("cupy").ascontiguousarray(array)


def operand(obj: Any, field: str, rank: tuple[int, ...] = (4, 5)) -> Operand:
    """The Operand of a caller's array; BadParm naming ``field`` for anything else."""
    kind = kind_of(obj)
    if kind is None:
        raise bad(field, type(obj).__name__, "expected a NumPy, PyTorch, CuPy or JAX array")
    if kind == "jax":
        return _jax_operand(obj, field, rank)
    array = obj.detach() if kind == "torch" else obj
    if kind == "torch":
        if array.device.type not in ("cuda", "cpu"):
            raise bad(field, f"tensor on {array.device}", "expected a CPU or CUDA tensor")
        device = ("cuda", array.device.index or 0) if array.device.type == "cuda" else HOST
    else:
        device = ("cuda", int(array.device.id)) if kind == "cupy" else HOST
    dtype = _dtype(array.dtype, field)
    lens = tuple(int(n) for n in array.shape)
    if len(lens) not in rank:
        raise bad(field, f"array of shape {lens}", f"expected {' or '.join(map(str, rank))} dimensions")
    strides = _strides(kind, array)
    if any(s <= 0 for n, s in zip(lens, strides) if n > 1):
        array = _contiguous(kind, array)  # broadcast or flipped: the kernels need positive strides
        strides = _strides(kind, array)
    strides = tuple(max(s, 1) for s in strides)
    desc = desc_for(dtype, lens, strides, field)
    return Operand(kind, device, desc, _flat(kind, array, desc.element_space), obj)


def _jax_operand(obj: Any, field: str, rank: tuple[int, ...]) -> Operand:
    """JAX arrays are immutable and have no strides: a GPU array is read through DLPack as CuPy,
    a CPU one as NumPy; both are packed row-major (NCHW)."""
    devices = list(obj.devices())
    platform = devices[0].platform if devices else "cpu"
    if platform == "gpu":
        import cupy as cp

        inner = operand(cp.from_dlpack(obj), field, rank)
    else:
        inner = operand(np.asarray(obj), field, rank)
    return Operand("jax", inner.device, inner.desc, inner.arg, obj)


def _memory_order(lens: tuple[int, ...], layout: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape in memory order, axes that bring it back to logical order)."""
    logical = "NCDHW" if len(lens) == 5 else "NCHW"
    order = [logical.index(a) for a in layout]
    shape = tuple(lens[i] for i in order)
    back = tuple(order.index(i) for i in range(len(lens)))
    return shape, back


def empty(like: Operand, lens: tuple[int, ...], layout: str, dtype: DataType | None = None) -> Any:
    """A new array of ``like``'s kind, device and data type: logical shape ``lens``, memory
    order ``layout`` (what a torch channels_last tensor is)."""
    shape, back = _memory_order(lens, layout)
    src = like.array
    if like.kind == "torch":
        torch = _module("torch")
        return torch.empty(shape, dtype=src.dtype, device=src.device).permute(*back)
    if like.kind == "cupy" or (like.kind == "jax" and like.device != HOST):
        cp = _module("cupy") or __import__("cupy")
        with cp.cuda.Device(like.device[1]):
            dtype_ = src.dtype if like.kind == "cupy" else _jax_storage(src)
            return cp.empty(shape, dtype=dtype_).transpose(back)
    dtype_ = src.dtype if like.kind == "numpy" else _jax_storage(src)
    return np.empty(shape, dtype=dtype_).transpose(back)


def _jax_storage(src: Any) -> Any:
    return np.dtype(str(src.dtype)) if str(src.dtype) != "bfloat16" else np.uint16


def finish(like: Operand, out: Any) -> Any:
    """The caller's kind for an output made by ``empty``: JAX gets its array back through DLPack
    (GPU) or a copy (CPU); the others already have theirs."""
    if like.kind != "jax":
        return out
    import jax.numpy as jnp

    if like.device == HOST:
        return jnp.asarray(out)
    import jax.dlpack

    return jax.dlpack.from_dlpack(out)


def in_layout(op: Operand, layout: str, field: str) -> Operand:
    """``op`` itself when packed in ``layout``, else a copy that is."""
    if op.desc.packed and op.layout == layout:
        return op
    out = empty(op, op.desc.lens, layout)
    if op.kind == "torch":
        out.copy_(op.array)
    else:
        out[...] = op.array
    return operand(out, field)


def empty_bytes(like: Operand, nbytes: int) -> Any:
    """A flat uint8 array of ``like``'s kind and device (a workspace such as a pooling index)."""
    src = like.array
    if like.kind == "torch":
        torch = _module("torch")
        return torch.empty(max(nbytes, 1), dtype=torch.uint8, device=src.device)
    if like.device != HOST:
        cp = _module("cupy") or __import__("cupy")
        with cp.cuda.Device(like.device[1]):
            return cp.empty(max(nbytes, 1), dtype=cp.uint8)
    return np.empty(max(nbytes, 1), dtype=np.uint8)


def raw_operand(like: Operand, raw: Any) -> Operand:
    """An Operand for a flat uint8 array made by ``empty_bytes`` (checked by size only)."""
    arg = raw.numpy() if like.kind == "torch" and raw.device.type == "cpu" else raw
    return Operand(like.kind, like.device, like.desc, arg, raw)


__all__ = [
    "HOST",
    "Operand",
    "desc_for",
    "empty",
    "empty_bytes",
    "finish",
    "in_layout",
    "kind_of",
    "operand",
    "raw_operand",
]
