"""NdDesc: a tensor of any rank (1 to 8 dims) with explicit strides, for the primitives whose
tensors are not N,C,(D),H,W images: layer norm's input and statistics, group norm's (N, G)
statistics, weights of shape (C,). Packed means row-major over its lens."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from miopy.checks import OFFSET_MAX, int_tuple
from miopy.errors import bad
from miopy.tensor import DataType, TensorDesc

MAX_RANK = 8


def row_major(lens: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(lens):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def channels_last_strides(lens: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of an (N, C, spatial...) tensor stored as N, spatial..., C."""
    c, spatial = lens[1], lens[2:]
    return (c * math.prod(spatial), 1, *(s * c for s in row_major(spatial)))


@dataclass(frozen=True)
class Dim:
    """One dim of a normalisation problem as its kernels see it: length, whether it indexes the
    statistics' key (else it is reduced over) and each tensor role's stride along it."""

    length: int
    key: bool
    strides: dict[str, int] = field(default_factory=dict)

    def stride(self, role: str) -> int:
        return int(self.strides.get(role, 0))


@dataclass(frozen=True)
class PgradGeometry:
    """How a dense layer / group norm lays out the data of each weight element, for the packed
    weight-gradient kernels. cols: element (row, col) at row * rstride + col, the weight index is
    col < P, the key (row / rdiv) * rmul + col / cdiv. rows: weight p's elements are S segments of
    L at p * pstride + s * sstride, the key s * smul + p / pdiv."""

    kind: str
    P: int
    rows: int = 1
    rstride: int = 0
    rdiv: int = 1
    rmul: int = 1
    cdiv: int = 1
    S: int = 1
    L: int = 1
    pstride: int = 0
    sstride: int = 0
    smul: int = 0
    pdiv: int = 1


@dataclass(frozen=True)
class NdDesc:
    """dtype, lens (1 to 8 dims) and strides in elements (row-major when not given)."""

    dtype: DataType
    lens: tuple[int, ...]
    strides: tuple[int, ...]

    def __init__(self, dtype: DataType | str, lens, strides=None, field: str = "lens"):
        dtype = DataType.parse(dtype)
        lens = int_tuple(field, lens, tuple(range(1, MAX_RANK + 1)))
        for i, n in enumerate(lens):
            if n <= 0:
                raise bad(f"{field}[{i}]", n, "must be positive")
        if strides is None:
            strides = row_major(lens)
        else:
            strides = int_tuple(f"{field} strides", strides, len(lens), 1, OFFSET_MAX)
        if math.prod(lens) > OFFSET_MAX:
            raise bad(field, lens, f"more than {OFFSET_MAX} elements")
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "lens", lens)
        object.__setattr__(self, "strides", strides)

    @classmethod
    def of(cls, desc: TensorDesc | NdDesc) -> NdDesc:
        """The same tensor as an NdDesc (an image descriptor keeps its strides)."""
        if isinstance(desc, NdDesc):
            return desc
        return cls(desc.dtype, desc.lens, desc.strides)

    @property
    def packed(self) -> bool:
        return self.strides == row_major(self.lens)

    @property
    def layout(self) -> str:
        return "PACKED" if self.packed else "STRIDED"

    @property
    def element_count(self) -> int:
        return math.prod(self.lens)

    @property
    def element_space(self) -> int:
        return 1 + sum((n - 1) * s for n, s in zip(self.lens, self.strides))

    @property
    def nbytes(self) -> int:
        return self.element_space * self.dtype.itemsize

    def memory_shape(self) -> tuple[int, ...] | None:
        """The array shape that holds it (miopy.arrays): its lens when packed."""
        return self.lens if self.packed else None

    def key(self) -> str:
        """``2x3x4`` packed, ``2x3x4s12,4,1`` with strides."""
        text = "x".join(map(str, self.lens))
        return text if self.packed else text + "s" + ",".join(map(str, self.strides))

    @classmethod
    def parse(cls, dtype: DataType | str, text: str) -> NdDesc:
        lens, _, strides = text.partition("s")
        try:
            return cls(
                dtype,
                [int(v) for v in lens.split("x")],
                [int(v) for v in strides.split(",")] if strides else None,
            )
        except ValueError:
            raise bad("key", text, "not a tensor key (e.g. 2x3x4 or 2x3x4s12,4,1)") from None


__all__ = ["Dim", "MAX_RANK", "NdDesc", "PgradGeometry", "channels_last_strides", "row_major"]
