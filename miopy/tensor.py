"""Data types, layouts and the tensor descriptor."""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from miopy.checks import OFFSET_MAX, int_tuple
from miopy.errors import bad


class DataType(enum.Enum):
    FP32 = "FP32"
    FP16 = "FP16"
    BF16 = "BF16"
    # Reductions only: fp64 data (reducefp64, where the device has fp64) and int32 indices.
    FP64 = "FP64"
    INT32 = "INT32"

    @property
    def storage(self) -> np.dtype:
        """NumPy dtype of the stored bits (bf16 is kept as uint16)."""
        return np.dtype(
            {
                "FP32": np.float32,
                "FP16": np.float16,
                "BF16": np.uint16,
                "FP64": np.float64,
                "INT32": np.int32,
            }[self.value]
        )

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.value]

    @property
    def code(self) -> int:
        """Compile-time id used by the kernels (MIOPY_DTYPE)."""
        return {"FP32": 0, "FP16": 1, "BF16": 2, "FP64": 3, "INT32": 4}[self.value]

    @classmethod
    def parse(cls, text: str | DataType) -> DataType:
        if isinstance(text, DataType):
            return text
        aliases = {
            "FP32": "FP32",
            "FLOAT": "FP32",
            "FLOAT32": "FP32",
            "FP16": "FP16",
            "HALF": "FP16",
            "FLOAT16": "FP16",
            "BF16": "BF16",
            "BFP16": "BF16",
            "BFLOAT16": "BF16",
            "FP64": "FP64",
            "DOUBLE": "FP64",
            "FLOAT64": "FP64",
            "INT32": "INT32",
        }
        key = str(text).upper()
        if key not in aliases:
            raise bad("dtype", text, "expected fp32, fp16, bf16 (fp64 and int32 for reductions)")
        return cls(aliases[key])


_ITEMSIZE = {"FP32": 4, "FP16": 2, "BF16": 2, "FP64": 8, "INT32": 4}  # DataType.storage's itemsize

LAYOUTS_2D = ("NCHW", "NHWC")
LAYOUTS_3D = ("NCDHW", "NDHWC")


def packed_strides(lens: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Strides (in elements, in logical N,C,(D),H,W order) of a packed tensor in ``layout``."""
    logical = "NCDHW" if len(lens) == 5 else "NCHW"
    if sorted(layout) != sorted(logical) or len(layout) != len(lens):
        raise bad("layout", layout, f"not a layout of a {len(lens)}-d tensor")
    strides = {}
    step = 1
    for axis in reversed(layout):
        strides[axis] = step
        step *= lens[logical.index(axis)]
    return tuple(strides[axis] for axis in logical)


def _layout_with(lens: tuple[int, ...], strides: tuple[int, ...], label: str | None) -> str:
    """The layout of a tensor given its strides: a packed layout's name, else STRIDED. A ``label``
    that contradicts the strides is BadParm (a mislabelled tensor once shared a packed one's
    kernels and wrote past its buffer)."""
    if label is not None and packed_strides(lens, label) == strides:
        return label
    for layout in LAYOUTS_3D if len(lens) == 5 else LAYOUTS_2D:
        if packed_strides(lens, layout) == strides:
            if label is not None:
                raise bad("layout", label, f"strides {strides} are those of a packed {layout} tensor")
            return layout
    if label is not None:
        logical = "NCDHW" if len(lens) == 5 else "NCHW"
        ordered = [strides[logical.index(a)] for a in label if lens[logical.index(a)] > 1]
        if any(a < b for a, b in zip(ordered, ordered[1:])):
            raise bad("layout", label, f"strides {strides} do not follow its axis order")
    return "STRIDED"


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float -> bf16 bits (uint16), round to nearest even, NaN kept NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    out = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if np.any(nan):
        out = np.where(nan, np.uint16(0x7FC0), out)
    return out


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_storage(values: np.ndarray, dtype: DataType) -> np.ndarray:
    """Real values -> the stored representation of ``dtype``."""
    if dtype is DataType.BF16:
        return to_bf16_bits(np.asarray(values, dtype=np.float32))
    if dtype is DataType.INT32:
        values = np.asarray(values)
        return np.where(np.isfinite(values), values, -1).astype(np.int32)
    return np.asarray(values).astype(dtype.storage)


def from_storage(stored: np.ndarray, dtype: DataType) -> np.ndarray:
    """The stored representation -> float32 values (float64 for FP64)."""
    if dtype is DataType.BF16:
        return from_bf16_bits(stored)
    if dtype is DataType.FP64:
        return np.asarray(stored).astype(np.float64)
    return np.asarray(stored).astype(np.float32)


@dataclass(frozen=True)
class TensorDesc:
    """A tensor: dtype, lens in logical order (N, C, [D,] H, W) and strides in elements.

    Give ``layout`` (packed), explicit ``strides``, or both; with neither, the tensor is packed
    NCHW / NCDHW. ``layout`` is derived from the strides: the packed layout they describe, else
    ``STRIDED`` (its key then carries the strides). A label given with strides must agree with
    them: the packed layout they describe, or an axis order the strides follow (a padded tensor).
    """

    dtype: DataType
    lens: tuple[int, ...]
    strides: tuple[int, ...] = field(default=())
    layout: str = ""

    def __init__(self, dtype: DataType | str, lens, strides=None, layout: str | None = None):
        dtype = DataType.parse(dtype)
        lens = int_tuple("lens", lens, (4, 5))
        for name, value in zip("NCDHW" if len(lens) == 5 else "NCHW", lens):
            if value <= 0:
                raise bad(f"lens[{name}]", value, "must be positive")
        if layout is not None and not isinstance(layout, str):
            raise bad("layout", layout, "expected a layout name such as NCHW or NHWC")
        valid = LAYOUTS_3D if len(lens) == 5 else LAYOUTS_2D
        label = layout.strip().upper() if layout else None
        if label is not None and label not in valid:
            raise bad("layout", layout, f"expected one of {', '.join(valid)} for a {len(lens)}-d tensor")
        given = strides is not None
        if given:
            strides = int_tuple("strides", strides, len(lens), 1, OFFSET_MAX)
            layout = _layout_with(lens, strides, label)
        else:
            layout = label or valid[0]
            strides = packed_strides(lens, layout)
        if math.prod(lens) > OFFSET_MAX:
            raise bad("lens", lens, f"more than {OFFSET_MAX} elements (the kernels count them in i64)")
        space = 1 + sum((n - 1) * s for n, s in zip(lens, strides))
        if space * dtype.itemsize > OFFSET_MAX:
            name, value = ("strides", strides) if given else ("lens", lens)
            raise bad(name, value, f"the tensor spans more than {OFFSET_MAX} bytes (i64 offsets)")
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "lens", lens)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "layout", layout)
        # what cached_property would keep (not fields), set here: a first run reads them for every
        # tensor several times, and cached_property takes a lock at each first read (Python 3.11)
        self.__dict__["element_space"] = space
        self.__dict__["nbytes"] = space * dtype.itemsize

    @property
    def spatial_dims(self) -> int:
        return len(self.lens) - 2

    @property
    def packed(self) -> bool:
        return self.layout != "STRIDED"

    @property
    def element_count(self) -> int:
        return math.prod(self.lens)

    @functools.cached_property
    def element_space(self) -> int:
        """Number of elements a buffer must hold: the highest offset plus one (computed once: a
        first run reads it for every tensor several times)."""
        return 1 + sum((n - 1) * s for n, s in zip(self.lens, self.strides))

    @functools.cached_property
    def nbytes(self) -> int:
        return self.element_space * self.dtype.itemsize

    def strides5(self) -> tuple[int, int, int, int, int]:
        """Strides in N,C,D,H,W order, D inserted (stride 0) for a 2-d tensor."""
        s = self.strides
        return s if len(s) == 5 else (s[0], s[1], 0, s[2], s[3])

    def lens5(self) -> tuple[int, int, int, int, int]:
        n = self.lens
        return n if len(n) == 5 else (n[0], n[1], 1, n[2], n[3])

    def key(self) -> str:
        """Layout name, or the explicit strides when not packed."""
        return self.layout if self.packed else "s" + ",".join(map(str, self.strides))
