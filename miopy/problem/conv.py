"""Convolution: ConvDesc, Direction and ConvProblem (key, network config, flops, bytes, the driver
command line)."""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, replace

from miopy.checks import INDEX_MAX, int_tuple, int_value
from miopy.errors import MiopyError, bad
from miopy.problem.base import Problem
from miopy.tensor import DataType, TensorDesc

# miopy-driver subcommand of each data type, and -F of each direction
DRIVER_SUBCOMMAND = {DataType.FP32: "conv", DataType.FP16: "convfp16", DataType.BF16: "convbfp16"}


class Direction(enum.Enum):
    FORWARD = "F"
    BACKWARD_DATA = "B"
    BACKWARD_WEIGHTS = "W"

    @classmethod
    def parse(cls, value: str | Direction) -> Direction:
        if isinstance(value, Direction):
            return value
        names = {
            "F": "F",
            "FWD": "F",
            "FORWARD": "F",
            "B": "B",
            "BWD": "B",
            "BACKWARD_DATA": "B",
            "W": "W",
            "WRW": "W",
            "BACKWARD_WEIGHTS": "W",
        }
        key = str(value).upper()
        if key not in names:
            raise bad("direction", value, "expected forward, backward_data or backward_weights")
        return cls(names[key])

    @property
    def title(self) -> str:
        return {"F": "Forward", "B": "Backward Data", "W": "Backward Weights"}[self.value]


PAD_MODES = ("default", "same", "valid")
MODES = ("conv", "trans")


def _tuple(name: str, values, dims: int | None, minimum: int) -> tuple[int, ...]:
    return int_tuple(name, values, dims, minimum)


@dataclass(frozen=True)
class ConvDesc:
    """Convolution parameters; the number of spatial dims is ``len(pads)`` (2 or 3)."""

    pads: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int = 1
    mode: str = "conv"
    trans_output_pads: tuple[int, ...] = ()
    pad_mode: str = "default"

    def __init__(
        self,
        pads=(0, 0),
        strides=None,
        dilations=None,
        groups: int = 1,
        mode: str = "conv",
        trans_output_pads=None,
        pad_mode: str = "default",
    ):
        pads = _tuple("pads", pads, None, 0)
        dims = len(pads)
        if dims not in (2, 3):
            raise bad("pads", pads, "expected 2 or 3 values (2-d or 3-d convolution)")
        strides = _tuple("strides", strides if strides is not None else (1,) * dims, dims, 1)
        dilations = _tuple("dilations", dilations if dilations is not None else (1,) * dims, dims, 1)
        opads = _tuple(
            "trans_output_pads", trans_output_pads if trans_output_pads is not None else (0,) * dims, dims, 0
        )
        groups = int_value("groups", groups, 1)
        if not isinstance(mode, str):
            raise bad("mode", mode, "expected conv or trans")
        if not isinstance(pad_mode, str):
            raise bad("pad_mode", pad_mode, "expected default, same or valid")
        mode = str(mode).lower()
        if mode not in MODES:
            raise bad("mode", mode, "expected conv or trans")
        pad_mode = str(pad_mode).lower()
        if pad_mode not in PAD_MODES:
            raise bad("pad_mode", pad_mode, "expected default, same or valid")
        if mode == "conv" and any(opads):
            raise bad("trans_output_pads", opads, "only a transposed convolution has output padding")
        for o, s, d in zip(opads, strides, dilations):
            if o >= max(s, d):
                raise bad("trans_output_pads", opads, "each must be smaller than its stride or dilation")
        for name, value in (
            ("pads", pads),
            ("strides", strides),
            ("dilations", dilations),
            ("groups", groups),
            ("mode", mode),
            ("trans_output_pads", opads),
            ("pad_mode", pad_mode),
        ):
            object.__setattr__(self, name, value)

    @property
    def spatial_dims(self) -> int:
        return len(self.pads)


def _out_len(
    size: int, fil: int, pad: int, stride: int, dil: int, mode: str, pad_mode: str, opad: int
) -> tuple[int, int]:
    """(output length, low-side pad) of one spatial axis."""
    span = dil * (fil - 1) + 1
    if mode == "conv":
        if pad_mode == "same":
            out = -(-size // stride)
            return out, max((out - 1) * stride + span - size, 0) // 2
        if pad_mode == "valid":
            return (size - span) // stride + 1 if size >= span else 0, 0
        return (size + 2 * pad - span) // stride + 1 if size + 2 * pad >= span else 0, pad
    if pad_mode == "same":
        out = size * stride
        return out, max((size - 1) * stride + span - out, 0) // 2
    if pad_mode == "valid":
        return (size - 1) * stride + span, 0
    return (size - 1) * stride + span - 2 * pad + opad, pad


_AXES = {2: "HW", 3: "DHW"}


@dataclass(frozen=True)
class ConvProblem(Problem):
    """One convolution in one direction: x (input), w (weights), y (output) and the ConvDesc.

    Tensor roles are the same in every direction, as in MIOpen's Find 2.0: backward data reads
    dy from ``y`` and writes dx to ``x``; backward weights reads ``x`` and ``y`` and writes ``w``.
    Lens are given in logical order: x (N, C, [D,] H, W); w (K, C/G, ...) for conv and
    (C, K/G, ...) for trans, as in MIOpen; y (N, K, ...).
    """

    primitive = "conv"
    log_name = "Convolution"

    x: TensorDesc
    w: TensorDesc
    y: TensorDesc
    conv: ConvDesc
    direction: Direction
    pads: tuple[int, ...]  # resolved low-side pads (pad mode applied)

    @classmethod
    def create(
        cls,
        x: TensorDesc,
        w: TensorDesc,
        conv: ConvDesc,
        direction: Direction | str,
        y_layout: str | None = None,
        y_strides=None,
    ) -> ConvProblem:
        """Build the problem, deriving y's lens from x, w and conv (y takes x's layout by default)."""
        lens, pads = cls._output(x, w, conv)
        if y_strides is not None:
            y = TensorDesc(x.dtype, lens, strides=y_strides)
        else:
            y = TensorDesc(x.dtype, lens, layout=y_layout or (x.layout if x.packed else None))
        return cls(x, w, y, conv, Direction.parse(direction), pads)

    def __init__(
        self,
        x: TensorDesc,
        w: TensorDesc,
        y: TensorDesc,
        conv: ConvDesc,
        direction: Direction | str,
        pads=None,
    ):
        lens, resolved = self._output(x, w, conv)
        if not isinstance(y, TensorDesc):
            raise bad("y", type(y).__name__, "expected a TensorDesc")
        if tuple(y.lens) != lens:
            raise bad("y.lens", y.lens, f"expected {lens} for this input, filter and convolution")
        if pads is not None and tuple(pads) != resolved:
            raise bad("pads", pads, f"expected {resolved}")
        if x.dtype not in (DataType.FP32, DataType.FP16, DataType.BF16):
            raise bad("dtype", x.dtype.value, "convolution takes fp32, fp16 or bf16")
        if not (x.dtype == w.dtype == y.dtype):
            raise bad(
                "dtype", (x.dtype.value, w.dtype.value, y.dtype.value), "x, w and y must share one data type"
            )
        for name, value in (
            ("x", x),
            ("w", w),
            ("y", y),
            ("conv", conv),
            ("direction", Direction.parse(direction)),
            ("pads", resolved),
        ):
            object.__setattr__(self, name, value)

    @staticmethod
    def _output(x: TensorDesc, w: TensorDesc, conv: ConvDesc) -> tuple[tuple[int, ...], tuple[int, ...]]:
        for name, value, kind in (("x", x, TensorDesc), ("w", w, TensorDesc), ("conv", conv, ConvDesc)):
            if not isinstance(value, kind):
                raise bad(name, type(value).__name__, f"expected a {kind.__name__}")
        dims = conv.spatial_dims
        if x.spatial_dims != dims:
            raise bad("x.lens", x.lens, f"a {dims}-d convolution needs a {dims + 2}-d input")
        if w.spatial_dims != dims:
            raise bad("w.lens", w.lens, f"a {dims}-d convolution needs a {dims + 2}-d filter")
        n, c = x.lens[:2]
        g = conv.groups
        if c % g:
            raise bad("groups", g, f"input channels C={c} are not divisible by it")
        if conv.mode == "conv":
            k, wc = w.lens[:2]
            if wc * g != c:
                raise bad("w.lens", w.lens, f"filter channels {wc} x groups {g} != input channels {c}")
            if k % g:
                raise bad("groups", g, f"output channels K={k} are not divisible by it")
        else:
            wc, kg = w.lens[:2]
            if wc != c:
                raise bad("w.lens", w.lens, f"a transposed filter's first dim must equal C={c}")
            k = kg * g
        out, pads = [], []
        for i, axis in enumerate(_AXES[dims]):
            size, fil = x.lens[2 + i], w.lens[2 + i]
            o, p = _out_len(
                size,
                fil,
                conv.pads[i],
                conv.strides[i],
                conv.dilations[i],
                conv.mode,
                conv.pad_mode,
                conv.trans_output_pads[i],
            )
            span = conv.dilations[i] * (fil - 1) + 1
            reach = max(size, o) + 2 * conv.pads[i] + (max(size, o) - 1) * conv.strides[i] + span
            if reach > INDEX_MAX:
                raise bad(
                    f"in_{axis.lower()}",
                    size,
                    f"with filter {fil}, pad {conv.pads[i]}, stride {conv.strides[i]} and dilation "
                    f"{conv.dilations[i]} the {axis} indices exceed {INDEX_MAX} (the kernels' int32)",
                )
            if o <= 0:
                raise bad(
                    f"fil_{axis.lower()}",
                    fil,
                    f"filter (dilation {conv.dilations[i]}) is larger than the padded input "
                    f"({size} + 2*{conv.pads[i]})",
                )
            out.append(o)
            pads.append(p)
        return (n, k, *out), tuple(pads)

    # ---- views -------------------------------------------------------------------------------
    @property
    def spatial_dims(self) -> int:
        return self.conv.spatial_dims

    @property
    def dtype(self) -> DataType:
        return self.x.dtype

    @property
    def is_transposed(self) -> bool:
        return self.conv.mode == "trans"

    def conv_view(self) -> ConvProblem:
        """The same work as a plain convolution: what solvers see.

        A transposed convolution is the opposite direction of the convolution whose input is the
        transposed output (MIOpen swaps x and y the same way); tensor roles map with ``roles``.
        """
        if not self.is_transposed:
            if self.conv.pad_mode == "default":
                return self
            return _raw(self.x, self.w, self.y, replace_pads(self.conv, self.pads), self.direction, self.pads)
        swap = {
            Direction.FORWARD: Direction.BACKWARD_DATA,
            Direction.BACKWARD_DATA: Direction.FORWARD,
            Direction.BACKWARD_WEIGHTS: Direction.BACKWARD_WEIGHTS,
        }[self.direction]
        conv = ConvDesc(self.pads, self.conv.strides, self.conv.dilations, self.conv.groups)
        return _raw(self.y, self.w, self.x, conv, swap, self.pads)

    @property
    def roles(self) -> dict[str, str]:
        """conv_view role -> this problem's role."""
        return {"x": "y", "w": "w", "y": "x"} if self.is_transposed else {"x": "x", "w": "w", "y": "y"}

    def solver_view(self) -> ConvProblem:
        return self.conv_view()

    def view_roles(self) -> dict[str, str]:
        return self.roles

    def tensors(self) -> dict[str, TensorDesc]:
        return {"x": self.x, "w": self.w, "y": self.y}

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.input_roles

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.output_role,)

    # ---- keys -------------------------------------------------------------------------------
    def _layouts(self) -> str:
        keys = [self.x.key(), self.w.key(), self.y.key()]
        return keys[0] if len(set(keys)) == 1 and self.x.packed else ".".join(keys)

    def key(self) -> str:
        """Canonical key (MIOpen's find-db style, extended): ``parse(key).key() == key``."""
        c = self.conv
        sp = slice(2, None)
        fields = [
            str(self.x.lens[1]),
            *map(str, self.x.lens[sp]),
            "x".join(map(str, self.w.lens[sp])),
            str(self.y.lens[1]),
            *map(str, self.y.lens[sp]),
            str(self.x.lens[0]),
            "x".join(map(str, self.pads)),
            "x".join(map(str, c.strides)),
            "x".join(map(str, c.dilations)),
            "0",
            self._layouts(),
            self.dtype.value,
            self.direction.value,
        ]
        key = "-".join(fields)
        if c.groups != 1:
            key += f"_g{c.groups}"
        if c.mode == "trans":
            key += "_trans" + "x".join(map(str, c.trans_output_pads))
        if c.pad_mode != "default":
            key += "_" + c.pad_mode
        return key

    _KEY = re.compile(r"^(?P<body>[^_]+)(?P<suffix>(_[a-z0-9x]+)*)$")

    @classmethod
    def parse(cls, key: str) -> ConvProblem:
        """Inverse of ``key()``; a malformed key raises BadParm naming the key."""
        if not isinstance(key, str):
            raise bad("key", key, "expected a string")
        try:
            return cls._parse(key)
        except MiopyError as exc:
            raise bad("key", key, f"not a valid convolution problem key ({exc})") from None
        except (ValueError, TypeError, OverflowError, IndexError, StopIteration, ZeroDivisionError):
            raise bad("key", key, "not a convolution problem key") from None

    @classmethod
    def _parse(cls, key: str) -> ConvProblem:
        m = cls._KEY.match(key.strip())
        if not m:
            raise ValueError("pattern")
        parts = m.group("body").split("-")
        dims = 3 if len(parts) == 17 else 2
        if len(parts) != 11 + 2 * dims:
            raise ValueError("field count")
        it = iter(parts)
        c = _num(next(it))
        in_sp = [_num(next(it)) for _ in range(dims)]
        fil = _nums(next(it))
        k = _num(next(it))
        out_sp = [_num(next(it)) for _ in range(dims)]
        n = _num(next(it))
        pads, strides, dils = _nums(next(it)), _nums(next(it)), _nums(next(it))
        if next(it) != "0":
            raise ValueError("bias")
        layouts = next(it)
        dtype = DataType.parse(next(it))
        direction = Direction.parse(next(it))
        groups, mode, opads, pad_mode = 1, "conv", None, "default"
        for part in filter(None, m.group("suffix").split("_")):
            if part.startswith("g"):
                groups = _num(part[1:])
            elif part.startswith("trans"):
                mode, opads = "trans", _nums(part[5:])
            elif part in ("same", "valid"):
                pad_mode = part
            else:
                raise ValueError(part)
        conv = ConvDesc(pads, strides, dils, groups, mode, opads, pad_mode)
        lays = layouts.split(".") if "." in layouts else [layouts] * 3
        if len(lays) != 3:
            raise bad("layouts", layouts, "expected one layout or three (x.w.y)")
        wlens = (k, c // groups, *fil) if mode == "conv" else (c, k // groups, *fil)
        x = _desc(dtype, (n, c, *in_sp), lays[0])
        w = _desc(dtype, wlens, lays[1])
        ylens, _ = cls._output(x, w, conv)
        if ylens[1:] != (k, *out_sp):
            raise bad("output", (k, *out_sp), f"expected {ylens[1:]} for this input, filter and convolution")
        return cls(x, w, _desc(dtype, ylens, lays[2]), conv, direction)

    def invoker_key(self) -> str:
        """The network config plus every tensor's full strides: all a kernel is compiled or bound
        for, so that two problems sharing a cached invoker address memory identically."""
        strides = ";".join(",".join(map(str, d.strides)) for d in (self.x, self.w, self.y))
        return f"{self.network_config()}|{strides}"

    def network_config(self) -> str:
        """MIOpen-style network config: what an invoker depends on (a tensor that is not packed
        appears with its strides)."""
        c = self.conv
        sp = slice(2, None)
        fields = [
            self.x.lens[1],
            *self.x.lens[sp],
            *self.w.lens[sp],
            self.y.lens[1],
            *self.y.lens[sp],
            self.x.lens[0],
            self._layouts(),
            self.dtype.value,
            *self.pads,
            *c.strides,
            *c.dilations,
            c.groups,
            self.direction.value,
        ]
        cfg = "x".join(map(str, fields))
        if c.mode == "trans":
            cfg += "xT" + "x".join(map(str, c.trans_output_pads))
        return cfg

    # ---- counts ------------------------------------------------------------------------------
    def flops(self) -> int:
        v = self.conv_view()
        return 2 * v.y.element_count * (v.x.lens[1] // v.conv.groups) * math.prod(v.w.lens[2:])

    def bytes_read(self) -> int:
        size = {"x": self.x.nbytes, "w": self.w.nbytes, "y": self.y.nbytes}
        reads = {
            Direction.FORWARD: ("x", "w"),
            Direction.BACKWARD_DATA: ("y", "w"),
            Direction.BACKWARD_WEIGHTS: ("x", "y"),
        }[self.direction]
        return sum(size[r] for r in reads)

    def bytes_written(self) -> int:
        return {"x": self.x.nbytes, "w": self.w.nbytes, "y": self.y.nbytes}[self.output_role]

    def bytes(self) -> int:
        return self.bytes_read() + self.bytes_written()

    @property
    def output_role(self) -> str:
        return {Direction.FORWARD: "y", Direction.BACKWARD_DATA: "x", Direction.BACKWARD_WEIGHTS: "w"}[
            self.direction
        ]

    @property
    def input_roles(self) -> tuple[str, str]:
        return tuple(r for r in ("x", "w", "y") if r != self.output_role)  # type: ignore[return-value]

    # ---- reproduction ------------------------------------------------------------------------
    def driver_args(self, solver_id: int | None = None) -> list[str]:
        """``[subcommand, flags...]`` of the miopy-driver command running this problem.

        2-D problems use MIOpen's short flags; the depth flags of 3-D ones are long (as MIOpen
        logs them). Pads are the descriptor's, with ``-z`` when the pad mode is not default.
        Layouts are given when not the default; a strided (non-packed) tensor cannot be written
        as flags and is logged with the default layout."""
        c = self.conv
        x, w, y = self.x, self.w, self.y
        three = self.spatial_dims == 3

        def axes(values) -> dict[str, int]:
            return dict(zip("dhw" if three else "hw", values))

        ins, fil, pads = axes(x.lens[2:]), axes(w.lens[2:]), axes(c.pads)
        strides, dils, opads = axes(c.strides), axes(c.dilations), axes(c.trans_output_pads)
        args = [DRIVER_SUBCOMMAND[self.dtype], "-n", x.lens[0], "-c", x.lens[1]]
        if three:
            args += ["--in_d", ins["d"]]
        args += ["-H", ins["h"], "-W", ins["w"], "-k", y.lens[1]]
        if three:
            args += ["--fil_d", fil["d"]]
        args += ["-y", fil["h"], "-x", fil["w"]]
        if three:
            args += ["--pad_d", pads["d"]]
        args += ["-p", pads["h"], "-q", pads["w"]]
        if three:
            args += ["--conv_stride_d", strides["d"]]
        args += ["-u", strides["h"], "-v", strides["w"]]
        if three:
            args += ["--dilation_d", dils["d"]]
        args += ["-l", dils["h"], "-j", dils["w"]]
        if c.mode == "trans":
            if three:
                args += ["--trans_output_pad_d", opads["d"]]
            args += ["-Y", opads["h"], "-X", opads["w"]]
        if three:
            args += ["--spatial_dim", 3]
        default = "NCDHW" if three else "NCHW"
        for flag, desc in (("--in_layout", x), ("--out_layout", y), ("--fil_layout", w)):
            if desc.packed and desc.layout != default:
                args += [flag, desc.layout]
        args += ["-m", c.mode, "-g", c.groups]
        if c.pad_mode != "default":
            args += ["-z", c.pad_mode]
        args += ["-F", _FORW[self.direction], "-t", 1]
        if solver_id is not None:
            args += ["-S", solver_id]
        return [str(a) for a in args]

    def __str__(self) -> str:
        return self.key()


def _num(text: str) -> int:
    """A key's number: ASCII digits only (int() would also take "+1", " 1", "1_0", "٣")."""
    if not re.fullmatch(r"[0-9]{1,19}", text):
        raise ValueError(text)
    return int(text)


def _nums(text: str) -> list[int]:
    return [_num(v) for v in text.split("x")]


_FORW = {Direction.FORWARD: "1", Direction.BACKWARD_DATA: "2", Direction.BACKWARD_WEIGHTS: "4"}


def _desc(dtype: DataType, lens, layout: str) -> TensorDesc:
    if layout.startswith("s"):
        return TensorDesc(dtype, lens, strides=[_num(v) for v in layout[1:].split(",")])
    return TensorDesc(dtype, lens, layout=layout)


def replace_pads(conv: ConvDesc, pads) -> ConvDesc:
    return ConvDesc(pads, conv.strides, conv.dilations, conv.groups, conv.mode, conv.trans_output_pads)


def _raw(x, w, y, conv, direction, pads) -> ConvProblem:
    """A problem whose shapes are taken as given (the pads are already resolved)."""
    problem = object.__new__(ConvProblem)
    for name, value in (
        ("x", x),
        ("w", w),
        ("y", y),
        ("conv", conv),
        ("direction", direction),
        ("pads", tuple(pads)),
    ):
        object.__setattr__(problem, name, value)
    return problem


__all__ = ["DRIVER_SUBCOMMAND", "ConvDesc", "ConvProblem", "Direction", "replace"]
