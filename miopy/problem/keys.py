"""Key helpers shared by the problems of the simpler primitives (tensor ops, softmax, LRN,
reductions): a tensor descriptor as it appears in a key, and back; finite scalars."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from miopy.errors import bad
from miopy.problem.passes import float_text
from miopy.tensor import DataType, TensorDesc


def lens_text(lens) -> str:
    return "x".join(map(str, lens))


def lens_from_text(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split("x"))


def desc_from_key(dtype: DataType, lens, layout: str) -> TensorDesc:
    """A descriptor from its key part: a packed layout's name, or ``s<strides>``."""
    if layout.startswith("s"):
        return TensorDesc(dtype, lens, strides=[int(v) for v in layout[1:].split(",")])
    return TensorDesc(dtype, lens, layout=layout)


def match_key(pattern: re.Pattern, key, what: str) -> re.Match:
    """``pattern``'s match of ``key``, else BadParm saying the key is not ``what``."""
    m = pattern.match(key.strip()) if isinstance(key, str) else None
    if not m:
        raise bad("key", key, f"not {what}")
    return m


@contextmanager
def key_fields(key: str, what: str) -> Iterator[None]:
    """Turns a ValueError or KeyError while converting a key's fields into BadParm naming the key."""
    try:
        yield
    except (KeyError, ValueError):
        raise bad("key", key, f"not {what}") from None


def role_descs(key: str, layouts: str, dtype: DataType, lens, roles: Sequence[str]) -> dict[str, TensorDesc]:
    """One descriptor per role from a key's layout part: one layout for all, or one per role."""
    lays = layouts.split(".") if "." in layouts else [layouts] * len(roles)
    if len(lays) != len(roles):
        raise bad("key", key, f"expected one layout or {len(roles)}")
    return {r: desc_from_key(dtype, lens, lay) for r, lay in zip(roles, lays)}


def finite(name: str, value) -> float:
    """A finite float, else BadParm naming ``name``."""
    if isinstance(value, bool):
        raise bad(name, value, "expected a number")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise bad(name, value, "expected a number") from None
    if not math.isfinite(out):
        raise bad(name, value, "must be finite")
    return out


def check_desc(role: str, desc, dtypes=(DataType.FP32, DataType.FP16, DataType.BF16)) -> TensorDesc:
    if not isinstance(desc, TensorDesc):
        raise bad(role, type(desc).__name__, "expected a TensorDesc")
    if desc.dtype not in dtypes:
        raise bad(f"{role}.dtype", desc.dtype.value, f"expected {', '.join(d.value for d in dtypes)}")
    return desc


def same_as(role: str, desc: TensorDesc, other_role: str, other: TensorDesc) -> None:
    """``desc`` has ``other``'s lens and data type."""
    if desc.lens != other.lens:
        raise bad(f"{role}.lens", desc.lens, f"must equal {other_role}.lens {other.lens}")
    if desc.dtype != other.dtype:
        raise bad(f"{role}.dtype", desc.dtype.value, f"must equal {other_role}.dtype {other.dtype.value}")


def dense_alike(descs) -> str | None:
    """None when every descriptor is dense (no gaps) with the same strides, else why not."""
    first = descs[0]
    if first.element_space != first.element_count:
        return "tensors are not dense"
    if any(d.strides != first.strides for d in descs[1:]):
        return "tensors have different strides"
    return None


def memory_order(desc: TensorDesc) -> list[int]:
    """Logical axes from outermost to innermost in memory (stable for equal strides)."""
    return sorted(range(len(desc.lens)), key=lambda a: (-desc.strides[a], a))


__all__ = [
    "check_desc",
    "dense_alike",
    "desc_from_key",
    "finite",
    "float_text",
    "lens_from_text",
    "key_fields",
    "lens_text",
    "match_key",
    "memory_order",
    "role_descs",
    "same_as",
]
