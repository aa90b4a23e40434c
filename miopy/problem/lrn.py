"""Local response normalisation (MIOpen's miopenLRNForward / miopenLRNBackward).

With pad = (n - 1) // 2:
CROSS_CHANNEL: scale = k + alpha / n * sum of x^2 over channels c - pad .. c - pad + n - 1 (inside
the tensor); y = x * scale^-beta. Backward: dx = dy * scale^-beta - 2 alpha beta / n * x * sum of
dy * y / scale over the channels whose window holds c (c - (n - 1 - pad) .. c + pad).
WITHIN_CHANNEL: an n x n window from (h - pad, w - pad), its end clipped at (H + pad, W + pad);
area = its size before clipping to the image; scale = k + alpha / area * sum of x^2 inside the image.
Backward (MIOpen's): dx = dy * scale^-beta - 2 alpha beta / area * x * sum of dy * y / scale over
the same window.
Forward with ``save_scale`` also writes ``scale`` (MIOpen's workspace, y's size), which backward
reads together with x, y and dy.
"""

from __future__ import annotations

import enum
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


class LRNMode(enum.IntEnum):
    WITHIN_CHANNEL = 0
    CROSS_CHANNEL = 1

    @classmethod
    def parse(cls, value) -> LRNMode:
        if isinstance(value, LRNMode):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
            return cls(value)
        if isinstance(value, str):
            text = (
                value.strip()
                .upper()
                .replace("MIOPENLRN", "")
                .replace("_CHANNELS", "")
                .replace("_CHANNEL", "")
            )
            text = {"WITHIN": "WITHIN_CHANNEL", "CROSS": "CROSS_CHANNEL", "ACROSS": "CROSS_CHANNEL"}.get(
                text, text
            )
            if text.isdigit() and int(text) in (0, 1):
                return cls(int(text))
            if text in cls.__members__:
                return cls[text]
        raise bad("mode", value, "expected within (0) or cross (1)")


_FWD = ("x", "y")
_BWD = ("x", "y", "dy", "scale", "dx")


@dataclass(frozen=True)
class LRNProblem(Problem):
    """One LRN call. Forward: {x, y} (+ scale with save_scale); backward: {x, y, dy, scale, dx}."""

    primitive: ClassVar[str] = "lrn"
    log_name: ClassVar[str] = "LRN"

    mode: LRNMode
    n: int
    alpha: float
    beta: float
    k: float
    direction: Pass
    descs: tuple[tuple[str, TensorDesc], ...]

    def __init__(
        self,
        mode,
        n: int,
        alpha: float,
        beta: float,
        k: float,
        direction: Pass | str,
        save_scale: bool = False,
        **tensors: TensorDesc,
    ):
        direction = Pass.parse(direction)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise bad("n", n, "the window size must be a positive integer")
        roles = _FWD + (("scale",) if save_scale else ()) if direction is Pass.FORWARD else _BWD
        extra = sorted(set(tensors) - set(roles))
        if extra:
            hint = " (a forward pass writes scale only with save_scale)" if extra == ["scale"] else ""
            raise bad(extra[0], "given", f"not a tensor of this LRN {direction.title.lower()} pass{hint}")
        missing = [r for r in roles if tensors.get(r) is None]
        if missing:
            raise bad(missing[0], None, f"the {direction.title.lower()} pass needs {', '.join(roles)}")
        for role in roles:
            check_desc(role, tensors[role])
        for role in roles[1:]:
            same_as(role, tensors[role], "x", tensors["x"])
        if len(tensors["x"].lens) != 4:
            raise bad("x.lens", tensors["x"].lens, "LRN takes 4-D tensors (N, C, H, W)")
        object.__setattr__(self, "mode", LRNMode.parse(mode))
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "alpha", finite("alpha", alpha))
        object.__setattr__(self, "beta", finite("beta", beta))
        object.__setattr__(self, "k", finite("k", k))
        object.__setattr__(self, "direction", direction)
        object.__setattr__(self, "descs", tuple((r, tensors[r]) for r in roles))

    @classmethod
    def create(
        cls, x: TensorDesc, mode=1, n: int = 5, alpha=1e-4, beta=0.75, k=1.0, direction="F", save_scale=False
    ) -> LRNProblem:
        direction = Pass.parse(direction)
        roles = _FWD + (("scale",) if save_scale else ()) if direction is Pass.FORWARD else _BWD
        return cls(mode, n, alpha, beta, k, direction, save_scale, **{r: x for r in roles})

    # ---- tensors ---------------------------------------------------------------------------------
    def tensors(self) -> dict[str, TensorDesc]:
        return dict(self.descs)

    @property
    def x(self) -> TensorDesc:
        return self.descs[0][1]

    @property
    def save_scale(self) -> bool:
        return self.direction is Pass.FORWARD and len(self.descs) == 3

    @property
    def pad(self) -> int:
        return (self.n - 1) // 2

    @property
    def inputs(self) -> tuple[str, ...]:
        return ("x",) if self.direction is Pass.FORWARD else ("x", "y", "dy", "scale")

    @property
    def outputs(self) -> tuple[str, ...]:
        if self.direction is Pass.BACKWARD:
            return ("dx",)
        return ("y", "scale") if self.save_scale else ("y",)

    @property
    def dtype(self) -> DataType:
        return self.x.dtype

    # ---- keys ------------------------------------------------------------------------------------
    def key(self) -> str:
        """``lrn_CROSS_CHANNEL_n5_a0.0001_b0.75_k1_s1_100x3x32x32_NCHW_FP32_F`` (s: save_scale)."""
        return "_".join(
            [
                "lrn",
                self.mode.name,
                f"n{self.n}",
                "a" + float_text(self.alpha),
                "b" + float_text(self.beta),
                "k" + float_text(self.k),
                f"s{int(self.save_scale)}",
                lens_text(self.x.lens),
                layouts_key([d for _, d in self.descs]),
                self.dtype.value,
                self.direction.value,
            ]
        )

    _KEY = re.compile(
        r"^lrn_(?P<mode>[A-Z_]+?)_n(?P<n>[0-9]+)_a(?P<a>[^_]+)_b(?P<b>[^_]+)_k(?P<k>[^_]+)_s(?P<s>[01])_"
        r"(?P<lens>[0-9x]+)_(?P<lay>[^_]+)_(?P<dt>[A-Z0-9]+)_(?P<dir>[FB])$"
    )

    @classmethod
    def parse(cls, key: str) -> LRNProblem:
        what = "an LRN problem key"
        m = match_key(cls._KEY, key, what)
        with key_fields(key, what):
            lens = lens_from_text(m["lens"])
            dtype = DataType.parse(m["dt"])
            nums = [float(m[v]) for v in "abk"]
        direction = Pass.parse(m["dir"])
        save = m["s"] == "1"
        roles = _FWD + (("scale",) if save else ()) if direction is Pass.FORWARD else _BWD
        descs = role_descs(key, m["lay"], dtype, lens, roles)
        return cls(m["mode"], int(m["n"]), *nums, direction, save, **descs)

    def network_config(self) -> str:
        return self.key()

    def invoker_key(self) -> str:
        return self.key()

    # ---- counts ----------------------------------------------------------------------------------
    def flops(self) -> int:
        taps = self.n if self.mode is LRNMode.CROSS_CHANNEL else self.n * self.n
        return self.x.element_count * (2 * taps + 4)

    def bytes(self) -> int:
        t = self.tensors()
        return sum(t[r].element_count * t[r].dtype.itemsize for r in (*self.inputs, *self.outputs))

    def driver_args(self, solver_id: int | None = None) -> list[str]:
        """MIOpenDriver's ``lrn`` flags; miopy adds --layout and bf16."""
        sub = {"FP32": "lrn", "FP16": "lrnfp16", "BF16": "lrnbfp16"}[self.dtype.value]
        lens = self.x.lens
        args = [sub, "-n", str(lens[0]), "-c", str(lens[1])]
        args += ["-H", str(lens[-2]), "-W", str(lens[-1]), "-N", str(self.n)]
        args += ["-A", float_text(self.alpha), "-B", float_text(self.beta), "-K", float_text(self.k)]
        args += ["-m", "cross" if self.mode is LRNMode.CROSS_CHANNEL else "within"]
        # A forward pass that saves the scale is the driver's forward-then-backward (-F 0), the
        # only way its command line asks for one: a line read back (a workload) is this problem.
        forward = "0" if self.save_scale else "1"
        args += ["-F", forward if self.direction is Pass.FORWARD else "2"]
        if self.x.layout not in ("NCHW", "NCDHW"):
            args += ["--layout", self.x.layout]
        if solver_id is not None:
            args += ["-S", str(solver_id)]
        return args


__all__ = ["LRNMode", "LRNProblem"]
