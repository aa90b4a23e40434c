"""The 3xTF32 implicit-GEMM solvers (implicit_gemm_tf32x3.py, implicit_gemm_wrw_tf32x3.py) for
fp32 problems whose C or K is not a multiple of 4, such as the first layer of an image network
(C = 3): ConvIgemmPadFwdTf32x3, ConvIgemmPadBwdTf32x3 (stride 1; strided backward data is
implicit_gemm_phase_tf32x3.py's) and ConvIgemmPadWrwTf32x3. CUDA only, fp32 accuracy (never
plain TF32).

The GEMM kernels copy 4 channels per 16-byte copy. Here they run on a padded problem: C and K
rounded up to multiples of 4, the new channels zero, which adds nothing to any sum. Each read
tensor whose shape changes is copied into the workspace padded and NHWC in one pass
(kernels/cuda/channel_pad.cu from NHWC, kernels/cuda/tf32x3_reshape.cu's pad_nchw_to_nhwc_f32
from NCHW: the transpose the inner solver would do anyway, with the padding), so the inner
solver reads it as it lies. A written tensor whose shape changes is computed into the workspace
in the user's layout and cut back to its real channels (channel_pad.cu). Tensors whose shape
does not change are the user's own (the inner solver transposes NCHW inputs itself, and writes
NCHW outputs in its epilogue).

Workspace: the padded copies, 256-byte aligned, then the inner program's workspace. The config
is the inner solver's, on the padded problem."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from miopy.errors import bad
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import TunableSolver
from miopy.solvers.conv.common import grid_for
from miopy.solvers.conv.igemm_common import is_nhwc
from miopy.solvers.conv.igemm_padded import pad_launch, relocated_launches
from miopy.solvers.conv.implicit_gemm_tf32x3 import (
    ConvIgemmBwdTf32x3,
    ConvIgemmFwdTf32x3,
    Tf32x3Solver,
    align,
    fp32_ungrouped_reason,
    unpacked_reason,
)
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import ConvIgemmWrwTf32x3
from miopy.tensor import DataType, TensorDesc

CHANNEL_STEP = 4  # the kernels' channels per 16-byte copy
OUTPUT_ROLE = {Direction.FORWARD: "y", Direction.BACKWARD_DATA: "x", Direction.BACKWARD_WEIGHTS: "w"}


def round4(value: int) -> int:
    return -(-value // CHANNEL_STEP) * CHANNEL_STEP


def user_layout(desc: TensorDesc) -> str:
    return "NHWC" if is_nhwc(desc) else "NCHW"


def changed_roles(problem: ConvProblem) -> set[str]:
    """The roles whose shape padding changes: x where C is padded, y where K is, w where either."""
    c, k = problem.x.lens[1], problem.w.lens[0]
    out = set()
    if c % CHANNEL_STEP:
        out |= {"x", "w"}
    if k % CHANNEL_STEP:
        out |= {"y", "w"}
    return out


def padded_tf32x3_problem(problem: ConvProblem) -> ConvProblem:
    """The problem with C and K rounded up to multiples of 4: a read tensor that changes is NHWC
    (the padded copy), a written one keeps the user's layout, the others are the user's."""
    n, c, h, w = problem.x.lens
    k, _, r, s = problem.w.lens
    written = OUTPUT_ROLE[problem.direction]
    changed = changed_roles(problem)

    def layout(role: str) -> str:
        if role in changed and role != written:
            return "NHWC"
        return user_layout(getattr(problem, role))

    x = TensorDesc(DataType.FP32, (n, round4(c), h, w), layout=layout("x"))
    wd = TensorDesc(DataType.FP32, (round4(k), round4(c), r, s), layout=layout("w"))
    conv = ConvDesc(problem.pads, problem.conv.strides, problem.conv.dilations)
    return ConvProblem.create(x, wd, conv, problem.direction, y_layout=layout("y"))


def nchw_geometry(problem: ConvProblem, role: str) -> tuple[int, int, int]:
    """(rows, channels, plane) of a role's tensor seen NCHW-like: x N x C x H*W, w K x C x R*S,
    y N x K x P*Q."""
    desc = getattr(problem, role)
    rows, ch, *spatial = desc.lens
    return rows, ch, int(np.prod(spatial))


def nhwc_geometry(problem: ConvProblem, role: str) -> tuple[int, int, int]:
    """(rows, middle, channels) of a role's tensor NHWC: x N*H*W x 1 x C, w K x R*S x C,
    y N*P*Q x 1 x K (channel_pad.cu's view)."""
    rows, ch, plane = nchw_geometry(problem, role)
    return (rows, plane, ch) if role == "w" else (rows * plane, 1, ch)


def pad_in_launch(problem: ConvProblem, padded: ConvProblem, role: str, dst: Workspace) -> Launch:
    """A read tensor into its padded NHWC copy."""
    if is_nhwc(getattr(problem, role)):
        real, wide = nhwc_geometry(problem, role), nhwc_geometry(padded, role)
        return pad_launch(DataType.FP32, Tensor(role), dst, real, wide)
    rows, ch, plane = nchw_geometry(problem, role)
    rows_dst, ch_dst, _ = nchw_geometry(padded, role)
    defines = {"MIOPY_DTYPE": 0, "PT_PLANE": plane, "PT_C_SRC": ch, "PT_C_DST": ch_dst}
    global_size, local_size = grid_for(rows_dst * plane)
    spec = KernelSpec("tf32x3_reshape", "pad_nchw_to_nhwc_f32", defines, global_size, local_size)
    return Launch(spec, (Tensor(role), dst, np.int64(rows_dst), np.int64(rows)))


def cut_launch(problem: ConvProblem, padded: ConvProblem, role: str, src: Workspace) -> Launch:
    """The padded written tensor (in the user's layout) back to its real rows and channels."""
    if is_nhwc(getattr(problem, role)):
        real, wide = nhwc_geometry(problem, role), nhwc_geometry(padded, role)
    else:
        real, wide = nchw_geometry(problem, role), nchw_geometry(padded, role)
    return pad_launch(DataType.FP32, src, Tensor(role), wide, real)


class PaddedTf32x3Solver(TunableSolver):
    """A 3xTF32 solver (``inner``) on the channel-padded problem, with the copies around it."""

    primitive = "conv"
    algorithm = "implicit_gemm"
    inner: ClassVar[Tf32x3Solver]

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        why = fp32_ungrouped_reason(ctx, problem, self.inner.direction) or unpacked_reason(problem)
        if why:
            return why
        if not changed_roles(problem):
            return f"C={problem.x.lens[1]} and K={problem.w.lens[0]} are multiples of 4: nothing to pad"
        return self.inner.is_applicable(ctx, padded_tf32x3_problem(problem))

    # ---- configs: the inner solver's, on the padded problem ---------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        return self.inner.is_valid_config(ctx, padded_tf32x3_problem(problem), config)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        return self.inner.default_config(ctx, padded_tf32x3_problem(problem))

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        return self.inner.search_space(ctx, padded_tf32x3_problem(problem))

    # ---- program ---------------------------------------------------------------------------------
    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        return self.get_program(ctx, problem, config).workspace

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        padded = padded_tf32x3_problem(problem)
        written = OUTPUT_ROLE[problem.direction]
        steps: list[Launch] = []
        operands: dict[str, Any] = {}
        size = 0
        for role in ("x", "w", "y"):
            if role not in changed_roles(problem):
                operands[role] = Tensor(role)
                continue
            operands[role] = Workspace(size)
            size += align(getattr(padded, role).element_space * 4)
            if role != written:
                steps.append(pad_in_launch(problem, padded, role, operands[role]))
        gemm = self.inner.get_program(ctx, padded, config)
        base = size
        size += align(gemm.workspace)
        steps.extend(relocated_launches(self.name, gemm, operands, base))
        if written in changed_roles(problem):
            steps.append(cut_launch(problem, padded, written, operands[written]))
        return Program(tuple(steps), size, {"precision": "3xtf32"})


class ConvIgemmPadFwdTf32x3(PaddedTf32x3Solver):
    name = "ConvIgemmPadFwdTf32x3"
    id = 223  # no MIOpen counterpart; outside the range of its solver ids
    inner = ConvIgemmFwdTf32x3()


class ConvIgemmPadBwdTf32x3(PaddedTf32x3Solver):
    name = "ConvIgemmPadBwdTf32x3"
    id = 224
    inner = ConvIgemmBwdTf32x3()


class ConvIgemmPadWrwTf32x3(PaddedTf32x3Solver):
    name = "ConvIgemmPadWrwTf32x3"
    id = 225
    inner = ConvIgemmWrwTf32x3()
