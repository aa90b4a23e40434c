"""ConvIgemmFwdTf32x3, ConvIgemmBwdTf32x3, ConvIgemmWrwTf32x3: fp32 convolution on tensor cores
with fp32 accuracy (3xTF32; CUDA only).

On the CPU: applicability, the config space, the programs (layout changes for NCHW, the flipped
filter of backward data, the split reduction), NVRTC builds for sm_90, and the arithmetic of the
3xTF32 split in NumPy (its error is an fp32 kernel's, not TF32's). On a GPU (marked ``gpu``):
random problems of both layouts against the float64 reference, each next to the naive FFMA
kernel on the same data: the 3xTF32 error must be within the fp32 tolerance, comparable to the
FFMA error, and far below what plain TF32 gives on the same data (so it is never plain TF32)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import support

from miopy import backends
from miopy.errors import BadParm
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.reference.conv import conv_reference, conv_reference_buffers, rms_range, view
from miopy.solution import Launch, Tensor, Workspace
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.implicit_gemm_tf32x3 import (
    DEFAULT_NARROW,
    DEFAULT_SMALL_GRID,
    DEFAULT_SPLIT,
    DEFAULT_WIDE,
    DOMAIN,
    FIELDS,
    PREFERRED,
    ConvIgemmBwdTf32x3,
    ConvIgemmFwdTf32x3,
    gemm_shape,
    grid_blocks,
    k_tiles,
    smem_bytes,
    threads,
)
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import ConvIgemmWrwTf32x3
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import grid_blocks as wrw_blocks
from miopy.solvers.conv.implicit_gemm_wrw_tf32x3 import smem_bytes as wrw_smem
from miopy.tensor import TensorDesc, from_storage

FWD, BWD, WRW = ConvIgemmFwdTf32x3(), ConvIgemmBwdTf32x3(), ConvIgemmWrwTf32x3()
NHWC, NCHW = ("NHWC",) * 3, ("NCHW",) * 3


def make(xlens, wlens, direction="F", layouts=NHWC, dtype="fp32", **conv) -> ConvProblem:
    return support.conv_problem(dtype, xlens, wlens, direction, layouts, **conv)


fake_ctx = support.fake_cuda_ctx


CTX = fake_ctx()
RESNET = [
    make((32, c, hw, hw), (k, c, 3, 3), layouts=layouts, pads=(1, 1))
    for c, hw, k in [(64, 56, 64), (128, 28, 128), (256, 14, 256), (512, 7, 512)]
    for layouts in (NHWC, NCHW)
]
ODD = make((3, 12, 9, 11), (20, 12, 2, 3), pads=(1, 0), strides=(2, 2), dilations=(2, 1))


# ---- applicability -------------------------------------------------------------------------------
def test_applicability():
    for problem in RESNET + [ODD]:
        assert FWD.is_applicable(CTX, problem) is None
    assert BWD.is_applicable(CTX, make((2, 8, 7, 7), (12, 8, 3, 3), "B", NCHW, pads=(1, 1))) is None
    assert "cuda" in FWD.is_applicable(fake_ctx("opencl"), ODD)
    reasons = {
        "direction": (FWD, make((2, 16, 8, 8), (16, 16, 3, 3), "W", pads=(1, 1))),
        "FP32": (FWD, make((2, 16, 8, 8), (16, 16, 3, 3), dtype="fp16", pads=(1, 1))),
        "groups": (FWD, make((2, 16, 8, 8), (16, 8, 3, 3), pads=(1, 1), groups=2)),
        "multiples of 4": (FWD, make((2, 3, 8, 8), (16, 3, 3, 3), pads=(1, 1))),
        "3-d": (FWD, make((1, 8, 2, 4, 4), (8, 8, 1, 3, 3), layouts=("NDHWC",) * 3, pads=(0, 1, 1))),
        "stride 1": (BWD, make((2, 8, 8, 8), (8, 8, 3, 3), "B", pads=(1, 1), strides=(2, 2))),
        "padding": (BWD, make((2, 8, 8, 8), (8, 8, 3, 3), "B", pads=(3, 1))),
    }
    for word, (solver, problem) in reasons.items():
        reason = solver.is_applicable(CTX, problem.conv_view())
        assert reason is not None and word in reason, (word, reason)
    x = TensorDesc("fp32", (2, 8, 6, 6), strides=(600, 1, 100, 10))  # padded rows
    w = TensorDesc("fp32", (8, 8, 3, 3), layout="NCHW")
    strided = ConvProblem.create(x, w, ConvDesc((1, 1)), "F")
    assert "x is neither packed" in FWD.is_applicable(CTX, strided)


def test_registered_before_the_im2col_gemms():
    assert isinstance(by_name("ConvIgemmFwdTf32x3"), ConvIgemmFwdTf32x3)
    assert isinstance(by_name(str(BWD.id)), ConvIgemmBwdTf32x3)
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)
    names = [s.name for s in CONV_SOLVERS]
    assert names.index("ConvIgemmFwdTf32x3") < names.index("GemmFwdRest")
    assert names.index("ConvIgemmBwdTf32x3") < names.index("GemmBwdRest")
    assert names.index("ConvIgemmWrwTf32x3") < names.index("GemmWrwUniversal")
    assert FWD.tunable and FWD.algorithm == "implicit_gemm"


# ---- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", RESNET[::2] + [ODD], ids=lambda p: p.key())
def test_search_space_and_default(problem):
    space = list(FWD.search_space(CTX, problem))
    assert len(space) >= 20
    assert len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
    for config in space:
        assert FWD.is_valid_config(CTX, problem, json.loads(json.dumps(config))), config
        assert smem_bytes(config) <= 232448 and 64 <= threads(config) <= 256
    default = FWD.default_config(CTX, problem)
    assert FWD.is_valid_config(CTX, problem, default) and default in space


def test_default_config_follows_the_problem():
    assert FWD.default_config(CTX, RESNET[0]) == DEFAULT_WIDE  # 100352 rows: 784 blocks
    assert FWD.default_config(CTX, RESNET[2]) == DEFAULT_WIDE  # 25088 rows: 392 blocks
    assert FWD.default_config(CTX, RESNET[4]) == DEFAULT_SMALL_GRID  # 6272 rows x 256: 196 blocks
    tiny = RESNET[6]  # 7x7 images: 1568 rows, 200 blocks of 64 x 64: 128 x 128 split in 2
    assert FWD.default_config(CTX, tiny) == DEFAULT_SPLIT
    few = make((32, 64, 7, 7), (64, 64, 3, 3), pads=(1, 1))  # 25 blocks of 64 x 64, K = 64
    assert FWD.default_config(CTX, few) == {**DEFAULT_SMALL_GRID, "split_k": 4}  # 576 taps: 36 steps
    narrow = make((8, 16, 20, 20), (32, 16, 3, 3), pads=(1, 1))
    assert FWD.default_config(fake_ctx(compute_units=8), narrow) == DEFAULT_NARROW
    small = fake_ctx(smem=24 * 1024)
    cfg = FWD.default_config(small, RESNET[0])
    assert FWD.is_valid_config(small, RESNET[0], cfg) and smem_bytes(cfg) <= 24 * 1024


def test_is_valid_config_rejects_garbage():
    good = dict(PREFERRED[0])
    assert FWD.is_valid_config(CTX, ODD, good)
    bad_values = [
        None,
        [],
        "bm=128",
        7,
        {},
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "bk"},
    ]
    for field in FIELDS:
        bad_values += [
            {**good, field: str(good[field])},
            {**good, field: float(good[field])},
            {**good, field: True},
            {**good, field: 0},
            {**good, field: 7},
            {**good, field: max(DOMAIN[field]) * 2},
        ]
    bad_values += [
        {**good, "warps_m": 4, "bm": 32},  # warp tile of 8 rows
        {**good, "bm": 256, "bn": 256, "warps_m": 2, "warps_n": 2},  # 128 x 128 per warp
        {**good, "bm": 128, "bn": 128, "warps_m": 2, "warps_n": 2},  # 64 x 64 per warp: spills
        {**good, "bm": 32, "bn": 32, "warps_m": 1, "warps_n": 1},  # 32 threads
        {**good, "bm": 256, "bn": 256, "warps_m": 4, "warps_n": 4},  # 512 threads
    ]
    for config in bad_values:
        assert not FWD.is_valid_config(CTX, ODD, config), config
    assert smem_bytes(good) == 4 * 192 * 16 * 4
    assert not FWD.is_valid_config(fake_ctx(smem=40 * 1024), ODD, good)  # 48 KB
    assert k_tiles(gemm_shape(ODD), good) == 5  # 2 * 3 * 12 taps, 16 at a time
    assert FWD.is_valid_config(CTX, ODD, {**good, "bk": 16, "split_k": 4})
    assert not FWD.is_valid_config(CTX, ODD, {**good, "bk": 16, "split_k": 6})


# ---- programs ------------------------------------------------------------------------------------
def _names(program) -> list[str]:
    return [step.spec.name for step in program.steps if isinstance(step, Launch)]


def test_nhwc_forward_is_one_launch():
    config = dict(DEFAULT_SMALL_GRID)
    program = FWD.get_program(CTX, ODD, config)
    assert _names(program) == ["igemm_fwd_tf32x3"] and program.workspace == 0
    (launch,) = program.steps
    assert launch.shared_mem == smem_bytes(config)
    assert launch.args[0] == Tensor("x") and launch.args[2] == Tensor("w") and launch.args[4] == Tensor("y")
    shape = gemm_shape(ODD)
    spec = launch.spec
    assert spec.local_size == (128, 1) and spec.global_size == (grid_blocks(shape, config) * 128, 1)
    defines = dict(spec.defines)
    assert defines["MIOPY_DTYPE"] == 0 and defines["TX_BM"] == 64 and defines["TX_SPLIT_K"] == 1
    want = {
        "N": 3,
        "C": 12,
        "H": 9,
        "W": 11,
        "K": 20,
        "R": 2,
        "S": 3,
        "PH": 1,
        "PW": 0,
        "SH": 2,
        "DH": 2,
        "DW": 1,
    }
    assert all(defines[f"TX_{k}"] == v for k, v in want.items())
    with pytest.raises(BadParm):
        FWD.get_program(CTX, ODD, {**config, "bm": 48})


def test_nchw_forward_goes_through_the_workspace():
    problem = RESNET[3]  # 128 x 28 x 28 -> 128, NCHW
    program = FWD.get_program(CTX, problem)
    assert _names(program) == ["transpose_f32", "filter_repack_f32", "igemm_fwd_tf32x3"]
    t_in, repack, gemm = program.steps
    assert t_in.args[0] == Tensor("x") and t_in.args[2] == Workspace()
    assert t_in.spec.global_size == (-(-784 // 32) * 32, 4 * 8, 32) and t_in.spec.local_size == (32, 8, 1)
    assert repack.args[-1] == 0  # forward: taps as they lie
    assert all(isinstance(a, Workspace) for a in gemm.args[0:4:2])
    assert gemm.args[4] == Tensor("y") and dict(gemm.spec.defines)["TX_OUT_NCHW"] == 1  # written NCHW
    act = 32 * 128 * 28 * 28 * 4
    assert act + 128 * 128 * 9 * 4 <= program.workspace < 2 * act
    mixed = make((32, 128, 28, 28), (128, 128, 3, 3), layouts=("NCHW", "NCHW", "NHWC"), pads=(1, 1))
    assert "TX_OUT_NCHW" not in dict(FWD.get_program(CTX, mixed).kernels[-1].defines)


def test_backward_data_flips_the_filter():
    problem = make((2, 8, 7, 7), (12, 8, 3, 3), "B", pads=(1, 1), dilations=(2, 2))
    shape = gemm_shape(problem)
    assert (shape.c, shape.k, shape.h, shape.p, shape.pads, shape.strides) == (12, 8, 5, 7, (3, 3), (1, 1))
    program = BWD.get_program(CTX, problem)
    assert _names(program) == ["filter_repack_f32", "igemm_fwd_tf32x3"]
    repack, gemm = program.steps
    assert repack.args[-1] == 1 and gemm.args[0] == Tensor("y") and gemm.args[4] == Tensor("x")


def test_split_reduction_program():
    problem = RESNET[6]  # 512 x 7 x 7, NHWC: 4608 taps
    config = {**DEFAULT_SMALL_GRID, "split_k": 4}
    program = FWD.get_program(CTX, problem, config)
    assert _names(program) == ["igemm_fwd_tf32x3", "tf32x3_splitk_sum"]
    gemm, total = program.steps
    rows = 32 * 7 * 7
    assert gemm.spec.global_size[1] == 4 and gemm.args[6] == Workspace()
    assert total.args == (Workspace(), gemm.args[7], Tensor("y"), gemm.args[5])
    assert program.workspace == 4 * rows * 512 * 4 == FWD.workspace_size(CTX, problem, config)


@support.needs_nvrtc
def test_sample_of_configs_compiles_for_sm90():
    rng = np.random.default_rng(5)
    for problem in (RESNET[3], ODD):
        configs = support.config_spread(FWD, CTX, problem, rng)
        support.assert_builds_for_sm90(FWD, CTX, problem, configs, "igemm_fwd_tf32x3")


def test_backward_weights_program_and_configs():
    problem = make((32, 128, 28, 28), (128, 128, 3, 3), "W", NCHW, pads=(1, 1))
    assert WRW.is_applicable(CTX, problem) is None
    assert "direction" in WRW.is_applicable(CTX, RESNET[0])
    config = WRW.default_config(CTX, problem)
    assert WRW.is_valid_config(CTX, problem, config)
    assert wrw_blocks(problem, config) * config["split_k"] >= 2 * 132  # the split fills the device
    program = WRW.get_program(CTX, problem, config)
    names = ["transpose_f32", "transpose_f32", "igemm_wrw_tf32x3", "tf32x3_wrw_sum", "transpose_f32"]
    assert _names(program) == names
    gemm, total, back = program.steps[2:]
    assert gemm.shared_mem == wrw_smem(config) and gemm.spec.global_size[1] == config["split_k"]
    assert total.args[2] == Workspace() and back.args[2] == Tensor("w")
    assert "TX_OUT_NCHW" not in dict(gemm.spec.defines)
    unsplit = WRW.get_program(CTX, problem, {**config, "split_k": 1})  # the kernel writes K x C x R x S
    assert _names(unsplit) == names[:3] and unsplit.steps[2].args[4] == Tensor("w")
    assert dict(unsplit.steps[2].spec.defines)["TX_OUT_NCHW"] == 1
    nhwc = make((32, 128, 28, 28), (128, 128, 3, 3), "W", pads=(1, 1))
    assert _names(WRW.get_program(CTX, nhwc, {**config, "split_k": 1})) == ["igemm_wrw_tf32x3"]
    space = list(WRW.search_space(CTX, nhwc))
    assert len(space) >= 20 and all(WRW.is_valid_config(CTX, nhwc, c) for c in space[::50])
    assert not WRW.is_valid_config(CTX, nhwc, {**config, "split_k": 3})
    uneven = {**config, "bm": 32, "bn": 64, "bk": 16, "warps_m": 2, "warps_n": 4}  # 256 threads, 128 chunks
    assert not WRW.is_valid_config(CTX, nhwc, uneven)


@support.needs_nvrtc
def test_backward_weights_compiles_for_sm90():
    problem = make((3, 12, 9, 11), (20, 12, 2, 3), "W", pads=(1, 0), strides=(2, 2), dilations=(2, 1))
    space = list(WRW.search_space(CTX, problem))
    configs = (WRW.default_config(CTX, problem), space[0], space[-1])
    support.assert_builds_for_sm90(WRW, CTX, problem, configs, "igemm_wrw_tf32x3")


# ---- the arithmetic, in NumPy --------------------------------------------------------------------
def tf32(a: np.ndarray) -> np.ndarray:
    """Round fp32 to TF32 (10 stored mantissa bits), to nearest with ties away (cvt.rna)."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x1000) & 0xFFFFE000
    return bits.astype(np.uint32).view(np.float32)


def split3(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    big = tf32(a)
    return big, tf32(a.astype(np.float32) - big)


def conv_emulated(problem: ConvProblem, x: np.ndarray, w: np.ndarray, mode: str) -> np.ndarray:
    """The forward conv with products as the kernel forms them (float64 sums): 'tf32' rounds
    both operands to TF32, '3xtf32' sums big*big + big*small + small*big."""
    if mode == "tf32":
        return conv_reference(problem, {"x": tf32(x), "w": tf32(w)})
    (xb, xs), (wb, ws) = split3(x), split3(w)
    return sum(conv_reference(problem, {"x": a, "w": b}) for a, b in ((xb, wb), (xb, ws), (xs, wb)))


def test_3xtf32_arithmetic_keeps_fp32_accuracy():
    """On a 3x3 layer with 576 taps: 3xTF32's error against float64 is within 2x an fp32
    result's (the reference's output rounded to fp32 and an fp32 sum), and about 1000x
    below plain TF32's."""
    rng = np.random.default_rng(7)
    problem = make((2, 64, 10, 10), (32, 64, 3, 3), layouts=NCHW, pads=(1, 1))
    x = rng.uniform(-1, 1, problem.x.lens).astype(np.float32)
    w = rng.uniform(-1, 1, problem.w.lens).astype(np.float32)
    exact = conv_reference(problem, {"x": x, "w": w})
    x32 = x.astype(np.float64)
    cols = np.lib.stride_tricks.sliding_window_view(
        np.pad(x32, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3)
    )
    fp32_sum = np.einsum("ncpqrs,kcrs->nkpq", cols.astype(np.float32), w, dtype=np.float32)
    err_fp32 = rms_range(fp32_sum.astype(np.float32), exact)
    err_3x = rms_range(conv_emulated(problem, x, w, "3xtf32").astype(np.float32), exact)
    err_tf32 = rms_range(conv_emulated(problem, x, w, "tf32").astype(np.float32), exact)
    assert err_3x < 2 * max(err_fp32, 1e-8) and err_3x < err_tf32 / 300, (err_3x, err_fp32, err_tf32)


# ---- on a GPU: against the reference, next to FFMA ----------------------------------------------
_WHY = backends.unavailable_reason("cuda")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


def errors(handle, solver, problem: ConvProblem, rng, config=None) -> tuple[float, float, float]:
    """(3xTF32 error, naive FFMA error, plain-TF32 error emulated in NumPy) against float64 on
    one data set; asserts the first is within the fp32 tolerance."""
    from miopy.engine.candidates import make_solution

    view_ = problem.conv_view()
    assert solver.is_applicable(handle, view_) is None, solver.is_applicable(handle, view_)
    bufs = support.random_buffers(problem, rng)
    expected = conv_reference_buffers(problem, bufs)
    errs = []
    naive = {
        "FORWARD": "ConvDirectNaiveFwd",
        "BACKWARD_DATA": "ConvDirectNaiveBwd",
        "BACKWARD_WEIGHTS": "ConvDirectNaiveWrw",
    }[view_.direction.name]
    for s, cfg in ((solver, config), (by_name(naive), None)):
        run = {role: buf.copy() for role, buf in bufs.items()}
        make_solution(handle, problem, s, cfg).run(handle, run)
        errs.append(rms_range(support.output_of(problem, run), expected))
    assert errs[0] < support.tolerance(problem), (problem.key(), errs)
    descs = {"x": problem.x, "w": problem.w, "y": problem.y}
    rounded = {
        role: tf32(from_storage(view(buf, descs[role]), problem.dtype))
        for role, buf in bufs.items()
        if role != problem.output_role
    }
    errs.append(rms_range(conv_reference(problem, rounded).astype(np.float32), expected))
    return tuple(errs)


def check_close_to_ffma(errs: tuple[float, float, float]) -> None:
    err_3x, err_ffma, err_tf32 = errs
    assert err_3x < 3 * err_ffma + 2e-7, errs
    assert err_3x < err_tf32 / 50, errs


def random_problem(rng, direction: str) -> ConvProblem:
    while True:
        c, k = 4 * int(rng.integers(1, 17)), 4 * int(rng.integers(1, 25))
        layouts = tuple(str(rng.choice(["NCHW", "NHWC"])) for _ in range(3))
        strided = direction != "B"
        try:
            return make(
                (int(rng.integers(1, 5)), c, *rng.integers(3, 20, 2)),
                (k, c, *rng.integers(1, 6, 2)),
                direction,
                layouts,
                pads=tuple(int(v) for v in rng.integers(0, 3, 2)),
                strides=tuple(int(v) for v in rng.integers(1, 4, 2)) if strided else (1, 1),
                dilations=tuple(int(v) for v in rng.integers(1, 3, 2)),
            )
        except ValueError:
            continue


@pytest.mark.parametrize("direction", ["F", "B", "W"])
@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_random_problems(handle, direction):
    """Random shapes, both layouts (mixed too), padding, dilation, strides forward."""
    solver = {"F": FWD, "B": BWD, "W": WRW}[direction]
    rng = np.random.default_rng({"F": 51, "B": 52, "W": 55}[direction])
    done = 0
    while done < 12:
        problem = random_problem(rng, direction)
        if solver.is_applicable(handle, problem.conv_view()) is not None:
            continue
        check_close_to_ffma(errors(handle, solver, problem, rng))
        done += 1


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_search_space_sample(handle):
    """A spread of the search space (splits included) on a problem with partial tiles everywhere."""
    problem = make(
        (3, 40, 13, 15), (72, 40, 3, 3), layouts=("NCHW", "NHWC", "NCHW"), pads=(1, 2), dilations=(2, 1)
    )
    space = list(FWD.search_space(handle, problem))
    rng = np.random.default_rng(53)
    picks = {0, len(space) - 1, *rng.choice(len(space), 12, replace=False).tolist()}
    configs = [space[i] for i in sorted(picks)] + [dict(c) for c in PREFERRED]
    configs += [{**DEFAULT_SMALL_GRID, "split_k": s} for s in (2, 3, 8)]
    for config in configs:
        if FWD.is_valid_config(handle, problem, config):
            check_close_to_ffma(errors(handle, FWD, problem, rng, config))


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_resnet_like_layers(handle):
    """3x3 layers at batch 2, both layouts and directions; a transposed problem."""
    rng = np.random.default_rng(54)
    for layouts in (NHWC, NCHW):
        for direction, solver in (("F", FWD), ("B", BWD), ("W", WRW)):
            problem = make((2, 128, 28, 28), (128, 128, 3, 3), direction, layouts, pads=(1, 1))
            check_close_to_ffma(errors(handle, solver, problem, rng))
    x = TensorDesc("fp32", (2, 16, 5, 6), layout="NHWC")
    w = TensorDesc("fp32", (16, 24, 3, 3), layout="NHWC")
    trans = ConvProblem.create(x, w, ConvDesc((1, 1), (1, 1), mode="trans"), "B")
    errs = errors(handle, FWD, trans, rng)
    assert errs[0] < support.tolerance(trans)
