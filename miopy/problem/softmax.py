"""Softmax (MIOpen's miopenSoftmaxForward_V2 / miopenSoftmaxBackward_V2).

Forward: y = alpha * f(x) + beta * y with f the softmax over each group: FAST and ACCURATE
exp(x - max) / sum(exp(x - max)) (miopy subtracts the maximum in both: it costs nothing in one
pass, and large inputs never overflow), LOG x - max - log(sum(exp(x - max))).
Backward: dx = alpha * y * (dy - sum(y * dy)) + beta * dx; LOG: dx = alpha * (dy - exp(y) *
sum(dy)) + beta * dx. Groups: INSTANCE, over C, (D,) H, W of each image; CHANNEL, over C at each
(n, (d,) h, w). y (forward) and dx (backward) are read only when beta is not 0.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import ClassVar

from miopy.errors import bad
from miopy.problem.base import Problem
from miopy.problem.keys import (
    check_desc,
    finite,
    float_text,
    key_fields,
    lens_from_text,
    lens_text,
    match_key,
    role_descs,
    same_as,
)
from miopy.problem.passes import Pass, layouts_key
from miopy.tensor import DataType, TensorDesc


class SoftmaxAlgorithm(enum.IntEnum):
    FAST = 0
    ACCURATE = 1
    LOG = 2


class SoftmaxMode(enum.IntEnum):
    INSTANCE = 0
    CHANNEL = 1


def _enum(cls, name: str, value):
    if isinstance(value, cls):
        return value
    if isinstance(value, bool):
        raise bad(name, value, f"expected one of {', '.join(m.name.lower() for m in cls)}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        if int(value) in cls._value2member_map_:
            return cls(int(value))
    elif isinstance(value, str):
        key = value.strip().upper().replace("MIOPEN_SOFTMAX_", "").replace("MODE_", "")
        if key in cls.__members__:
            return cls[key]
    codes = ", ".join(f"{m.value} {m.name.lower()}" for m in cls)
    raise bad(name, value, f"expected one of {codes}")


_FWD = ("x", "y")
_BWD = ("y", "dy", "dx")


@dataclass(frozen=True)
class SoftmaxProblem(Problem):
    """One softmax call. Forward: {x, y}; backward: {y, dy, dx}; same lens and dtype."""

    primitive: ClassVar[str] = "softmax"
    log_name: ClassVar[str] = "Softmax"

    algorithm: SoftmaxAlgorithm
    mode: SoftmaxMode
    direction: Pass
    descs: tuple[tuple[str, TensorDesc], ...]
    alpha: float = 1.0
    beta: float = 0.0

    def __init__(
        self,
        direction: Pass | str,
        algorithm=SoftmaxAlgorithm.ACCURATE,
        mode=SoftmaxMode.CHANNEL,
        alpha: float = 1.0,
        beta: float = 0.0,
        **tensors: TensorDesc,
    ):
        direction = Pass.parse(direction)
        roles = _FWD if direction is Pass.FORWARD else _BWD
        extra = sorted(set(tensors) - set(roles))
        if extra:
            raise bad(extra[0], "given", f"not a tensor of a softmax {direction.title.lower()} pass")
        missing = [r for r in roles if tensors.get(r) is None]
        if missing:
            raise bad(missing[0], None, f"the {direction.title.lower()} pass needs {', '.join(roles)}")
        for role in roles:
            check_desc(role, tensors[role])
        for role in roles[1:]:
            same_as(role, tensors[role], roles[0], tensors[roles[0]])
        object.__setattr__(self, "algorithm", _enum(SoftmaxAlgorithm, "algorithm", algorithm))
        object.__setattr__(self, "mode", _enum(SoftmaxMode, "mode", mode))
        object.__setattr__(self, "direction", direction)
        object.__setattr__(self, "descs", tuple((r, tensors[r]) for r in roles))
        object.__setattr__(self, "alpha", finite("alpha", alpha))
        object.__setattr__(self, "beta", finite("beta", beta))

    @classmethod
    def create(
        cls, x: TensorDesc, direction: Pass | str = Pass.FORWARD, algorithm=1, mode=1, alpha=1.0, beta=0.0
    ) -> SoftmaxProblem:
        """Every tensor takes ``x``'s descriptor."""
        direction = Pass.parse(direction)
        roles = _FWD if direction is Pass.FORWARD else _BWD
        return cls(direction, algorithm, mode, alpha, beta, **{r: x for r in roles})

    # ---- tensors ---------------------------------------------------------------------------------
    def tensors(self) -> dict[str, TensorDesc]:
        return dict(self.descs)

    @property
    def first(self) -> TensorDesc:
        return self.descs[0][1]

    @property
    def lens(self) -> tuple[int, ...]:
        return self.first.lens

    @property
    def inputs(self) -> tuple[str, ...]:
        if self.direction is Pass.FORWARD:
            return ("x", "y") if self.beta != 0 else ("x",)
        return ("y", "dy", "dx") if self.beta != 0 else ("y", "dy")

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("y",) if self.direction is Pass.FORWARD else ("dx",)

    @property
    def dtype(self) -> DataType:
        return self.first.dtype

    def group_length(self) -> int:
        """How many elements one softmax normalises over."""
        return self.lens[1] if self.mode is SoftmaxMode.CHANNEL else math.prod(self.lens[1:])

    # ---- keys ------------------------------------------------------------------------------------
    def key(self) -> str:
        """``softmax_ACCURATE_CHANNEL_a1_b0_100x3x32x32_NCHW_FP32_F``."""
        return "_".join(
            [
                "softmax",
                self.algorithm.name,
                self.mode.name,
                "a" + float_text(self.alpha),
                "b" + float_text(self.beta),
                lens_text(self.lens),
                layouts_key([d for _, d in self.descs]),
                self.dtype.value,
                self.direction.value,
            ]
        )

    _KEY = re.compile(
        r"^softmax_(?P<algo>[A-Z]+)_(?P<mode>[A-Z]+)_a(?P<a>[^_]+)_b(?P<b>[^_]+)_(?P<lens>[0-9x]+)_"
        r"(?P<lay>[^_]+)_(?P<dt>[A-Z0-9]+)_(?P<dir>[FB])$"
    )

    @classmethod
    def parse(cls, key: str) -> SoftmaxProblem:
        what = "a softmax problem key"
        m = match_key(cls._KEY, key, what)
        with key_fields(key, what):
            lens = lens_from_text(m["lens"])
            dtype = DataType.parse(m["dt"])
            alpha, beta = float(m["a"]), float(m["b"])
        direction = Pass.parse(m["dir"])
        roles = _FWD if direction is Pass.FORWARD else _BWD
        descs = role_descs(key, m["lay"], dtype, lens, roles)
        return cls(direction, m["algo"], m["mode"], alpha, beta, **descs)

    def network_config(self) -> str:
        return self.key()

    def invoker_key(self) -> str:
        return self.key()

    # ---- counts ----------------------------------------------------------------------------------
    def flops(self) -> int:
        return 4 * self.first.element_count

    def bytes(self) -> int:
        t = self.tensors()
        return sum(t[r].element_count * t[r].dtype.itemsize for r in (*self.inputs, *self.outputs))

    def driver_args(self, solver_id: int | None = None) -> list[str]:
        """MIOpenDriver's ``softmax`` flags; miopy adds --layout, -D (5-d) and bf16."""
        sub = {"FP32": "softmax", "FP16": "softmaxfp16", "BF16": "softmaxbfp16"}[self.dtype.value]
        lens = self.lens
        args = [sub, "-n", str(lens[0]), "-c", str(lens[1])]
        if len(lens) == 5:
            args += ["-D", str(lens[2])]
        args += ["-H", str(lens[-2]), "-W", str(lens[-1])]
        args += ["-a", str(int(self.algorithm)), "-m", str(int(self.mode))]
        args += ["-A", float_text(self.alpha), "-B", float_text(self.beta)]
        args += ["-F", "1" if self.direction is Pass.FORWARD else "2"]
        layout = self.first.layout
        if layout not in ("NCHW", "NCDHW"):
            args += ["--layout", layout]
        if solver_id is not None:
            args += ["-S", str(solver_id)]
        return args


__all__ = ["SoftmaxAlgorithm", "SoftmaxMode", "SoftmaxProblem"]
