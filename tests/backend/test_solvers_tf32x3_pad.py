"""The 3xTF32 solvers for layers the plain ones cannot take (CUDA only, fp32 accuracy):
ConvIgemmPad{Fwd,Bwd,Wrw}Tf32x3 (C or K not a multiple of 4: padded copies around the GEMM) and
ConvIgemmBwdPhaseTf32x3 (strided backward data as one stride-1 forward GEMM over the output's
phases).

On the CPU: applicability, the padded problem and the programs (copies, layouts, workspace),
the phase decomposition's arithmetic in NumPy against the reference, NVRTC builds for sm_90.
On a GPU (marked ``gpu``): the first layer of ResNet-50 (batch 2) and random problems of both
layouts against the float64 reference, next to the naive FFMA kernel on the same data (the
checks of test_solvers_tf32x3.py: within the fp32 tolerance, close to the FFMA error, far below
plain TF32's)."""

from __future__ import annotations

import numpy as np
import pytest
import support
from test_solvers_tf32x3 import check_close_to_ffma, errors

from miopy import backends
from miopy.reference.conv import conv_reference
from miopy.solution import Launch, Tensor, Workspace
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.implicit_gemm_pad_tf32x3 import (
    ConvIgemmPadBwdTf32x3,
    ConvIgemmPadFwdTf32x3,
    ConvIgemmPadWrwTf32x3,
    padded_tf32x3_problem,
)
from miopy.solvers.conv.implicit_gemm_phase_tf32x3 import ConvIgemmBwdPhaseTf32x3, phase_geometry
from miopy.solvers.conv.implicit_gemm_tf32x3 import DEFAULT_NARROW_16

PAD_F, PAD_B, PAD_W = ConvIgemmPadFwdTf32x3(), ConvIgemmPadBwdTf32x3(), ConvIgemmPadWrwTf32x3()
PHASE = ConvIgemmBwdPhaseTf32x3()
SOLVERS = {"F": (PAD_F,), "B": (PAD_B, PHASE), "W": (PAD_W,)}
CTX = support.fake_cuda_ctx()


def make(xlens, wlens, direction="F", layout="NCHW", **conv):
    layouts = (layout,) * 3 if isinstance(layout, str) else layout
    return support.conv_problem("fp32", xlens, wlens, direction, layouts, **conv).conv_view()


def stem(direction: str, layout: str, batch: int = 32):
    return make((batch, 3, 224, 224), (64, 3, 7, 7), direction, layout, pads=(3, 3), strides=(2, 2))


def names(program) -> list[str]:
    return [s.spec.name for s in program.steps if isinstance(s, Launch)]


# ---- applicability -------------------------------------------------------------------------------
def test_applicability():
    for layout in ("NCHW", "NHWC"):
        assert PAD_F.is_applicable(CTX, stem("F", layout)) is None
        assert PAD_W.is_applicable(CTX, stem("W", layout)) is None
        assert PHASE.is_applicable(CTX, stem("B", layout)) is None
        assert "stride 1" in PAD_B.is_applicable(CTX, stem("B", layout))
    assert PAD_B.is_applicable(CTX, make((2, 3, 9, 9), (6, 3, 3, 3), "B", pads=(1, 1))) is None
    reasons = {
        "nothing to pad": (PAD_F, make((2, 8, 9, 9), (12, 8, 3, 3), pads=(1, 1))),
        "FP32": (PAD_F, support.conv_problem("fp16", (2, 3, 9, 9), (8, 3, 3, 3), "F").conv_view()),
        "cuda": (PAD_F, stem("F", "NCHW")),
        "direction": (PAD_W, stem("F", "NCHW")),
        "stride 1:": (PHASE, make((2, 3, 9, 9), (8, 3, 3, 3), "B", pads=(1, 1))),
        "dilation": (PHASE, make((2, 3, 19, 19), (8, 3, 3, 3), "B", strides=(2, 2), dilations=(2, 2))),
        "K=6": (PHASE, make((2, 3, 19, 19), (6, 3, 3, 3), "B", strides=(2, 2))),
        "groups": (PHASE, make((2, 4, 19, 19), (8, 2, 3, 3), "B", strides=(2, 2), groups=2)),
    }
    for word, (solver, problem) in reasons.items():
        ctx = support.fake_cuda_ctx("opencl") if word == "cuda" else CTX
        reason = solver.is_applicable(ctx, problem)
        assert reason is not None and word in reason, (word, reason)


def test_registered_after_the_plain_3xtf32_solvers():
    order = [s.name for s in CONV_SOLVERS]
    for plain, padded in (
        ("ConvIgemmFwdTf32x3", "ConvIgemmPadFwdTf32x3"),
        ("ConvIgemmBwdTf32x3", "ConvIgemmPadBwdTf32x3"),
        ("ConvIgemmBwdTf32x3", "ConvIgemmBwdPhaseTf32x3"),
        ("ConvIgemmWrwTf32x3", "ConvIgemmPadWrwTf32x3"),
    ):
        assert order.index(plain) < order.index(padded)
        assert by_name(padded).name == padded
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)


# ---- padded problems and programs ----------------------------------------------------------------
def test_padded_problem_layouts():
    padded = padded_tf32x3_problem(stem("F", "NCHW"))
    assert padded.x.lens == (32, 4, 224, 224) and padded.w.lens == (64, 4, 7, 7)
    assert padded.x.layout == "NHWC" and padded.w.layout == "NHWC"  # read copies: NHWC
    assert padded.y.layout == "NCHW"  # unchanged: the user's, written by the GEMM's epilogue
    wrw = padded_tf32x3_problem(stem("W", "NCHW"))
    assert wrw.w.layout == "NCHW" and wrw.y.layout == "NCHW" and wrw.x.layout == "NHWC"
    odd_k = padded_tf32x3_problem(make((2, 8, 9, 9), (6, 8, 3, 3), "F", "NHWC", pads=(1, 1)))
    assert odd_k.y.lens == (2, 8, 9, 9) and odd_k.w.lens == (8, 8, 3, 3) and odd_k.x.lens[1] == 8


def test_forward_programs():
    nchw = PAD_F.get_program(CTX, stem("F", "NCHW"))
    assert names(nchw) == ["pad_nchw_to_nhwc_f32", "pad_nchw_to_nhwc_f32", "igemm_fwd_tf32x3"]
    pad_x, pad_w, gemm = nchw.steps
    assert dict(pad_x.spec.defines)["PT_C_DST"] == 4 and pad_x.args[0] == Tensor("x")
    assert gemm.args[0] == pad_x.args[1] and gemm.args[2] == pad_w.args[1] and gemm.args[4] == Tensor("y")
    assert dict(gemm.spec.defines)["TX_C"] == 4 and dict(gemm.spec.defines)["TX_OUT_NCHW"] == 1
    assert nchw.workspace >= 32 * 224 * 224 * 4 * 4 + 64 * 49 * 4 * 4
    nhwc = PAD_F.get_program(CTX, stem("F", "NHWC"))
    assert names(nhwc) == ["pad_channels", "pad_channels", "igemm_fwd_tf32x3"]
    odd_k = PAD_F.get_program(CTX, make((2, 8, 9, 9), (6, 8, 3, 3), "F", "NCHW", pads=(1, 1)))
    assert names(odd_k) == ["pad_nchw_to_nhwc_f32", "transpose_f32", "igemm_fwd_tf32x3", "pad_channels"]
    cut = odd_k.steps[-1]
    assert cut.args[1] == Tensor("y") and dict(cut.spec.defines)["CP_MID"] == 8  # 8 padded -> 6
    assert dict(cut.spec.defines)["CP_MID_DST"] == 6


def test_backward_weights_program_cuts_the_filter():
    for layout in ("NCHW", "NHWC"):
        problem = stem("W", layout)
        program = PAD_W.get_program(CTX, problem)
        got = names(program)
        assert got[0] == ("pad_nchw_to_nhwc_f32" if layout == "NCHW" else "pad_channels")
        assert "igemm_wrw_tf32x3" in got and got[-1] == "pad_channels"
        cut = program.steps[-1]
        assert cut.args[1] == Tensor("w") and isinstance(cut.args[0], Workspace)
        defines = dict(cut.spec.defines)
        if layout == "NCHW":  # K x 4 x 49 -> K x 3 x 49
            assert (defines["CP_MID"], defines["CP_MID_DST"], defines["CP_C_DST"]) == (4, 3, 49)
        else:  # K x 49 x 4 -> K x 49 x 3
            assert (defines["CP_MID"], defines["CP_C_SRC"], defines["CP_C_DST"]) == (49, 4, 3)
        assert PAD_W.workspace_size(CTX, problem) == program.workspace


def test_phase_program_and_geometry():
    g = phase_geometry(stem("B", "NCHW"))
    assert (g["D0"], g["RR"], g["E0"], g["SS"], g["CZ"], g["H2"], g["W2"]) == (-1, 4, -1, 4, 12, 112, 112)
    assert PHASE.default_config(CTX, stem("B", "NCHW")) == DEFAULT_NARROW_16
    program = PHASE.get_program(CTX, stem("B", "NCHW"))
    assert names(program) == ["transpose_f32", "phase_filter_f32", "igemm_fwd_tf32x3", "phase_scatter_f32"]
    gemm = program.steps[2]
    defines = dict(gemm.spec.defines)
    assert (defines["TX_C"], defines["TX_K"], defines["TX_R"], defines["TX_P"]) == (64, 12, 4, 112)
    assert (defines["TX_PH"], defines["TX_SH"]) == (1, 1)
    assert dict(program.steps[-1].spec.defines)["PS_NCHW"] == 1 and program.steps[-1].args[-1] == Tensor("x")
    nhwc = PHASE.get_program(CTX, stem("B", "NHWC"))
    assert names(nhwc) == names(program)[1:] and nhwc.steps[1].args[0] == Tensor("y")
    split = PHASE.get_program(CTX, stem("B", "NHWC", batch=1), {**DEFAULT_NARROW_16, "split_k": 4})
    assert names(split) == ["phase_filter_f32", "igemm_fwd_tf32x3", "tf32x3_splitk_sum", "phase_scatter_f32"]


def phase_emulated(problem, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """dx computed the way the phase program does (NCHW in and out, float64): the rearranged
    filter, the stride-1 forward GEMM over dy's windows, the depth-to-space scatter."""
    g = phase_geometry(problem)
    n, c, k = g["N"], g["C"], g["K"]
    filt = np.zeros((g["CZ"], g["RR"], g["SS"], k))
    for o in range(g["SH"] * g["SW"] * c):
        ph, pw, ch = o // (c * g["SW"]), o // c % g["SW"], o % c
        for dr in range(g["RR"]):
            for ds in range(g["SS"]):
                r = ph + g["PH"] - g["SH"] * (dr + g["D0"])
                s = pw + g["PW"] - g["SW"] * (ds + g["E0"])
                if 0 <= r < g["R"] and 0 <= s < g["S"]:
                    filt[o, dr, ds] = w[:, ch, r, s]
    dy_nhwc = dy.transpose(0, 2, 3, 1)
    z = np.zeros((n, g["H2"], g["W2"], g["CZ"]))
    for dr in range(g["RR"]):
        for ds in range(g["SS"]):
            for h2 in range(g["H2"]):
                i = h2 + g["D0"] + dr
                if not 0 <= i < g["P"]:
                    continue
                for w2 in range(g["W2"]):
                    j = w2 + g["E0"] + ds
                    if 0 <= j < g["Q"]:
                        z[:, h2, w2] += dy_nhwc[:, i, j] @ filt[:, dr, ds].T
    dx = np.zeros((n, c, g["H"], g["W"]))
    for h in range(g["H"]):
        for x in range(g["W"]):
            o = ((h % g["SH"]) * g["SW"] + x % g["SW"]) * c
            dx[:, :, h, x] = z[:, h // g["SH"], x // g["SW"], o : o + c]
    return dx


@pytest.mark.parametrize(
    "xlens, wlens, pads, strides",
    [
        ((2, 3, 22, 22), (8, 3, 7, 7), (3, 3), (2, 2)),  # the stem, small
        ((1, 5, 13, 11), (4, 5, 3, 3), (1, 1), (2, 2)),
        ((1, 2, 10, 9), (4, 2, 3, 5), (0, 2), (3, 2)),  # a phase no tap reaches along h
        ((1, 3, 15, 16), (4, 3, 4, 4), (1, 2), (2, 3)),
        ((1, 3, 12, 12), (4, 3, 1, 1), (0, 0), (2, 2)),
    ],
)
def test_phase_decomposition_matches_the_reference(xlens, wlens, pads, strides):
    problem = make(xlens, wlens, "B", pads=pads, strides=strides)
    assert PHASE.is_applicable(CTX, problem) is None
    rng = np.random.default_rng(3)
    dy, w = rng.standard_normal(problem.y.lens), rng.standard_normal(problem.w.lens)
    expected = conv_reference(problem, {"y": dy, "w": w})
    np.testing.assert_allclose(phase_emulated(problem, dy, w), expected, rtol=1e-12, atol=1e-12)


@support.needs_nvrtc
def test_programs_build_for_sm90():
    reshape = "tf32x3_reshape"
    support.assert_builds_for_sm90(PAD_F, CTX, stem("F", "NCHW"), [None], reshape, "pad_nchw_to_nhwc_f32")
    support.assert_builds_for_sm90(PAD_F, CTX, stem("F", "NHWC"), [None], "igemm_fwd_tf32x3")
    support.assert_builds_for_sm90(PAD_W, CTX, stem("W", "NHWC"), [None], "igemm_wrw_tf32x3")
    for kernel in ("phase_filter_f32", "phase_scatter_f32"):
        support.assert_builds_for_sm90(PHASE, CTX, stem("B", "NCHW"), [None], "tf32x3_reshape", kernel)
    support.assert_builds_for_sm90(PHASE, CTX, stem("B", "NHWC"), [DEFAULT_NARROW_16], "igemm_fwd_tf32x3")


# ---- on a GPU: against the reference, next to FFMA ----------------------------------------------
_WHY = backends.unavailable_reason("cuda")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_stem_layer(handle):
    """The ResNet-50 stem (C = 3, 7x7, stride 2) at batch 2 in every direction and layout."""
    rng = np.random.default_rng(61)
    for layout in ("NCHW", "NHWC"):
        for direction, solver in (("F", PAD_F), ("B", PHASE), ("W", PAD_W)):
            problem = support.conv_problem(
                "fp32", (2, 3, 224, 224), (64, 3, 7, 7), direction, (layout,) * 3, pads=(3, 3), strides=(2, 2)
            )
            check_close_to_ffma(errors(handle, solver, problem, rng))


def random_problem(rng, direction: str, solver):
    while True:
        c = int(rng.integers(1, 13))
        k = int(rng.integers(1, 25)) * (4 if solver is PHASE else 1)
        layouts = tuple(str(rng.choice(["NCHW", "NHWC"])) for _ in range(3))
        strides = tuple(int(v) for v in rng.integers(1, 4, 2))
        if solver is PAD_B:
            strides = (1, 1)
        try:
            problem = support.conv_problem(
                "fp32",
                (int(rng.integers(1, 4)), c, *(int(v) for v in rng.integers(3, 20, 2))),
                (k, c, *(int(v) for v in rng.integers(1, 6, 2))),
                direction,
                layouts,
                pads=tuple(int(v) for v in rng.integers(0, 3, 2)),
                strides=strides,
                dilations=(1, 1) if solver is PHASE else tuple(int(v) for v in rng.integers(1, 3, 2)),
            )
        except ValueError:
            continue
        if solver.is_applicable(CTX, problem.conv_view()) is None:
            return problem


@pytest.mark.parametrize("solver", [PAD_F, PAD_B, PHASE, PAD_W], ids=lambda s: s.name)
@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_random_problems(handle, solver):
    direction = {PAD_F: "F", PAD_B: "B", PHASE: "B", PAD_W: "W"}[solver]
    rng = np.random.default_rng(62 + solver.id)
    for _ in range(10):
        problem = random_problem(rng, direction, solver)
        check_close_to_ffma(errors(handle, solver, problem, rng))
