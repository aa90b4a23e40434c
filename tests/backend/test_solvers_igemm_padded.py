"""ConvIgemmPadFwdNhwc, ConvIgemmPadBwdNhwc and ConvIgemmPadWrwNhwc: the tensor-core
implicit-GEMM convolutions on channel-padded copies, for C or K not a multiple of 8 (CUDA only).

On the CPU: applicability, configs, the programs' workspace layout and steps, the programs run
step by step in NumPy (the padding kernel's contract and the reference convolution standing in
for the GEMM kernel) against the reference, and NVRTC builds of their kernels for sm_90. On a GPU
(marked ``gpu``): random problems with odd channel counts (strides, padding, dilation, both data
types), the ResNet-50 stem at a small batch, splits and a sample of each search space, against
the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
import support
from test_solvers_igemm import CTX, fake_ctx, make

from miopy import backends
from miopy.errors import BadParm
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.reference.conv import conv_reference
from miopy.solution import Launch, Tensor, Workspace
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv import implicit_gemm_pad_c4 as c4
from miopy.solvers.conv import implicit_gemm_wrw as wrw
from miopy.solvers.conv.igemm_padded import ALIGN, padded_problem, padding_reason
from miopy.solvers.conv.implicit_gemm_pad import ConvIgemmPadFwdNhwc
from miopy.solvers.conv.implicit_gemm_pad_bwd import (
    DEFAULT_NARROW_C,
    DEFAULT_NARROW_C_SMALL,
    ConvIgemmPadBwdNhwc,
)
from miopy.solvers.conv.implicit_gemm_pad_c4 import ConvIgemmPadC4FwdNhwc
from miopy.solvers.conv.implicit_gemm_pad_wrw import DEFAULT_NARROW_K, ConvIgemmPadWrwNhwc
from miopy.tensor import TensorDesc

SOLVERS = {"F": ConvIgemmPadFwdNhwc(), "B": ConvIgemmPadBwdNhwc(), "W": ConvIgemmPadWrwNhwc()}
INNER = {"F": "ConvIgemmFwdNhwc", "B": "ConvIgemmBwdNhwc", "W": "ConvIgemmWrwNhwc"}
GEMM_ROLES = {
    "igemm_fwd": ("x", "w", "y"),
    "igemm_fwd_c4": ("x", "w", "y"),
    "igemm_bwd": ("y", "w", "x"),
    "igemm_wrw": ("x", "y", "w"),
}


def stem(direction: str, batch: int = 32, dtype: str = "fp16") -> ConvProblem:
    """ResNet-50's first layer: 3 x 224 x 224 -> 64, 7x7, stride 2, pad 3."""
    return make(dtype, (batch, 3, 224, 224), (64, 3, 7, 7), direction, pads=(3, 3), strides=(2, 2))


def odd(direction: str) -> list[ConvProblem]:
    return [
        make("fp16", (2, 3, 9, 11), (16, 3, 3, 3), direction, pads=(1, 1)),
        make("bf16", (3, 5, 10, 7), (12, 5, 3, 2), direction, pads=(1, 0), strides=(2, 2), dilations=(1, 2)),
        make("fp16", (1, 16, 6, 6), (20, 16, 1, 3), direction, pads=(0, 1), strides=(1, 2)),  # K only
        make("bf16", (2, 1, 8, 8), (8, 1, 5, 5), direction, pads=(2, 2), dilations=(2, 1)),  # C = 1
    ]


# ---- applicability and registration ------------------------------------------------------------
@pytest.mark.parametrize("direction", "FBW")
def test_applicability(direction):
    solver = SOLVERS[direction]
    for problem in [stem(direction), *odd(direction)]:
        assert solver.is_applicable(CTX, problem.conv_view()) is None, problem.key()
    assert solver.is_applicable(fake_ctx("opencl"), stem(direction)).startswith("backend ")
    other = {"F": "B", "B": "W", "W": "F"}[direction]
    reasons = {
        "direction": make("fp16", (2, 3, 8, 8), (16, 3, 3, 3), other, pads=(1, 1)),
        "nothing to pad": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), direction, pads=(1, 1)),
        "dtype": make("fp32", (2, 3, 8, 8), (16, 3, 3, 3), direction, pads=(1, 1)),
        "groups": make("fp16", (2, 6, 8, 8), (6, 3, 3, 3), direction, pads=(1, 1), groups=2),
        "NHWC": make("fp16", (2, 3, 8, 8), (16, 3, 3, 3), direction, ("NCHW",) * 3, pads=(1, 1)),
        "3-d": make("fp16", (1, 3, 4, 4, 4), (8, 3, 3, 3, 3), direction, ("NDHWC",) * 3, pads=(1, 1, 1)),
    }
    for word, problem in reasons.items():
        reason = solver.is_applicable(CTX, problem.conv_view())
        assert reason is not None and word.lower() in reason.lower(), (word, reason)
    # never both: the unpadded solver takes exactly the problems this one refuses as unpadded
    inner = by_name(INNER[direction])
    for problem in [stem(direction), *odd(direction), reasons["nothing to pad"]]:
        view_ = problem.conv_view()
        assert (solver.is_applicable(CTX, view_) is None) != (inner.is_applicable(CTX, view_) is None)


def test_padded_problem():
    padded = padded_problem(stem("F"))
    assert padded.x.lens == (32, 8, 224, 224) and padded.w.lens == (64, 8, 7, 7)
    assert padded.y.lens == (32, 64, 112, 112) and padded.pads == (3, 3)
    padded = padded_problem(odd("W")[1])
    assert padded.x.lens == (3, 8, 10, 7) and padded.w.lens == (16, 8, 3, 2)
    assert padded.conv.strides == (2, 2) and padded.conv.dilations == (1, 2)
    for desc in (padded.x, padded.w, padded.y):
        assert desc.layout == "NHWC" and desc.packed


def test_registered_in_order():
    names = [s.name for s in CONV_SOLVERS]
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)
    for d, after, before in (
        ("F", "ConvIgemmFwdNhwc", "GemmFwdRest"),
        ("B", "ConvIgemmBwdNhwc", "GemmBwdRest"),
        ("W", "ConvIgemmWrwNhwc", "GemmWrwUniversal"),
    ):
        solver = SOLVERS[d]
        assert isinstance(by_name(solver.name), type(solver)) and by_name(str(solver.id), "conv") is not None
        assert names.index(after) < names.index(solver.name) < names.index(before)
        assert solver.tunable and solver.algorithm == "implicit_gemm"


# ---- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("direction", "FBW")
def test_configs_are_the_inner_solvers_on_the_padded_problem(direction):
    solver, inner = SOLVERS[direction], by_name(INNER[direction])
    for problem in [stem(direction), *odd(direction)]:
        view_ = problem.conv_view()
        padded = padded_problem(view_)
        default = solver.default_config(CTX, view_)
        assert solver.is_valid_config(CTX, view_, default) and inner.is_valid_config(CTX, padded, default)
        space = list(solver.search_space(CTX, view_))
        assert space == list(inner.search_space(CTX, padded)) and len(space) >= 10
        assert all(solver.is_valid_config(CTX, view_, c) for c in space[:: max(1, len(space) // 20)])
        assert not solver.is_valid_config(CTX, view_, {**default, "bm": 48})
        assert not solver.is_valid_config(CTX, view_, None)
        with pytest.raises(BadParm):
            solver.get_program(CTX, view_, {**default, "bm": 48})
    if direction == "W":  # 64 x 128 tiles, twice default_split's 32: 64 on the stem
        assert solver.default_config(CTX, stem("W")) == {**DEFAULT_NARROW_K, "split_k": 64}
        assert wrw.default_split(padded_problem(stem("W")), DEFAULT_NARROW_K, 132) == 32
        wide = make("fp16", (2, 12, 9, 9), (80, 12, 3, 3), "W", pads=(1, 1))
        assert solver.default_config(CTX, wide) == inner.default_config(CTX, padded_problem(wide))
    if direction == "B":  # 8 padded channels: the 32-wide block
        assert solver.default_config(CTX, stem("B")) == DEFAULT_NARROW_C
        small = solver.default_config(CTX, stem("B", batch=1))  # 196 blocks of 256 rows: < 2 per SM
        assert small == DEFAULT_NARROW_C_SMALL
        wide = make("fp16", (2, 60, 9, 9), (16, 60, 3, 3), "B", pads=(1, 1))
        assert solver.default_config(CTX, wide) == inner.default_config(CTX, padded_problem(wide))


# ---- programs ------------------------------------------------------------------------------------
def test_stem_programs():
    """The workspace parts and steps of the stem in each direction."""
    x8 = 32 * 224 * 224 * 8 * 2  # x with 8 channels, fp16
    w8 = 64 * 49 * 8 * 2
    fwd = SOLVERS["F"].get_program(CTX, stem("F"))
    pad_x, pad_w, gemm = fwd.steps
    assert pad_x.args[:2] == (Tensor("x"), Workspace(0)) and pad_w.args[:2] == (Tensor("w"), Workspace(x8))
    assert gemm.args == (Workspace(0), Workspace(x8), Tensor("y"), None) and fwd.workspace == x8 + w8
    assert dict(pad_x.spec.defines)["CP_VEC"] == 8 and pad_x.spec.name == "pad_channels"
    assert dict(gemm.spec.defines)["IG_C"] == 8 and dict(gemm.spec.defines)["IG_K"] == 64

    bwd = SOLVERS["B"].get_program(CTX, stem("B"))
    pad_w, gemm, unpad = bwd.steps
    dx8 = -(-w8 // ALIGN) * ALIGN
    assert gemm.args == (Tensor("y"), Workspace(0), Workspace(dx8), None)
    assert unpad.args[:2] == (Workspace(dx8), Tensor("x")) and dict(unpad.spec.defines)["CP_VEC"] == 1
    assert (dict(unpad.spec.defines)["CP_C_SRC"], dict(unpad.spec.defines)["CP_C_DST"]) == (8, 3)
    assert bwd.workspace == dx8 + x8

    wrw = SOLVERS["W"].get_program(CTX, stem("W"))
    pad_x, gemm, reduce, unpad = wrw.steps
    assert wrw.kernels[1].name == "igemm_wrw" and reduce.spec.name == "igemm_wrw_splitk_reduce"
    partials = gemm.args[3]
    assert gemm.args[:3] == (Workspace(0), Tensor("y"), Workspace(x8)) and partials.offset == x8 + w8
    assert reduce.args == (partials, Workspace(x8)) and unpad.args[:2] == (Workspace(x8), Tensor("w"))
    split = SOLVERS["W"].default_config(CTX, stem("W"))["split_k"]
    assert wrw.workspace == x8 + w8 + split * 64 * 49 * 8 * 4 == SOLVERS["W"].workspace_size(CTX, stem("W"))


def _storage(a: np.ndarray) -> np.ndarray:
    """Packed NHWC storage of a logical (N, C, H, W) array."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).ravel()


def _logical(flat: np.ndarray, lens: tuple[int, ...]) -> np.ndarray:
    n, c, h, w = lens
    return flat[: n * h * w * c].reshape(n, h, w, c).transpose(0, 3, 1, 2)


def simulate(program, problem: ConvProblem, tensors: dict[str, np.ndarray]) -> np.ndarray:
    """Run ``program`` in NumPy: pad_channels by its contract (channel_pad.h), a GEMM kernel by the
    reference convolution of the problem its defines describe, a split-K sum as done (the GEMM
    step wrote the whole result). Returns the output role's logical array."""
    itemsize = problem.dtype.itemsize
    memory = {role: _storage(a.astype(np.float64)) for role, a in tensors.items()}
    out_role = problem.output_role
    memory[out_role] = np.full(int(np.prod(getattr(problem, out_role).lens)), np.nan)
    workspace = np.full(program.workspace // itemsize + 64, np.nan)

    def buf(arg):
        if isinstance(arg, Tensor):
            return memory[arg.role]
        assert arg.offset % ALIGN == 0
        return workspace[arg.offset // itemsize :]

    for step in program.steps:
        assert isinstance(step, Launch)
        d = dict(step.spec.defines)
        if step.spec.name == "pad_channels":
            src, dst = buf(step.args[0]), buf(step.args[1])
            rows_dst, rows_src = int(step.args[2]), int(step.args[3])
            mid_src, mid_dst, c_src, c_dst = d["CP_MID"], d["CP_MID_DST"], d["CP_C_SRC"], d["CP_C_DST"]
            assert c_dst % d["CP_VEC"] == 0
            s = src[: rows_src * mid_src * c_src].reshape(rows_src, mid_src, c_src)
            out = np.zeros((rows_dst, mid_dst, c_dst))
            rows, mids, cols = min(rows_src, rows_dst), min(mid_src, mid_dst), min(c_src, c_dst)
            out[:rows, :mids, :cols] = s[:rows, :mids, :cols]
            dst[: out.size] = out.ravel()
        elif step.spec.name in GEMM_ROLES:
            x = TensorDesc(problem.dtype, (d["IG_N"], d["IG_C"], d["IG_H"], d["IG_W"]), layout="NHWC")
            w = TensorDesc(problem.dtype, (d["IG_K"], d["IG_C"], d["IG_R"], d["IG_S"]), layout="NHWC")
            conv = ConvDesc((d["IG_PH"], d["IG_PW"]), (d["IG_SH"], d["IG_SW"]), (d["IG_DH"], d["IG_DW"]))
            gemm_problem = ConvProblem.create(x, w, conv, problem.direction)
            roles = GEMM_ROLES[step.spec.name]
            descs = gemm_problem.tensors()
            inputs = {role: _logical(buf(arg), descs[role].lens) for role, arg in zip(roles[:2], step.args)}
            if step.spec.name == "igemm_fwd_c4":  # the filter lies K x R x S2 x 4, tap S2-1 unused
                k, c, r, s = descs["w"].lens
                rows = buf(step.args[1])[: k * r * d["IG_S2"] * c].reshape(k, r, d["IG_S2"], c)
                inputs["w"] = rows[:, :, :s].transpose(0, 3, 1, 2)
            assert not any(np.isnan(a).any() for a in inputs.values()), "a GEMM input was never written"
            result = conv_reference(gemm_problem, inputs)
            flat = _storage(result)
            buf(step.args[2])[: flat.size] = flat
        else:
            assert step.spec.name.endswith("splitk_reduce")
    return _logical(memory[out_role], getattr(problem, out_role).lens)


@pytest.mark.parametrize("direction", "FBW")
def test_programs_run_in_numpy(direction):
    """Every odd problem's program, with its default config and a split where the space has one,
    computes the reference result when its steps do what their kernels promise."""
    rng = np.random.default_rng(61)
    solver = SOLVERS[direction]
    for problem in odd(direction):
        view_ = problem.conv_view()
        tensors = {
            r: rng.uniform(-1, 1, d.lens) for r, d in view_.tensors().items() if r != view_.output_role
        }
        want = conv_reference(view_, tensors)
        configs = [solver.default_config(CTX, view_)]
        configs += [c for c in solver.search_space(CTX, view_) if c["split_k"] > 1][:1]
        for config in configs:
            got = simulate(solver.get_program(CTX, view_, config), view_, tensors)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{problem.key()} {config}")


@support.needs_nvrtc
@pytest.mark.parametrize("direction", "FBW")
def test_kernels_compile_for_sm90(direction):
    """NVRTC builds every kernel of the stem's and an odd problem's programs (no GPU)."""
    from miopy.backends.base import KERNEL_ROOT
    from miopy.backends.cuda import compile_cubin

    solver = SOLVERS[direction]
    for problem in (stem(direction), odd(direction)[1]):
        for spec in solver.get_program(CTX, problem.conv_view()).kernels:
            source = (KERNEL_ROOT / "cuda" / f"{spec.file}.cu").read_text()
            cubin = compile_cubin(source, f"{spec.file}.cu", spec.options(), arch="sm_90")
            assert cubin[:4] == b"\x7fELF" and spec.name.encode() in cubin, spec


def test_padding_reason_refuses_other_backends():
    assert padding_reason(fake_ctx("opencl"), stem("F"), stem("F").direction).startswith("backend ")


# ---- on a GPU: against the reference ------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")
gpu = pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


def channels(rng) -> tuple[int, int] | None:
    """C and K, not both multiples of 8 (None: draw again)."""
    c = int(rng.choice([1, 2, 3, 4, 5, 6, 7, 12, 20, 8, 16]))
    k = int(rng.choice([3, 7, 8, 12, 16, 24, 36, 64]))
    return None if c % 8 == 0 and k % 8 == 0 else (c, k)


def random_problem(rng, dtype, direction):
    return support.random_nhwc_problem(rng, dtype, direction, channels, batch=4, filter_size=8, pad=4)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", "FBW")
def test_random_problems(handle, direction, dtype):
    """Default configs on random problems with C or K not a multiple of 8."""
    rng = np.random.default_rng({"fp16": 71, "bf16": 72}[dtype] + "FBW".index(direction) * 2)
    for _ in range(10):
        support.check_solver(handle, SOLVERS[direction], random_problem(rng, dtype, direction), rng)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", "FBW")
def test_stem_small_batch(handle, direction, dtype):
    """The ResNet-50 stem at batch 2 (the benchmark's layer 1 at batch 32)."""
    rng = np.random.default_rng(73)
    support.check_solver(handle, SOLVERS[direction], stem(direction, batch=2, dtype=dtype), rng)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("direction", "FBW")
def test_search_space_sample(handle, direction):
    """A spread of each search space (splits included) on an odd problem with partial tiles."""
    solver = SOLVERS[direction]
    problem = make(
        "fp16", (2, 5, 13, 15), (36, 5, 3, 3), direction, pads=(1, 2), strides=(2, 2), dilations=(1, 2)
    )
    space = list(solver.search_space(handle, problem.conv_view()))
    rng = np.random.default_rng(74)
    picks = {0, len(space) - 1, *rng.choice(len(space), 8, replace=False).tolist()}
    picks |= {i for i, c in enumerate(space) if c["split_k"] > 1 and i % 7 == 0}
    for i in sorted(picks):
        support.check_solver(handle, solver, problem, rng, space[i])


@pytest.mark.gpu
@gpu
def test_transposed_forward(handle):
    """A transposed convolution with 3 output channels: backward data in its conv view."""
    rng = np.random.default_rng(75)
    x = TensorDesc("fp16", (2, 16, 5, 6), layout="NHWC")
    w = TensorDesc("fp16", (16, 3, 3, 3), layout="NHWC")
    problem = ConvProblem.create(x, w, ConvDesc((1, 1), (2, 2), mode="trans", trans_output_pads=(1, 0)), "F")
    support.check_solver(handle, SOLVERS["B"], problem, rng)


def test_invoker_passes_workspace_parts():
    """A Workspace with an offset reaches the kernel as backend.buffer_at(workspace, offset);
    the whole workspace otherwise; a backend without pointers refuses an offset."""
    from miopy.backends.base import Backend
    from miopy.invoker import ProgramInvoker
    from miopy.solution import InvokeArgs, KernelSpec, Program

    class Fake:
        name = "fake"

        def __init__(self):
            self.launched = []

        def buffer_at(self, buffer, offset):
            return (buffer, offset)

        def launch(self, kernel, global_size, local_size, args, shared_mem=0):
            self.launched.append(args)

    spec = KernelSpec("channel_pad", "pad_channels")
    program = Program(
        (Launch(spec, (Tensor("x"), Workspace(512), Workspace(), np.int64(3))),), workspace=1024
    )
    fake = Fake()
    ProgramInvoker(fake, program, {spec: object()})(InvokeArgs({"x": "X"}, "WS"))
    assert fake.launched == [["X", ("WS", 512), "WS", np.int64(3)]]
    with pytest.raises(BadParm, match="offset"):
        Backend.buffer_at(Fake(), "WS", 256)


# ---- ConvIgemmPadC4FwdNhwc: 4 channels, two taps per 16-byte chunk ----------------------------------
C4 = ConvIgemmPadC4FwdNhwc()
C4_ODD = [
    make("fp16", (2, 3, 9, 11), (16, 3, 3, 3), "F", pads=(1, 1)),
    make("bf16", (2, 1, 8, 8), (8, 1, 5, 5), "F", pads=(2, 2), dilations=(2, 1)),
    make("fp16", (3, 2, 10, 7), (12, 2, 3, 2), "F", pads=(1, 0), strides=(2, 2), dilations=(1, 2)),
    make("bf16", (1, 4, 6, 9), (20, 4, 1, 4), "F", pads=(0, 3), strides=(1, 3)),
]


def test_c4_applicability_and_order():
    for problem in [stem("F"), *C4_ODD]:
        assert C4.is_applicable(CTX, problem) is None, problem.key()
    assert C4.is_applicable(fake_ctx("opencl"), stem("F")).startswith("backend ")
    assert "> 4" in C4.is_applicable(CTX, make("fp16", (2, 5, 8, 8), (16, 5, 3, 3), "F", pads=(1, 1)))
    assert "nothing to pad" in C4.is_applicable(CTX, make("fp16", (2, 8, 8, 8), (8, 8, 3, 3), "F"))
    assert "direction" in C4.is_applicable(CTX, stem("B"))
    names = [s.name for s in CONV_SOLVERS]
    assert names.index("ConvIgemmFwdNhwc") < names.index(C4.name) < names.index("ConvIgemmPadFwdNhwc")
    assert by_name("207", "conv") is not None and C4.tunable


def test_c4_configs():
    assert C4.default_config(CTX, stem("F")) == c4.DEFAULT
    assert C4.default_config(CTX, stem("F", batch=1)) == c4.DEFAULT_SMALL_GRID  # 49 blocks of 256
    for problem in [stem("F"), *C4_ODD]:
        default = C4.default_config(CTX, problem)
        assert C4.is_valid_config(CTX, problem, default) and default["split_k"] == 1
        space = list(C4.search_space(CTX, problem))
        assert len(space) >= 10 and all(c["split_k"] == 1 for c in space)
        assert not C4.is_valid_config(CTX, problem, {**default, "split_k": 2})
        assert not C4.is_valid_config(CTX, problem, {**default, "bm": 48})
        assert C4.is_valid_config(
            fake_ctx(smem=16384), problem, C4.default_config(fake_ctx(smem=16384), problem)
        )


def test_c4_stem_program():
    program = C4.get_program(CTX, stem("F"))
    pad_x, pad_w, gemm = program.steps
    x4 = 32 * 224 * 224 * 4 * 2
    assert pad_x.args[:2] == (Tensor("x"), Workspace(0)) and pad_w.args[:2] == (Tensor("w"), Workspace(x4))
    dx, dw, dg = dict(pad_x.spec.defines), dict(pad_w.spec.defines), dict(gemm.spec.defines)
    assert (dx["CP_C_SRC"], dx["CP_C_DST"], dx["CP_VEC"]) == (3, 4, 4)  # 8-byte stores
    assert (dw["CP_MID"], dw["CP_MID_DST"], dw["CP_C_SRC"], dw["CP_C_DST"]) == (7, 8, 3, 4)
    assert int(pad_w.args[2]) == int(pad_w.args[3]) == 64 * 7
    assert gemm.spec.name == "igemm_fwd_c4" and (dg["IG_C"], dg["IG_S"], dg["IG_S2"]) == (4, 7, 8)
    assert gemm.args == (Workspace(0), Workspace(x4), Tensor("y"), None)
    assert program.workspace == x4 + 64 * 7 * 8 * 4 * 2


def test_c4_programs_run_in_numpy():
    rng = np.random.default_rng(62)
    for problem in C4_ODD:
        tensors = {r: rng.uniform(-1, 1, d.lens) for r, d in problem.tensors().items() if r != "y"}
        want = conv_reference(problem, tensors)
        got = simulate(C4.get_program(CTX, problem), problem, tensors)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=problem.key())


@support.needs_nvrtc
def test_c4_kernels_compile_for_sm90():
    from miopy.backends.base import KERNEL_ROOT
    from miopy.backends.cuda import compile_cubin

    for problem in (stem("F"), C4_ODD[2]):
        space = list(C4.search_space(CTX, problem))
        for config in (C4.default_config(CTX, problem), space[len(space) // 2]):
            for spec in C4.get_program(CTX, problem, config).kernels:
                source = (KERNEL_ROOT / "cuda" / f"{spec.file}.cu").read_text()
                cubin = compile_cubin(source, f"{spec.file}.cu", spec.options(), arch="sm_90")
                assert cubin[:4] == b"\x7fELF" and spec.name.encode() in cubin, spec


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_c4_random_problems(handle, dtype):
    """Default configs on random problems of 1 to 4 channels, the stem at batch 2."""
    rng = np.random.default_rng({"fp16": 76, "bf16": 77}[dtype])
    support.check_solver(handle, C4, stem("F", batch=2, dtype=dtype), rng)

    def channels(r):
        return (int(r.integers(1, 5)), int(r.choice([3, 8, 16, 24, 64])))

    for _ in range(10):
        problem = support.random_nhwc_problem(rng, dtype, "F", channels, batch=4, filter_size=8, pad=4)
        support.check_solver(handle, C4, problem, rng)


@pytest.mark.gpu
@gpu
def test_c4_search_space_sample(handle):
    problem = make("fp16", (2, 3, 13, 15), (36, 3, 3, 5), "F", pads=(1, 2), strides=(2, 2), dilations=(1, 2))
    space = list(C4.search_space(handle, problem))
    rng = np.random.default_rng(78)
    for i in sorted({0, len(space) - 1, *rng.choice(len(space), 8, replace=False).tolist()}):
        support.check_solver(handle, C4, problem, rng, space[i])
