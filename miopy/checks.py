"""Strict checks of integer arguments, and the largest values the kernels can index.

Sizes, pads, strides, dilations and groups must be true integers: ``int``, a NumPy integer or
anything with ``__index__``. Floats (even ``4.0``), strings, ``bool`` and NaN or infinities are
refused with BadParm naming the field, never truncated or read character by character.

The kernels take lens, pads, convolution strides, dilations and groups as 32-bit ``int``
arguments (``CONV_SHAPE_ARGS`` in kernels/common/conv_shape.h, the GEMM's M, N, K) and tensor
strides and element offsets as 64-bit ``i64``; ``INDEX_MAX`` and ``OFFSET_MAX`` are those limits,
checked when a descriptor or problem is built, so nothing wraps around inside a kernel.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

from miopy.errors import bad

INDEX_MAX = 2**31 - 1  # int32: sizes, pads, strides and dilations of a convolution
OFFSET_MAX = 2**63 - 1  # i64: element strides, offsets and element counts


def int_value(field: str, value: object, minimum: int | None = None, maximum: int = INDEX_MAX) -> int:
    """``value`` as an int, or BadParm naming ``field`` (not an integer, or out of range)."""
    if isinstance(value, bool) or isinstance(value, str | bytes):
        raise bad(field, value, "expected an integer")
    try:
        out = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise bad(field, value, "expected an integer") from None
    if minimum is not None and out < minimum:
        raise bad(field, out, f"must be >= {minimum}")
    if out > maximum:
        raise bad(field, out, f"exceeds {maximum}, the largest value the kernels can index")
    return out


def int_tuple(
    field: str,
    values: object,
    dims: int | Iterable[int] | None = None,
    minimum: int | None = None,
    maximum: int = INDEX_MAX,
) -> tuple[int, ...]:
    """A tuple of ints from a sequence; ``dims`` is the allowed length (or lengths)."""
    if isinstance(values, str | bytes | dict) or not hasattr(values, "__iter__"):
        raise bad(field, values, "expected a sequence of integers")
    try:
        items = list(values)  # type: ignore[call-overload]
    except TypeError:
        raise bad(field, values, "expected a sequence of integers") from None
    out = []
    for i, v in enumerate(items):
        if isinstance(v, bool) or isinstance(v, str | bytes):
            raise bad(field, values, f"item {i} ({v!r}) is not an integer")
        try:
            out.append(operator.index(v))
        except TypeError:
            raise bad(field, values, f"item {i} ({v!r}) is not an integer") from None
    allowed = (dims,) if isinstance(dims, int) else tuple(dims) if dims is not None else None
    if allowed is not None and len(out) not in allowed:
        expected = " or ".join(map(str, allowed))
        raise bad(field, tuple(out), f"expected {expected} values")
    for v in out:
        if minimum is not None and v < minimum:
            raise bad(field, tuple(out), f"every value must be >= {minimum}")
        if v > maximum:
            raise bad(field, tuple(out), f"{v} exceeds {maximum}, the largest value the kernels can index")
    return tuple(out)


__all__ = ["INDEX_MAX", "OFFSET_MAX", "int_tuple", "int_value"]
