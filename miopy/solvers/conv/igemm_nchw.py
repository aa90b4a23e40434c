"""What the NCHW tensor-core implicit-GEMM solvers share (implicit_gemm_nchw.py: ConvIgemmNchwFwd,
ConvIgemmNchwBwd, ConvIgemmNchwWrw).

The fp16 / bf16 tensor-core solvers (Hopper's wgmma, mma.sync, their channel-padding variants)
read and write packed NHWC only. An NCHW problem runs them on its NHWC twin (the same convolution,
every tensor packed NHWC): each read tensor stored NCHW is transposed into the workspace
(kernels/cuda/layout_tile.cu: x or dy [N][C][HW] -> [N][HW][C], the KCRS filter -> KRSC; a read
tensor already packed NHWC, or of one pixel per channel such as a 1x1 filter, is used in place),
one NHWC solver (an ``inner``) runs its own program on those copies, its output lands in the
workspace, and kernels/cuda/layout_tile_out.cu writes it back in NCHW ([N][HW][K] -> [N][K][HW],
dw KRSC -> KCRS; a copy for a 1x1 filter). That last kernel makes every write of the output, so
alpha / beta, the bias (forward) and the activation of a fused epilogue are applied there
(epilogue.py); the inner kernels are the plain ones. Tensors of at most 8 channels (an image's 3)
take per-pixel kernels instead of the 64 x 64 shared-memory tiles.

The config is the inner solver's config on the twin with the inner solver's name added:
``{"inner": "ConvWgmmaFwdNhwc", "bm": 128, ...}``. The default is what immediate mode would run
for the twin: the first inner solver of the twin's find DB record whose config is valid here,
else the first applicable inner solver in registry order (those that defer last) with its
perf DB config or its default. The search space is every applicable inner solver's.

Workspace: the NHWC copies of the NCHW read tensors, the NHWC output, then the inner program's
own workspace (split-K partials, channel-padded copies), each part 256-byte aligned.

Refused: other backends, 3-d, fp32 (the 3xTF32 solvers have their own NCHW paths), groups other
than 1, an output that is not packed NCHW (a packed NHWC output runs the NHWC solvers directly),
read tensors neither packed NCHW nor packed NHWC, transposes whose grid would exceed CUDA's
65535 blocks in y or z, and problems whose twin no inner solver takes."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from miopy import config as knobs
from miopy.errors import MiopyError, bad
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor, Workspace
from miopy.solvers.base import Solver, TunableSolver
from miopy.solvers.conv.igemm_common import cuda_2d_reason, is_nhwc
from miopy.solvers.conv.igemm_padded import WorkspaceParts, relocated_launches
from miopy.tensor import DataType, TensorDesc, packed_strides

INNER = "inner"  # the config field naming the inner solver
TILE = 64  # layout_tile's tile side (common/transpose_tile.h)
BLOCK = (32, 8)  # its threads per block
MAX_GRID_YZ = 65535  # CUDA's limit on a grid's y and z
NARROW_ROWS = 8  # NCHW inputs of at most this many channels take transpose_narrow_in
NARROW_BLOCK = 256


def is_nchw(desc: TensorDesc) -> bool:
    return tuple(desc.strides) == packed_strides(tuple(desc.lens), "NCHW")


@functools.lru_cache(maxsize=256)
def nhwc_twin(problem: ConvProblem) -> ConvProblem:
    """The same convolution (a solver view: mode conv, pads resolved) with every tensor packed
    NHWC: what the inner solvers run."""
    dt = problem.dtype
    x = TensorDesc(dt, problem.x.lens, layout="NHWC")
    w = TensorDesc(dt, problem.w.lens, layout="NHWC")
    conv = ConvDesc(problem.pads, problem.conv.strides, problem.conv.dilations)
    return ConvProblem.create(x, w, conv, problem.direction, y_layout="NHWC")


def geometry(desc: TensorDesc) -> tuple[int, int, int]:
    """(batches, channels, pixels) of a 4-d tensor: NCHW stores [batches][channels][pixels], NHWC
    [batches][pixels][channels] (a filter: K, C, R*S)."""
    a, b, *spatial = desc.lens
    return a, b, math.prod(spatial)


def vector(length: int) -> int:
    """Elements per access along a row of ``length``: 8 (16 bytes of 16-bit data) where it is a
    multiple of 8, 2 where it is even, else 1."""
    return next(v for v in (8, 2, 1) if length % v == 0)


def transpose_launch(file: str, name: str, dtype: DataType, src: Any, dst: Any, batches: int, rows: int,
                     cols: int) -> Launch:  # fmt: skip
    """kernels/cuda/``file``.cu's ``name``: ``batches`` rows x cols matrices to cols x rows, read
    ``vector(cols)`` elements at a time (TP_LDV) and written ``vector(rows)`` at a time (TP_STV)."""
    defines = {"MIOPY_DTYPE": dtype.code, "TP_LDV": vector(cols), "TP_STV": vector(rows)}
    global_size = (-(-cols // TILE) * BLOCK[0], -(-rows // TILE) * BLOCK[1], batches)
    spec = KernelSpec(file, name, defines, global_size, (*BLOCK, 1))
    return Launch(spec, (src, dst, np.int32(rows), np.int32(cols)))


def narrow_launch(
    file: str, name: str, dtype: DataType, src: Any, dst: Any, args: tuple, items: int
) -> Launch:
    """kernels/cuda/``file``.cu's ``name``, one work item of ``items`` each, in blocks of
    NARROW_BLOCK, with ``args`` after its source and destination."""
    global_size = (-(-items // NARROW_BLOCK) * NARROW_BLOCK,)
    spec = KernelSpec(file, name, {"MIOPY_DTYPE": dtype.code}, global_size, (NARROW_BLOCK,))
    return Launch(spec, (src, dst, *args))


def to_nhwc(dtype: DataType, desc: TensorDesc, src: Any, dst: Any) -> Launch | None:
    """An NCHW tensor (``desc``) to NHWC: per batch, channels x pixels to pixels x channels
    (transpose_narrow_in for at most NARROW_ROWS channels). None where it has one pixel (a 1x1
    filter): then NCHW and NHWC are the same bytes."""
    batches, channels, pixels = geometry(desc)
    if pixels == 1:
        return None
    if channels > NARROW_ROWS:
        return transpose_launch(
            "layout_tile", "transpose_tile_in", dtype, src, dst, batches, channels, pixels
        )
    total = batches * pixels  # one work item per pixel, reading its few channels
    args = (np.int32(channels), np.int32(pixels), np.int64(total))
    return narrow_launch("layout_tile", "transpose_narrow_in", dtype, src, dst, args, total)


def to_nchw(dtype: DataType, desc: TensorDesc, src: Any, dst: Any) -> Launch:
    """An NHWC result to the NCHW output ``desc`` through layout_tile_out (the fused epilogue's
    kernels): transpose_tile_out, transpose_narrow_out for at most NARROW_ROWS channels, copy_out
    for one pixel (the same bytes in both layouts)."""
    batches, channels, pixels = geometry(desc)
    file = "layout_tile_out"
    if pixels == 1:
        total = batches * channels
        return narrow_launch(file, "copy_out", dtype, src, dst, (np.int64(total), np.int32(channels)), total)
    if channels > NARROW_ROWS:
        return transpose_launch(file, "transpose_tile_out", dtype, src, dst, batches, pixels, channels)
    total = batches * pixels  # one work item per pixel, writing one element to each channel
    args = (np.int32(pixels), np.int32(channels), np.int64(total))
    return narrow_launch(file, "transpose_narrow_out", dtype, src, dst, args, total)


def grid_reason(role: str, desc: TensorDesc) -> str | None:
    """Why ``desc``'s transposes do not fit CUDA's grid (None when they do)."""
    batches, channels, pixels = geometry(desc)
    if batches > MAX_GRID_YZ or -(-max(channels, pixels) // TILE) > MAX_GRID_YZ:
        return f"{role} {desc.lens}: its transpose's grid exceeds {MAX_GRID_YZ} blocks in y or z"
    return None


class NchwIgemmSolver(TunableSolver):
    """One direction's NHWC tensor-core solvers (``inners``, in registry order) on the NHWC twin
    of an NCHW problem, with the transposes around them. A subclass names the direction, its
    roles, the inner solvers, its name and id."""

    primitive = "conv"
    algorithm = "implicit_gemm"
    direction: ClassVar[Direction]
    reads: ClassVar[tuple[str, str]]
    writes: ClassVar[str]
    inners: ClassVar[tuple[Solver, ...]]
    epilogue_files = frozenset({"layout_tile_out"})  # its transpose makes every write of the output

    # ---- applicability ---------------------------------------------------------------------------
    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        why = cuda_2d_reason(ctx, problem, self.direction)
        if why:
            return why
        if problem.dtype not in (DataType.FP16, DataType.BF16):
            return f"dtype is {problem.dtype.value}, not FP16 or BF16"
        if problem.conv.groups != 1:
            return f"groups={problem.conv.groups}"
        tensors = problem.tensors()
        if not is_nchw(tensors[self.writes]):
            return f"{self.writes} (the output) is not packed NCHW"
        for role in self.reads:
            if not (is_nchw(tensors[role]) or is_nhwc(tensors[role])):
                return f"{role} is neither packed NCHW nor packed NHWC"
        for role, desc in tensors.items():
            why = grid_reason(role, desc)
            if why:
                return why
        twin = nhwc_twin(problem)
        reasons = [inner.is_applicable(ctx, twin) for inner in self.inners]
        if all(reasons):
            return f"no NHWC tensor-core solver takes the NHWC twin ({self.inners[0].name}: {reasons[0]})"
        return None

    def applicable_inners(self, ctx, twin: ConvProblem) -> list[Solver]:
        """The inner solvers that take ``twin``, in immediate mode's order (those that defer last)."""
        found = [inner for inner in self.inners if inner.applicability(ctx, twin) is None]
        return sorted(found, key=lambda inner: inner.defers(ctx, twin))

    def inner_named(self, name: Any) -> Solver | None:
        return next((inner for inner in self.inners if inner.name == name), None)

    # ---- configs ---------------------------------------------------------------------------------
    def split_config(self, config: Any) -> tuple[Solver | None, dict[str, Any]]:
        """(the inner solver a config names, the inner solver's config); None where it names none."""
        if not isinstance(config, dict):
            return None, {}
        rest = {k: v for k, v in config.items() if k != INNER}
        return self.inner_named(config.get(INNER)), rest

    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        inner, rest = self.split_config(config)
        if inner is None:
            return False
        twin = nhwc_twin(problem)
        return inner.is_applicable(ctx, twin) is None and inner.is_valid_config(ctx, twin, rest)

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        """The twin's find DB choice among the inner solvers, else the first applicable inner
        solver (immediate mode's order) with its perf DB config or its default."""
        twin = nhwc_twin(problem)
        recorded = self.recorded_config(ctx, twin)
        if recorded is not None:
            return recorded
        inners = self.applicable_inners(ctx, twin)
        if not inners:
            raise bad(
                "problem", problem.key(), f"{self.name}: no NHWC tensor-core solver takes its NHWC twin"
            )
        inner = inners[0]
        stored = self.stored_config(ctx, twin, inner)
        return {INNER: inner.name, **(stored or inner.default_config(ctx, twin))}

    def recorded_config(self, ctx, twin: ConvProblem) -> dict[str, Any] | None:
        """The first record of the twin's find DB list that names an inner solver applicable here
        with a config valid here (None without a find DB, a record or such an entry)."""
        db = getattr(ctx, "find_db", None)
        if db is None or knobs.disable_find_db():
            return None
        try:
            records = db.load(twin.key(), primitive="conv") or ()
        except MiopyError:
            return None
        for record in records:
            inner = self.inner_named(record.solver)
            if inner is None or not isinstance(record.config, dict):
                continue
            if inner.applicability(ctx, twin) is None and inner.is_valid_config(ctx, twin, record.config):
                return {INNER: inner.name, **record.config}
        return None

    @staticmethod
    def stored_config(ctx, twin: ConvProblem, inner: Solver) -> dict[str, Any] | None:
        """The perf DB's config of ``inner`` for the twin, where valid."""
        db = getattr(ctx, "perf_db", None)
        if db is None:
            return None
        try:
            record = db.load(twin.key(), inner.name, primitive="conv")
        except MiopyError:
            return None
        return record if record is not None and inner.is_valid_config(ctx, twin, record) else None

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Every applicable inner solver's search space on the twin, each config named."""
        twin = nhwc_twin(problem)
        out = [{INNER: inner.name, **c} for inner in self.applicable_inners(ctx, twin)
               for c in inner.search_space(ctx, twin)]  # fmt: skip
        return out or [self.default_config(ctx, problem)]

    def defers(self, ctx, problem: ConvProblem) -> bool:
        """Where the chosen inner solver defers on the twin, so does this one."""
        inner, _ = self.split_config(self.default_config(ctx, problem))
        return inner is not None and inner.defers(ctx, nhwc_twin(problem))

    # ---- program ---------------------------------------------------------------------------------
    def workspace_size(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> int:
        return self.get_program(ctx, problem, config).workspace

    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        inner, inner_config = self.split_config(config)
        twin = nhwc_twin(problem)
        gemm = inner.get_program(ctx, twin, inner_config)
        dtype = problem.dtype
        tensors = problem.tensors()
        parts = WorkspaceParts()
        steps: list[Launch] = []
        operands: dict[str, Any] = {}
        for role in self.reads:
            desc = tensors[role]
            ws = Workspace(parts.size)
            launch = None if is_nhwc(desc) else to_nhwc(dtype, desc, Tensor(role), ws)
            if launch is None:  # NHWC already, or one pixel (NCHW is NHWC): read in place
                operands[role] = Tensor(role)
                continue
            operands[role] = parts.take(desc.nbytes)
            steps.append(launch)
        out = tensors[self.writes]
        operands[self.writes] = parts.take(out.nbytes)
        base = parts.take(gemm.workspace).offset if gemm.workspace else None
        steps.extend(relocated_launches(self.name, gemm, operands, base))
        steps.append(to_nchw(dtype, out, operands[self.writes], Tensor(self.writes)))
        return Program(tuple(steps), workspace=parts.size)
