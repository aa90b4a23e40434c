"""ConvIgemmFwdNhwc, the tensor-core implicit-GEMM forward convolution (CUDA only).

On the CPU: applicability, the config space (validation, defaults, search space), the launch
geometry, and NVRTC builds of a sample of configs for sm_90. On a GPU (marked ``gpu``): random
problems (strides, padding, dilation, odd sizes, both data types) and a sample of the search
space against the NumPy reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
import support

from miopy import backends
from miopy.errors import BadParm
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.solution import Tensor, Workspace
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.igemm_common import DOMAIN, FIELDS, MAX_CLUSTER, cluster_split, threads
from miopy.solvers.conv.implicit_gemm import (
    DEFAULT_NARROW,
    DEFAULT_SHORT,
    DEFAULT_SMALL_GRID,
    DEFAULT_TINY_GRID,
    DEFAULT_WIDE,
    PREFERRED,
    ConvIgemmFwdNhwc,
    grid_blocks,
    k_tiles,
    smem_bytes,
)
from miopy.tensor import TensorDesc

SOLVER = ConvIgemmFwdNhwc()
NHWC = ("NHWC",) * 3


make = support.conv_problem  # (dtype, xlens, wlens, direction, layouts, **conv)
fake_ctx = support.fake_cuda_ctx


CTX = fake_ctx()
RESNET = [
    make("fp16", (32, c, hw, hw), (k, c, f, f), pads=(f // 2, f // 2))
    for c, hw, k, f in [
        (64, 56, 64, 3),
        (128, 28, 128, 3),
        (256, 14, 256, 3),
        (512, 7, 512, 3),
        (64, 56, 256, 1),
        (1024, 14, 512, 1),
        (512, 7, 2048, 1),
    ]
]
ODD = make("bf16", (3, 24, 9, 11), (40, 24, 2, 3), pads=(1, 0), strides=(2, 2), dilations=(2, 1))


# ---- applicability -------------------------------------------------------------------------------
def test_applicability():
    assert SOLVER.is_applicable(CTX, RESNET[0]) is None
    assert SOLVER.is_applicable(CTX, ODD) is None
    assert "cuda" in SOLVER.is_applicable(fake_ctx("opencl"), RESNET[0])
    reasons = {
        "direction": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), "B", pads=(1, 1)),
        "dtype": make("fp32", (2, 16, 8, 8), (16, 16, 3, 3), pads=(1, 1)),
        "per group": make("fp16", (2, 16, 8, 8), (16, 4, 3, 3), pads=(1, 1), groups=4),
        "NHWC": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), layouts=("NCHW",) * 3, pads=(1, 1)),
        "multiples of 8": make("fp16", (2, 12, 8, 8), (16, 12, 3, 3), pads=(1, 1)),
        "3-d": make("fp16", (1, 8, 2, 4, 4), (8, 8, 1, 3, 3), layouts=("NDHWC",) * 3, pads=(0, 1, 1)),
    }
    for word, problem in reasons.items():
        reason = SOLVER.is_applicable(CTX, problem.conv_view())
        assert reason is not None and word in reason, (word, reason)
    mixed = make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), layouts=("NHWC", "NCHW", "NHWC"), pads=(1, 1))
    assert "w is not packed NHWC" in SOLVER.is_applicable(CTX, mixed)


def test_registered_as_an_implicit_gemm_solver():
    assert isinstance(by_name("ConvIgemmFwdNhwc"), ConvIgemmFwdNhwc)
    assert isinstance(by_name(str(SOLVER.id)), ConvIgemmFwdNhwc)
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)
    names = [s.name for s in CONV_SOLVERS]
    # after cuBLAS's plain GEMM for 1x1 layers (faster there), before im2col + GEMM
    assert names.index("GemmFwd1x1_0_1") < names.index("ConvIgemmFwdNhwc") < names.index("GemmFwdRest")
    assert SOLVER.tunable and SOLVER.algorithm == "implicit_gemm"


# ---- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", RESNET + [ODD], ids=lambda p: p.key())
def test_search_space_and_default(problem):
    space = list(SOLVER.search_space(CTX, problem))
    assert len(space) >= 20
    assert len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
    for config in space:
        assert SOLVER.is_valid_config(CTX, problem, config), config
        assert SOLVER.is_valid_config(CTX, problem, json.loads(json.dumps(config)))  # a DB round trip
        assert smem_bytes(config) <= 232448 and 64 <= threads(config) <= 256
    default = SOLVER.default_config(CTX, problem)
    assert SOLVER.is_valid_config(CTX, problem, default)
    k = problem.w.lens[0]
    assert default["bn"] <= max(64, k)
    # a split only for a small grid, and then one that sums in a cluster
    unsplit = grid_blocks(problem, {**default, "split_k": 1})
    assert default["split_k"] == 1 or (unsplit < 2 * 132 and default["split_k"] <= MAX_CLUSTER)


def test_default_config_follows_the_problem():
    wide = SOLVER.default_config(CTX, RESNET[1])  # K = 128, 25088 rows
    narrow = SOLVER.default_config(CTX, RESNET[0])  # K = 64
    tiny = SOLVER.default_config(CTX, RESNET[3])  # 7x7 images: 1568 rows, few tiles
    short = SOLVER.default_config(CTX, RESNET[4])  # 1x1 from 64 channels: 64 taps
    assert wide == DEFAULT_WIDE and narrow == DEFAULT_NARROW and short == DEFAULT_SHORT
    assert (wide["bm"], wide["bn"], wide["split_k"]) == (128, 64, 1)
    assert grid_blocks(RESNET[3], DEFAULT_WIDE) < 2 * 132
    # 200 tiles of 64 x 64 are still fewer than 2 per SM: 100 of 64 x 128, split in two in a cluster
    assert grid_blocks(RESNET[3], DEFAULT_SMALL_GRID) == 200
    assert tiny == {**DEFAULT_TINY_GRID, "split_k": 2} and grid_blocks(RESNET[3], tiny) == 100
    assert SOLVER.default_config(fake_ctx(arch="sm_80"), RESNET[3]) == DEFAULT_TINY_GRID  # no clusters
    assert SOLVER.default_config(CTX, RESNET[2]) == DEFAULT_SMALL_GRID  # 14x14: 392 tiles of 64 x 64
    assert SOLVER.default_config(fake_ctx(compute_units=8), RESNET[3]) == DEFAULT_WIDE
    small_smem = fake_ctx(smem=16384)
    cfg = SOLVER.default_config(small_smem, RESNET[0])
    assert SOLVER.is_valid_config(small_smem, RESNET[0], cfg) and smem_bytes(cfg) <= 16384


def test_is_valid_config_rejects_garbage():
    good = dict(PREFERRED[0])
    assert SOLVER.is_valid_config(CTX, ODD, good)
    bad_values = [None, [], "bm=128", 7, {}, list(good.items()), {**good, "extra": 1}]
    bad_values.append({k: v for k, v in good.items() if k != "stages"})
    for field in FIELDS:
        bad_values += [
            {**good, field: str(good[field])},
            {**good, field: float(good[field])},
            {**good, field: True},
            {**good, field: None},
            {**good, field: 0},
            {**good, field: -good[field]},
            {**good, field: 3 if 3 not in DOMAIN[field] else 7},
            {**good, field: max(DOMAIN[field]) * 2},
        ]
    bad_values += [
        {**good, "warps_m": 4, "bm": 32},  # warp tile of 8 rows
        {**good, "bm": 256, "bn": 256},  # 128 x 128 per warp: spills
        {**good, "bm": 256, "bn": 256, "bk": 64, "warps_m": 4, "warps_n": 4, "stages": 4},  # 512 threads
        {**good, "bm": 32, "bn": 32, "warps_m": 1, "warps_n": 1},  # 32 threads
    ]
    for config in bad_values:
        assert not SOLVER.is_valid_config(CTX, ODD, config), config
    assert not SOLVER.is_valid_config(fake_ctx(smem=32768), ODD, good)
    big = {
        "bm": 128,
        "bn": 256,
        "bk": 64,
        "warps_m": 2,
        "warps_n": 4,
        "stages": 4,
        "frag_bufs": 1,
        "split_k": 1,
    }  # 192 KB
    assert smem_bytes(big) == 4 * 384 * 64 * 2 and SOLVER.is_valid_config(CTX, ODD, big)
    assert not SOLVER.is_valid_config(fake_ctx(smem=160 * 1024), ODD, big)
    assert not SOLVER.is_valid_config(fake_ctx(max_work_group_size=64), ODD, good)


def test_launch_geometry():
    problem = ODD.conv_view()
    config = {
        "bm": 64,
        "bn": 32,
        "bk": 64,
        "warps_m": 2,
        "warps_n": 2,
        "stages": 2,
        "frag_bufs": 1,
        "split_k": 1,
    }
    program = SOLVER.get_program(CTX, problem, config)
    (spec,) = program.kernels
    (launch,) = program.steps
    assert launch.shared_mem == smem_bytes(config) and launch.args[3] is None
    n, k, ho, wo = 3, 40, *problem.y.lens[2:]
    blocks = -(-(n * ho * wo) // 64) * -(-k // 32)
    assert spec.local_size == (128, 1) and spec.global_size == (blocks * 128, 1)
    defines = dict(spec.defines)
    assert defines["MIOPY_DTYPE"] == 2
    assert all(defines[f"IG_{f.upper()}"] == v for f, v in config.items())
    shape = {"N": 3, "C": 24, "H": 9, "W": 11, "K": 40, "R": 2, "S": 3, "P": ho, "Q": wo}
    assert all(defines[f"IG_{name}"] == v for name, v in shape.items())
    assert (defines["IG_PH"], defines["IG_PW"], defines["IG_SH"], defines["IG_DH"]) == (1, 0, 2, 2)
    assert program.workspace == 0
    with pytest.raises(BadParm):
        SOLVER.get_program(CTX, problem, {**config, "bm": 48})


def test_split_reduction_geometry():
    """A split reduction without clusters (sm_80) or past MAX_CLUSTER: one block row per slice
    (grid y), fp32 partials, then the sum kernel."""
    ctx = fake_ctx(arch="sm_80")
    problem = RESNET[3]  # 7x7, R*S*C = 4608: 72 steps of 64
    config = {
        "bm": 64,
        "bn": 64,
        "bk": 64,
        "warps_m": 2,
        "warps_n": 2,
        "stages": 3,
        "frag_bufs": 2,
        "split_k": 4,
    }
    assert k_tiles(problem, config) == 72 and SOLVER.is_valid_config(ctx, problem, config)
    program = SOLVER.get_program(ctx, problem, config)
    main, reduce = program.kernels
    assert program.steps[0].args[3] == Workspace() and program.steps[1].args == (Workspace(), Tensor("y"))
    rows, k = 32 * 7 * 7, 512
    assert main.global_size == (grid_blocks(problem, config) * 128, 4) and main.local_size == (128, 1)
    assert reduce.name == "igemm_splitk_reduce" and reduce.local_size == (256,)
    assert reduce.global_size[0] >= rows * k // 8 > reduce.global_size[0] - 256
    assert program.workspace == 4 * rows * k * 4 == SOLVER.workspace_size(ctx, problem, config)
    assert dict(main.defines)["IG_SPLIT_K"] == 4 == dict(reduce.defines)["IG_SPLIT_K"]
    assert "IG_CLUSTER" not in dict(main.defines)
    few_steps = {**config, "bk": 32, "split_k": 8}
    assert k_tiles(ODD, few_steps) == 5  # 2 * 3 * 24 taps, 32 at a time
    assert SOLVER.is_valid_config(CTX, ODD, {**few_steps, "split_k": 4})
    assert not SOLVER.is_valid_config(CTX, ODD, {**few_steps, "split_k": 6})


def test_cluster_split_geometry():
    """On sm_90 a split of 2 to 8 slices is one kernel whose slices of a tile form a cluster
    (grid y, IG_CLUSTER), with the fp32 partial tile in shared memory and no workspace."""
    problem = RESNET[3]
    config = {**DEFAULT_SMALL_GRID, "split_k": 4}
    assert cluster_split(CTX, config) and not cluster_split(fake_ctx(arch="sm_80"), config)
    assert not cluster_split(CTX, {**config, "split_k": 1})
    program = SOLVER.get_program(CTX, problem, config)
    (launch,) = program.steps
    spec = launch.spec
    assert launch.args[:3] == (Tensor("x"), Tensor("w"), Tensor("y")) and launch.args[3] is None
    assert spec.global_size == (grid_blocks(problem, config) * 128, 4) and spec.local_size == (128, 1)
    assert dict(spec.defines)["IG_CLUSTER"] == 1 and dict(spec.defines)["IG_SPLIT_K"] == 4
    assert program.workspace == 0 == SOLVER.workspace_size(CTX, problem, config)
    assert launch.shared_mem == max(smem_bytes(config), 64 * (64 + 4) * 4)
    # a tall tile whose partial sums need more shared memory than its pipeline
    big = {**config, "bm": 256, "bn": 128, "bk": 32, "warps_m": 4, "warps_n": 2, "stages": 2, "split_k": 2}
    assert SOLVER.launch_smem(CTX, big) == 256 * 132 * 4 > smem_bytes(big)
    assert not SOLVER.is_valid_config(fake_ctx(smem=100 * 1024), problem, big)


@support.needs_nvrtc
def test_sample_of_configs_compiles_for_sm90():
    """NVRTC builds the kernel of the default and of a spread of the search space (no GPU)."""
    rng = np.random.default_rng(5)
    for problem in (RESNET[0], ODD):
        configs = support.config_spread(SOLVER, CTX, problem, rng)
        support.assert_builds_for_sm90(SOLVER, CTX, problem, configs, "igemm_fwd")


# ---- on a GPU: against the reference ------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


def check(handle, problem: ConvProblem, rng, config=None) -> float:
    return support.check_solver(handle, SOLVER, problem, rng, config)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_igemm_random_problems(handle, dtype):
    """Default configs on random problems: channels, sizes, filters, strides, padding, dilation."""
    rng = np.random.default_rng({"fp16": 41, "bf16": 42}[dtype])

    def channels(r):
        return (8 * int(r.integers(1, 9)), 8 * int(r.integers(1, 25)))

    for _ in range(10):
        check(handle, support.random_nhwc_problem(rng, dtype, "F", channels), rng)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_igemm_search_space_sample(handle):
    """A spread of the search space on a problem with partial tiles in M, N and the reduction."""
    problem = make("fp16", (3, 40, 13, 15), (72, 40, 3, 3), pads=(1, 2), strides=(1, 2), dilations=(2, 1))
    space = list(SOLVER.search_space(handle, problem))
    rng = np.random.default_rng(43)
    picks = {0, len(space) - 1, *rng.choice(len(space), 14, replace=False).tolist()}
    for i in sorted(picks):
        check(handle, problem, rng, space[i])
    for config in PREFERRED:
        check(handle, problem, rng, dict(config))


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_igemm_larger_layers(handle):
    """ResNet-like shapes, smaller batches: 3x3 and 1x1, and a strided 3x3 and 1x1."""
    rng = np.random.default_rng(44)
    for problem in (
        make("fp16", (2, 64, 28, 28), (64, 64, 3, 3), pads=(1, 1)),
        make("bf16", (2, 256, 14, 14), (128, 256, 1, 1), pads=(0, 0)),
        make("fp16", (2, 128, 28, 28), (128, 128, 3, 3), pads=(1, 1), strides=(2, 2)),
        make("bf16", (2, 256, 28, 28), (512, 256, 1, 1), pads=(0, 0), strides=(2, 2)),
    ):
        check(handle, problem, rng)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_igemm_split_reduction(handle):
    """Split reductions (uneven slices too) give the unsplit answer, both data types."""
    rng = np.random.default_rng(46)
    for dtype, split in (("fp16", 2), ("bf16", 3), ("fp16", 8)):
        problem = make(dtype, (4, 64, 7, 7), (48, 64, 3, 3), pads=(1, 1))
        config = {
            "bm": 64,
            "bn": 64,
            "bk": 32,
            "warps_m": 2,
            "warps_n": 2,
            "stages": 3,
            "frag_bufs": 1,
            "split_k": split,
        }
        assert SOLVER.is_valid_config(handle, problem, config)
        check(handle, problem, rng, config)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_igemm_transposed_problem(handle):
    """Backward data of a transposed convolution runs as a forward convolution in its conv view."""
    rng = np.random.default_rng(45)
    x = TensorDesc("fp16", (2, 16, 5, 6), layout="NHWC")
    w = TensorDesc("fp16", (16, 24, 3, 3), layout="NHWC")
    problem = ConvProblem.create(x, w, ConvDesc((1, 1), (2, 2), mode="trans", trans_output_pads=(1, 0)), "B")
    check(handle, problem, rng)
