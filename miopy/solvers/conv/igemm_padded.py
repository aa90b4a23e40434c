"""What the channel-padding implicit-GEMM solvers share (implicit_gemm_pad.py forward,
implicit_gemm_pad_bwd.py backward data, implicit_gemm_pad_wrw.py backward weights).

The tensor-core kernels (igemm_fwd.cu, igemm_bwd.cu, igemm_wrw.cu) move 8 channels per 16-byte
copy, so they need C and K to be multiples of 8. A problem whose C or K is not (the first layer
of an image network has C = 3) runs them on a padded problem instead: C and K rounded up to the
next multiple of 8, the padding zeros. Each read tensor whose shape changes is copied into the
workspace with zero channels (kernels/cuda/channel_pad.cu, one pass), the GEMM runs on the padded
tensors, and a written tensor whose shape changes is computed into the workspace and cut back to
its real channels by the same kernel. Zero channels of x or dy add nothing to a sum, and the
extra channels of a padded result are dropped, so the answer is exact up to the GEMM's rounding.

Workspace: the padded copies, 256-byte aligned, then the GEMM program's own workspace (split-K
partials, if any). The GEMM steps are the inner solver's program on the padded problem with its
tensors and workspace placed. The config is the inner solver's, validated and defaulted on the
padded problem."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from miopy.errors import bad
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.solvers.conv.common import grid_for
from miopy.solvers.conv.igemm_common import (
    IgemmSolver,
    cuda_2d_reason,
    nhwc_tensor_core_reason,
    not_nhwc_reason,
)
from miopy.tensor import DataType, TensorDesc

ALIGN = 256  # bytes between the workspace's parts
CHANNEL_STEP = 8  # the kernels' channels per 16-byte copy


def round_up(value: int, step: int = CHANNEL_STEP) -> int:
    return -(-value // step) * step


def padded_problem(problem: ConvProblem) -> ConvProblem:
    """The same convolution with C and K rounded up to multiples of 8, packed NHWC."""
    n, c, h, w = problem.x.lens
    k, _, r, s = problem.w.lens
    dt = problem.dtype
    x = TensorDesc(dt, (n, round_up(c), h, w), layout="NHWC")
    wd = TensorDesc(dt, (round_up(k), round_up(c), r, s), layout="NHWC")
    conv = ConvDesc(problem.pads, problem.conv.strides, problem.conv.dilations)
    return ConvProblem.create(x, wd, conv, problem.direction, y_layout="NHWC")


def padding_reason(ctx, problem: ConvProblem, direction: Direction) -> str | None:
    """Why the padded solvers cannot take ``problem`` (None when they can): as the tensor-core
    solvers (CUDA, 2-D, fp16 or bf16, groups = 1, packed NHWC, under 2^31 elements padded), and
    C or K must not be a multiple of 8 (those problems run unpadded)."""
    why = cuda_2d_reason(ctx, problem, direction)
    if why:
        return why
    if problem.conv.groups != 1:
        return f"groups={problem.conv.groups}"
    c, k = problem.x.lens[1], problem.w.lens[0]
    if c % CHANNEL_STEP == 0 and k % CHANNEL_STEP == 0:
        return f"C={c} and K={k} are multiples of 8: nothing to pad"
    return not_nhwc_reason(problem) or nhwc_tensor_core_reason(ctx, padded_problem(problem), direction)


def role_geometry(problem: ConvProblem, role: str) -> tuple[int, int, int]:
    """(rows, middle, channels) of a role's tensor seen as rows x middle x channels, where
    padding adds channels and (for the filter) rows: x N*H*W x 1 x C, w K x R*S x C,
    y N*P*Q x 1 x K."""
    if role == "w":
        k, c, r, s = problem.w.lens
        return k, r * s, c
    desc = problem.x if role == "x" else problem.y
    n, ch, h, w = desc.lens
    return n * h * w, 1, ch


def pad_launch(dtype: DataType, src: Any, dst: Any, src_geom: tuple, dst_geom: tuple) -> Launch:
    """kernels/cuda/channel_pad.cu: ``dst`` (rows x middle x channels of ``dst_geom``) from
    ``src`` (``src_geom``), zero-filled where ``src`` has no such row, middle or channel."""
    rows_src, mid_src, c_src = src_geom
    rows_dst, mid_dst, c_dst = dst_geom
    vec = next(v for v in (16 // dtype.itemsize, 8 // dtype.itemsize, 1) if c_dst % v == 0)
    defines = {
        "MIOPY_DTYPE": dtype.code,
        "CP_MID": mid_src,
        "CP_MID_DST": mid_dst,
        "CP_C_SRC": c_src,
        "CP_C_DST": c_dst,
        "CP_VEC": vec,
    }
    global_size, local_size = grid_for(rows_dst * mid_dst * c_dst // vec)
    spec = KernelSpec("channel_pad", "pad_channels", defines, global_size, local_size)
    return Launch(spec, (src, dst, np.int64(rows_dst), np.int64(rows_src)))


def relocated_launches(
    solver: str, gemm: Program, operands: dict[str, Any], base: int | None
) -> list[Launch]:
    """``gemm``'s launches as a padded solver runs them: each Tensor argument replaced by
    ``operands[role]`` (the padded copy of that tensor, or the tensor itself) and each Workspace
    argument moved ``base`` bytes on, past the copies. ``solver`` names the caller in the error
    raised for a step that is not a kernel launch."""

    def place(arg: Any) -> Any:
        if isinstance(arg, Tensor):
            return operands[arg.role]
        if isinstance(arg, Workspace):
            return Workspace(base + arg.offset)
        return arg

    out: list[Launch] = []
    for step in gemm.steps:
        if not isinstance(step, Launch):
            raise bad("step", type(step).__name__, f"{solver} places kernel launches only")
        out.append(dataclasses.replace(step, args=tuple(place(a) for a in step.args)))
    return out


class WorkspaceParts:
    """Hands out 256-byte aligned parts of the workspace."""

    def __init__(self) -> None:
        self.size = 0

    def take(self, nbytes: int) -> Workspace:
        offset = self.size
        self.size += round_up(nbytes, ALIGN)
        return Workspace(offset)


class PaddedIgemmSolver(TunableSolver):
    """A tensor-core implicit-GEMM solver (``inner``) on the channel-padded problem, with the
    padding and unpadding copies around it. Subclasses name the inner solver, their name and
    id, and may choose their own default config."""

    primitive = "conv"
    algorithm = "implicit_gemm"
    inner: ClassVar[IgemmSolver]

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        return padding_reason(ctx, problem, self.inner.direction)

    # ---- configs: the inner solver's, on the padded problem ---------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        return self.inner.is_valid_config(ctx, padded_problem(problem), config)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        return self.inner.default_config(ctx, padded_problem(problem))

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        return self.inner.search_space(ctx, padded_problem(problem))

    # ---- what a subclass may change: the padded problem, its tensors, its GEMM ------------------
    def padded(self, problem: ConvProblem) -> ConvProblem:
        """The problem the GEMM computes."""
        return padded_problem(problem)

    def geometries(self, problem: ConvProblem, padded: ConvProblem, role: str) -> tuple[tuple, tuple]:
        """A role's (rows, middle, channels) in the user's problem and in the padded one."""
        return role_geometry(problem, role), role_geometry(padded, role)

    def gemm_program(self, ctx, padded: ConvProblem, config: dict[str, int]) -> Program:
        """The GEMM on the padded problem, on its roles and its own workspace (the inner
        solver's program: with a split, a second kernel or a cluster sum, as it decides)."""
        return self.inner.get_program(ctx, padded, config)

    # ---- program ---------------------------------------------------------------------------------
    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        return self.get_program(ctx, problem, config).workspace

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        padded = self.padded(problem)
        inner = self.inner
        dtype = problem.dtype
        parts = WorkspaceParts()
        steps: list[Launch] = []
        operands: dict[str, Any] = {}
        for role in (*inner.reads, inner.writes):
            real, wide = self.geometries(problem, padded, role)
            if real == wide:
                operands[role] = Tensor(role)
                continue
            operands[role] = parts.take(wide[0] * wide[1] * wide[2] * dtype.itemsize)
            if role != inner.writes:
                steps.append(pad_launch(dtype, Tensor(role), operands[role], real, wide))
        gemm = self.gemm_program(ctx, padded, config)
        base = parts.take(gemm.workspace).offset if gemm.workspace else None
        out = operands[inner.writes]
        steps.extend(relocated_launches(self.name, gemm, operands, base))
        if out != Tensor(inner.writes):
            real, wide = self.geometries(problem, padded, inner.writes)
            steps.append(pad_launch(dtype, out, Tensor(inner.writes), wide, real))
        return Program(tuple(steps), workspace=parts.size)
