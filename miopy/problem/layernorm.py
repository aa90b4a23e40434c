"""Layer norm and group norm (MIOpen's miopenLayerNormForward / miopenGroupNormForward, and their
backward): NormMode, LayerNormProblem, GroupNormProblem.

Both normalise x per key and write mean and rstd = 1 / sqrt(var + epsilon) in x's data type:
- layer norm: the key is dims[:normalized_dim], the statistics are over dims[normalized_dim:];
  weight and bias have the lens dims[normalized_dim:];
- group norm: x is (N, C, spatial...), the key is (n, group), the statistics are over the group's
  C / G channels and the spatial dims; weight and bias have lens (C,); mean and rstd (N, G).
Mode 0 (MIOPEN_ELEMENTWISE_AFFINE, as MIOpen's driver uses it: no weight or bias) or 1
(MIOPEN_WEIGHT_BIAS: y = xhat * weight + bias).

Roles, forward: x, [weight, bias], y, mean, rstd. Backward: x, dy, [weight], mean, rstd (those the
forward pass wrote), dx, [dweight, dbias].
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from miopy.errors import bad
from miopy.problem.base import Problem
from miopy.problem.nd import Dim, NdDesc, PgradGeometry, channels_last_strides
from miopy.problem.passes import Pass, float_text
from miopy.tensor import DataType, TensorDesc


def _mode(value) -> int:
    if isinstance(value, bool) or value not in (0, 1, "0", "1"):
        raise bad("mode", value, "expected 0 (no weight and bias) or 1 (weight and bias)")
    return int(value)


def _eps(value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise bad("epsilon", value, "expected a number") from None
    if not math.isfinite(out) or out <= 0:
        raise bad("epsilon", value, "must be finite and > 0")
    return out


@dataclass(frozen=True)
class _StatNorm(Problem):
    """What layer norm and group norm share."""

    direction: Pass
    mode: int
    epsilon: float
    x: NdDesc

    # ---- tensors --------------------------------------------------------------------------------
    @property
    def affine(self) -> bool:
        return self.mode == 1

    @property
    def dtype(self) -> DataType:
        return self.x.dtype

    @property
    def param_dtype(self) -> DataType:
        return self.x.dtype

    def tensors(self) -> dict[str, NdDesc]:
        w, s = self.weight_desc, self.stat_desc
        if self.direction is Pass.FORWARD:
            t = {"x": self.x}
            if self.affine:
                t.update(weight=w, bias=w)
            t.update(y=self.x, mean=s, rstd=s)
            return t
        t = {"x": self.x, "dy": self.x}
        if self.affine:
            t["weight"] = w
        t.update(mean=s, rstd=s, dx=self.x)
        if self.affine:
            t.update(dweight=w, dbias=w)
        return t

    @property
    def inputs(self) -> tuple[str, ...]:
        w = ("weight",) if self.affine else ()
        if self.direction is Pass.FORWARD:
            return ("x", *w, *(("bias",) if self.affine else ()))
        return ("x", "dy", *w, "mean", "rstd")

    @property
    def outputs(self) -> tuple[str, ...]:
        if self.direction is Pass.FORWARD:
            return ("y", "mean", "rstd")
        return ("dx", *(("dweight", "dbias") if self.affine else ()))

    # ---- the norm kernels (miopy.solvers.norm.program) ----------------------------------------
    @property
    def norm_kind(self) -> str:
        return "ln_fwd" if self.direction is Pass.FORWARD else "ln_bwd"

    norm_flags = 0

    def finalize_roles(self) -> dict[str, str | None]:
        if self.direction is Pass.FORWARD:
            return {"s_c": "mean", "s_d": "rstd"}
        return {"s_a": "mean", "s_b": "rstd"}

    def _data_strides(self, i: int) -> dict[str, int]:
        s = self.x.strides[i]
        roles = ("y",) if self.direction is Pass.FORWARD else ("dy", "dx")
        return {"x": s, **{r: s for r in roles}}

    def network_config(self) -> str:
        return self.key()

    def invoker_key(self) -> str:
        return self.key()

    def flops(self) -> int:
        return 5 * self.x.element_count

    def bytes(self) -> int:
        t = self.tensors()
        return sum(t[r].nbytes for r in self.inputs) + sum(t[r].nbytes for r in self.outputs)

    def __str__(self) -> str:
        return self.key()


def _x(x, dtype=None) -> NdDesc:
    if not isinstance(x, TensorDesc | NdDesc):
        raise bad("x", type(x).__name__, "expected a TensorDesc or NdDesc")
    if x.dtype not in (DataType.FP32, DataType.FP16, DataType.BF16):
        raise bad("dtype", x.dtype.value, "layer and group norm take fp32, fp16 or bf16")
    return NdDesc.of(x)


# group norm's x layouts by rank, as its driver's -L names them
CHANNELS_FIRST = {3: "NCW", 4: "NCHW", 5: "NCDHW"}
CHANNELS_LAST = {3: "NWC", 4: "NHWC", 5: "NDHWC"}

_KEY = r"_(?P<dir>[FB])_m(?P<m>[01])_e(?P<e>[^_]+)_(?P<x>[0-9x,s]+)_(?P<dt>[A-Z0-9]+)$"


@dataclass(frozen=True)
class LayerNormProblem(_StatNorm):
    primitive = "layernorm"
    log_name = "LayerNorm"

    normalized_dim: int

    def __init__(self, x, normalized_dim: int = 1, epsilon: float = 1e-5, mode: int = 0, direction="F"):
        x = _x(x)
        if isinstance(normalized_dim, bool) or not isinstance(normalized_dim, int):
            raise bad("normalized_dim", normalized_dim, "expected an integer")
        if not 0 <= normalized_dim < len(x.lens):
            raise bad("normalized_dim", normalized_dim, f"expected 0 <= dim < {len(x.lens)} (x's rank)")
        object.__setattr__(self, "direction", Pass.parse(direction))
        object.__setattr__(self, "mode", _mode(mode))
        object.__setattr__(self, "epsilon", _eps(epsilon))
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "normalized_dim", normalized_dim)

    @property
    def weight_desc(self) -> NdDesc:
        return NdDesc(self.dtype, self.x.lens[self.normalized_dim :])

    @property
    def stat_desc(self) -> NdDesc:
        return NdDesc(self.dtype, self.x.lens[: self.normalized_dim] or (1,))

    def norm_dims(self) -> list[Dim]:
        o = self.normalized_dim
        stat, w = self.stat_desc.strides, self.weight_desc.strides
        dims = []
        for i, n in enumerate(self.x.lens):
            s = self._data_strides(i)
            if i < o:
                s["stat"] = stat[i]
                dims.append(Dim(n, True, s))
            else:
                s["param"] = w[i - o]
                dims.append(Dim(n, False, s))
        return dims

    def param_map(self):
        """The weight index of the packed kernels (pd, pm, pkm, pkmul, pjd): element i has weight
        (i / pd) % pm; in the reduction, element j of key k's segment (k % pkm) * pkmul + j / pjd.
        Only for a row-major x (another dense order numbers the weights differently)."""
        if not self.x.packed:
            return None
        return (1, self.weight_desc.element_count, 1, 0, 1)

    def packed_pgrad(self) -> PgradGeometry | None:
        """dweight / dbias of a row-major x: columns of (keys) rows."""
        if not self.x.packed:
            return None
        p = self.weight_desc.element_count
        return PgradGeometry("cols", p, rows=self.x.element_count // p, rstride=p, cdiv=p)

    def key(self) -> str:
        """``layernorm_o3_F_m1_e1e-05_100x3x32x32_FP32``."""
        return (
            f"layernorm_o{self.normalized_dim}_{self.direction.value}_m{self.mode}_"
            f"e{float_text(self.epsilon)}_{self.x.key()}_{self.dtype.value}"
        )

    @classmethod
    def parse(cls, key: str) -> LayerNormProblem:
        m = re.match(r"^layernorm_o(?P<o>[0-9]+)" + _KEY, key.strip()) if isinstance(key, str) else None
        if not m:
            raise bad("key", key, "not a layer norm problem key")
        x = NdDesc.parse(m["dt"], m["x"])
        return cls(x, int(m["o"]), float(m["e"]), int(m["m"]), m["dir"])

    def driver_args(self, solver_id: int | None = None) -> list[str]:
        sub = {"FP32": "layernorm", "FP16": "layernormfp16", "BF16": "layernormbfp16"}[self.dtype.value]
        x = "x".join(map(str, self.x.lens))
        if not self.x.packed:
            x += "," + ",".join(map(str, self.x.strides))
        args = [sub, "-X", x, "-o", str(self.normalized_dim)]
        args += [
            "-e",
            float_text(self.epsilon),
            "-m",
            str(self.mode),
            "-F",
            "1" if self.direction is Pass.FORWARD else "2",
        ]
        if solver_id is not None:
            args += ["-S", str(solver_id)]
        return args


@dataclass(frozen=True)
class GroupNormProblem(_StatNorm):
    primitive = "groupnorm"
    log_name = "GroupNorm"

    num_groups: int

    def __init__(self, x, num_groups: int, epsilon: float = 1e-5, mode: int = 0, direction="F"):
        x = _x(x)
        if not 3 <= len(x.lens) <= 5:
            raise bad("x.lens", x.lens, "expected (N, C, spatial...) with 1 to 3 spatial dims")
        if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
            raise bad("num_groups", num_groups, "expected a positive integer")
        if x.lens[1] % num_groups:
            raise bad("num_groups", num_groups, f"must divide the channels ({x.lens[1]})")
        object.__setattr__(self, "direction", Pass.parse(direction))
        object.__setattr__(self, "mode", _mode(mode))
        object.__setattr__(self, "epsilon", _eps(epsilon))
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "num_groups", num_groups)

    @property
    def weight_desc(self) -> NdDesc:
        return NdDesc(self.dtype, (self.x.lens[1],))

    @property
    def stat_desc(self) -> NdDesc:
        return NdDesc(self.dtype, (self.x.lens[0], self.num_groups))

    def norm_dims(self) -> list[Dim]:
        lens, xs = self.x.lens, self.x.strides
        g = self.num_groups
        cg = lens[1] // g
        stat = self.stat_desc.strides
        w = self.weight_desc.strides[0]
        ds = self._data_strides
        dims = [
            Dim(lens[0], True, {**ds(0), "stat": stat[0]}),
            Dim(g, True, {r: v * cg for r, v in ds(1).items()} | {"stat": stat[1], "param": w * cg}),
            Dim(cg, False, {**ds(1), "param": w}),
        ]
        dims += [Dim(lens[i], False, ds(i)) for i in range(2, len(lens))]
        del xs
        return dims

    @property
    def channels_last(self) -> bool:
        """x stored N, spatial..., C (and not also row-major: a 1x1 image is both)."""
        return not self.x.packed and self.x.strides == channels_last_strides(self.x.lens)

    def param_map(self):
        """As LayerNormProblem.param_map: for an NCHW-packed or a channels-last x."""
        n, c = self.x.lens[:2]
        hw = math.prod(self.x.lens[2:])
        g = self.num_groups
        cg = c // g
        if self.x.packed:
            return (hw, c, g, cg, hw)
        if self.channels_last:
            return (1, c, g, cg, 1)
        return None

    def packed_pgrad(self) -> PgradGeometry | None:
        """dweight / dbias: per channel N segments of H*W (NCHW), or columns of N*H*W rows
        (channels-last)."""
        n, c = self.x.lens[:2]
        hw = math.prod(self.x.lens[2:])
        g = self.num_groups
        cg = c // g
        if self.x.packed:
            return PgradGeometry("rows", c, S=n, L=hw, pstride=hw, sstride=c * hw, smul=g, pdiv=cg)
        if self.channels_last:
            return PgradGeometry("cols", c, rows=n * hw, rstride=c, rdiv=hw, rmul=g, cdiv=cg)
        return None

    def key(self) -> str:
        """``groupnorm_g4_F_m0_e1e-05_32x32x14x14x14_FP32``."""
        return (
            f"groupnorm_g{self.num_groups}_{self.direction.value}_m{self.mode}_"
            f"e{float_text(self.epsilon)}_{self.x.key()}_{self.dtype.value}"
        )

    @classmethod
    def parse(cls, key: str) -> GroupNormProblem:
        m = re.match(r"^groupnorm_g(?P<g>[0-9]+)" + _KEY, key.strip()) if isinstance(key, str) else None
        if not m:
            raise bad("key", key, "not a group norm problem key")
        x = NdDesc.parse(m["dt"], m["x"])
        return cls(x, int(m["g"]), float(m["e"]), int(m["m"]), m["dir"])

    def driver_args(self, solver_id: int | None = None) -> list[str]:
        sub = {"FP32": "groupnorm", "FP16": "groupnormfp16", "BF16": "groupnormbfp16"}[self.dtype.value]
        lens = self.x.lens
        args = [sub, "-n", str(lens[0]), "-c", str(lens[1])]
        sp = list(lens[2:])
        d, h, w = ([0, 0] + sp)[-3:] if len(sp) < 3 else sp
        args += ["-D", str(d), "-H", str(h), "-W", str(w), "-g", str(self.num_groups)]
        if not self.x.packed:
            if self.x.strides == channels_last_strides(lens):
                args += ["-L", CHANNELS_LAST[len(lens)]]
            else:
                args += ["-L", ",".join(map(str, self.x.strides))]
        args += [
            "-e",
            float_text(self.epsilon),
            "-m",
            str(self.mode),
            "-F",
            "1" if self.direction is Pass.FORWARD else "2",
        ]
        if solver_id is not None:
            args += ["-S", str(solver_id)]
        return args


__all__ = ["GroupNormProblem", "LayerNormProblem"]
