"""Reductions (MIOpen's miopenReduceTensor): y = alpha * reduce(x over ``dims``) + beta * y.

Operations: ADD, MUL, MIN, MAX, AMAX (max |x|), AVG, NORM1 (sum |x|), NORM2 (sqrt of sum x^2).
y has x's lens with every reduced dimension 1, packed; with ``indices`` (MIN, MAX, AMAX only) an
int32 tensor of y's lens receives the position of the chosen element, row-major over the reduced
dimensions in logical order, the first occurrence winning. NaN: with ``nan_propagation`` a NaN
wins MIN, MAX and AMAX (its position is the index); without, comparisons skip NaN (ADD, MUL, AVG and
the norms carry a NaN either way). fp32, fp16 and bf16 accumulate in fp32, fp64 in fp64. y is
read only when beta is not 0.
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
    desc_from_key,
    finite,
    float_text,
    key_fields,
    lens_from_text,
    lens_text,
    match_key,
)
from miopy.tensor import DataType, TensorDesc

FLOATS = (DataType.FP32, DataType.FP16, DataType.BF16, DataType.FP64)


class ReduceOp(enum.IntEnum):
    ADD = 0
    MUL = 1
    MIN = 2
    MAX = 3
    AMAX = 4
    AVG = 5
    NORM1 = 6
    NORM2 = 7

    @property
    def has_indices(self) -> bool:
        return self in (ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AMAX)

    @classmethod
    def parse(cls, value) -> ReduceOp:
        if isinstance(value, ReduceOp):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value in cls._value2member_map_:
            return cls(value)
        if isinstance(value, str):
            text = value.strip().upper().replace("MIOPEN_REDUCE_TENSOR_", "")
            if text.isdigit() and int(text) in cls._value2member_map_:
                return cls(int(text))
            if text in cls.__members__:
                return cls[text]
        raise bad("op", value, "expected add, mul, min, max, amax, avg, norm1, norm2 or 0-7")


def reduced_desc(x: TensorDesc, dims: tuple[int, ...], dtype: DataType | None = None) -> TensorDesc:
    """y's descriptor: x's lens with the reduced dimensions 1, packed in x's layout when packed."""
    lens = tuple(1 if i in dims else n for i, n in enumerate(x.lens))
    layout = x.layout if x.packed else None
    return TensorDesc(dtype or x.dtype, lens, layout=layout)


@dataclass(frozen=True)
class ReduceProblem(Problem):
    """One reduction: tensors {x, y} and, with indices, {indices}."""

    primitive: ClassVar[str] = "reduce"
    log_name: ClassVar[str] = "Reduction"

    op: ReduceOp
    dims: tuple[int, ...]
    descs: tuple[tuple[str, TensorDesc], ...]
    nan_propagation: bool = False
    alpha: float = 1.0
    beta: float = 0.0

    def __init__(
        self,
        op,
        x: TensorDesc,
        dims,
        indices: bool = False,
        nan_propagation: bool = False,
        alpha: float = 1.0,
        beta: float = 0.0,
    ):
        op = ReduceOp.parse(op)
        check_desc("x", x, FLOATS)
        try:
            dims = tuple(sorted({int(d) for d in dims}))
        except (TypeError, ValueError):
            raise bad("dims", dims, "expected dimension numbers") from None
        if not dims:
            raise bad("dims", dims, "reduce at least one dimension")
        for d in dims:
            if not 0 <= d < len(x.lens):
                raise bad("dims", dims, f"dimension {d} is not one of x's 0..{len(x.lens) - 1}")
        if indices and not op.has_indices:
            raise bad("indices", indices, f"only MIN, MAX and AMAX give indices, not {op.name}")
        descs = [("x", x), ("y", reduced_desc(x, dims))]
        if indices:
            descs.append(("indices", reduced_desc(x, dims, DataType.INT32)))
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "descs", tuple(descs))
        object.__setattr__(self, "nan_propagation", bool(nan_propagation))
        object.__setattr__(self, "alpha", finite("alpha", alpha))
        object.__setattr__(self, "beta", finite("beta", beta))

    # ---- tensors ---------------------------------------------------------------------------------
    def tensors(self) -> dict[str, TensorDesc]:
        return dict(self.descs)

    @property
    def x(self) -> TensorDesc:
        return self.descs[0][1]

    @property
    def y(self) -> TensorDesc:
        return self.descs[1][1]

    @property
    def indices(self) -> bool:
        return len(self.descs) == 3

    @property
    def inputs(self) -> tuple[str, ...]:
        return ("x", "y") if self.beta != 0 else ("x",)

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("y", "indices") if self.indices else ("y",)

    @property
    def dtype(self) -> DataType:
        return self.x.dtype

    def reduce_length(self) -> int:
        return math.prod(self.x.lens[d] for d in self.dims)

    # ---- keys ------------------------------------------------------------------------------------
    def key(self) -> str:
        """``reduce_ADD_R0.2_a1_b0_n0_i0_100x60x16x240_NCHW_FP32``."""
        return "_".join(
            [
                "reduce",
                self.op.name,
                "R" + ".".join(map(str, self.dims)),
                "a" + float_text(self.alpha),
                "b" + float_text(self.beta),
                f"n{int(self.nan_propagation)}",
                f"i{int(self.indices)}",
                lens_text(self.x.lens),
                self.x.key(),
                self.dtype.value,
            ]
        )

    _KEY = re.compile(
        r"^reduce_(?P<op>[A-Z0-9]+)_R(?P<dims>[0-9.]+)_a(?P<a>[^_]+)_b(?P<b>[^_]+)_n(?P<n>[01])_i(?P<i>[01])_"
        r"(?P<lens>[0-9x]+)_(?P<lay>[^_]+)_(?P<dt>[A-Z0-9]+)$"
    )

    @classmethod
    def parse(cls, key: str) -> ReduceProblem:
        what = "a reduce problem key"
        m = match_key(cls._KEY, key, what)
        with key_fields(key, what):
            x = desc_from_key(DataType.parse(m["dt"]), lens_from_text(m["lens"]), m["lay"])
            dims = [int(d) for d in m["dims"].split(".")]
            alpha, beta = float(m["a"]), float(m["b"])
        return cls(m["op"], x, dims, m["i"] == "1", m["n"] == "1", alpha, beta)

    def network_config(self) -> str:
        return self.key()

    def invoker_key(self) -> str:
        return self.key()

    # ---- counts ----------------------------------------------------------------------------------
    def flops(self) -> int:
        return self.x.element_count

    def bytes(self) -> int:
        t = self.tensors()
        return sum(t[r].element_count * t[r].dtype.itemsize for r in (*self.inputs, *self.outputs))

    def driver_args(self, solver_id: int | None = None) -> list[str]:
        """MIOpenDriver's ``reduce`` flags; miopy adds --layout and bf16."""
        sub = {"FP32": "reduce", "FP16": "reducefp16", "BF16": "reducebfp16", "FP64": "reducefp64"}
        args = [sub[self.dtype.value], "-D", ",".join(map(str, self.x.lens))]
        args += ["-R", ",".join(map(str, self.dims)), "-O", str(int(self.op))]
        args += ["-N", str(int(self.nan_propagation)), "-I", str(int(self.indices))]
        args += ["-A", float_text(self.alpha), "-B", float_text(self.beta)]
        if self.x.layout not in ("NCHW", "NCDHW"):
            args += ["--layout", self.x.layout]
        if solver_id is not None:
            args += ["-S", str(solver_id)]
        return args


__all__ = ["ReduceOp", "ReduceProblem", "reduced_desc"]
