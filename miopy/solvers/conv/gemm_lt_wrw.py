"""fp32 NCHW 1x1 backward weights through cuBLASLt (CUDA only).

On NCHW data dw[K, C] = sum over images n of dy_n[K, HW] · x_n[C, HW]^T: a sum over images that
one product cannot express, since (n, hw) is not one strided index. The ways, a ``mode`` each,
every one timed by find with every cuBLASLt candidate algorithm (``{"mode": m, "algo": A}``, A the
algorithm's attribute values in the order of cuda_libs.ALGO_FIELDS, rebuilt and checked by
cublasLtMatmulAlgoCheck without asking cuBLASLt's heuristics; an older record's A is an index into
the heuristics' list, still read):

- ``batched``: one strided-batched product writes the N per-image results into an fp32
  workspace, then ``batch_sum_f32`` adds them up (N*K*C*4 bytes written and read once more: the
  choice for small K*C with large images).
- ``packed``: x copied to [C][N*HW] and dy to [K][N*HW] (``permute_rows_f32``: whole rows of HW
  values, 16 bytes a thread), then one product with an N*HW-long reduction.
- ``split<S>``: the packed copies, then the reduction cut into S equal slices as a strided batch
  (an explicit split-K: S times as many tiles for a small K*C), summed by ``batch_sum_f32``. The
  shape picks two values of S that fill the GPU with 128x128 tiles.

N products accumulating into dw (beta 1, one CUDA graph) were measured too and lost everywhere on
an H200 (ResNet-50 layers at batch 32: 331 / 357 / 238 µs where the best mode took 110 / 84 / 123
µs), so they are not offered. The GEMMs accumulate in fp32 without TF32.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from miopy.backends.cuda_libs import ALGO_FIELDS, config_of
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import Call, KernelSpec, Launch, Program, Step, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.solvers.conv.common import grid_for
from miopy.solvers.conv.gemm import Dims, GemmPlan, Operand, _is_1x1_0_1
from miopy.solvers.conv.gemm_lt import _lt_gemm, _lt_usable, lt_problem, lt_unknown
from miopy.tensor import DataType

_ALIGN = 256  # where each workspace region starts
BATCHED_MAX_PARTIALS = 1 << 24  # default mode: batched while N*K*C fp32 partials stay this many
SMS = 132  # tiles to aim a split at: two per SM of an H100 / H200
MAX_SPLIT = 64
_PERMUTE = KernelSpec("lt_wrw_nchw", "permute_rows_f32", {"MIOPY_DTYPE": 0})
_BATCH_SUM = KernelSpec("lt_wrw_nchw", "batch_sum_f32", {"MIOPY_DTYPE": 0})


def _up(value: int) -> int:
    return -(-value // _ALIGN) * _ALIGN


def _splits(d: Dims) -> list[int]:
    """Slice counts worth timing: the power of two that gives about 2 * SMS 128x128 tiles, and
    half of it; each must cut N*HW into slices of a multiple of 4 positions (16-byte starts)."""
    tiles = math.ceil(d.k / 128) * math.ceil(d.c / 128)
    target = min(MAX_SPLIT, 1 << max(1, math.ceil(math.log2(2 * SMS / tiles))))
    length = d.n * d.p
    return [s for s in (target // 2, target) if s >= 2 and length % s == 0 and (length // s) % 4 == 0]


class GemmLtWrw1x1Nchw(TunableSolver):
    name = "GemmLtWrw1x1Nchw"
    id = 214  # no MIOpen counterpart
    primitive = "conv"
    algorithm = "gemm"
    dynamic = True
    search_in_find = True

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        usable = _lt_usable(ctx)
        if usable is not None:
            return usable
        reason = self._shape_reason(problem)
        if reason is not None:
            return reason
        # the modes in order, stopping at the first with an algorithm: each asks cuBLASLt's
        # heuristics (about 1 ms on an H200), and the search space needs them all only for find
        if not any(self._algos(problem, mode) for mode in self.modes(problem)):
            return "cuBLASLt has no algorithm for it"
        return None

    def is_applicable_with(self, ctx, problem: ConvProblem, config: Any) -> str | None:
        """A valid config (an algorithm cuBLASLt accepts for its mode) shows cuBLASLt has one."""
        reason = _lt_usable(ctx) or self._shape_reason(problem)
        if reason is not None:
            return reason
        if self.is_valid_config(ctx, problem, config):
            return None
        return self.is_applicable(ctx, problem)

    def without_library(self, ctx, problem: ConvProblem) -> list[KernelSpec] | None:
        """Both kernels of the modes (which mode and algorithm cuBLASLt takes is unknown here)."""
        if not lt_unknown(ctx) or self._shape_reason(problem) is not None:
            return None
        return [_PERMUTE, _BATCH_SUM]

    @staticmethod
    def _shape_reason(problem: ConvProblem) -> str | None:
        """Why not, cuBLASLt's algorithms aside."""
        if problem.direction is not Direction.BACKWARD_WEIGHTS:
            return f"direction is {problem.direction.name}"
        if problem.dtype is not DataType.FP32:
            return f"data type {problem.dtype.value}: the partial results are fp32"
        if not _is_1x1_0_1(problem) or problem.spatial_dims != 2:
            return "not a 2-D 1x1 filter with stride 1 and no padding"
        if problem.conv.groups != 1:
            return "groups > 1"
        for role in ("x", "w", "y"):
            if not getattr(problem, role).packed:
                return f"{role} is not packed"
        d = Dims.of(problem)
        if d.xo != 1 or d.yo != 1 or d.n < 2:
            return "not NCHW with N > 1 (GemmLtWrw1x1 takes NHWC and single images)"
        return None

    # ---- the ways ------------------------------------------------------------------------------
    @staticmethod
    def modes(problem: ConvProblem) -> list[str]:
        return ["batched", "packed", *(f"split{s}" for s in _splits(Dims.of(problem)))]

    @staticmethod
    def _packed(d: Dims) -> tuple[int, int]:
        """Workspace bytes where the packed dy starts, and where the packed data end."""
        y_start = _up(d.c * d.n * d.p * 4)
        return y_start, _up(y_start + d.k * d.n * d.p * 4)

    def _layout(self, problem: ConvProblem, mode: str) -> tuple[GemmPlan, int, int]:
        """(the product, where its fp32 partials start or -1 without any, where cuBLASLt's
        scratch starts), offsets in workspace bytes."""
        d = Dims.of(problem)
        if mode == "batched":
            dy = Operand("y", 0, d.yk, d.yo, d.yn)
            x_t = Operand("x", 0, d.xo, d.xc, d.xn)
            plan = GemmPlan(d.k, d.c, d.p, dy, x_t, Operand("ws", 0, d.c, 1, d.k * d.c), d.n)
            return plan, 0, _up(d.n * d.k * d.c * 4)
        y_start, end = self._packed(d)
        length = d.n * d.p
        dy = Operand("ws", y_start // 4, length, 1)  # [K][N*HW]
        x_t = Operand("ws", 0, 1, length)  # [C][N*HW], read as its transpose
        if mode == "packed":
            return GemmPlan(d.k, d.c, length, dy, x_t, Operand("w", 0, d.wk, d.wc)), -1, end
        split = int(mode[len("split") :])
        part = length // split
        dy = Operand("ws", y_start // 4, length, 1, part)
        x_t = Operand("ws", 0, 1, length, part)
        partials = Operand("ws", end // 4, d.c, 1, d.k * d.c)
        return GemmPlan(d.k, d.c, part, dy, x_t, partials, split), end, end + _up(split * d.k * d.c * 4)

    def _found(self, problem: ConvProblem, mode: str) -> tuple[tuple, dict[str, tuple[str, int]]] | None:
        """The cuBLASLt product of ``mode``: (LtGemm key, operand roles and element offsets)."""
        if mode not in self.modes(problem):
            return None
        found = lt_problem(self._layout(problem, mode)[0], problem.dtype)
        if found is None or any(offset * 4 % 16 for _, offset in found[1].values()):
            return None
        return found

    def _algos(self, problem: ConvProblem, mode: str) -> list:
        found = self._found(problem, mode)
        return _lt_gemm(found[0]).algos() if found else []

    def _algo(self, problem: ConvProblem, mode: str, algo: Any) -> tuple[Any, int] | None:
        """(what cuda_libs.LtGemm.prepare takes, cuBLASLt's workspace bytes) for a config's
        ``algo``: attribute values (a cuda_libs.LtAlgo, checked without the heuristics) or an
        index into the heuristics' list; None when it names no algorithm of the mode here."""
        if isinstance(algo, list):
            if len(algo) != len(ALGO_FIELDS) or any(type(v) is not int for v in algo):
                return None
            found = self._found(problem, mode)
            resolved = _lt_gemm(found[0]).resolve(tuple(algo)) if found else None
            return None if resolved is None else (resolved, resolved.workspace)
        if type(algo) is not int:
            return None
        algos = self._algos(problem, mode)
        return (algo, algos[algo][1]) if 0 <= algo < len(algos) else None

    # ---- configs ---------------------------------------------------------------------------------
    def _pinned(self, problem: ConvProblem, mode: str) -> Iterator[dict[str, Any]]:
        """The configs of the heuristics' picks for ``mode``, each by its attribute values, in
        their order: those cuBLASLt accepts again when rebuilt from the values, each once."""
        found = self._found(problem, mode)
        if found is None:
            return
        gemm = _lt_gemm(found[0])
        seen: set[tuple[int, ...]] = set()
        for algo, _ in gemm.algos():
            values = config_of(algo)
            if values not in seen and gemm.resolve(values) is not None:
                seen.add(values)
                yield {"mode": mode, "algo": list(values)}

    def pin(self, ctx, problem: ConvProblem, config: Any) -> dict[str, Any] | None:
        """An older config naming its algorithm by an index into the heuristics' list, named by the
        algorithm's attribute values instead (the same algorithm, checked rebuilt); None when
        ``config`` is no such valid config or the rebuilt algorithm is refused."""
        if not self.is_valid_config(ctx, problem, config) or type(config["algo"]) is not int:
            return None
        found = self._found(problem, config["mode"])
        algo = self._algos(problem, config["mode"])[config["algo"]][0]
        values = config_of(algo)
        if found is None or _lt_gemm(found[0]).resolve(values) is None:
            return None
        return {"mode": config["mode"], "algo": list(values)}

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        d = Dims.of(problem)
        modes = self.modes(problem)
        mode = "batched" if d.n * d.k * d.c <= BATCHED_MAX_PARTIALS else modes[-1]
        if not self._algos(problem, mode):
            mode = next((m for m in modes if self._algos(problem, m)), mode)
        return next(self._pinned(problem, mode), {"mode": mode, "algo": 0})

    def search_space(self, ctx, problem: ConvProblem) -> list[dict[str, Any]]:
        return [cfg for m in self.modes(problem) for cfg in self._pinned(problem, m)]

    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not isinstance(config, dict) or set(config) != {"mode", "algo"}:
            return False
        mode = config["mode"]
        if not isinstance(mode, str) or not re.fullmatch(r"batched|packed|split\d+", mode):
            return False
        return self._algo(problem, mode, config["algo"]) is not None

    def _workspace(self, problem: ConvProblem, config: dict[str, Any]) -> int:
        found = self._algo(problem, config["mode"], config["algo"])
        need = found[1] if found is not None else 0
        return self._layout(problem, config["mode"])[2] + need

    def workspace_size(self, ctx, problem: ConvProblem) -> int:
        return self._workspace(problem, self.default_config(ctx, problem))

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        config = config or self.default_config(ctx, problem)
        mode = config["mode"]
        chosen = self._algo(problem, mode, config["algo"])
        assert chosen is not None, "checked by is_valid_config"
        found = self._found(problem, mode)
        assert found is not None, "checked by is_applicable"
        key, roles = found
        plan, partials, scratch = self._layout(problem, mode)
        d = Dims.of(problem)
        steps: list[Step] = []
        regions: list[tuple[str, int, int]] = list(plan.regions(4))
        if mode != "batched":
            y_start, _ = self._packed(d)
            spec = _PERMUTE
            for role, rows, start in (("x", d.c, 0), ("y", d.k, y_start)):
                sizes = (np.int32(d.n), np.int32(rows), np.int32(d.p))
                permute = (Tensor(role), Workspace(), np.int64(start // 4), *sizes)
                global_size, local_size = grid_for(-(-d.n * rows * d.p // 4))
                steps.append(Launch(spec, permute, global_size, local_size))
                regions.append(("ws", start // 4 + d.n * rows * d.p, 4))

        def operand(which: str) -> tuple[Any, int]:
            role, offset = roles[which]
            return (Workspace() if role == "ws" else Tensor(role)), offset * 4

        args = (_lt_gemm(key), chosen[0], *operand("a"), *operand("b"), *operand("d"), Workspace(), scratch)
        steps.append(Call("lt_matmul", args))
        if partials >= 0:
            total = d.k * d.c
            spec = _BATCH_SUM
            global_size, local_size = grid_for(-(-total // 4))
            sum_args = (
                Workspace(),
                np.int64(partials // 4),
                Tensor("w"),
                np.int64(total),
                np.int32(plan.batch0),
            )
            steps.append(Launch(spec, sum_args, global_size, local_size))
        workspace = self._workspace(problem, config)
        return Program(tuple(steps), workspace, {"library": "cublasLt", "regions": regions})


__all__ = ["GemmLtWrw1x1Nchw"]
