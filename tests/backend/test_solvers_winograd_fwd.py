"""ConvWinogradFwdF2x3Tf32x3 / ConvWinogradBwdF2x3Tf32x3: fp32 forward and stride-1 backward data
of 3x3 layers by Winograd F(2x2, 3x3) with 3xTF32 GEMMs (CUDA only).

On the CPU: applicability, the config and the program (filter and data transforms, the batched
GEMM, the output transform), the kernels' transform formulas in NumPy against the reference
(exact in float64), NVRTC builds for sm_90. On a GPU (marked ``gpu``): ResNet-like layers and
random problems (padding 0 to 2, odd sides, N = 1..3, both layouts) against the float64
reference. Winograd's error bound, stated: below the fp32 tolerance, below 8x the naive FFMA
kernel's error on the same data + 1e-6 (F(2x2, 3x3)'s transforms mix terms of both signs, a few
times a direct sum's rounding error), and at least 10x below plain TF32's."""

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
    ConvWinogradFwdF2x3Tf32x3,
    geometry,
)

FWD = ConvWinogradFwdF2x3Tf32x3()
BWD = ConvWinogradBwdF2x3Tf32x3()
CTX = support.fake_cuda_ctx()


def make(xlens, k, layout="NCHW", pads=(1, 1), direction="F", **conv):
    layouts = (layout,) * 3 if isinstance(layout, str) else layout
    wlens = (k, xlens[1], 3, 3)
    return support.conv_problem("fp32", xlens, wlens, direction, layouts, pads=pads, **conv).conv_view()


def names(program) -> list[str]:
    return [s.spec.name for s in program.steps if isinstance(s, Launch)]


def test_applicability():
    assert FWD.is_applicable(CTX, make((32, 128, 28, 28), 128)) is None
    assert FWD.is_applicable(CTX, make((2, 3, 9, 8), 5, "NHWC", pads=(0, 3))) is None  # any padding
    assert (
        BWD.is_applicable(CTX, make((2, 3, 9, 8), 5, ("NHWC", "NCHW", "NHWC"), pads=(2, 0), direction="B"))
        is None
    )
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
    assert names(program) == ["wf_filter_f2x3", "wf_in_f2x3", "igemm_wrw_tf32x3", "wf_out_f2x3"]
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


def winograd_emulated(problem, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The forward output from NCHW x and KCRS w the way the kernels form it (float64):
    wf_in_f2x3's and wf_filter_f2x3's formulas per tile, the 16 sums, wf_out_f2x3's formulas."""
    g = geometry(problem)
    n_, ci, co = g["N"], g["CI"], g["CO"]
    hp, wp = 2 * g["TH"] + 2, 2 * g["TW"] + 2
    xp = np.zeros((n_, ci, max(hp, g["HI"] + g["PH"]), max(wp, g["WI"] + g["PW"])))
    xp[:, :, g["PH"] : g["PH"] + g["HI"], g["PW"] : g["PW"] + g["WI"]] = x
    gt = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    u = np.einsum("ir,kcrs,js->ijkc", gt, w, gt)  # filter transform, per position (i, j)
    y = np.zeros((n_, co, 2 * g["TH"], 2 * g["TW"]))
    for th in range(g["TH"]):
        for tw in range(g["TW"]):
            d = xp[:, :, 2 * th : 2 * th + 4, 2 * tw : 2 * tw + 4]
            b = np.stack(
                [
                    d[:, :, 0] - d[:, :, 2],
                    d[:, :, 1] + d[:, :, 2],
                    d[:, :, 2] - d[:, :, 1],
                    d[:, :, 1] - d[:, :, 3],
                ],
                2,
            )
            v = np.stack(
                [b[..., 0] - b[..., 2], b[..., 1] + b[..., 2], b[..., 2] - b[..., 1], b[..., 1] - b[..., 3]],
                3,
            )
            m = np.einsum("ncij,ijkc->nkij", v, u)
            a = np.stack([m[:, :, 0] + m[:, :, 1] + m[:, :, 2], m[:, :, 1] - m[:, :, 2] - m[:, :, 3]], 2)
            o = np.stack([a[..., 0] + a[..., 1] + a[..., 2], a[..., 1] - a[..., 2] - a[..., 3]], 3)
            y[:, :, 2 * th : 2 * th + 2, 2 * tw : 2 * tw + 2] = o
    return y[:, :, : g["HO"], : g["WO"]]


@pytest.mark.parametrize(
    "xlens, k, pads",
    [
        ((2, 3, 7, 9), 4, (1, 1)),
        ((1, 5, 8, 8), 6, (0, 0)),
        ((3, 2, 6, 5), 3, (2, 0)),
        ((1, 4, 4, 4), 4, (3, 2)),
    ],
)
def test_transform_formulas_match_the_reference(xlens, k, pads):
    problem = make(xlens, k, pads=pads)
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal(problem.x.lens), rng.standard_normal(problem.w.lens)
    expected = conv_reference(problem, {"x": x, "w": w})
    np.testing.assert_allclose(winograd_emulated(problem, x, w), expected, rtol=1e-11, atol=1e-11)


@support.needs_nvrtc
def test_builds_for_sm90():
    odd = make((2, 3, 9, 8), 5, ("NHWC", "NCHW", "NHWC"), pads=(0, 2), direction="B")
    for kernel in ("wf_filter_f2x3", "wf_in_f2x3", "wf_out_f2x3"):
        support.assert_builds_for_sm90(BWD, CTX, odd, [None], "winograd_fwd_f2x3", kernel)
    support.assert_builds_for_sm90(FWD, CTX, make((2, 3, 9, 8), 5), [None], "igemm_wrw_tf32x3")


# ---- on a GPU ------------------------------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


def check_winograd(errs: tuple[float, float, float]) -> None:
    err_wino, err_ffma, err_tf32 = errs
    assert err_wino < 8 * err_ffma + 1e-6, errs
    assert err_wino < err_tf32 / 10, errs


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
@pytest.mark.parametrize("solver, direction", [(FWD, "F"), (BWD, "B")])
def test_resnet_like_layers(handle, solver, direction):
    rng = np.random.default_rng(81)
    for layout in ("NCHW", "NHWC"):
        for c, hw in ((64, 56), (256, 14), (512, 7)):
            problem = support.conv_problem(
                "fp32", (2, c, hw, hw), (c, c, 3, 3), direction, (layout,) * 3, pads=(1, 1)
            )
            check_winograd(errors(handle, solver, problem, rng))


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
@pytest.mark.parametrize("solver, direction", [(FWD, "F"), (BWD, "B")])
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
        check_winograd(errors(handle, solver, problem, rng))
        done += 1
