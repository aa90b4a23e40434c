"""Pooling (MIOpen's miopenPooling*): PoolingMode, IndexType, IndexMode, PoolingDesc, IndexDesc and
PoolingProblem.

Forward reads x and writes y, and for max pooling (with ``save_index``) the index workspace that
backward reads: one unsigned integer per output element, either the position of the maximum inside
its window (``IndexMode.MASK``: fd*Y*X + fy*X + fx, counted from the window's unclipped start) or
in the image (``IndexMode.IMAGE``: d*H*W + h*W + w). Backward reads dy (and the index for max) and
writes dx. Windows are clipped to the image; average pooling divides by the clipped count
(``AVG``) or by the whole window (``AVG_INCLUSIVE``). 2-D or 3-D, any layout or strides.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

import numpy as np

from miopy.errors import bad
from miopy.problem.base import Problem
from miopy.problem.keys import desc_from_key, key_fields, match_key
from miopy.problem.passes import Pass, layouts_key
from miopy.tensor import DataType, TensorDesc, packed_strides


class PoolingMode(enum.Enum):
    """miopenPoolingMode_t: max (0), average excluding padding (1), including padding (2)."""

    MAX = "max"
    AVG = "avg"
    AVG_INCLUSIVE = "avg_in"

    @classmethod
    def parse(cls, value) -> PoolingMode:
        if isinstance(value, PoolingMode):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2:
            return list(cls)[value]
        key = str(value).strip().lower().replace("miopenpooling", "")
        key = {
            "max": "max",
            "avg": "avg",
            "average": "avg",
            "avg_in": "avg_in",
            "averageinclusive": "avg_in",
            "avg_inclusive": "avg_in",
        }.get(key)
        if key is None:
            raise bad("mode", value, "unknown pooling mode (expected max, avg or avg_in)")
        return cls(key)

    @property
    def code(self) -> int:
        return list(PoolingMode).index(self)


class IndexType(enum.Enum):
    """miopenIndexType_t: the integer type of the max-pooling index workspace."""

    UINT8 = "u8"
    UINT16 = "u16"
    UINT32 = "u32"
    UINT64 = "u64"

    @classmethod
    def parse(cls, value) -> IndexType:
        if isinstance(value, IndexType):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
            return list(cls)[value]
        key = str(value).strip().lower().replace("miopenindex", "")
        key = {"uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}.get(key, key)
        if key not in ("u8", "u16", "u32", "u64"):
            raise bad("index_type", value, "expected miopenIndexUint8, Uint16, Uint32 or Uint64")
        return cls(key)

    @property
    def code(self) -> int:
        return list(IndexType).index(self)

    @property
    def numpy(self) -> np.dtype:
        return np.dtype({"u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}[self.value])

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def max(self) -> int:
        return int(np.iinfo(self.numpy).max)

    @property
    def miopen_name(self) -> str:
        return "miopenIndex" + self.name.capitalize()


class IndexMode(enum.Enum):
    """miopenPoolingWorkspaceIndexMode_t: index inside the window (0) or in the image (1)."""

    MASK = "mask"
    IMAGE = "image"

    @classmethod
    def parse(cls, value) -> IndexMode:
        if isinstance(value, IndexMode):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
            return list(cls)[value]
        key = str(value).strip().lower().replace("miopenpoolingworkspaceindex", "")
        if key in ("0", "1"):
            return list(cls)[int(key)]
        if key not in ("mask", "image"):
            raise bad("index_mode", value, "expected mask (0, index inside the window) or image (1)")
        return cls(key)

    @property
    def code(self) -> int:
        return list(IndexMode).index(self)


PAD_MODES = ("default", "same", "valid")


def _ints(name: str, values, minimum: int, dims: int | None = None) -> tuple[int, ...]:
    if isinstance(values, int | np.integer):
        values = (values,) * (dims or 2)
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise bad(name, values, "expected a sequence of integers") from None
    if dims is not None and len(out) != dims:
        raise bad(name, values, f"expected {dims} values, one per spatial dimension")
    for v in out:
        if v < minimum:
            raise bad(name, values, f"every value must be >= {minimum}")
    return out


@dataclass(frozen=True)
class PoolingDesc:
    """miopenPoolingDescriptor: mode, window, strides, pads (2 or 3 values, D first), pad mode,
    and the index workspace's type and meaning."""

    mode: PoolingMode
    window: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    pad_mode: str = "default"
    index_type: IndexType = IndexType.UINT8
    index_mode: IndexMode = IndexMode.MASK

    def __init__(
        self,
        mode="max",
        window=(3, 3),
        strides=None,
        pads=None,
        pad_mode: str = "default",
        index_type="u8",
        index_mode="mask",
    ):
        window = _ints("window", window, 1)
        dims = len(window)
        if dims not in (2, 3):
            raise bad("window", window, "expected 2 or 3 values (2-d or 3-d pooling)")
        strides = _ints("strides", strides if strides is not None else (1,) * dims, 1, dims)
        pads = _ints("pads", pads if pads is not None else (0,) * dims, 0, dims)
        pad_mode = str(pad_mode).lower()
        if pad_mode not in PAD_MODES:
            raise bad("pad_mode", pad_mode, "expected default, same or valid")
        if pad_mode != "default":
            pads = (0,) * dims  # same and valid derive the pads from the input
        else:
            for p, w in zip(pads, window):
                if p >= w:
                    raise bad("pads", pads, f"each pad must be smaller than its window {window}")
        for name, value in (
            ("mode", PoolingMode.parse(mode)),
            ("window", window),
            ("strides", strides),
            ("pads", pads),
            ("pad_mode", pad_mode),
            ("index_type", IndexType.parse(index_type)),
            ("index_mode", IndexMode.parse(index_mode)),
        ):
            object.__setattr__(self, name, value)

    @property
    def spatial_dims(self) -> int:
        return len(self.window)

    def output(self, spatial: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(output lens, resolved low-side pads) for input spatial lens (D first when 3-d).
        ``same`` and ``valid`` replace the given pads, as MIOpenDriver's reference does."""
        out, pads = [], []
        for axis, size, k, s, p in zip("DHW"[-len(spatial) :], spatial, self.window, self.strides, self.pads):
            if self.pad_mode == "same":
                o, p = -(-size // s), max(k - (size % s or s), 0) // 2
            elif self.pad_mode == "valid":
                if size < k:
                    raise bad(f"window[{axis}]", k, f"larger than the input ({size})")
                o, p = -(-(size - k + 1) // s), 0
            else:
                if size + 2 * p < k:
                    raise bad(f"window[{axis}]", k, f"larger than the padded input ({size} + 2*{p})")
                o = (size + 2 * p - k) // s + 1
            out.append(o)
            pads.append(p)
        return tuple(out), tuple(pads)


@dataclass(frozen=True)
class IndexDesc:
    """The max-pooling index workspace: y's lens, y's layout when packed (else packed NC(D)HW)."""

    index_type: IndexType
    lens: tuple[int, ...]
    strides: tuple[int, ...]
    layout: str

    @classmethod
    def for_output(cls, y: TensorDesc, index_type: IndexType) -> IndexDesc:
        layout = y.layout if y.packed else ("NCDHW" if len(y.lens) == 5 else "NCHW")
        return cls(index_type, y.lens, packed_strides(y.lens, layout), layout)

    packed = True

    @property
    def array_dtypes(self) -> tuple[str, ...]:
        """The array types that may hold it (miopy.arrays checks a user's array against these)."""
        return (self.index_type.numpy.name,)

    @property
    def type_name(self) -> str:
        return self.index_type.miopen_name

    @property
    def element_count(self) -> int:
        return math.prod(self.lens)

    @property
    def element_space(self) -> int:
        return self.element_count

    @property
    def nbytes(self) -> int:
        return self.element_count * self.index_type.itemsize

    def strides5(self) -> tuple[int, ...]:
        s = self.strides
        return s if len(s) == 5 else (s[0], s[1], 0, s[2], s[3])

    def lens5(self) -> tuple[int, ...]:
        n = self.lens
        return n if len(n) == 5 else (n[0], n[1], 1, n[2], n[3])

    def key(self) -> str:
        return self.layout


@dataclass(frozen=True)
class PoolingProblem(Problem):
    """One pooling call. Forward: x -> y (+ index for max with ``save_index``); backward:
    dy (+ index for max) -> dx. ``x``/``y`` are the input-side and output-side descriptors
    (dx and dy in backward); ``pads`` are resolved (pad mode applied)."""

    primitive = "pool"
    log_name = "Pooling"

    desc: PoolingDesc
    x: TensorDesc
    y: TensorDesc
    direction: Pass
    save_index: bool
    pads: tuple[int, ...]

    def __init__(
        self,
        desc: PoolingDesc,
        x: TensorDesc,
        y: TensorDesc,
        direction: Pass | str = Pass.FORWARD,
        save_index: bool = True,
    ):
        direction = Pass.parse(direction)
        xn, yn = ("x", "y") if direction is Pass.FORWARD else ("dx", "dy")
        if not isinstance(desc, PoolingDesc):
            raise bad("desc", type(desc).__name__, "expected a PoolingDesc")
        for name, value in ((xn, x), (yn, y)):
            if not isinstance(value, TensorDesc):
                raise bad(name, type(value).__name__, "expected a TensorDesc")
        if x.spatial_dims != desc.spatial_dims:
            raise bad(
                f"{xn}.lens",
                x.lens,
                f"a {desc.spatial_dims}-d pooling needs a {desc.spatial_dims + 2}-d tensor",
            )
        lens, pads = desc.output(x.lens[2:])
        want = (*x.lens[:2], *lens)
        if y.lens != want:
            raise bad(f"{yn}.lens", y.lens, f"expected {want} for {xn}.lens {x.lens} and this pooling")
        if x.dtype != y.dtype:
            raise bad(f"{yn}.dtype", y.dtype.value, f"must equal {xn}.dtype {x.dtype.value}")
        if desc.mode is PoolingMode.MAX and (save_index or direction is Pass.BACKWARD):
            it = desc.index_type
            if desc.index_mode is IndexMode.MASK:
                need, what = math.prod(desc.window), f"window {desc.window}"
            else:
                need, what = math.prod(x.lens[2:]), f"image {x.lens[2:]}"
            if it.max < need:
                raise bad("index_type", it.miopen_name, f"too small for the {what} ({need} positions)")
        for name, value in (
            ("desc", desc),
            ("x", x),
            ("y", y),
            ("direction", direction),
            ("save_index", bool(save_index) or direction is Pass.BACKWARD),
            ("pads", pads),
        ):
            object.__setattr__(self, name, value)

    @classmethod
    def create(
        cls,
        desc: PoolingDesc,
        x: TensorDesc,
        direction: Pass | str = Pass.FORWARD,
        y_layout: str | None = None,
        y_strides=None,
        save_index: bool = True,
    ) -> PoolingProblem:
        """Derive y (dy) from x (dx): same dtype, x's layout unless told otherwise."""
        if not isinstance(x, TensorDesc):
            raise bad("x", type(x).__name__, "expected a TensorDesc")
        if not isinstance(desc, PoolingDesc):
            raise bad("desc", type(desc).__name__, "expected a PoolingDesc")
        if x.spatial_dims != desc.spatial_dims:
            raise bad(
                "x.lens", x.lens, f"a {desc.spatial_dims}-d pooling needs a {desc.spatial_dims + 2}-d tensor"
            )
        lens = (*x.lens[:2], *desc.output(x.lens[2:])[0])
        if y_strides is not None:
            y = TensorDesc(x.dtype, lens, strides=y_strides)
        else:
            y = TensorDesc(x.dtype, lens, layout=y_layout or (x.layout if x.packed else None))
        return cls(desc, x, y, direction, save_index)

    # ---- tensors ----------------------------------------------------------------------------------
    @property
    def uses_index(self) -> bool:
        return self.desc.mode is PoolingMode.MAX and self.save_index

    @property
    def index(self) -> IndexDesc | None:
        return IndexDesc.for_output(self.y, self.desc.index_type) if self.uses_index else None

    def tensors(self) -> dict:
        if self.direction is Pass.FORWARD:
            out = {"x": self.x, "y": self.y}
        else:
            out = {"dy": self.y, "dx": self.x}
        if self.uses_index:
            out["index"] = self.index
        return out

    @property
    def inputs(self) -> tuple[str, ...]:
        if self.direction is Pass.FORWARD:
            return ("x",)
        return ("dy", "index") if self.uses_index else ("dy",)

    @property
    def outputs(self) -> tuple[str, ...]:
        if self.direction is Pass.FORWARD:
            return ("y", "index") if self.uses_index else ("y",)
        return ("dx",)

    @property
    def dtype(self) -> DataType:
        return self.x.dtype

    @property
    def spatial_dims(self) -> int:
        return self.desc.spatial_dims

    def solver_view(self) -> PoolingProblem:
        return self

    # ---- keys -------------------------------------------------------------------------------------
    def _layouts(self) -> str:
        return layouts_key([self.x, self.y])

    def key(self) -> str:
        """``pool_max_3x3_s2x2_p1x1_32x64x112x112_NHWC_FP16_F_u8mask`` (+ ``_same``/``_valid``,
        ``_noindex`` for a forward that keeps no index)."""
        d = self.desc
        parts = [
            "pool",
            d.mode.value.replace("_", ""),
            "x".join(map(str, d.window)),
            "s" + "x".join(map(str, d.strides)),
            "p" + "x".join(map(str, d.pads)),
            "x".join(map(str, self.x.lens)),
            self._layouts(),
            self.dtype.value,
            self.direction.value,
        ]
        if d.mode is PoolingMode.MAX:
            parts.append(d.index_type.value + d.index_mode.value if self.save_index else "noindex")
        if d.pad_mode != "default":
            parts.append(d.pad_mode)
        return "_".join(parts)

    _KEY = re.compile(
        r"^pool_(?P<mode>max|avg|avgin)_(?P<win>[0-9x]+)_s(?P<s>[0-9x]+)_p(?P<p>[0-9x]+)_"
        r"(?P<lens>[0-9x]+)_(?P<lay>[^_]+)_(?P<dt>[A-Z0-9]+)_(?P<dir>[FB])"
        r"(?:_(?P<idx>u(?:8|16|32|64)(?:mask|image)|noindex))?(?:_(?P<pm>same|valid))?$"
    )

    @classmethod
    def parse(cls, key: str) -> PoolingProblem:
        what = "a pooling problem key"
        m = match_key(cls._KEY, key, what)
        if (m["mode"] == "max") != (m["idx"] is not None):
            raise bad("key", key, f"not {what}")
        with key_fields(key, what):
            idx = m["idx"] or "u8mask"
            save = idx != "noindex"
            itype, imode = ("u8", "mask") if not save else re.match(r"(u\d+)(\w+)", idx).groups()
            mode = {"max": "max", "avg": "avg", "avgin": "avg_in"}[m["mode"]]
            desc = PoolingDesc(
                mode,
                [int(v) for v in m["win"].split("x")],
                [int(v) for v in m["s"].split("x")],
                [int(v) for v in m["p"].split("x")],
                m["pm"] or "default",
                itype,
                imode,
            )
            lens = tuple(int(v) for v in m["lens"].split("x"))
            dtype = DataType.parse(m["dt"])
        lays = m["lay"].split(".") if "." in m["lay"] else [m["lay"]] * 2
        if len(lays) != 2:
            raise bad("key", key, "expected one layout or two (x.y)")
        x = desc_from_key(dtype, lens, lays[0])
        ylens = (*lens[:2], *desc.output(lens[2:])[0])
        return cls(desc, x, desc_from_key(dtype, ylens, lays[1]), m["dir"], save)

    def network_config(self) -> str:
        return self.key()

    # ---- counts -----------------------------------------------------------------------------------
    def flops(self) -> int:
        return self.y.element_count * math.prod(self.desc.window)

    def bytes(self) -> int:
        t = self.tensors()
        return sum(t[r].element_count * _itemsize(t[r]) for r in (*self.inputs, *self.outputs))

    def driver_args(self, solver_id: int | None = None) -> list[str]:
        """MIOpenDriver's ``pool`` flags (tensor string -W, -v stride H, -u stride W)."""
        sub = {"FP32": "pool", "FP16": "poolfp16", "BF16": "poolbfp16"}[self.dtype.value]
        d = self.desc
        x = self.x
        tensor = "x".join(map(str, x.lens)) + "," + (x.layout if x.packed else ",".join(map(str, x.strides)))
        args = [sub, "-W", tensor]
        if not (self.y.packed and self.y.layout == x.layout) or not x.packed:
            ys = ",".join(map(str, self.y.strides)) if not self.y.packed else self.y.layout
            args += ["-O", "x".join(map(str, self.y.lens)) + "," + ys]
        k, s, p = d.window, d.strides, d.pads
        args += ["-y", str(k[-2]), "-x", str(k[-1]), "-v", str(s[-2]), "-u", str(s[-1])]
        args += ["-p", str(p[-2]), "-q", str(p[-1])]
        if d.spatial_dims == 3:
            args += ["-Z", str(k[0]), "-s", str(s[0]), "-o", str(p[0])]
        args += ["-m", d.mode.value, "-z", d.pad_mode]
        if d.mode is PoolingMode.MAX:
            args += ["-M", str(d.index_mode.code), "-I", d.index_type.miopen_name]
        # MIOpenDriver keeps the index only when backward runs too (-F 0)
        forward_only = self.direction is Pass.FORWARD and not self.uses_index
        args += ["-F", "1" if forward_only else "0"]
        if solver_id is not None:
            args += ["-S", str(solver_id)]
        return args

    def __str__(self) -> str:
        return self.key()


def _itemsize(desc) -> int:
    return desc.index_type.itemsize if isinstance(desc, IndexDesc) else desc.dtype.itemsize


__all__ = ["IndexDesc", "IndexMode", "IndexType", "PoolingDesc", "PoolingMode", "PoolingProblem"]
