"""ConvWinogradWrwF2x3Tf32x3: fp32 backward weights of 3x3 stride-1 layers by Winograd F(2x2, 3x3)
with 3xTF32 GEMMs (CUDA only).

On the CPU: applicability, the config and the program (transforms, the batched GEMM, the output
transform), the kernels' transform formulas in NumPy against the reference (exact in float64),
NVRTC builds for sm_90. On a GPU (marked ``gpu``): ResNet-like layers and random problems of both
layouts against the float64 reference. Winograd's error bound, stated: below the fp32 tolerance,
and below 8x the naive FFMA kernel's error on the same data + 1e-6 (F(2x2, 3x3)'s transforms mix
terms of both signs, a few times a direct sum's rounding error); and far below plain TF32's."""

from __future__ import annotations

import numpy as np
import pytest
import support
from test_solvers_tf32x3 import errors

from miopy import backends
from miopy.reference.conv import conv_reference
from miopy.solution import Launch, Tensor, Workspace
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.winograd_wrw_tf32x3 import (
    DEFAULT_NARROW,
    DEFAULT_TILE,
    POSITIONS,
    ConvWinogradWrwF2x3Tf32x3,
    geometry,
)

WINO = ConvWinogradWrwF2x3Tf32x3()
CTX = support.fake_cuda_ctx()


def make(xlens, k, layout="NCHW", pads=(1, 1), **conv):
    layouts = (layout,) * 3 if isinstance(layout, str) else layout
    wlens = (k, xlens[1], 3, 3)
    return support.conv_problem("fp32", xlens, wlens, "W", layouts, pads=pads, **conv).conv_view()


def names(program) -> list[str]:
    return [s.spec.name for s in program.steps if isinstance(s, Launch)]


def test_applicability():
    assert WINO.is_applicable(CTX, make((32, 256, 14, 14), 256)) is None
    assert WINO.is_applicable(CTX, make((2, 3, 9, 8), 5, "NHWC", pads=(0, 2))) is None
    reasons = {
        "3x3": support.conv_problem("fp32", (2, 8, 9, 9), (8, 8, 5, 5), "W", ("NCHW",) * 3).conv_view(),
        "stride 1": make((2, 8, 9, 9), 8, strides=(2, 2)),
        "dilation": make((2, 8, 9, 9), 8, dilations=(2, 1)),
        "padding": make((2, 8, 9, 9), 8, pads=(3, 1)),
        "direction": support.conv_problem("fp32", (2, 8, 9, 9), (8, 8, 3, 3), "F", ("NCHW",) * 3).conv_view(),
        "FP32": support.conv_problem("fp16", (2, 8, 9, 9), (8, 8, 3, 3), "W", ("NHWC",) * 3).conv_view(),
    }
    for word, problem in reasons.items():
        reason = WINO.is_applicable(CTX, problem)
        assert reason is not None and word in reason, (word, reason)
    assert "cuda" in WINO.is_applicable(support.fake_cuda_ctx("opencl"), make((2, 8, 9, 9), 8))
    names_ = [s.name for s in CONV_SOLVERS]
    # ahead of the 3xTF32 implicit GEMM (immediate mode's registry order): faster on every 3x3 layer
    assert names_.index(WINO.name) < names_.index("ConvIgemmWrwTf32x3") < names_.index("GemmWrwUniversal")
    assert by_name(str(WINO.id)) is not None and WINO.algorithm == "winograd"


def test_config_and_program():
    problem = make((32, 256, 14, 14), 256)
    g = geometry(problem)
    assert (g["TH"], g["TW"], g["T"]) == (7, 7, 1568)
    config = WINO.default_config(CTX, problem)
    assert {k: v for k, v in config.items() if k != "split_k"} == {
        k: v for k, v in DEFAULT_TILE.items() if k != "split_k"
    }
    assert config["split_k"] == 2  # 8 tiles x 16 GEMMs x 2 = 256 blocks: 1.5 per SM and more
    assert WINO.default_config(CTX, make((2, 32, 9, 9), 40))["bm"] == DEFAULT_NARROW["bm"]
    program = WINO.get_program(CTX, problem, config)
    assert names(program) == [
        "transpose_f32",
        "transpose_f32",
        "wino_in_f2x3",
        "wino_dy_f2x3",
        "igemm_wrw_tf32x3",
        "wino_out_f2x3",
    ]
    gemm = program.steps[4]
    defines = dict(gemm.spec.defines)
    assert defines["TX_BATCH"] == POSITIONS and (defines["TX_H"], defines["TX_C"], defines["TX_R"]) == (
        1568,
        256,
        1,
    )
    assert gemm.spec.global_size[1:] == (2, POSITIONS) and gemm.args[4] == gemm.args[6] == Workspace()
    out = program.steps[-1]
    assert out.args[-1] == Tensor("w") and dict(out.spec.defines)["WG_OUT_NCHW"] == 1
    assert dict(out.spec.defines)["WG_SPLIT"] == 2
    assert program.workspace >= 4 * (16 * 1568 * 256 * 2 + 2 * 16 * 256 * 256)
    nhwc = WINO.get_program(CTX, make((32, 256, 14, 14), 256, "NHWC"), config)
    assert names(nhwc)[0] == "wino_in_f2x3" and dict(nhwc.steps[-1].spec.defines)["WG_OUT_NCHW"] == 0
    odd = make((2, 3, 9, 8), 5, "NHWC", pads=(0, 2))
    assert dict(WINO.get_program(CTX, odd).steps[2].spec.defines)["TX_C"] == 4  # C4


def winograd_emulated(problem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dw from NCHW x and dy the way the kernels form it (float64): wino_in_f2x3's and
    wino_dy_f2x3's formulas per tile, the 16 sums, wino_out_f2x3's formulas."""
    g = geometry(problem)
    n_, c_, k_ = g["N"], g["C"], g["K"]
    xp = np.zeros((n_, c_, 2 * g["TH"] + 2, 2 * g["TW"] + 2))
    top, left = g["PH"], g["PW"]
    xp[:, :, top : top + g["H"], left : left + g["W"]] = x[
        :, :, : 2 * g["TH"] + 2 - top, : 2 * g["TW"] + 2 - left
    ]
    dyp = np.zeros((n_, k_, 2 * g["TH"], 2 * g["TW"]))
    dyp[:, :, : g["P"], : g["Q"]] = dy
    m = np.zeros((4, 4, k_, c_))
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
            e = dyp[:, :, 2 * th : 2 * th + 2, 2 * tw : 2 * tw + 2]
            a = np.stack([e[:, :, 0], e[:, :, 0] + e[:, :, 1], e[:, :, 0] - e[:, :, 1], -e[:, :, 1]], 2)
            u = np.stack([a[..., 0], a[..., 0] + a[..., 1], a[..., 0] - a[..., 1], -a[..., 1]], 3)
            m += np.einsum("nkij,ncij->ijkc", u, v)
    h = np.stack([m[0] + 0.5 * (m[1] + m[2]), 0.5 * (m[1] - m[2]), 0.5 * (m[1] + m[2]) + m[3]])  # r, j, k, c
    o = np.stack(
        [h[:, 0] + 0.5 * (h[:, 1] + h[:, 2]), 0.5 * (h[:, 1] - h[:, 2]), 0.5 * (h[:, 1] + h[:, 2]) + h[:, 3]],
        1,
    )
    return o.transpose(2, 3, 0, 1)  # r, s, k, c -> k, c, r, s


@pytest.mark.parametrize(
    "xlens, k, pads",
    [
        ((2, 3, 7, 9), 4, (1, 1)),
        ((1, 5, 8, 8), 6, (0, 0)),
        ((2, 2, 6, 5), 3, (2, 0)),
        ((1, 4, 4, 4), 4, (2, 2)),
    ],
)
def test_transform_formulas_match_the_reference(xlens, k, pads):
    problem = make(xlens, k, pads=pads)
    rng = np.random.default_rng(9)
    x, dy = rng.standard_normal(problem.x.lens), rng.standard_normal(problem.y.lens)
    expected = conv_reference(problem, {"x": x, "y": dy})
    np.testing.assert_allclose(winograd_emulated(problem, x, dy), expected, rtol=1e-11, atol=1e-11)


@support.needs_nvrtc
def test_builds_for_sm90():
    problem = make((32, 256, 14, 14), 256)
    for kernel in ("wino_in_f2x3", "wino_dy_f2x3", "wino_out_f2x3"):
        support.assert_builds_for_sm90(WINO, CTX, problem, [None], "winograd_wrw_f2x3", kernel)
    support.assert_builds_for_sm90(
        WINO, CTX, make((2, 3, 9, 8), 5, "NHWC", pads=(0, 2)), [None], "igemm_wrw_tf32x3"
    )


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
def test_resnet_like_layers(handle):
    rng = np.random.default_rng(71)
    for layout in ("NCHW", "NHWC"):
        for c, hw in ((128, 28), (256, 14), (512, 7)):
            problem = support.conv_problem(
                "fp32", (2, c, hw, hw), (c, c, 3, 3), "W", (layout,) * 3, pads=(1, 1)
            )
            check_winograd(errors(handle, WINO, problem, rng))


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_random_problems(handle):
    rng = np.random.default_rng(72)
    done = 0
    while done < 12:
        layouts = tuple(str(rng.choice(["NCHW", "NHWC"])) for _ in range(3))
        c, k = int(rng.integers(1, 40)), int(rng.integers(1, 70))
        try:
            problem = support.conv_problem(
                "fp32",
                (int(rng.integers(1, 4)), c, *(int(v) for v in rng.integers(3, 20, 2))),
                (k, c, 3, 3),
                "W",
                layouts,
                pads=tuple(int(v) for v in rng.integers(0, 3, 2)),
            )
        except ValueError:
            continue
        if WINO.is_applicable(handle, problem.conv_view()) is not None:
            continue
        check_winograd(errors(handle, WINO, problem, rng))
        done += 1
