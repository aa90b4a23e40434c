"""ConvIgemmBwdNhwc and ConvIgemmWrwNhwc, the tensor-core implicit-GEMM backward-data and
backward-weights convolutions (CUDA only).

On the CPU: applicability, the config spaces (validation, defaults, search spaces), the launch
geometry and NVRTC builds of a sample of configs for sm_90. On a GPU (marked ``gpu``): random
problems (strides, padding, dilation, odd sizes, both data types), splits, and a sample of each
search space against the NumPy reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
import support
from test_solvers_igemm import CTX, fake_ctx, make

from miopy import backends
from miopy.errors import BadParm
from miopy.solution import Tensor, Workspace
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv import implicit_gemm_bwd as bwd
from miopy.solvers.conv import implicit_gemm_wrw as wrw
from miopy.solvers.conv.igemm_common import FIELDS
from miopy.solvers.conv.implicit_gemm import DEFAULT_SMALL_GRID, DEFAULT_TINY_GRID
from miopy.solvers.conv.implicit_gemm_bwd import DEFAULT_NARROW, DEFAULT_WIDE, ConvIgemmBwdNhwc
from miopy.solvers.conv.implicit_gemm_wrw import ConvIgemmWrwNhwc
from miopy.tensor import TensorDesc

BWD, WRW = ConvIgemmBwdNhwc(), ConvIgemmWrwNhwc()
SOLVERS = {"B": BWD, "W": WRW}


def resnet(direction: str) -> list:
    return [
        make("fp16", (32, c, hw, hw), (k, c, f, f), direction, pads=(f // 2, f // 2), strides=(st, st))
        for c, hw, k, f, st in [
            (64, 56, 64, 3, 1),
            (128, 28, 128, 3, 1),
            (256, 14, 256, 3, 1),
            (512, 7, 512, 3, 1),
            (64, 56, 256, 1, 1),
            (128, 56, 128, 3, 2),
            (1024, 14, 2048, 1, 2),
        ]
    ]


ODD = {
    d: make("bf16", (3, 24, 9, 11), (40, 24, 3, 3), d, pads=(1, 0), strides=(2, 2), dilations=(2, 1))
    for d in "BW"
}


# ---- applicability and registration ------------------------------------------------------------
@pytest.mark.parametrize("direction", ["B", "W"])
def test_applicability(direction):
    solver = SOLVERS[direction]
    for problem in resnet(direction) + [ODD[direction]]:
        assert solver.is_applicable(CTX, problem) is None, problem.key()
    assert "cuda" in solver.is_applicable(fake_ctx("opencl"), ODD[direction])
    other = "W" if direction == "B" else "B"
    reasons = {
        "direction": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), "F", pads=(1, 1)),
        "DIRECTION": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), other, pads=(1, 1)),
        "dtype": make("fp32", (2, 16, 8, 8), (16, 16, 3, 3), direction, pads=(1, 1)),
        "per group": make("fp16", (2, 16, 8, 8), (16, 4, 3, 3), direction, pads=(1, 1), groups=4),
        "NHWC": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), direction, ("NCHW",) * 3, pads=(1, 1)),
        "multiples of 8": make("fp16", (2, 16, 8, 8), (12, 16, 3, 3), direction, pads=(1, 1)),
    }
    for word, problem in reasons.items():
        reason = solver.is_applicable(CTX, problem.conv_view())
        assert reason is not None and word.lower() in reason.lower(), (word, reason)
    # a transposed forward convolution is backward data in its conv view
    x = TensorDesc("fp16", (2, 16, 5, 6), layout="NHWC")
    w = TensorDesc("fp16", (16, 24, 3, 3), layout="NHWC")
    from miopy.problem.conv import ConvDesc, ConvProblem

    trans = ConvProblem.create(x, w, ConvDesc((1, 1), (2, 2), mode="trans", trans_output_pads=(1, 0)), "F")
    assert (solver.is_applicable(CTX, trans.conv_view()) is None) == (direction == "B")


def test_registered_in_order():
    names = [s.name for s in CONV_SOLVERS]
    assert isinstance(by_name("ConvIgemmBwdNhwc"), ConvIgemmBwdNhwc) and by_name("202", "conv") is not None
    assert isinstance(by_name("ConvIgemmWrwNhwc"), ConvIgemmWrwNhwc) and by_name("203", "conv") is not None
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)
    assert names.index("GemmBwd1x1_stride1") < names.index("ConvIgemmBwdNhwc") < names.index("GemmBwdRest")
    assert (
        names.index("GemmWrw1x1_stride1") < names.index("ConvIgemmWrwNhwc") < names.index("GemmWrwUniversal")
    )
    assert BWD.tunable and WRW.tunable and BWD.algorithm == WRW.algorithm == "implicit_gemm"


# ---- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("direction", ["B", "W"])
def test_search_space_and_default(direction):
    solver = SOLVERS[direction]
    for problem in resnet(direction) + [ODD[direction]]:
        space = list(solver.search_space(CTX, problem))
        assert len(space) >= (10 if problem is ODD[direction] else 20), problem.key()  # ODD: C = 24
        assert len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
        smem = bwd.smem_bytes if direction == "B" else wrw.smem_bytes
        for config in space:
            assert solver.is_valid_config(CTX, problem, config), config
            assert solver.is_valid_config(CTX, problem, json.loads(json.dumps(config)))
            assert smem(config) <= 232448
        default = solver.default_config(CTX, problem)
        assert solver.is_valid_config(CTX, problem, default), (problem.key(), default)
        small = fake_ctx(smem=16384)
        cfg = solver.default_config(small, problem)
        assert solver.is_valid_config(small, problem, cfg) and smem(cfg) <= 16384


def test_bwd_defaults_follow_the_problem():
    layers = resnet("B")
    assert BWD.default_config(CTX, layers[0]) == DEFAULT_NARROW  # C = 64
    assert BWD.default_config(CTX, layers[1]) == DEFAULT_WIDE  # C = 128, 3x3 x K = 128
    assert DEFAULT_WIDE["frag_bufs"] == 2  # double-buffered fragments, unlike the forward default
    assert BWD.default_config(CTX, layers[2]) == DEFAULT_SMALL_GRID  # 14x14: 392 tiles of 64 x 64
    # 7x7 images: 200 tiles of 64 x 64 are still a small grid: 64 x 128, split in two in a cluster
    assert BWD.default_config(CTX, layers[3]) == {**DEFAULT_TINY_GRID, "split_k": 2}
    assert BWD.default_config(fake_ctx(arch="sm_80"), layers[3]) == DEFAULT_TINY_GRID
    # stride 2, dilation 1: 4 phases, each with at most 2 x 2 of the 3 x 3 taps
    assert bwd.phase_steps(layers[5]) == (2, 2)
    assert bwd.max_k_tiles(layers[5], DEFAULT_WIDE) == 4 * 2
    assert bwd.phase_steps(ODD["B"]) == (1, 2)  # dilation 2 over stride 2: every row reaches


def test_wrw_defaults_fill_the_device():
    for problem in resnet("W"):
        config = WRW.default_config(CTX, problem)
        blocks = wrw.tiles(problem, config) * config["split_k"]
        assert blocks <= 2 * 132 or config["split_k"] == 1, (problem.key(), config)
        longest = max(d for d in wrw.DOMAIN["split_k"] if wrw.k_tiles(problem, config) >= 8 * d)
        assert blocks >= wrw.FULL_WAVE * 132 or config["split_k"] == longest, (problem.key(), config)
        assert wrw.k_tiles(problem, config) >= config["split_k"] * 8
        k, c, r, s = problem.w.lens
        assert config["bm"] == (64 if k <= 64 < r * s * c else 128)
    first = WRW.default_config(CTX, resnet("W")[0])  # 64 x 576 dw, 100352 pixels: a long split
    # 9 tiles of 64 x 64: 12 slices (108 blocks) are short of a wave, 24 give 1.6 blocks per SM
    assert first["split_k"] == 24 and wrw.tiles(resnet("W")[0], first) == 9
    wide = WRW.default_config(CTX, resnet("W")[2])  # 256 x 2304: 72 tiles, one wave is short
    assert wrw.tiles(resnet("W")[2], wide) == 72 and wide["split_k"] == 3
    assert WRW.default_config(fake_ctx(compute_units=2), resnet("W")[3])["split_k"] == 1


@pytest.mark.parametrize("direction", ["B", "W"])
def test_is_valid_config_rejects_garbage(direction):
    solver, problem = SOLVERS[direction], ODD[direction]
    good = solver.default_config(CTX, problem)
    assert solver.is_valid_config(CTX, problem, good)
    domain = solver.domain
    bad_values = [None, [], "bm=128", {}, {**good, "extra": 1}, {k: v for k, v in good.items() if k != "bk"}]
    for field in FIELDS:
        bad_values += [
            {**good, field: str(good[field])},
            {**good, field: True},
            {**good, field: 0},
            {**good, field: max(domain[field]) * 2},
        ]
    bad_values += [
        {**good, "warps_m": 4, "bm": 32},
        {**good, "split_k": 128},  # more slices than reduction steps
    ]
    for config in bad_values:
        assert not solver.is_valid_config(CTX, problem, config), config
    assert not solver.is_valid_config(
        fake_ctx(max_work_group_size=64), problem, {**good, "warps_m": 4, "bm": 128}
    )


# ---- launch geometry -----------------------------------------------------------------------------
def test_bwd_launch_geometry():
    problem = ODD["B"].conv_view()  # dx 3 x 24 x 9 x 11 from dy 3 x 40 x P x Q, stride 2
    config = {**DEFAULT_SMALL_GRID, "bm": 64, "bn": 32, "warps_m": 2, "warps_n": 1, "split_k": 1}
    program = BWD.get_program(CTX, problem, config)
    (launch,) = program.steps
    spec = launch.spec
    assert launch.args[:3] == (Tensor("y"), Tensor("w"), Tensor("x")) and launch.args[3] is None
    rows = 3 * 5 * 6  # the largest phase: ceil(9/2) x ceil(11/2) pixels per image
    assert bwd.phase_rows(problem) == rows
    assert spec.global_size == (-(-rows // 64) * 1 * 64, 4, 1) and spec.local_size == (64, 1, 1)
    assert launch.shared_mem == bwd.smem_bytes(config) and program.workspace == 0
    d = dict(spec.defines)
    assert (d["IG_C"], d["IG_K"], d["IG_H"], d["IG_W"], d["IG_RSTEP"], d["IG_SSTEP"]) == (24, 40, 9, 11, 1, 2)
    assert (d["IG_P"], d["IG_Q"]) == problem.y.lens[2:] and d["MIOPY_DTYPE"] == 2
    split = {**config, "split_k": 2}
    sm80 = fake_ctx(arch="sm_80")
    program = BWD.get_program(sm80, problem, split)
    main, reduce = program.kernels
    assert main.global_size[2] == 2 and reduce.name == "igemm_bwd_splitk_reduce"
    assert program.steps[1].args == (Workspace(), Tensor("x"))
    assert program.workspace == 2 * 3 * 9 * 11 * 24 * 4 == BWD.workspace_size(sm80, problem, split)
    assert reduce.global_size[0] >= 3 * 9 * 11 * 24 // 8
    (cluster,) = BWD.get_program(CTX, problem, split).kernels  # sm_90: the slices are a cluster (grid z)
    assert cluster.global_size == main.global_size and dict(cluster.defines)["IG_CLUSTER"] == 1
    assert BWD.workspace_size(CTX, problem, split) == 0
    with pytest.raises(BadParm):
        BWD.get_program(CTX, problem, {**config, "bm": 48})


def test_wrw_launch_geometry():
    problem = resnet("W")[0]
    config = WRW.default_config(CTX, problem)
    program = WRW.get_program(CTX, problem, config)
    main, reduce = program.kernels
    assert program.steps[0].args == (Tensor("x"), Tensor("y"), Tensor("w"), Workspace())
    assert program.steps[1].args == (Workspace(), Tensor("w"))
    assert main.global_size == (9 * 128, 24) and main.local_size == (128, 1)
    assert reduce.name == "igemm_wrw_splitk_reduce" and reduce.global_size[0] >= 64 * 576 // 8
    assert program.workspace == 24 * 64 * 576 * 4
    one = {**config, "split_k": 1}
    program = WRW.get_program(CTX, problem, one)
    assert len(program.steps) == 1 and program.workspace == 0 and program.steps[0].args[3] is None
    assert program.steps[0].shared_mem == wrw.smem_bytes(one) == 4 * 128 * 64 * 2


@support.needs_nvrtc
@pytest.mark.parametrize("direction", ["B", "W"])
def test_sample_of_configs_compiles_for_sm90(direction):
    """NVRTC builds the kernels of the default and of a spread of the search space (no GPU)."""
    from miopy.backends.base import KERNEL_ROOT
    from miopy.backends.cuda import compile_cubin

    solver = SOLVERS[direction]
    name = "igemm_bwd" if direction == "B" else "igemm_wrw"
    source = (KERNEL_ROOT / "cuda" / f"{name}.cu").read_text()
    rng = np.random.default_rng(7)
    for problem in (resnet(direction)[5], ODD[direction]):
        space = list(solver.search_space(CTX, problem))
        picks = [solver.default_config(CTX, problem), space[int(rng.integers(len(space)))]]
        for config in picks:
            for spec in solver.get_program(CTX, problem, config).kernels:
                cubin = compile_cubin(source, f"{name}.cu", spec.options(), arch="sm_90")
                assert cubin[:4] == b"\x7fELF" and spec.name.encode() in cubin, config


# ---- on a GPU: against the reference ------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")
gpu = pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


def check(handle, solver, problem, rng, config=None) -> float:
    return support.check_solver(handle, solver, problem, rng, config)


def channels(rng) -> tuple[int, int]:
    """C and K: multiples of 8 up to 64 and 96."""
    return 8 * int(rng.integers(1, 9)), 8 * int(rng.integers(1, 13))


def random_problem(rng, dtype, direction):
    return support.random_nhwc_problem(rng, dtype, direction, channels)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", ["B", "W"])
def test_random_problems(handle, direction, dtype):
    """Default configs on random problems: channels, sizes, filters, strides, padding, dilation."""
    rng = np.random.default_rng({"fp16": 51, "bf16": 52}[dtype] + (direction == "W"))
    for _ in range(12):
        check(handle, SOLVERS[direction], random_problem(rng, dtype, direction), rng)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("direction", ["B", "W"])
def test_search_space_sample(handle, direction):
    """A spread of the search space on a problem with partial tiles and a stride of 2."""
    solver = SOLVERS[direction]
    problem = make(
        "fp16", (3, 40, 13, 15), (72, 40, 3, 3), direction, pads=(1, 2), strides=(2, 2), dilations=(1, 2)
    )
    space = list(solver.search_space(handle, problem))
    rng = np.random.default_rng(53)
    picks = {0, len(space) - 1, *rng.choice(len(space), 12, replace=False).tolist()}
    for i in sorted(picks):
        check(handle, solver, problem, rng, space[i])
    preferred = (DEFAULT_WIDE, DEFAULT_NARROW, DEFAULT_SMALL_GRID) if direction == "B" else wrw.PREFERRED
    for config in preferred:
        config = {**config, "split_k": 1 if direction == "B" else 4}
        if solver.is_valid_config(handle, problem, config):
            check(handle, solver, problem, rng, config)


@pytest.mark.gpu
@gpu
def test_splits(handle):
    """Split reductions (uneven slices, empty phases) give the unsplit answer, both data types."""
    rng = np.random.default_rng(54)
    base = {**DEFAULT_SMALL_GRID, "bk": 32, "frag_bufs": 1}
    for dtype, split in (("fp16", 2), ("bf16", 3)):
        # stride 3 over a 2x2 filter: some phases have no taps (dx there is 0)
        problem = make(dtype, (2, 32, 11, 10), (136, 32, 2, 2), "B", pads=(0, 1), strides=(3, 3))
        assert bwd.max_k_tiles(problem, base) == 5  # one tap of 136 channels, 32 at a time
        check(handle, BWD, problem, rng, {**base, "split_k": split})
    for dtype, split in (("fp16", 3), ("bf16", 6)):
        problem = make(dtype, (4, 32, 12, 12), (48, 32, 3, 3), "W", pads=(1, 1))
        check(handle, WRW, problem, rng, {**base, "split_k": split})


@pytest.mark.gpu
@gpu
def test_larger_layers(handle):
    """ResNet-like shapes at a small batch: 3x3, 1x1, strided."""
    rng = np.random.default_rng(55)
    for direction in "BW":
        for problem in (
            make("fp16", (2, 64, 28, 28), (64, 64, 3, 3), direction, pads=(1, 1)),
            make("bf16", (2, 256, 14, 14), (128, 256, 1, 1), direction),
            make("fp16", (2, 128, 28, 28), (128, 128, 3, 3), direction, pads=(1, 1), strides=(2, 2)),
            make("bf16", (2, 256, 28, 28), (512, 256, 1, 1), direction, strides=(2, 2)),
        ):
            check(handle, SOLVERS[direction], problem, rng)


@pytest.mark.gpu
@gpu
def test_transposed_forward(handle):
    """A transposed convolution's forward runs as backward data in its conv view."""
    from miopy.problem.conv import ConvDesc, ConvProblem

    rng = np.random.default_rng(56)
    x = TensorDesc("fp16", (2, 16, 5, 6), layout="NHWC")
    w = TensorDesc("fp16", (16, 24, 3, 3), layout="NHWC")
    problem = ConvProblem.create(x, w, ConvDesc((1, 1), (2, 2), mode="trans", trans_output_pads=(1, 0)), "F")
    check(handle, BWD, problem, rng)
