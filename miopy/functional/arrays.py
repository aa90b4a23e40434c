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

import math
import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from miopy.errors import MiopyError, bad
from miopy.problem.nd import NdDesc, row_major
from miopy.tensor import LAYOUTS_2D, LAYOUTS_3D, DataType, TensorDesc, packed_strides

HOST = ("host", 0)

_DTYPES = {"float32": DataType.FP32, "float16": DataType.FP16, "bfloat16": DataType.BF16}


@dataclass(frozen=True)
class Operand:
    """One array argument: ``kind`` (numpy, torch, cupy, jax), ``device`` (("host", 0) or
    ("cuda", index)), its TensorDesc and ``arg``, the zero-copy buffer a Handle runs on."""

    kind: str
    device: tuple[str, int]
    desc: TensorDesc | NdDesc
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


def _read(obj: Any, field: str) -> tuple[str, tuple[str, int], Any, DataType]:
    """(kind, device, the array to read: a JAX array's NumPy or CuPy view, data type)."""
    kind = kind_of(obj)
    if kind is None:
        raise bad(field, type(obj).__name__, "expected a NumPy, PyTorch, CuPy or JAX array")
    if kind == "jax":
        inner = _jax_inner(obj)
        _, device, array, dtype = _read(inner, field)
        return "jax", device, array, dtype
    array = obj.detach() if kind == "torch" else obj
    if kind == "torch":
        if array.device.type not in ("cuda", "cpu"):
            raise bad(field, f"tensor on {array.device}", "expected a CPU or CUDA tensor")
        device = ("cuda", array.device.index or 0) if array.device.type == "cuda" else HOST
    else:
        device = ("cuda", int(array.device.id)) if kind == "cupy" else HOST
    return kind, device, array, _dtype(array.dtype, field)


def _inner_kind(kind: str, array: Any) -> str:
    """The kind of the array miopy reads (a JAX array is read as NumPy or CuPy)."""
    if kind != "jax":
        return kind
    return "numpy" if isinstance(array, np.ndarray) else "cupy"


def _positive_strides(kind: str, array: Any) -> tuple[Any, tuple[int, ...]]:
    """The array (a packed copy when it is broadcast or flipped) and its element strides, >= 1."""
    lens = tuple(int(n) for n in array.shape)
    strides = _strides(kind, array)
    if any(s <= 0 for n, s in zip(lens, strides) if n > 1):
        array = _contiguous(kind, array)  # broadcast or flipped: the kernels need positive strides
        strides = _strides(kind, array)
    return array, tuple(max(s, 1) for s in strides)


def operand(obj: Any, field: str, rank: tuple[int, ...] = (4, 5)) -> Operand:
    """The Operand of a caller's array (an N, C, [D,] H, W image); BadParm naming ``field`` for
    anything else."""
    kind, device, array, dtype = _read(obj, field)
    lens = tuple(int(n) for n in array.shape)
    if len(lens) not in rank:
        raise bad(field, f"array of shape {lens}", f"expected {' or '.join(map(str, rank))} dimensions")
    inner = _inner_kind(kind, array)
    array, strides = _positive_strides(inner, array)
    desc = desc_for(dtype, lens, strides, field)
    return Operand(kind, device, desc, _flat(inner, array, desc.element_space), obj)


def image_operand(obj: Any, field: str, lens: tuple[int, ...]) -> Operand:
    """An array of 2 or 3 dims, (N, C) or (N, C, L), read as the image ``lens`` (its shape with
    trailing 1s: (N, C, 1, 1), (N, C, L, 1)) without a copy; 4 and 5 dims as ``operand``."""
    kind, device, array, dtype = _read(obj, field)
    shape = tuple(int(n) for n in array.shape)
    if shape == lens:
        return operand(obj, field)
    inner = _inner_kind(kind, array)
    array, strides = _positive_strides(inner, array)
    strides = strides + (1,) * (len(lens) - len(shape))
    desc = desc_for(dtype, lens, strides, field)
    return Operand(kind, device, desc, _flat(inner, array, desc.element_space), obj)


def nd_operand(obj: Any, field: str, dense: bool = True) -> Operand:
    """The Operand of an array of any rank (1 to 8), its descriptor an NdDesc with the array's
    strides; with ``dense`` an array with gaps (a slice) is copied packed first."""
    kind, device, array, dtype = _read(obj, field)
    inner = _inner_kind(kind, array)
    array, strides = _positive_strides(inner, array)
    lens = tuple(int(n) for n in array.shape)
    desc = NdDesc(dtype, lens, strides, field)
    if dense and desc.element_space != desc.element_count:
        array = _contiguous(inner, array)
        desc = NdDesc(dtype, lens, None, field)
    return Operand(kind, device, desc, _flat(inner, array, desc.element_space), obj)


def vector(obj: Any, field: str, count: int, writable: bool = False) -> Operand:
    """A parameter array (weights, statistics) of ``count`` elements in row-major order, any
    shape ((C,), (1, C, 1, 1), (C, H, W)...). One that is not packed is copied, unless it is
    ``writable`` (updated in place: running statistics), which is refused."""
    kind, device, array, dtype = _read(obj, field)
    inner = _inner_kind(kind, array)
    lens = tuple(int(n) for n in array.shape)
    if math.prod(lens) != count:
        raise bad(field, f"array of shape {lens}", f"expected {count} elements")
    desc = NdDesc(dtype, (count,))
    rows = row_major(lens)
    if any(n > 1 and s != r for n, s, r in zip(lens, _strides(inner, array), rows)):
        if writable:
            raise bad(field, f"strides {_strides(inner, array)}", "must be packed (it is updated in place)")
        array = _contiguous(inner, array)
    if writable and kind == "jax":
        raise bad(field, "a JAX array", "JAX arrays are immutable: it cannot be updated in place")
    return Operand(kind, device, desc, _flat(inner, array, count), obj)


def as_image(op: Operand, lens: tuple[int, ...], strides: tuple[int, ...], field: str) -> Operand:
    """The same memory read as the N, C, [D,] H, W image ``lens`` with element ``strides`` (a
    reshaped view: (N, C) as (N, C, 1, 1), a softmax's dim as C of a row-major array...)."""
    return replace(op, desc=desc_for(op.desc.dtype, tuple(lens), tuple(strides), field))


def row_major_op(op: Operand, field: str) -> Operand:
    """``op`` when its strides are row-major, else a row-major copy (as an NdDesc operand)."""
    if tuple(op.desc.strides) == row_major(op.desc.lens):
        return op
    return with_strides(op, row_major(op.desc.lens), field)


def _jax_inner(obj: Any) -> Any:
    """JAX arrays are immutable and have no strides: a GPU array is read through DLPack as CuPy,
    a CPU one as NumPy; both are packed row-major."""
    devices = list(obj.devices())
    platform = devices[0].platform if devices else "cpu"
    if platform == "gpu":
        import cupy as cp

        return cp.from_dlpack(obj)
    return np.asarray(obj)


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


def _framework_dtype(like: Operand, dtype: DataType | None) -> Any:
    """``dtype`` (else the like array's) as like's framework names it."""
    src = like.array
    if like.kind == "torch":
        if dtype is None:
            return src.dtype
        torch = _module("torch")
        return {DataType.FP32: torch.float32, DataType.FP16: torch.float16, DataType.BF16: torch.bfloat16}[
            dtype
        ]
    if dtype is None:
        return src.dtype if like.kind in ("numpy", "cupy") else _jax_storage(src)
    if dtype is DataType.BF16:
        if like.kind == "numpy":
            import ml_dtypes

            return ml_dtypes.bfloat16
        return np.uint16  # CuPy and JAX hold bf16 as its bits
    return np.dtype({DataType.FP32: "float32", DataType.FP16: "float16"}[dtype])


def _on_gpu(like: Operand) -> bool:
    return like.kind == "cupy" or (like.kind == "jax" and like.device != HOST)


def empty_nd(like: Operand, lens: tuple[int, ...], strides: tuple[int, ...] | None = None, dtype=None) -> Any:
    """A new array of ``like``'s kind and device, shape ``lens`` with element ``strides``
    (row-major when None; they must describe a dense array), data type ``dtype`` or like's."""
    lens = tuple(int(n) for n in lens)
    strides = row_major(lens) if strides is None else tuple(strides)
    fdt = _framework_dtype(like, dtype)
    if like.kind == "torch":
        torch = _module("torch")
        return torch.empty_strided(lens, strides, dtype=fdt, device=like.array.device)
    space = 1 + sum((n - 1) * s for n, s in zip(lens, strides))
    if _on_gpu(like):
        cp = _module("cupy") or __import__("cupy")
        with cp.cuda.Device(like.device[1]):
            flat = cp.empty(space, dtype=fdt)
        return cp.lib.stride_tricks.as_strided(flat, lens, tuple(s * flat.itemsize for s in strides))
    flat = np.empty(space, dtype=fdt)
    return np.lib.stride_tricks.as_strided(flat, lens, tuple(s * flat.itemsize for s in strides))


def full(like: Operand, lens: tuple[int, ...], value: float, dtype: DataType | None = None) -> Any:
    """A new row-major array filled with ``value`` (default weights: ones, zeros)."""
    out = empty_nd(like, lens, None, dtype)
    if like.kind == "torch":
        out.fill_(value)
    elif like.kind != "numpy" and np.dtype(out.dtype) == np.uint16:  # bf16 bits
        out.fill(np.array(value, dtype=np.float32).view(np.uint32) >> 16)
    else:
        out.fill(value)
    return out


def with_strides(op: Operand, strides: tuple[int, ...], field: str) -> Operand:
    """``op`` itself when it has ``strides``, else a copy that has them (a gradient that must be
    laid out like its forward input)."""
    if tuple(op.desc.strides) == tuple(strides):
        return op
    out = empty_nd(op, op.desc.lens, strides)
    src = op.array if op.kind != "jax" else _jax_inner(op.array)
    if tuple(src.shape) != tuple(op.desc.lens):
        src = src.reshape(op.desc.lens)  # an (N, C) array read as (N, C, 1)
    if op.kind == "torch":
        out.copy_(src.detach())
    else:
        out[...] = src
    return nd_operand(out, field, dense=False) if isinstance(op.desc, NdDesc) else operand(out, field)


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
    "as_image",
    "desc_for",
    "empty",
    "empty_bytes",
    "empty_nd",
    "finish",
    "full",
    "image_operand",
    "in_layout",
    "kind_of",
    "nd_operand",
    "operand",
    "raw_operand",
    "row_major_op",
    "vector",
    "with_strides",
]
