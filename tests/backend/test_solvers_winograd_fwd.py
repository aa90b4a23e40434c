"""ConvWinograd{Fwd,Bwd}F2x3Tf32x3 / ConvWinograd{Fwd,Bwd}F4x3Tf32x3: fp32 forward and stride-1
backward data of 3x3 layers by Winograd F(2x2, 3x3) and F(4x4, 3x3) with 3xTF32 GEMMs (CUDA only).

On the CPU: applicability, the config and the program (filter and data transforms, the batched
GEMM, the output transform), the kernels' transform matrices in NumPy against the reference
(exact in float64), NVRTC builds for sm_90. On a GPU (marked ``gpu``): ResNet-like layers and
random problems (padding 0 to 2, odd sides, N = 1..3, both layouts) against the float64
reference. Winograd's error bound, stated (RMS error over the output's range, on the same data):
below the fp32 tolerance, and
- F(2x2, 3x3): below 8x the naive FFMA kernel's error + 1e-6 (its transforms mix terms of both
  signs, a few times a direct sum's rounding error), at least 10x below plain TF32's;
- F(4x4, 3x3): below 8x the FFMA error + 5e-7 (about 8 fp32 ulps of the range; constants up to 8
  in A^T and 5 in B^T), at least 50x below plain TF32's. Measured on an H200 over this file's GPU
  problems (14 per direction): 1.5e-7 to 2.6e-7, 1.0x to 13.7x the FFMA error (the largest
  ratio where the FFMA error was only 1.2e-8), 220x to 400x below TF32's; F(2x2) on the same
  problems: at most 6.2e-8 and 2.8x the FFMA error."""

from __future__ import annotations

import numpy as np
import pytest
import support
from test_solvers_tf32x3 import errors

from miopy import backends
from miopy.reference.conv import conv_reference
from miopy.solution import Launch, Tensor
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.winograd_fwd_tf32x3 import (
    DEFAULT_TILE,
    POSITIONS,
    ConvWinogradBwdF2x3Tf32x3,
    ConvWinogradBwdF4x3Tf32x3,
    ConvWinogradFwdF2x3Tf32x3,
    ConvWinogradFwdF4x3Tf32x3,
    geometry,
    positions,
)

FWD = ConvWinogradFwdF2x3Tf32x3()
BWD = ConvWinogradBwdF2x3Tf32x3()
FWD4 = ConvWinogradFwdF4x3Tf32x3()
BWD4 = ConvWinogradBwdF4x3Tf32x3()
CTX = support.fake_cuda_ctx()
# The error the GPU tests allow per output tile side m (RMS over the output's range; see the module
# doc): (multiple of the naive FFMA kernel's error, plus an absolute floor, how far below TF32's)
ERROR_BOUND = {2: (8, 1e-6, 10), 4: (8, 5e-7, 50)}


def make(xlens, k, layout="NCHW", pads=(1, 1), direction="F", **conv):
    layouts = (layout,) * 3 if isinstance(layout, str) else layout
    wlens = (k, xlens[1], 3, 3)
    return support.conv_problem("fp32", xlens, wlens, direction, layouts, pads=pads, **conv).conv_view()


def names(program) -> list[str]:
    return [s.spec.name for s in program.steps if isinstance(s, Launch)]


@pytest.mark.parametrize("FWD, BWD", [(FWD, BWD), (FWD4, BWD4)], ids=["F2x3", "F4x3"])
def test_applicability(FWD, BWD):  # noqa: N803 (the module's names)
    assert FWD.is_applicable(CTX, make((32, 128, 28, 28), 128)) is None
    assert FWD.is_applicable(CTX, make((2, 3, 9, 8), 5, "NHWC", pads=(0, 3))) is None  # any padding
    assert (
        BWD.is_applicable(CTX, make((2, 3, 9, 8), 5, ("NHWC", "NCHW", "NHWC"), pads=(2, 0), direction="B"))
        is None
    )
    assert FWD.is_applicable(CTX, make((1, 2, 1, 1), 3, pads=(1, 1))) is None  # one partial tile
    reasons = {
        "3x3": support.conv_problem("fp32", (2, 8, 9, 9), (8, 8, 5, 5), "F", ("NCHW",) * 3).conv_view(),
        "stride 1": make((2, 8, 9, 9), 8, strides=(2, 2)),
        "dilation": make((2, 8, 9, 9), 8, dilations=(2, 1)),
        "direction": make((2, 8, 9, 9), 8, direction="W"),
        "FP32": support.conv_problem("fp16", (2, 8, 9, 9), (8, 8, 3, 3), "F", ("NHWC",) * 3).conv_view(),
        "groups": support.conv_problem(
            "fp32", (2, 8, 9, 9), (8, 4, 3, 3), "F", ("NCHW",) * 3, groups=2
        ).conv_view(),
    }
    for word, problem in reasons.items():
        reason = FWD.is_applicable(CTX, problem)
        assert reason is not None and word in reason, (word, reason)
    assert "0 to 2" in BWD.is_applicable(CTX, make((2, 8, 9, 9), 8, pads=(3, 1), direction="B"))
    assert "cuda" in FWD.is_applicable(support.fake_cuda_ctx("opencl"), make((2, 8, 9, 9), 8))
    assert f"F({FWD.m}x{FWD.m}, 3x3)" in FWD.is_applicable(CTX, make((2, 8, 9, 9), 8, strides=(2, 2)))
    names_ = [s.name for s in CONV_SOLVERS]
    assert names_.index(FWD.name) < names_.index("GemmFwdRest")  # a find candidate, before the fallback
    assert names_.index(BWD.name) < names_.index("GemmBwdRest")
    assert (
        by_name(str(FWD.id)).name == FWD.name
        and by_name(str(BWD.id)).name == BWD.name
        and FWD.algorithm == "winograd"
    )


def test_config_and_program():
    problem = make((32, 128, 28, 28), 128)
    g = geometry(problem)
    assert (g["TH"], g["TW"], g["T"], g["T4"]) == (14, 14, 6272, 6272)
    config = FWD.default_config(CTX, problem)
    assert config == {**DEFAULT_TILE, "split_k": 1}
    assert not FWD.is_valid_config(CTX, problem, {**DEFAULT_TILE, "split_k": 2})
    assert all(c["split_k"] == 1 for c in FWD.search_space(CTX, problem))
    program = FWD.get_program(CTX, problem, config)
    assert names(program) == ["wf_filter", "wf_in", "igemm_wrw_tf32x3", "wf_out"]
    assert dict(program.steps[0].spec.defines)["WF_M"] == 2
    gemm = program.steps[2]
    defines = dict(gemm.spec.defines)
    assert defines["TX_BATCH"] == POSITIONS
    assert (defines["TX_K"], defines["TX_H"], defines["TX_C"], defines["TX_R"]) == (6272, 128, 128, 1)
    assert gemm.spec.global_size[1:] == (1, POSITIONS)
    assert program.steps[1].args[0] == Tensor("x") and program.steps[-1].args[-1] == Tensor("y")
    assert program.workspace >= 4 * 16 * (128 * 128 + 2 * 128 * 6272)
    # backward data: dy in, dx out, the filter read rotated with K and C swapped, padding 2 - p
    odd = make((3, 5, 7, 9), 6, ("NHWC", "NCHW", "NCHW"), pads=(0, 2), direction="B")
    back = BWD.get_program(CTX, odd)
    d = dict(back.steps[0].spec.defines)
    assert (d["WF_BWD"], d["WF_CI"], d["WF_CO"], d["WF_PH"], d["WF_PW"]) == (1, 6, 5, 2, 0)
    assert (d["WF_HI"], d["WF_HO"], d["WF_IN_NHWC"], d["WF_OUT_NHWC"], d["WF_FILT_NHWC"]) == (5, 7, 0, 1, 0)
    assert (d["WF_T4"], d["WF_CI4"], d["WF_CO4"]) == (3 * 4 * 5, 8, 8)
    assert back.steps[1].args[0] == Tensor("y") and back.steps[-1].args[-1] == Tensor("x")


def test_f4x3_geometry_and_program():
    """F(4x4, 3x3): 4x4 output tiles, 36 GEMMs, the transformed input 2.25x the activations."""
    assert (positions(2), positions(4)) == (POSITIONS, 36)
    problem = make((32, 128, 28, 28), 128)
    g = geometry(problem, 4)
    assert (g["TH"], g["TW"], g["T"], g["T4"]) == (7, 7, 1568, 1568)
    program = FWD4.get_program(CTX, problem)
    assert names(program) == ["wf_filter", "wf_in", "igemm_wrw_tf32x3", "wf_out"]
    assert program.notes["winograd"] == "F(4x4,3x3)"
    gemm = program.steps[2]
    defines = dict(gemm.spec.defines)
    assert defines["TX_BATCH"] == 36 and gemm.spec.global_size[2] == 36
    assert (defines["TX_K"], defines["TX_H"], defines["TX_C"]) == (1568, 128, 128)
    assert 36 * 1568 * 128 == 2.25 * 32 * 128 * 28 * 28  # V against x
    assert program.workspace >= 4 * 36 * (128 * 128 + 2 * 128 * 1568)
    # odd sides: the last tiles partly past the output; backward data reads the filter rotated
    odd = make((3, 5, 7, 9), 6, ("NHWC", "NCHW", "NCHW"), pads=(0, 2), direction="B")
    d = dict(BWD4.get_program(CTX, odd).steps[0].spec.defines)
    assert (d["WF_M"], d["WF_BWD"], d["WF_HO"], d["WF_WO"], d["WF_TH"], d["WF_TW"]) == (4, 1, 7, 9, 2, 3)
    assert (d["WF_T4"], d["WF_CI4"], d["WF_CO4"]) == (3 * 2 * 3 + 2, 8, 8)


# The transforms of common/winograd_f2x3.h and common/winograd_f4x3.h as matrices (B^T, G, A^T).
MATRICES = {
    2: (
        np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]]),
    ),
    4: (
        np.array(
            [
                [2, -3, -4, 3, 2, 0],
                [0, -2, 1, 5, 2, 0],
                [0, 2, -5, 1, 2, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 1, -2, -1, 2, 0],
                [0, 2, -3, -4, 3, 2],
            ]
        ),
        np.array(
            [
                [1 / 2, 0, 0],
                [1 / 6, 1 / 6, 1 / 6],
                [-1 / 6, 1 / 6, -1 / 6],
                [-16 / 15, -8 / 15, -4 / 15],
                [1 / 30, -1 / 15, 2 / 15],
                [0, 0, 1 / 2],
            ]
        ),
        np.array(
            [[1, 1, 1, 1, 1, 0], [0, 1, -1, 1 / 2, -2, 0], [0, 1, 1, 1 / 4, 4, 0], [0, 1, -1, 1 / 8, -8, 1]]
        ),
    ),
}


def winograd_emulated(problem, x: np.ndarray, w: np.ndarray, m: int) -> np.ndarray:
    """The forward output from NCHW x and KCRS w the way the kernels form it (float64): per tile
    V = B^T d B (wf_in), U = G g G^T (wf_filter), the (m+2)^2 sums, Y = A^T M A (wf_out)."""
    bt, gm, at = MATRICES[m]
    g = geometry(problem, m)
    n_, ci, co, a = g["N"], g["CI"], g["CO"], m + 2
    hp, wp = m * g["TH"] + 2, m * g["TW"] + 2
    xp = np.zeros((n_, ci, max(hp, g["HI"] + g["PH"]), max(wp, g["WI"] + g["PW"])))
    xp[:, :, g["PH"] : g["PH"] + g["HI"], g["PW"] : g["PW"] + g["WI"]] = x
    u = np.einsum("ir,kcrs,js->ijkc", gm, w, gm)  # filter transform, per position (i, j)
    y = np.zeros((n_, co, m * g["TH"], m * g["TW"]))
    for th in range(g["TH"]):
        for tw in range(g["TW"]):
            d = xp[:, :, m * th : m * th + a, m * tw : m * tw + a]
            v = np.einsum("ir,ncrs,js->ncij", bt, d, bt)
            mm = np.einsum("ncij,ijkc->nkij", v, u)
            y[:, :, m * th : m * th + m, m * tw : m * tw + m] = np.einsum("ir,nkrs,js->nkij", at, mm, at)
    return y[:, :, : g["HO"], : g["WO"]]


@pytest.mark.parametrize(
    "xlens, k, pads",
    [
        ((2, 3, 7, 9), 4, (1, 1)),
        ((1, 5, 8, 8), 6, (0, 0)),
        ((3, 2, 6, 5), 3, (2, 0)),
        ((1, 4, 4, 4), 4, (3, 2)),
        ((1, 3, 11, 10), 2, (1, 2)),
    ],
)
@pytest.mark.parametrize("m", [2, 4])
def test_transform_formulas_match_the_reference(xlens, k, pads, m):
    problem = make(xlens, k, pads=pads)
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal(problem.x.lens), rng.standard_normal(problem.w.lens)
    expected = conv_reference(problem, {"x": x, "w": w})
    np.testing.assert_allclose(winograd_emulated(problem, x, w, m), expected, rtol=1e-11, atol=1e-11)


@support.needs_nvrtc
def test_builds_for_sm90():
    odd = make((2, 3, 9, 8), 5, ("NHWC", "NCHW", "NHWC"), pads=(0, 2), direction="B")
    for kernel in ("wf_filter", "wf_in", "wf_out"):
        support.assert_builds_for_sm90(BWD4, CTX, odd, [None], "winograd_fwd", kernel)
    support.assert_builds_for_sm90(FWD4, CTX, make((2, 3, 9, 8), 5), [None], "igemm_wrw_tf32x3")


# ---- on a GPU ------------------------------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


def check_winograd(errs: tuple[float, float, float], m: int) -> None:
    err_wino, err_ffma, err_tf32 = errs
    factor, floor, below_tf32 = ERROR_BOUND[m]
    assert err_wino < factor * err_ffma + floor, errs
    assert err_wino < err_tf32 / below_tf32, errs


SOLVERS = [(FWD, "F"), (BWD, "B"), (FWD4, "F"), (BWD4, "B")]
IDS = ["F2x3-F", "F2x3-B", "F4x3-F", "F4x3-B"]


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
@pytest.mark.parametrize("solver, direction", SOLVERS, ids=IDS)
def test_resnet_like_layers(handle, solver, direction):
    rng = np.random.default_rng(81)
    for layout in ("NCHW", "NHWC"):
        for c, hw in ((64, 56), (256, 14), (512, 7)):
            problem = support.conv_problem(
                "fp32", (2, c, hw, hw), (c, c, 3, 3), direction, (layout,) * 3, pads=(1, 1)
            )
            check_winograd(errors(handle, solver, problem, rng), solver.m)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
@pytest.mark.parametrize("solver, direction", SOLVERS, ids=IDS)
def test_random_problems(handle, solver, direction):
    rng = np.random.default_rng(82 if direction == "F" else 83)
    done = 0
    while done < 8:
        layouts = tuple(str(rng.choice(["NCHW", "NHWC"])) for _ in range(3))
        c, k = int(rng.integers(1, 40)), int(rng.integers(1, 70))
        try:
            problem = support.conv_problem(
                "fp32",
                (int(rng.integers(1, 4)), c, *(int(v) for v in rng.integers(3, 20, 2))),
                (k, c, 3, 3),
                direction,
                layouts,
                pads=tuple(int(v) for v in rng.integers(0, 3, 2)),
            )
        except ValueError:
            continue
        if solver.is_applicable(handle, problem.conv_view()) is not None:
            continue
        check_winograd(errors(handle, solver, problem, rng), solver.m)
        done += 1
