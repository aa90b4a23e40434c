"""ConvIgemmFfmaFwd, ConvIgemmFfmaBwd, ConvIgemmFfmaWrw: fp32 implicit GEMM on the CUDA cores
(plain FFMA, true fp32; CUDA only).

On the CPU: applicability, the registry's order, the config space (validity, defaults, search
space), the programs' launch geometry and workspace, and NVRTC builds for sm_90 of one program
per direction. On a GPU (marked ``gpu``): random problems of every direction (layouts mixed,
strides, padding, dilation, groups, transposed) and a sample of the config space against the
float64 reference, with the fp32 tolerance of the naive solver."""

from __future__ import annotations

import json

import numpy as np
import pytest
import support

from miopy import backends
from miopy.errors import BadParm
from miopy.solution import Launch, Tensor, Workspace
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.implicit_gemm_ffma import (
    FALLBACK,
    FIELDS,
    ConvIgemmFfmaBwd,
    ConvIgemmFfmaFwd,
    ConvIgemmFfmaWrw,
    estimate_us,
    ffma_config,
    gemm_dims,
    grid_blocks,
    k_tiles,
    smem_bytes,
    threads,
)

FWD, BWD, WRW = ConvIgemmFfmaFwd(), ConvIgemmFfmaBwd(), ConvIgemmFfmaWrw()
SOLVERS = {"F": FWD, "B": BWD, "W": WRW}
NHWC, NCHW = ("NHWC",) * 3, ("NCHW",) * 3
CTX = support.fake_cuda_ctx()


def make(xlens, wlens, direction="F", layouts=NCHW, dtype="fp32", **conv):
    return support.conv_problem(dtype, xlens, wlens, direction, layouts, **conv)


RESNET = [
    make((32, c, hw, hw), (k, c, 3, 3), d, layouts, pads=(1, 1))
    for c, hw, k in [(64, 56, 64), (256, 14, 256)]
    for d in "FBW"
    for layouts in (NCHW, NHWC)
]
ODD = make((3, 12, 9, 11), (18, 4, 2, 3), pads=(1, 0), strides=(2, 2), dilations=(2, 1), groups=3)


# ---- applicability and registry ------------------------------------------------------------------
def test_applicability():
    for problem in RESNET + [ODD]:
        assert SOLVERS[problem.direction.value].is_applicable(CTX, problem.conv_view()) is None
    assert BWD.is_applicable(CTX, make((2, 6, 9, 9), (10, 3, 3, 3), "B", strides=(3, 2), groups=2)) is None
    reasons = {
        "cuda": (FWD, support.fake_cuda_ctx("opencl"), ODD),
        "direction": (BWD, CTX, ODD),
        "FP32": (FWD, CTX, make((2, 16, 8, 8), (16, 16, 3, 3), dtype="fp16", pads=(1, 1))),
        "3-d": (FWD, CTX, make((1, 8, 2, 4, 4), (8, 8, 1, 3, 3), layouts=("NDHWC",) * 3, pads=(0, 1, 1))),
    }
    for word, (solver, ctx, problem) in reasons.items():
        reason = solver.is_applicable(ctx, problem.conv_view())
        assert reason is not None and word in reason, (word, reason)


def test_registered_after_the_tensor_core_solvers_before_im2col():
    names = [s.name for s in CONV_SOLVERS]
    for ffma, before, after in (
        ("ConvIgemmFfmaFwd", "ConvWinogradFwdF2x3Tf32x3", "GemmFwdRest"),
        ("ConvIgemmFfmaBwd", "ConvWinogradBwdF2x3Tf32x3", "GemmBwdRest"),
        ("ConvIgemmFfmaWrw", "ConvIgemmPadWrwTf32x3", "GemmWrwUniversal"),
    ):
        assert names.index(before) < names.index(ffma) < names.index(after)
        assert by_name(ffma).tunable and by_name(ffma).algorithm == "implicit_gemm"
    assert isinstance(by_name(str(WRW.id)), ConvIgemmFfmaWrw)
    depthwise = make((2, 16, 9, 9), (16, 1, 3, 3), pads=(1, 1), groups=16).conv_view()
    assert FWD.defers(CTX, depthwise) and FWD.defers(CTX, ODD.conv_view())  # 6 channels per group
    assert not FWD.defers(CTX, RESNET[0].conv_view())
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)


# ---- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", RESNET[::3] + [ODD], ids=lambda p: p.key())
def test_search_space_and_default(problem):
    solver, view = SOLVERS[problem.direction.value], problem.conv_view()
    space = list(solver.search_space(CTX, view))
    assert len(space) >= 8
    assert len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
    for config in space:
        assert solver.is_valid_config(CTX, view, json.loads(json.dumps(config))), config
        assert 64 <= threads(config) <= 256 and smem_bytes(config) <= 232448
    default = solver.default_config(CTX, view)
    assert solver.is_valid_config(CTX, view, default) and default in space


def test_default_config_follows_the_model():
    big = RESNET[0].conv_view()  # 100352 x 64 outputs, 576 taps: 784 blocks of 128 x 64, no split
    assert FWD.default_config(CTX, big) == ffma_config(128, 64, 8, 8, 8)
    layer = make((32, 128, 28, 28), (128, 128, 3, 3), pads=(1, 1))  # 25088 x 128 outputs
    whole, half = ffma_config(128, 128, 8, 8, 8), ffma_config(128, 64, 8, 8, 8)
    # 196 blocks of 128 x 128 leave 68 of 132 SMs one block: 392 of 128 x 64 spread evenly
    assert estimate_us(CTX, layer, half) < estimate_us(CTX, layer, whole)
    split = {**whole, "split_k": 4}
    nhwc = make((32, 128, 28, 28), (128, 128, 3, 3), layouts=NHWC, pads=(1, 1))
    assert estimate_us(CTX, nhwc, split) < estimate_us(CTX, layer, split)  # scattered NCHW partials
    wrw = make((32, 256, 14, 14), (256, 256, 3, 3), "W", pads=(1, 1))  # 256 x 2304 outputs, 6272 pixels
    config = WRW.default_config(CTX, wrw)
    assert config["split_k"] > 1 and k_tiles(wrw, config) >= 8 * config["split_k"]
    assert grid_blocks(wrw, config) * config["split_k"] >= 2 * 132
    few = make((1, 8, 4, 4), (8, 8, 3, 3), pads=(1, 1))  # 16 x 8 outputs, 72 taps: 9 slices, no split
    assert FWD.default_config(CTX, few) == ffma_config(32, 32, 8, 4, 4)
    small = support.fake_cuda_ctx(smem=2048, max_work_group_size=64)
    assert FWD.default_config(small, big) == FALLBACK


def test_is_valid_config_rejects_garbage():
    view = ODD.conv_view()
    good = ffma_config(64, 32, 8, 8, 4)
    assert FWD.is_valid_config(CTX, view, good)
    short = {k: v for k, v in good.items() if k != "bk"}
    bad_values = [None, [], "bm=64", 7, {}, {**good, "extra": 1}, short]
    for field in FIELDS:
        bad_values += [
            {**good, field: str(good[field])},
            {**good, field: float(good[field])},
            {**good, field: True},
            {**good, field: 0},
            {**good, field: 5},
        ]
    bad_values += [
        {**good, "bm": 256, "bn": 256, "tm": 8, "tn": 8},  # 1024 threads
        {**good, "bm": 32, "bn": 32, "tm": 8, "tn": 8},  # 16 threads
        {**good, "bm": 32, "bn": 256, "tm": 4, "tn": 4, "bk": 8},  # 512 threads
    ]
    for config in bad_values:
        assert not FWD.is_valid_config(CTX, view, config), config
    assert gemm_dims(view) == (3 * 5 * 5, 6, 4 * 2 * 3)  # per group: 75 pixels, 6 channels, 24 taps
    assert k_tiles(view, good) == 3
    assert FWD.is_valid_config(CTX, view, {**good, "split_k": 3})
    assert not FWD.is_valid_config(CTX, view, {**good, "split_k": 4})  # more parts than slices
    assert not FWD.is_valid_config(support.fake_cuda_ctx(smem=1024), view, good)


# ---- programs ------------------------------------------------------------------------------------
def test_program_geometry_grouped_forward():
    view = ODD.conv_view()  # 3 groups of 4 -> 6 channels
    config = ffma_config(64, 32, 8, 8, 4)
    program = FWD.get_program(CTX, view, config)
    (launch,) = program.steps
    assert program.workspace == 0 and FWD.workspace_size(CTX, view, config) == 0
    assert launch.args == (Tensor("x"), Tensor("w"), Tensor("y"), None)
    assert launch.shared_mem == smem_bytes(config) == 2 * 8 * (68 + 36) * 4
    blocks = 2 * 1  # 75 rows in 64s, 6 columns in 32s
    assert launch.spec.global_size == (blocks * 64, 1, 3) and launch.spec.local_size == (64, 1, 1)
    defines = dict(launch.spec.defines)
    want = {"DIR": 0, "G": 3, "C": 4, "K": 6, "P": 5, "Q": 5, "SH": 2, "DH": 2, "PW": 0, "SPLIT": 1, "XSW": 1}
    assert all(defines[f"FF_{k}"] == v for k, v in want.items()), defines
    with pytest.raises(BadParm):
        FWD.get_program(CTX, view, {**config, "bm": 48})


def test_program_split_backward_weights():
    problem = make((4, 16, 12, 12), (24, 16, 3, 3), "W", NHWC, pads=(1, 1))
    config = ffma_config(32, 64, 16, 4, 8, 4)
    program = WRW.get_program(CTX, problem, config)
    gemm, total = program.steps
    assert [s.spec.name for s in program.steps if isinstance(s, Launch)] == ["igemm_ffma", "igemm_ffma_sum"]
    assert gemm.args == (Tensor("y"), Tensor("x"), Tensor("w"), Workspace())
    assert total.args == (Workspace(), Tensor("w"))
    assert gemm.spec.global_size == (3 * 64, 4, 1)  # 24 x 144 outputs: 1 x 3 blocks of 64 threads, 4 parts
    assert program.workspace == 4 * 24 * 144 * 4 == WRW.workspace_size(CTX, problem, config)
    assert total.spec.global_size == (-(-24 * 144 // 256) * 256,) and total.spec.local_size == (256,)
    defines = dict(gemm.spec.defines)
    assert defines["FF_DIR"] == 2 and defines["FF_CFAST"] == 1 and defines["FF_SPLIT"] == 4


@support.needs_nvrtc
def test_one_program_per_direction_builds_for_sm90():
    for direction, layouts in (("F", NHWC), ("B", NCHW), ("W", NCHW)):
        problem = make((2, 12, 9, 11), (20, 12, 3, 3), direction, layouts, pads=(1, 1), strides=(2, 2))
        solver = SOLVERS[direction]
        configs = [solver.default_config(CTX, problem)]
        support.assert_builds_for_sm90(solver, CTX, problem, configs, "igemm_ffma")


# ---- on a GPU: against the reference ------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")
gpu = pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


def _solver_of(problem):
    return {"FORWARD": FWD, "BACKWARD_DATA": BWD, "BACKWARD_WEIGHTS": WRW}[problem.conv_view().direction.name]


@pytest.mark.parametrize("direction", ["F", "B", "W"])
@pytest.mark.gpu
@gpu
def test_random_problems(handle, direction):
    """Small random problems: layouts mixed, strides, padding, dilation, groups, depthwise,
    transposed; each with its default config."""
    rng = np.random.default_rng({"F": 91, "B": 92, "W": 93}[direction])
    for _ in range(16):
        problem = support.random_problem(rng, direction=direction, max_size=14)
        support.check_solver(handle, _solver_of(problem), problem, rng)


@pytest.mark.gpu
@gpu
def test_config_sample(handle):
    """A spread of each direction's search space (splits included) on problems with partial tiles."""
    rng = np.random.default_rng(94)
    mixed = ("NCHW", "NHWC", "NCHW")
    for direction in "FBW":
        conv = (
            {"pads": (1, 2), "dilations": (2, 1)} if direction != "B" else {"pads": (1, 1), "strides": (2, 2)}
        )
        problem = make((3, 40, 13, 15), (72, 40, 3, 3), direction, mixed, **conv)
        solver = SOLVERS[direction]
        space = list(solver.search_space(handle, problem))
        picks = sorted({0, len(space) - 1, *rng.choice(len(space), 8, replace=False).tolist()})
        for i in picks:
            support.check_solver(handle, solver, problem, rng, space[i])


@pytest.mark.gpu
@gpu
def test_resnet_like_layers(handle):
    """3x3 layers at batch 2, both layouts, every direction, with their defaults (splits)."""
    rng = np.random.default_rng(95)
    for layouts in (NHWC, NCHW):
        for direction in "FBW":
            problem = make((2, 64, 28, 28), (96, 64, 3, 3), direction, layouts, pads=(1, 1))
            support.check_solver(handle, SOLVERS[direction], problem, rng)
