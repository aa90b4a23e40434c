"""Activation (MIOpen's miopenActivation*): ActivationMode, ActivationDesc and ActivationProblem.

Forward reads x and writes y = f(x); backward reads x, y and dy and writes dx. Every tensor has
the same lens; each may have its own layout or strides. alpha, beta and gamma mean what they mean
in MIOpen (see ``ActivationMode``); they are run-time kernel arguments.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

from miopy.errors import bad
from miopy.problem.base import Problem
from miopy.problem.keys import key_fields, match_key, role_descs
from miopy.problem.passes import Pass, float_text, layouts_key
from miopy.tensor import DataType, TensorDesc


class ActivationMode(enum.IntEnum):
    """miopenActivationMode_t. f(x) and the gradient MIOpen computes:

    PASTHRU x | dy;  LOGISTIC 1/(1+e^-x) | dy*y*(1-y);  TANH beta*tanh(alpha*x) |
    dy*alpha*(beta - y^2/beta);  RELU max(0,x) | x>0 ? dy : 0;  SOFTRELU log(1+e^x) |
    dy*e/(1+e) with e = exp(min(x, 50));  ABS |x| | dy*(x>0 ? 1 : -1);  POWER v = alpha+beta*x,
    v<=0 ? 0 : v^gamma | v<=0 ? 0 : gamma*beta*y/v (dy is not used, as in MIOpen);
    CLIPPED_RELU min(alpha, max(0,x)) | 0<x<alpha ? dy : 0;  LEAKY_RELU x>0 ? x : alpha*x |
    dy*(x>0 ? 1 : alpha);  ELU x>0 ? x : alpha*(e^x-1) | dy*(x>0 ? 1 : y+alpha).
    """

    PASTHRU = 0
    LOGISTIC = 1
    TANH = 2
    RELU = 3
    SOFTRELU = 4
    ABS = 5
    POWER = 6
    CLIPPED_RELU = 7
    LEAKY_RELU = 8
    ELU = 9

    @classmethod
    def parse(cls, value: int | str | ActivationMode) -> ActivationMode:
        if isinstance(value, ActivationMode):
            return value
        if isinstance(value, bool):
            raise bad("mode", value, "expected an activation mode name or code 0-9")
        if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
            code = int(value)
            if code not in cls._value2member_map_:
                raise bad("mode", value, "unknown activation mode (codes 0-9)")
            return cls(code)
        if isinstance(value, str):
            name = value.strip().upper().replace("-", "_")
            name = {
                "PASSTHRU": "PASTHRU",
                "IDENTITY": "PASTHRU",
                "SIGMOID": "LOGISTIC",
                "CLIPPEDRELU": "CLIPPED_RELU",
                "LEAKYRELU": "LEAKY_RELU",
                "BNLL": "SOFTRELU",
                "SOFTPLUS": "SOFTRELU",
            }.get(name.replace("MIOPENACTIVATION", ""), name.replace("MIOPENACTIVATION", ""))
            if name in cls.__members__:
                return cls[name]
        raise bad("mode", value, f"unknown activation mode (one of {', '.join(m.name for m in cls)})")

    @property
    def backward_reads(self) -> tuple[str, ...]:
        """The roles the gradient of this mode reads."""
        return _BWD_READS[self]


_BWD_READS = {
    ActivationMode.PASTHRU: ("dy",),
    ActivationMode.LOGISTIC: ("y", "dy"),
    ActivationMode.TANH: ("y", "dy"),
    ActivationMode.RELU: ("x", "dy"),
    ActivationMode.SOFTRELU: ("x", "dy"),
    ActivationMode.ABS: ("x", "dy"),
    ActivationMode.POWER: ("x", "y"),
    ActivationMode.CLIPPED_RELU: ("x", "dy"),
    ActivationMode.LEAKY_RELU: ("x", "dy"),
    ActivationMode.ELU: ("x", "y", "dy"),
}


def _finite(name: str, value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise bad(name, value, "expected a number") from None
    if not math.isfinite(out):
        raise bad(name, value, "must be finite")
    return out


@dataclass(frozen=True)
class ActivationDesc:
    """miopenActivationDescriptor: the mode and its alpha, beta, gamma."""

    mode: ActivationMode
    alpha: float = 1.0
    beta: float = 1.0
    gamma: float = 1.0

    def __init__(self, mode, alpha: float = 1.0, beta: float = 1.0, gamma: float = 1.0):
        object.__setattr__(self, "mode", ActivationMode.parse(mode))
        object.__setattr__(self, "alpha", _finite("alpha", alpha))
        object.__setattr__(self, "beta", _finite("beta", beta))
        object.__setattr__(self, "gamma", _finite("gamma", gamma))


_FWD_ROLES = ("x", "y")
_BWD_ROLES = ("x", "y", "dy", "dx")


@dataclass(frozen=True)
class ActivationProblem(Problem):
    """One activation call. Forward: {x, y}; backward: {x, y, dy, dx} (MIOpen's
    miopenActivationBackward(yDesc, y, dyDesc, dy, xDesc, x, dxDesc, dx))."""

    primitive = "activ"
    log_name = "Activation"

    desc: ActivationDesc
    direction: Pass
    descs: tuple[tuple[str, TensorDesc], ...]

    def __init__(self, desc: ActivationDesc, direction: Pass | str, **tensors: TensorDesc):
        if not isinstance(desc, ActivationDesc):
            raise bad("desc", type(desc).__name__, "expected an ActivationDesc")
        direction = Pass.parse(direction)
        roles = _FWD_ROLES if direction is Pass.FORWARD else _BWD_ROLES
        extra = sorted(set(tensors) - set(roles))
        if extra:
            raise bad(extra[0], "given", f"not a tensor of an activation {direction.title.lower()} pass")
        missing = [r for r in roles if tensors.get(r) is None]
        if missing:
            raise bad(missing[0], None, f"the {direction.title.lower()} pass needs {', '.join(roles)}")
        for role in roles:
            if not isinstance(tensors[role], TensorDesc):
                raise bad(role, type(tensors[role]).__name__, "expected a TensorDesc")
        first = tensors[roles[0]]
        for role in roles[1:]:
            t = tensors[role]
            if t.lens != first.lens:
                other = "dy" if role == "dx" else roles[0]
                ref = tensors[other]
                raise bad(f"{role}.lens", t.lens, f"must equal {other}.lens {ref.lens}")
            if t.dtype != first.dtype:
                raise bad(f"{role}.dtype", t.dtype.value, f"must equal {roles[0]}.dtype {first.dtype.value}")
        object.__setattr__(self, "desc", desc)
        object.__setattr__(self, "direction", direction)
        object.__setattr__(self, "descs", tuple((r, tensors[r]) for r in roles))

    @classmethod
    def create(
        cls,
        desc: ActivationDesc,
        x: TensorDesc,
        direction: Pass | str = Pass.FORWARD,
        y: TensorDesc | None = None,
        dy: TensorDesc | None = None,
        dx: TensorDesc | None = None,
    ) -> ActivationProblem:
        """Tensors left out take x's descriptor."""
        direction = Pass.parse(direction)
        if direction is Pass.FORWARD:
            if dy is not None or dx is not None:
                raise bad("dy" if dy is not None else "dx", "given", "a forward pass has no gradients")
            return cls(desc, direction, x=x, y=y or x)
        return cls(desc, direction, x=x, y=y or x, dy=dy or x, dx=dx or dy or x)

    # ---- tensors --------------------------------------------------------------------------------
    def tensors(self) -> dict[str, TensorDesc]:
        return dict(self.descs)

    def __getattr__(self, name: str):
        for role, desc in object.__getattribute__(self, "descs"):
            if role == name:
                return desc
        raise AttributeError(name)

    @property
    def inputs(self) -> tuple[str, ...]:
        if self.direction is Pass.FORWARD:
            return ("x",)
        return tuple(r for r in ("x", "y", "dy") if r in self.desc.mode.backward_reads)

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("y",) if self.direction is Pass.FORWARD else ("dx",)

    @property
    def dtype(self) -> DataType:
        return self.descs[0][1].dtype

    @property
    def lens(self) -> tuple[int, ...]:
        return self.descs[0][1].lens

    def solver_view(self) -> ActivationProblem:
        return self

    # ---- keys -------------------------------------------------------------------------------------
    def _layouts(self) -> str:
        return layouts_key([d for _, d in self.descs])

    def key(self) -> str:
        """``activ_RELU_a1_b1_g1_100x3x32x32_NCHW_FP32_F`` (one layout or one per tensor)."""
        d = self.desc
        return "_".join(
            [
                "activ",
                d.mode.name,
                "a" + float_text(d.alpha),
                "b" + float_text(d.beta),
                "g" + float_text(d.gamma),
                "x".join(map(str, self.lens)),
                self._layouts(),
                self.dtype.value,
                self.direction.value,
            ]
        )

    _KEY = re.compile(
        r"^activ_(?P<mode>[A-Z_]+?)_a(?P<a>[^_]+)_b(?P<b>[^_]+)_g(?P<g>[^_]+)_(?P<lens>[0-9x]+)_"
        r"(?P<lay>[^_]+)_(?P<dt>[A-Z0-9]+)_(?P<dir>[FB])$"
    )

    @classmethod
    def parse(cls, key: str) -> ActivationProblem:
        what = "an activation problem key"
        m = match_key(cls._KEY, key, what)
        with key_fields(key, what):
            desc = ActivationDesc(m["mode"], float(m["a"]), float(m["b"]), float(m["g"]))
            lens = tuple(int(v) for v in m["lens"].split("x"))
            dtype = DataType.parse(m["dt"])
        direction = Pass.parse(m["dir"])
        roles = _FWD_ROLES if direction is Pass.FORWARD else _BWD_ROLES
        return cls(desc, direction, **role_descs(key, m["lay"], dtype, lens, roles))

    def network_config(self) -> str:
        """What an invoker depends on; alpha, beta, gamma included while invokers bind them."""
        return self.key()

    # ---- counts -----------------------------------------------------------------------------------
    def flops(self) -> int:
        return math.prod(self.lens)

    def bytes(self) -> int:
        t = self.tensors()
        return sum(t[r].element_count * t[r].dtype.itemsize for r in (*self.inputs, *self.outputs))

    def driver_args(self, solver_id: int | None = None) -> list[str]:
        """MIOpenDriver's ``activ`` flags; other layouts and 5-D tensors add miopy's --layout / -D."""
        sub = {"FP32": "activ", "FP16": "activfp16", "BF16": "activbfp16"}[self.dtype.value]
        lens = self.lens
        args = [sub, "-n", str(lens[0]), "-c", str(lens[1])]
        if len(lens) == 5:
            args += ["-D", str(lens[2])]
        args += ["-H", str(lens[-2]), "-W", str(lens[-1])]
        d = self.desc
        args += ["-m", str(int(d.mode)), "-A", float_text(d.alpha), "-B", float_text(d.beta)]
        args += ["-G", float_text(d.gamma), "-F", "1" if self.direction is Pass.FORWARD else "2"]
        layout = self.descs[0][1].layout
        if layout not in ("NCHW", "NCDHW"):
            args += ["--layout", layout]
        if solver_id is not None:
            args += ["-S", str(solver_id)]
        return args

    def __str__(self) -> str:
        return self.key()


__all__ = ["ActivationDesc", "ActivationMode", "ActivationProblem", "Pass"]
