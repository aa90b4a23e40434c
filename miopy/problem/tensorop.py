"""Tensor operations (MIOpen's miopenOpTensor, miopenSetTensor, miopenScaleTensor).

ADD, MUL, MIN, MAX: c = op(alpha1 * a, alpha2 * b) + beta * c, with a and c of the same lens and
b broadcast over every dimension where its length is 1 (MIOpen's rule: each of b's lengths is 1
or c's). c is read only when beta is not 0. SET: y = value; SCALE: y = value * y. Tensors are
4-d or 5-d, any layout or strides, fp32, fp16 or bf16 (computed in fp32).
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
    desc_from_key,
    finite,
    float_text,
    key_fields,
    lens_from_text,
    lens_text,
    match_key,
)
from miopy.problem.passes import layouts_key
from miopy.tensor import DataType, TensorDesc


class TensorOp(enum.Enum):
    """The operation; ``code`` is MIOpenDriver's ``-o`` (0 set, 1 scale, 2 add, 3 mul, 4 min, 5 max),
    ``kernel_code`` what the kernels switch on (miopenTensorOp_t for the binary ops)."""

    SET = 0
    SCALE = 1
    ADD = 2
    MUL = 3
    MIN = 4
    MAX = 5

    @property
    def code(self) -> int:
        return self.value

    @property
    def binary(self) -> bool:
        return self.value >= 2

    @property
    def kernel_code(self) -> int:
        return {0: 4, 1: 5, 2: 0, 3: 1, 4: 2, 5: 3}[self.value]

    @classmethod
    def parse(cls, value) -> TensorOp:
        if isinstance(value, TensorOp):
            return value
        if isinstance(value, bool):
            raise bad("op", value, "expected set, scale, add, mul, min, max or a driver code 0-5")
        if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
            code = int(value)
            if 0 <= code <= 5:
                return cls(code)
        elif isinstance(value, str):
            name = value.strip().upper().replace("MIOPENTENSOROP", "").replace("TENSOR", "")
            name = {"SETTENSOR": "SET", "SCALETENSOR": "SCALE"}.get(name, name)
            if name in cls.__members__:
                return cls[name]
        raise bad("op", value, "expected set, scale, add, mul, min, max or a driver code 0-5")


@dataclass(frozen=True)
class TensorOpProblem(Problem):
    """One tensor operation. Binary ops: tensors {a, b, c}; SET and SCALE: {y}."""

    primitive: ClassVar[str] = "tensorop"
    log_name: ClassVar[str] = "TensorOp"

    op: TensorOp
    descs: tuple[tuple[str, TensorDesc], ...]
    alpha1: float = 1.0
    alpha2: float = 1.0
    beta: float = 0.0
    value: float = 0.0

    def __init__(
        self,
        op,
        a: TensorDesc | None = None,
        b: TensorDesc | None = None,
        c: TensorDesc | None = None,
        alpha1: float = 1.0,
        alpha2: float = 1.0,
        beta: float = 0.0,
        value: float = 0.0,
        y: TensorDesc | None = None,
    ):
        op = TensorOp.parse(op)
        if op.binary:
            if y is not None:
                raise bad("y", "given", f"{op.name} takes a, b and c")
            for role, d in (("a", a), ("b", b), ("c", c)):
                if d is None:
                    raise bad(role, None, f"{op.name} needs a, b and c")
                check_desc(role, d)
            if a.lens != c.lens:
                raise bad("a.lens", a.lens, f"must equal c.lens {c.lens}")
            if len(b.lens) != len(c.lens):
                raise bad("b.lens", b.lens, f"must have c's rank {len(c.lens)}")
            for i, (nb, nc) in enumerate(zip(b.lens, c.lens)):
                if nb not in (1, nc):
                    raise bad(f"b.lens[{i}]", nb, f"must be 1 or c.lens[{i}]={nc} (broadcast)")
            for role, d in (("a", a), ("b", b)):
                if d.dtype != c.dtype:
                    raise bad(f"{role}.dtype", d.dtype.value, f"must equal c.dtype {c.dtype.value}")
            descs = (("a", a), ("b", b), ("c", c))
        else:
            if y is None:
                y = c if c is not None else a
            if y is None:
                raise bad("y", None, f"{op.name} needs the tensor y")
            check_desc("y", y)
            descs = (("y", y),)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "descs", descs)
        object.__setattr__(self, "alpha1", finite("alpha1", alpha1))
        object.__setattr__(self, "alpha2", finite("alpha2", alpha2))
        object.__setattr__(self, "beta", finite("beta", beta))
        object.__setattr__(self, "value", finite("value", value))

    # ---- tensors ---------------------------------------------------------------------------------
    def tensors(self) -> dict[str, TensorDesc]:
        return dict(self.descs)

    @property
    def out(self) -> TensorDesc:
        return self.descs[-1][1]

    @property
    def inputs(self) -> tuple[str, ...]:
        if not self.op.binary:
            return ("y",) if self.op is TensorOp.SCALE else ()
        return ("a", "b", "c") if self.beta != 0 else ("a", "b")

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("c",) if self.op.binary else ("y",)

    @property
    def dtype(self) -> DataType:
        return self.out.dtype

    # ---- keys ------------------------------------------------------------------------------------
    def key(self) -> str:
        """``tensorop_ADD_a1_b1_g0_v0_64x3x32x32_B1x3x1x1_NCHW_FP32`` (B: b's lens, binary ops)."""
        parts = [
            "tensorop",
            self.op.name,
            "a" + float_text(self.alpha1),
            "b" + float_text(self.alpha2),
            "g" + float_text(self.beta),
            "v" + float_text(self.value),
            lens_text(self.out.lens),
        ]
        if self.op.binary:
            parts.append("B" + lens_text(self.tensors()["b"].lens))
        parts += [layouts_key([d for _, d in self.descs]), self.dtype.value]
        return "_".join(parts)

    _KEY = re.compile(
        r"^tensorop_(?P<op>[A-Z]+)_a(?P<a1>[^_]+)_b(?P<a2>[^_]+)_g(?P<g>[^_]+)_v(?P<v>[^_]+)_"
        r"(?P<lens>[0-9x]+)(?:_B(?P<blens>[0-9x]+))?_(?P<lay>[^_]+)_(?P<dt>[A-Z0-9]+)$"
    )

    @classmethod
    def parse(cls, key: str) -> TensorOpProblem:
        what = "a tensorop problem key"
        m = match_key(cls._KEY, key, what)
        with key_fields(key, what):
            op = TensorOp[m["op"]]
            lens = lens_from_text(m["lens"])
            dtype = DataType.parse(m["dt"])
            nums = [float(m[k]) for k in ("a1", "a2", "g", "v")]
        count = 3 if op.binary else 1
        lays = m["lay"].split(".") if "." in m["lay"] else [m["lay"]] * count
        if len(lays) != count or op.binary != (m["blens"] is not None):
            raise bad("key", key, f"not {what}")
        if not op.binary:
            return cls(op, y=desc_from_key(dtype, lens, lays[0]), value=nums[3])
        blens = lens_from_text(m["blens"])
        a, b, c = (desc_from_key(dtype, ln, lay) for ln, lay in zip((lens, blens, lens), lays))
        return cls(op, a, b, c, *nums)

    def network_config(self) -> str:
        return self.key()

    def invoker_key(self) -> str:
        return self.key()

    # ---- counts ----------------------------------------------------------------------------------
    def flops(self) -> int:
        return self.out.element_count * (3 if self.op.binary else 1)

    def bytes(self) -> int:
        t = self.tensors()
        return sum(t[r].element_count * t[r].dtype.itemsize for r in (*self.inputs, *self.outputs))

    def driver_args(self, solver_id: int | None = None) -> list[str]:
        """MIOpenDriver's ``tensorop`` flags; miopy adds --layout, -D (5-d) and --b_lens."""
        sub = {"FP32": "tensorop", "FP16": "tensoropfp16", "BF16": "tensoropbfp16"}[self.dtype.value]
        lens = self.out.lens
        args = [sub, "-n", str(lens[0]), "-c", str(lens[1])]
        if len(lens) == 5:
            args += ["-D", str(lens[2])]
        args += ["-H", str(lens[-2]), "-W", str(lens[-1]), "-o", str(self.op.code)]
        if self.op.binary:
            args += [
                "-A",
                float_text(self.alpha1),
                "-B",
                float_text(self.alpha2),
                "-G",
                float_text(self.beta),
            ]
            blens = self.tensors()["b"].lens
            if blens != lens:
                args += ["--b_lens", ",".join(map(str, blens))]
        else:
            args += ["-v", float_text(self.value)]
        layout = self.out.layout
        if layout not in ("NCHW", "NCDHW"):
            args += ["--layout", layout]
        if solver_id is not None:
            args += ["-S", str(solver_id)]
        return args


__all__ = ["TensorOp", "TensorOpProblem"]
