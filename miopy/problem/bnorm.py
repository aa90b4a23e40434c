"""Batch normalisation (MIOpen's miopenBatchNormalization*): BatchNormMode, BnPass and
BatchNormProblem.

Spatial mode keeps one mean and variance per channel (over N and the spatial dims); per-activation
mode one per (C, [D,] H, W) element (over N). Scale, bias and every statistic share one
descriptor: (1, C, 1, 1[, 1]) spatial or (1, C, [D,] H, W) per-activation, in x's layout, of
``param_dtype`` (fp32 for fp16/bf16 data, as MIOpen's mixed-precision batch norm).

Roles (MIOpen's argument names in brackets):
- training forward: x, scale, bias, y; with ``running`` running_mean and running_var are read and
  updated (resultRunningMean/Variance, with MIOpen's exponential-average factor f:
  r = (1 - f) r + f * stat, the variance unbiased by n / (n - 1)); with ``save`` saved_mean and
  saved_inv_var (1 / sqrt(var + epsilon)) are written;
- inference forward: x, scale, bias, estimated_mean, estimated_var, y;
- backward: x, dy, scale, dx, dscale, dbias; with ``save`` the saved_mean and saved_inv_var of the
  training pass are read, else the statistics are recomputed from x.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

from miopy.errors import bad
from miopy.problem.base import Problem
from miopy.problem.keys import key_fields, match_key, role_descs
from miopy.problem.nd import Dim
from miopy.problem.passes import float_text, layouts_key
from miopy.tensor import DataType, TensorDesc

F_SAVE, F_RUNNING, F_SAVED = 4, 8, 16


class BatchNormMode(enum.IntEnum):
    """miopenBatchNormMode_t."""

    PER_ACTIVATION = 0
    SPATIAL = 1

    @classmethod
    def parse(cls, value) -> BatchNormMode:
        if isinstance(value, BatchNormMode):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
            return cls(value)
        text = str(value).strip().upper().replace("-", "_").replace("MIOPENBN", "")
        names = {
            "0": "PER_ACTIVATION",
            "1": "SPATIAL",
            "PERACTIVATION": "PER_ACTIVATION",
            "PERACT": "PER_ACTIVATION",
        }
        text = names.get(text, text)
        if text in cls.__members__:
            return cls[text]
        raise bad("mode", value, "expected per_activation (0) or spatial (1)")


class BnPass(enum.Enum):
    TRAINING = "T"
    INFERENCE = "I"
    BACKWARD = "B"

    @classmethod
    def parse(cls, value) -> BnPass:
        if isinstance(value, BnPass):
            return value
        names = {
            "T": "T",
            "TRAIN": "T",
            "TRAINING": "T",
            "FORWARD_TRAINING": "T",
            "I": "I",
            "INFER": "I",
            "INFERENCE": "I",
            "FORWARD_INFERENCE": "I",
            "B": "B",
            "BWD": "B",
            "BACKWARD": "B",
        }
        key = str(value).strip().upper()
        if key not in names:
            raise bad("direction", value, "expected training, inference or backward")
        return cls(names[key])


_STATS = ("saved_mean", "saved_inv_var")
_RUNNING = ("running_mean", "running_var")
_ESTIMATED = ("estimated_mean", "estimated_var")


def param_desc(x: TensorDesc, mode: BatchNormMode, dtype: DataType) -> TensorDesc:
    """The descriptor of scale, bias and the statistics (MIOpen's miopenDeriveBNTensorDescriptor)."""
    lens = list(x.lens)
    lens[0] = 1
    if mode is BatchNormMode.SPATIAL:
        lens[2:] = [1] * (len(lens) - 2)
    layout = x.layout if x.packed else None
    return TensorDesc(dtype, lens, layout=layout)


def _positive_float(name: str, value, low: float = 0.0, high: float | None = None, closed=False) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise bad(name, value, "expected a number") from None
    if (
        not math.isfinite(out)
        or out < low
        or (out == low and not closed)
        or (high is not None and out > high)
    ):
        rng = f"in [{low:g}, {high:g}]" if high is not None else f"> {low:g}"
        raise bad(name, value, f"must be finite and {rng}")
    return out


@dataclass(frozen=True)
class BatchNormProblem(Problem):
    primitive = "bnorm"
    log_name = "BatchNorm"

    mode: BatchNormMode
    direction: BnPass
    save: bool
    running: bool
    epsilon: float
    exp_avg_factor: float
    x: TensorDesc
    data: TensorDesc  # y forward; dy and dx backward
    param: TensorDesc

    def __init__(
        self,
        mode,
        direction,
        x: TensorDesc,
        out: TensorDesc | None = None,
        param_dtype: DataType | str | None = None,
        save: bool = False,
        running: bool = False,
        epsilon: float = 1e-5,
        exp_avg_factor: float = 1.0,
    ):
        mode = BatchNormMode.parse(mode)
        direction = BnPass.parse(direction)
        if not isinstance(x, TensorDesc):
            raise bad("x", type(x).__name__, "expected a TensorDesc")
        out = x if out is None else out
        if not isinstance(out, TensorDesc):
            raise bad(
                "y" if direction is not BnPass.BACKWARD else "dy", type(out).__name__, "expected a TensorDesc"
            )
        if out.lens != x.lens:
            raise bad(
                "y.lens" if direction is not BnPass.BACKWARD else "dx.lens",
                out.lens,
                f"must equal x.lens {x.lens}",
            )
        if out.dtype != x.dtype:
            raise bad("y.dtype", out.dtype.value, f"must equal x.dtype {x.dtype.value}")
        pdt = DataType.FP32 if param_dtype is None else DataType.parse(param_dtype)
        if (x.dtype, pdt) not in SUBCOMMANDS:
            pairs = ", ".join(f"{a.value}/{b.value}" for a, b in SUBCOMMANDS)
            raise bad("param_dtype", pdt.value, f"not with {x.dtype.value} data (data/param: {pairs})")
        for name, flag in (("save", save), ("running", running)):
            if not isinstance(flag, bool | int) or flag not in (0, 1, True, False):
                raise bad(name, flag, "expected True or False")
        if direction is not BnPass.TRAINING and running:
            raise bad("running", running, "only training updates running statistics")
        if direction is BnPass.INFERENCE and save:
            raise bad("save", save, "inference has no saved statistics")
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "direction", direction)
        object.__setattr__(self, "save", bool(save))
        object.__setattr__(self, "running", bool(running))
        object.__setattr__(self, "epsilon", _positive_float("epsilon", epsilon))
        object.__setattr__(
            self, "exp_avg_factor", _positive_float("exp_avg_factor", exp_avg_factor, 0.0, 1.0, True)
        )
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "data", out)
        object.__setattr__(self, "param", param_desc(x, mode, pdt))
        if self.reduction_count < 1:
            raise bad("x.lens", x.lens, "nothing to normalise over")

    # ---- tensors --------------------------------------------------------------------------------
    @property
    def param_dtype(self) -> DataType:
        return self.param.dtype

    @property
    def dtype(self) -> DataType:
        return self.x.dtype

    @property
    def reduction_count(self) -> int:
        lens = self.x.lens
        return lens[0] * (math.prod(lens[2:]) if self.mode is BatchNormMode.SPATIAL else 1)

    def tensors(self) -> dict[str, TensorDesc]:
        p = self.param
        if self.direction is BnPass.TRAINING:
            t = {"x": self.x, "scale": p, "bias": p, "y": self.data}
            if self.running:
                t.update({r: p for r in _RUNNING})
            if self.save:
                t.update({r: p for r in _STATS})
            return t
        if self.direction is BnPass.INFERENCE:
            return {"x": self.x, "scale": p, "bias": p, **{r: p for r in _ESTIMATED}, "y": self.data}
        t = {"x": self.x, "dy": self.data, "scale": p}
        if self.save:
            t.update({r: p for r in _STATS})
        t.update({"dx": self.data, "dscale": p, "dbias": p})
        return t

    @property
    def inputs(self) -> tuple[str, ...]:
        if self.direction is BnPass.TRAINING:
            return ("x", "scale", "bias", *(_RUNNING if self.running else ()))
        if self.direction is BnPass.INFERENCE:
            return ("x", "scale", "bias", *_ESTIMATED)
        return ("x", "dy", "scale", *(_STATS if self.save else ()))

    @property
    def outputs(self) -> tuple[str, ...]:
        if self.direction is BnPass.TRAINING:
            return ("y", *(_RUNNING if self.running else ()), *(_STATS if self.save else ()))
        if self.direction is BnPass.INFERENCE:
            return ("y",)
        return ("dx", "dscale", "dbias")

    def solver_view(self) -> BatchNormProblem:
        return self

    def view_roles(self) -> dict[str, str]:
        return {r: r for r in self.tensors()}

    # ---- what the norm kernels need (miopy.solvers.norm.program) ------------------------------
    @property
    def norm_kind(self) -> str:
        return {"T": "bn_train", "I": "bn_infer", "B": "bn_bwd"}[self.direction.value]

    @property
    def norm_flags(self) -> int:
        if self.direction is BnPass.TRAINING:
            return (F_SAVE if self.save else 0) | (F_RUNNING if self.running else 0)
        if self.direction is BnPass.BACKWARD:
            return F_SAVED if self.save else 0
        return 0

    affine = False

    def param_map(self):
        return None

    def norm_dims(self) -> list[Dim]:
        roles = ("dy", "dx") if self.direction is BnPass.BACKWARD else ("y",)
        dims = []
        for i, n in enumerate(self.x.lens):
            key = i == 1 or (i > 1 and self.mode is BatchNormMode.PER_ACTIVATION)
            strides = {"x": self.x.strides[i], **{r: self.data.strides[i] for r in roles}}
            if key:
                strides["stat"] = self.param.strides[i]
            dims.append(Dim(n, key, strides))
        return dims

    def finalize_roles(self) -> dict[str, str | None]:
        if self.direction is BnPass.TRAINING:
            r = {"scale": "scale", "bias": "bias"}
            if self.running:
                r.update(s_a="running_mean", s_b="running_var")
            if self.save:
                r.update(s_c="saved_mean", s_d="saved_inv_var")
            return r
        if self.direction is BnPass.INFERENCE:
            return {"scale": "scale", "bias": "bias", "s_a": "estimated_mean", "s_b": "estimated_var"}
        r = {"scale": "scale", "s_c": "dscale", "s_d": "dbias"}
        if self.save:
            r.update(s_a="saved_mean", s_b="saved_inv_var")
        return r

    # ---- keys -----------------------------------------------------------------------------------
    def key(self) -> str:
        """``bnorm_SPATIAL_T_s_r_e1e-05_f1_32x64x56x56_NHWC_FP16_FP32``."""
        parts = ["bnorm", self.mode.name, self.direction.value]
        if self.save:
            parts.append("s")
        if self.running:
            parts.append("r")
        parts += ["e" + float_text(self.epsilon), "f" + float_text(self.exp_avg_factor)]
        parts += ["x".join(map(str, self.x.lens)), layouts_key([self.x, self.data])]
        parts += [self.dtype.value, self.param_dtype.value]
        return "_".join(parts)

    _KEY = re.compile(
        r"^bnorm_(?P<mode>PER_ACTIVATION|SPATIAL)_(?P<dir>[TIB])(?P<s>_s)?(?P<r>_r)?_e(?P<e>[^_]+)_"
        r"f(?P<f>[^_]+)_(?P<lens>[0-9x]+)_(?P<lay>[^_]+)_(?P<dt>[A-Z0-9]+)_(?P<pdt>[A-Z0-9]+)$"
    )

    @classmethod
    def parse(cls, key: str) -> BatchNormProblem:
        what = "a batch norm problem key"
        m = match_key(cls._KEY, key, what)
        with key_fields(key, what):
            lens = tuple(int(v) for v in m["lens"].split("x"))
            dtype = DataType.parse(m["dt"])
            eps, factor = float(m["e"]), float(m["f"])
        x, out = role_descs(key, m["lay"], dtype, lens, ("x", "y")).values()
        return cls(m["mode"], m["dir"], x, out, m["pdt"], bool(m["s"]), bool(m["r"]), eps, factor)

    def network_config(self) -> str:
        """epsilon and the factor are bound as the invokers' scalar defaults, so they are part of it."""
        return self.key()

    def invoker_key(self) -> str:
        return self.key()

    # ---- counts ---------------------------------------------------------------------------------
    def flops(self) -> int:
        return 4 * self.x.element_count

    def bytes(self) -> int:
        t = self.tensors()
        return sum(t[r].nbytes for r in self.inputs) + sum(t[r].nbytes for r in self.outputs)

    def driver_args(self, solver_id: int | None = None) -> list[str]:
        """MIOpenDriver's bnorm flags (miopy adds --epsilon and --exp_avg_factor when they differ
        from the driver's 1e-3 and 1)."""
        sub = subcommand(self.dtype, self.param_dtype)
        lens = self.x.lens
        args = [sub, "-n", str(lens[0]), "-c", str(lens[1])]
        if len(lens) == 5:
            args += ["-D", str(lens[2])]
        args += ["-H", str(lens[-2]), "-W", str(lens[-1]), "-m", str(int(self.mode))]
        if self.direction is BnPass.BACKWARD:
            args += ["--forw", "0", "-b", "1"]
        else:
            args += ["--forw", "1" if self.direction is BnPass.TRAINING else "2", "-b", "0"]
        args += [
            "-s",
            str(int(self.save)),
            "-r",
            str(int(self.running or self.direction is BnPass.INFERENCE)),
        ]
        args += ["--layout", self.x.layout if self.x.packed else ("NCDHW" if len(lens) == 5 else "NCHW")]
        if self.epsilon != 1e-3:
            args += ["--epsilon", float_text(self.epsilon)]
        if self.exp_avg_factor != 1.0:
            args += ["--exp_avg_factor", float_text(self.exp_avg_factor)]
        if solver_id is not None:
            args += ["-S", str(solver_id)]
        return args

    def __str__(self) -> str:
        return self.key()


SUBCOMMANDS = {
    (DataType.FP32, DataType.FP32): "bnorm",
    (DataType.FP16, DataType.FP16): "bnormfp16",
    (DataType.FP16, DataType.FP32): "bnormfp16fp32",
    (DataType.BF16, DataType.FP32): "bnormbfp16fp32",
    (DataType.BF16, DataType.BF16): "bnormbfp16",
}


def subcommand(dtype: DataType, param_dtype: DataType) -> str:
    return SUBCOMMANDS[(dtype, param_dtype)]


__all__ = ["BatchNormMode", "BatchNormProblem", "BnPass", "param_desc", "subcommand"]
