"""ConvIgemmNchwFwd, ConvIgemmNchwBwd and ConvIgemmNchwWrw: the fp16 / bf16 tensor-core
implicit-GEMM solvers on the NHWC twin of an NCHW problem, with transposes around them (CUDA).

On the CPU: applicability, registration, configs (the inner solvers' on the twin, the default
from the twin's find DB record), the programs' steps, launch geometry and workspace, the programs
run step by step in NumPy (the transposes by their contract, the GEMM kernels by the reference
convolution) against the reference, and NVRTC builds of their kernels for sm_90. On a GPU (marked
``gpu``): every direction in fp16 and bf16 on 3x3 and 1x1 layers, stride 2, padding, odd pixel
counts and the 3-channel first layer, with each applicable inner solver, against the reference."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import support

from miopy import backends
from miopy.db.find_db import FindRecord
from miopy.errors import BadParm
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.reference.common import view
from miopy.reference.conv import conv_reference
from miopy.solution import Launch, Tensor, Workspace
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.epilogue import Epilogue, fused_program
from miopy.solvers.conv.igemm_nchw import INNER, nhwc_twin
from miopy.solvers.conv.igemm_padded import ALIGN
from miopy.solvers.conv.implicit_gemm_nchw import ConvIgemmNchwBwd, ConvIgemmNchwFwd, ConvIgemmNchwWrw
from miopy.tensor import TensorDesc

SOLVERS = {"F": ConvIgemmNchwFwd(), "B": ConvIgemmNchwBwd(), "W": ConvIgemmNchwWrw()}
NCHW = ("NCHW",) * 3
CTX = support.fake_cuda_ctx()
CTX80 = support.fake_cuda_ctx(arch="sm_80")  # no wgmma: the mma.sync inner solvers
make = support.conv_problem


def layer(direction: str, dtype: str = "fp16", batch: int = 32) -> ConvProblem:
    """ResNet-50's 64-channel 56x56 3x3 layer, NCHW."""
    return make(dtype, (batch, 64, 56, 56), (64, 64, 3, 3), direction, NCHW, pads=(1, 1))


def stem(direction: str, dtype: str = "fp16", batch: int = 32) -> ConvProblem:
    return make(dtype, (batch, 3, 224, 224), (64, 3, 7, 7), direction, NCHW, pads=(3, 3), strides=(2, 2))


def small(direction: str) -> list[ConvProblem]:
    """Small NCHW problems: 3x3, stride 2 with odd sides, 1x1, 3 channels, mixed read layouts."""
    return [
        make("fp16", (2, 16, 9, 11), (24, 16, 3, 3), direction, NCHW, pads=(1, 1)),
        make("bf16", (3, 8, 7, 9), (16, 8, 3, 2), direction, NCHW, pads=(1, 0), strides=(2, 2)),
        make("fp16", (2, 32, 5, 5), (16, 32, 1, 1), direction, NCHW),
        make("bf16", (2, 3, 12, 10), (8, 3, 3, 3), direction, NCHW, pads=(1, 1), strides=(2, 2)),
    ]


def mixed(direction: str) -> ConvProblem:
    """One read activation NHWC (used in place), the other tensors NCHW (x, w, y)."""
    layouts = {"F": ("NHWC", "NCHW", "NCHW"), "B": ("NCHW", "NCHW", "NHWC"), "W": ("NHWC", "NCHW", "NCHW")}
    return make("fp16", (2, 16, 6, 6), (16, 16, 3, 3), direction, layouts[direction], pads=(1, 1))


# ---- applicability and registration ------------------------------------------------------------
@pytest.mark.parametrize("direction", "FBW")
def test_applicability(direction):
    solver = SOLVERS[direction]
    for problem in [layer(direction), stem(direction), *small(direction), mixed(direction)]:
        assert solver.is_applicable(CTX, problem.conv_view()) is None, problem.key()
        assert solver.is_applicable(CTX80, problem.conv_view()) is None, problem.key()
    other = {"F": "B", "B": "W", "W": "F"}[direction]
    reasons = {
        "backend": (support.fake_cuda_ctx("opencl"), layer(direction)),
        "direction": (CTX, layer(other)),
        "dtype": (CTX, make("fp32", (2, 16, 8, 8), (16, 16, 3, 3), direction, NCHW, pads=(1, 1))),
        "groups": (CTX, make("fp16", (2, 16, 8, 8), (16, 8, 3, 3), direction, NCHW, pads=(1, 1), groups=2)),
        "not packed NCHW": (CTX, make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), direction, pads=(1, 1))),
        "3-d": (
            CTX,
            make("fp16", (1, 8, 4, 4, 4), (8, 8, 3, 3, 3), direction, ("NCDHW",) * 3, pads=(1, 1, 1)),
        ),
        "grid": (CTX, make("fp16", (70000, 8, 2, 2), (8, 8, 1, 1), direction, NCHW)),
    }
    for word, (ctx, problem) in reasons.items():
        reason = solver.is_applicable(ctx, problem.conv_view())
        assert reason is not None and word.lower() in reason.lower(), (word, reason)


def test_registered_in_order():
    names = [s.name for s in CONV_SOLVERS]
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)
    for d, after, before in (
        ("F", "ConvIgemmPadFwdNhwc", "GemmFwdRest"),
        ("B", "ConvIgemmPadBwdNhwc", "GemmBwdRest"),
        ("W", "ConvIgemmPadWrwNhwc", "GemmWrwUniversal"),
    ):
        solver = SOLVERS[d]
        assert isinstance(by_name(solver.name), type(solver)) and by_name(str(solver.id), "conv") is not None
        assert names.index(after) < names.index(solver.name) < names.index(before)
        assert solver.tunable and solver.algorithm == "implicit_gemm"
        assert solver.epilogue_files == frozenset({"layout_tile_out"}) and solver.epilogue_bias == (d == "F")


def test_twin():
    twin = nhwc_twin(stem("F").conv_view())
    assert (
        twin.x.lens == (32, 3, 224, 224)
        and twin.w.lens == (64, 3, 7, 7)
        and twin.y.lens == (32, 64, 112, 112)
    )
    assert twin.pads == (3, 3) and twin.conv.strides == (2, 2) and twin.direction is stem("F").direction
    assert all(d.layout == "NHWC" and d.packed for d in (twin.x, twin.w, twin.y))


# ---- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("direction", "FBW")
def test_configs_are_the_inner_solvers_on_the_twin(direction):
    solver = SOLVERS[direction]
    wgmma = {"F": "ConvWgmmaFwdNhwc", "B": "ConvWgmmaBwdNhwc", "W": "ConvWgmmaWrwNhwc"}[direction]
    for ctx in (CTX, CTX80):
        for problem in [layer(direction), stem(direction), *small(direction)]:
            view_ = problem.conv_view()
            twin = nhwc_twin(view_)
            default = solver.default_config(ctx, view_)
            inner = by_name(default[INNER], "conv")
            rest = {k: v for k, v in default.items() if k != INNER}
            assert inner.name in [s.name for s in solver.inners]
            assert inner.is_valid_config(ctx, twin, rest) and rest == inner.default_config(ctx, twin)
            assert solver.is_valid_config(ctx, view_, default)
            assert (ctx is CTX80) <= (inner.name != wgmma)  # no wgmma on sm_80
            assert not solver.is_valid_config(ctx, view_, {**default, INNER: "GemmFwdRest"})
            assert not solver.is_valid_config(ctx, view_, rest)
            assert not solver.is_valid_config(ctx, view_, None)
            with pytest.raises(BadParm):
                solver.get_program(ctx, view_, {**default, INNER: "nothing"})
    view_ = layer(direction).conv_view()
    space = list(solver.search_space(CTX80, view_))
    assert len(space) >= 10 and {c[INNER] for c in space} == {INNER_MMA[direction]}
    assert all(solver.is_valid_config(CTX80, view_, c) for c in space[:: max(1, len(space) // 10)])
    if direction != "B":  # on sm_90 the wgmma solver's space too (backward data's defers for C = 64)
        assert solver.default_config(CTX, view_)[INNER] == wgmma
    assert wgmma in {c[INNER] for c in solver.search_space(CTX, view_)}


INNER_MMA = {"F": "ConvIgemmFwdNhwc", "B": "ConvIgemmBwdNhwc", "W": "ConvIgemmWrwNhwc"}


def test_default_follows_the_twins_find_record():
    """The first record of the twin's find DB list naming an inner solver, with its config."""
    view_ = layer("F").conv_view()
    twin = nhwc_twin(view_)
    mma = by_name("ConvIgemmFwdNhwc", "conv")
    tuned = dict(
        mma.default_config(CTX, twin), stages=3 if mma.default_config(CTX, twin)["stages"] != 3 else 4
    )
    assert tuned != mma.default_config(CTX, twin) and mma.is_valid_config(CTX, twin, tuned)
    records = [
        FindRecord("GemmLtFwd1x1", 0.01, 0, "gemm", {"order": "col"}),  # not an inner solver
        FindRecord("ConvWgmmaFwdNhwc", 0.02, 0, "implicit_gemm", {"bm": 48}),  # not valid
        FindRecord("ConvIgemmFwdNhwc", 0.03, 0, "implicit_gemm", tuned),
    ]
    asked = []

    def load(key, primitive="conv"):
        asked.append(key)
        return records

    ctx = SimpleNamespace(info=CTX.info, backend_name="cuda", find_db=SimpleNamespace(load=load))
    assert SOLVERS["F"].default_config(ctx, view_) == {INNER: "ConvIgemmFwdNhwc", **tuned}
    assert asked and asked[0] == twin.key()
    records[:] = []
    assert SOLVERS["F"].default_config(ctx, view_)[INNER] == "ConvWgmmaFwdNhwc"


# ---- programs ------------------------------------------------------------------------------------
def test_layer_programs():
    """Steps, arguments, launch geometry and workspace parts of the 56x56 layer."""
    act = 32 * 64 * 56 * 56 * 2  # one activation, fp16
    fil = 64 * 64 * 9 * 2
    for direction, reads, out in (("F", ("x", "w"), "y"), ("B", ("y", "w"), "x"), ("W", ("x", "y"), "w")):
        solver = SOLVERS[direction]
        view_ = layer(direction).conv_view()
        for ctx in (CTX, CTX80):
            config = solver.default_config(ctx, view_)
            program = solver.get_program(ctx, view_)
            first, second, *gemm, back = program.steps
            sizes = {"x": act, "y": act, "w": fil}
            offsets = [0, sizes[reads[0]], sizes[reads[0]] + sizes[reads[1]]]
            offsets = [-(-o // ALIGN) * ALIGN for o in offsets]
            for step, role, offset in ((first, reads[0], offsets[0]), (second, reads[1], offsets[1])):
                assert step.spec.name == "transpose_tile_in" and step.args[:2] == (
                    Tensor(role),
                    Workspace(offset),
                )
                batches, rows, cols = (64, 64, 9) if role == "w" else (32, 64, 3136)
                assert (int(step.args[2]), int(step.args[3])) == (rows, cols)
                assert step.spec.global_size == (-(-cols // 64) * 32, -(-rows // 64) * 8, batches)
                assert step.spec.local_size == (32, 8, 1)
                defines = dict(step.spec.defines)
                assert (defines["TP_LDV"], defines["TP_STV"]) == ((1, 8) if role == "w" else (8, 8))
            assert back.spec.name == "transpose_tile_out" and back.args[:2] == (
                Workspace(offsets[2]),
                Tensor(out),
            )
            rows, cols = (9, 64) if out == "w" else (3136, 64)
            assert (int(back.args[2]), int(back.args[3])) == (rows, cols)
            inner = by_name(config[INNER], "conv")
            twin = nhwc_twin(view_)
            plain = inner.get_program(ctx, twin, {k: v for k, v in config.items() if k != INNER})
            assert [s.spec for s in gemm] == [s.spec for s in plain.steps]
            assert not any(isinstance(a, Tensor) for s in gemm for a in s.args)
            end = offsets[2] + -(-sizes[out] // ALIGN) * ALIGN
            assert program.workspace == end + -(-plain.workspace // ALIGN) * ALIGN
            assert program.workspace == solver.workspace_size(ctx, view_)


def test_one_pixel_tensors_in_place():
    """A 1x1 filter is read in place (KCRS is KRSC); its gradient is written by copy_out."""
    fwd = SOLVERS["F"].get_program(CTX, small("F")[2].conv_view())
    assert [s.spec.name for s in fwd.steps][0] == "transpose_tile_in" and fwd.steps[0].args[0] == Tensor("x")
    assert all(s.spec.name != "transpose_tile_in" or s.args[0] != Tensor("w") for s in fwd.steps)
    assert Tensor("w") in fwd.steps[1].args
    wrw = SOLVERS["W"].get_program(CTX, small("W")[2].conv_view())
    back = wrw.steps[-1]
    assert back.spec.name == "copy_out" and back.args[1] == Tensor("w")
    assert [int(a) for a in back.args[2:]] == [16 * 32, 32]


def test_narrow_input_and_mixed_layouts():
    """3 channels: transpose_narrow_in, one work item per pixel; an NHWC read tensor in place."""
    program = SOLVERS["F"].get_program(CTX, stem("F").conv_view())
    narrow = program.steps[0]
    assert narrow.spec.name == "transpose_narrow_in" and narrow.spec.local_size == (256,)
    assert [int(a) for a in narrow.args[2:]] == [3, 224 * 224, 32 * 224 * 224]
    assert narrow.spec.global_size == (-(-32 * 224 * 224 // 256) * 256,)
    back = SOLVERS["B"].get_program(CTX, stem("B").conv_view()).steps[-1]
    assert back.spec.name == "transpose_narrow_out" and back.args[1] == Tensor("x")
    assert [int(a) for a in back.args[2:]] == [224 * 224, 3, 32 * 224 * 224]
    for direction in "FBW":
        solver = SOLVERS[direction]
        program = solver.get_program(CTX80, mixed(direction).conv_view())
        first, *_, back = program.steps
        transposed = {"F": "w", "B": "w", "W": "y"}[direction]
        assert first.spec.name == "transpose_tile_in" and first.args[0] == Tensor(transposed)
        gemm_args = [a for s in program.steps[1:-1] for a in s.args]
        assert Tensor({"F": "x", "B": "y", "W": "x"}[direction]) in gemm_args
        assert back.args[1] == Tensor(solver.writes)


@pytest.mark.parametrize("direction", "FBW")
def test_fused_program_only_on_the_output_transpose(direction):
    solver = SOLVERS[direction]
    view_ = layer(direction).conv_view()
    cfg = solver.default_config(CTX, view_)
    fused = fused_program(solver, CTX, view_, cfg, Epilogue(bias=direction == "F"))
    plain = solver.get_program(CTX, view_, cfg)
    for got, was in zip(fused.steps, plain.steps):
        if got.spec.name == "transpose_tile_out":
            assert dict(got.spec.defines)["MIOPY_EPI"] == 1 and len(got.args) == len(was.args) + 4
        else:
            assert got == was


def _take(memory: dict, workspace: np.ndarray, itemsize: int, arg) -> np.ndarray:
    if isinstance(arg, Tensor):
        return memory[arg.role]
    assert arg.offset % ALIGN == 0
    return workspace[arg.offset // itemsize :]


GEMM_ROLES = {
    "igemm_fwd": ("x", "w", "y"),
    "igemm_fwd_c4": ("x", "w", "y"),
    "igemm_bwd": ("y", "w", "x"),
    "igemm_wrw": ("x", "y", "w"),
}


def _stored(values: np.ndarray, desc: TensorDesc) -> np.ndarray:
    """A flat float64 buffer holding ``values`` (logical shape) as ``desc`` lays them out."""
    flat = np.full(desc.element_space, np.nan)
    view(flat, desc)[...] = values
    return flat


def simulate(program, problem: ConvProblem, tensors: dict[str, np.ndarray]) -> np.ndarray:
    """Run ``program`` in NumPy: the transposes and pad_channels by their contracts, a GEMM kernel
    (mma.sync) by the reference convolution its defines describe; a split-K sum as done. Returns
    the output role's logical array."""
    itemsize = problem.dtype.itemsize
    descs = problem.tensors()
    memory = {r: _stored(a, descs[r]) for r, a in tensors.items()}
    out_role = problem.output_role
    memory[out_role] = np.full(descs[out_role].element_space, np.nan)
    workspace = np.full(program.workspace // itemsize + 64, np.nan)
    for step in program.steps:
        assert isinstance(step, Launch)
        d = dict(step.spec.defines)
        buf = [
            _take(memory, workspace, itemsize, a) if isinstance(a, Tensor | Workspace) else a
            for a in step.args
        ]
        name = step.spec.name
        if name in ("transpose_tile_in", "transpose_tile_out", "transpose_narrow_in", "transpose_narrow_out"):
            rows, cols = int(step.args[2]), int(step.args[3])
            if name.startswith("transpose_tile"):
                batches = step.spec.global_size[2]
                assert cols % d["TP_LDV"] == 0 and rows % d["TP_STV"] == 0
            else:  # one work item per pixel: the columns of an input, the rows of an output
                batches = int(step.args[4]) // (cols if name == "transpose_narrow_in" else rows)
            src = buf[0][: batches * rows * cols].reshape(batches, rows, cols)
            buf[1][: src.size] = src.transpose(0, 2, 1).ravel()
        elif name == "copy_out":
            total = int(step.args[2])
            buf[1][:total] = buf[0][:total]
        elif name == "pad_channels":
            rows_dst, rows_src = int(step.args[2]), int(step.args[3])
            s = buf[0][: rows_src * d["CP_MID"] * d["CP_C_SRC"]].reshape(rows_src, d["CP_MID"], d["CP_C_SRC"])
            padded = np.zeros((rows_dst, d["CP_MID_DST"], d["CP_C_DST"]))
            r, m, c = (
                min(rows_src, rows_dst),
                min(d["CP_MID"], d["CP_MID_DST"]),
                min(d["CP_C_SRC"], d["CP_C_DST"]),
            )
            padded[:r, :m, :c] = s[:r, :m, :c]
            buf[1][: padded.size] = padded.ravel()
        elif name in GEMM_ROLES:
            x = TensorDesc(problem.dtype, (d["IG_N"], d["IG_C"], d["IG_H"], d["IG_W"]), layout="NHWC")
            w = TensorDesc(problem.dtype, (d["IG_K"], d["IG_C"], d["IG_R"], d["IG_S"]), layout="NHWC")
            conv = ConvDesc((d["IG_PH"], d["IG_PW"]), (d["IG_SH"], d["IG_SW"]), (d["IG_DH"], d["IG_DW"]))
            gemm = ConvProblem.create(x, w, conv, problem.direction, y_layout="NHWC")
            roles, gd = GEMM_ROLES[name], gemm.tensors()
            inputs = {}
            for role, flat in zip(roles[:2], buf[:2]):
                stored = flat[: gd[role].element_space]
                assert not np.isnan(stored).any(), f"{name}: {role} was never written"
                inputs[role] = np.array(view(stored, gd[role]))
            if name == "igemm_fwd_c4":  # the filter lies K x R x S2 x 4, tap S2-1 unused
                k, c, r, s = gd["w"].lens
                rows = buf[1][: k * r * d["IG_S2"] * c].reshape(k, r, d["IG_S2"], c)
                inputs["w"] = rows[:, :, :s].transpose(0, 3, 1, 2)
            result = conv_reference(gemm, inputs)
            flat = np.ascontiguousarray(result.transpose(0, 2, 3, 1)).ravel()
            buf[2][: flat.size] = flat
        else:
            assert name.endswith("splitk_reduce"), name
    return np.array(view(memory[out_role], descs[out_role]))


@pytest.mark.parametrize("direction", "FBW")
def test_programs_run_in_numpy(direction):
    """Each small problem's program (mma.sync inner solvers; a split where the space has one)
    computes the reference result when its steps do what their kernels promise."""
    rng = np.random.default_rng(83)
    solver = SOLVERS[direction]
    for problem in [*small(direction), mixed(direction)]:
        view_ = problem.conv_view()
        tensors = {
            r: rng.uniform(-1, 1, d.lens) for r, d in view_.tensors().items() if r != view_.output_role
        }
        want = conv_reference(view_, tensors)
        configs = [solver.default_config(CTX80, view_)]
        configs += [c for c in solver.search_space(CTX80, view_) if c.get("split_k", 1) > 1][:1]
        for config in configs:
            got = simulate(solver.get_program(CTX80, view_, config), view_, tensors)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{problem.key()} {config}")


@support.needs_nvrtc
def test_kernels_compile_for_sm90():
    """NVRTC builds the transposes of a program of each direction, the fused output transpose
    included (the GEMM kernels have their own build tests)."""
    from miopy.backends.base import KERNEL_ROOT
    from miopy.backends.cuda import compile_cubin

    specs = []
    for direction in "FBW":
        view_ = small(direction)[1].conv_view()
        solver = SOLVERS[direction]
        cfg = solver.default_config(CTX, view_)
        specs += solver.get_program(CTX, view_, cfg).kernels
        specs += fused_program(solver, CTX, view_, cfg, Epilogue(bias=direction == "F")).kernels
    specs += SOLVERS["F"].get_program(CTX, stem("F").conv_view()).kernels
    specs += SOLVERS["B"].get_program(CTX, stem("B").conv_view()).kernels
    specs += SOLVERS["W"].get_program(CTX, small("W")[2].conv_view()).kernels
    specs = {s for s in specs if s.file.startswith("layout_tile")}
    names = {
        "transpose_tile_in",
        "transpose_tile_out",
        "transpose_narrow_in",
        "transpose_narrow_out",
        "copy_out",
    }
    assert {s.name for s in specs} == names
    for spec in specs:
        source = (KERNEL_ROOT / "cuda" / f"{spec.file}.cu").read_text()
        cubin = compile_cubin(source, f"{spec.file}.cu", spec.options(), arch="sm_90")
        assert cubin[:4] == b"\x7fELF" and spec.name.encode() in cubin, spec


# ---- on a GPU: against the reference ------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")
gpu = pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


def gpu_problems(direction: str, dtype: str) -> list[ConvProblem]:
    """3x3 with padding, 3x3 stride 2 with odd sides, 1x1 (stride 2 for bf16), and the
    3-channel first layer (fp16) or a dilated filter with odd pixel counts (bf16)."""
    if dtype == "fp16":
        return [
            make(dtype, (4, 64, 14, 14), (64, 64, 3, 3), direction, NCHW, pads=(1, 1)),
            make(dtype, (2, 64, 15, 13), (128, 64, 3, 3), direction, NCHW, pads=(1, 1), strides=(2, 2)),
            make(dtype, (3, 128, 7, 7), (64, 128, 1, 1), direction, NCHW),
            stem(direction, dtype, batch=2),
        ]
    return [
        make(dtype, (4, 64, 14, 14), (64, 64, 3, 3), direction, NCHW, pads=(1, 1)),
        make(dtype, (2, 64, 15, 13), (128, 64, 3, 3), direction, NCHW, pads=(1, 1), strides=(2, 2)),
        make(dtype, (2, 64, 14, 14), (256, 64, 1, 1), direction, NCHW, strides=(2, 2)),
        make(dtype, (2, 24, 9, 11), (40, 24, 3, 2), direction, NCHW, pads=(2, 0), dilations=(2, 1)),
    ]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", "FBW")
def test_against_the_reference(handle, direction, dtype):
    """Default configs; on the first two problems also every other applicable inner solver's
    default (wgmma and mma.sync on sm_90)."""
    rng = np.random.default_rng({"fp16": 91, "bf16": 92}[dtype] + "FBW".index(direction) * 2)
    solver = SOLVERS[direction]
    inners_run = set()
    for i, problem in enumerate(gpu_problems(direction, dtype)):
        view_ = problem.conv_view()
        default = solver.default_config(handle, view_)
        support.check_solver(handle, solver, problem, rng, default)
        inners_run.add(default[INNER])
        if i >= 2:
            continue
        twin = nhwc_twin(view_)
        for inner in solver.applicable_inners(handle, twin):
            if inner.name != default[INNER]:
                config = {INNER: inner.name, **inner.default_config(handle, twin)}
                support.check_solver(handle, solver, problem, rng, config)
                inners_run.add(inner.name)
    assert len(inners_run) >= 2, inners_run


@pytest.mark.gpu
@gpu
def test_mixed_layouts(handle):
    """One read activation NHWC, used in place."""
    rng = np.random.default_rng(93)
    for direction in "FBW":
        support.check_solver(handle, SOLVERS[direction], mixed(direction), rng)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("direction", "FBW")
def test_search_space_sample(handle, direction):
    """A spread of the search space (every inner solver's, splits included) on a ResNet layer at a
    small batch."""
    solver = SOLVERS[direction]
    problem = make("fp16", (2, 128, 14, 14), (128, 128, 3, 3), direction, NCHW, pads=(1, 1))
    space = list(solver.search_space(handle, problem.conv_view()))
    rng = np.random.default_rng(94)
    picks = {0, len(space) - 1, *rng.choice(len(space), 3, replace=False).tolist()}
    for i in sorted(picks):
        support.check_solver(handle, solver, problem, rng, space[i])


@pytest.mark.gpu
@gpu
def test_immediate_mode_takes_it(handle):
    """get_solutions on an NCHW fp16 3x3 layer without a find record: these solvers first."""
    from miopy.engine.find import get_solutions

    for direction in "FBW":
        problem = make("fp16", (2, 32, 10, 10), (48, 32, 3, 3), direction, NCHW, pads=(1, 1))
        first = get_solutions(handle, problem)[0]
        assert first.solver == SOLVERS[direction].name
        support.check(handle, first, np.random.default_rng(95))
