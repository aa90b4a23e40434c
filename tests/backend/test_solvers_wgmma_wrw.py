"""ConvWgmmaWrwNhwc, the Hopper wgmma implicit-GEMM backward-weights convolution (sm_90 only).

On the CPU: applicability (sm_90 only), the config space (validation, defaults, search space),
the launch geometry of each way to split the reduction, and an NVRTC build of one config. On a
GPU (marked ``gpu``, skipped where the device is not sm_90): random problems (strides, padding,
dilation, partial tiles, both data types), every block tile, every way to split, against the
NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
import support

from miopy import backends
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.implicit_gemm_wgmma_wrw import (
    DOMAIN,
    ConvWgmmaWrwNhwc,
    blocks_per_sm,
    k_tiles,
    slices,
    smem_bytes,
    threads,
    tiles,
    workspace_bytes,
    wrw_config,
)

SOLVER = ConvWgmmaWrwNhwc()
make = support.conv_problem
CTX = support.fake_cuda_ctx()
RESNET = [
    make("fp16", (32, c, hw, hw), (k, c, 3, 3), "W", pads=(1, 1))
    for c, hw, k in [(64, 56, 64), (128, 28, 128), (256, 14, 256), (512, 7, 512)]
]
LONG = make("fp16", (32, 16, 56, 56), (64, 16, 3, 3), "W", pads=(1, 1))  # 3 tiles of dw, 1568 k-tiles
ODD = make("bf16", (3, 24, 9, 11), (40, 24, 2, 3), "W", pads=(1, 0), strides=(2, 2), dilations=(2, 1))


# ---- applicability -------------------------------------------------------------------------------
def test_applicable_on_sm90_only():
    assert SOLVER.is_applicable(CTX, RESNET[0]) is None
    assert SOLVER.is_applicable(CTX, ODD) is None
    for arch in ("sm_80", "sm_89", "sm_100"):
        reason = SOLVER.is_applicable(support.fake_cuda_ctx(arch=arch), RESNET[0])
        assert reason is not None and "sm_90" in reason, (arch, reason)
    reasons = {
        "direction": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), "F", pads=(1, 1)),
        "dtype": make("fp32", (2, 16, 8, 8), (16, 16, 3, 3), "W", pads=(1, 1)),
        "groups": make("fp16", (2, 16, 8, 8), (16, 8, 3, 3), "W", pads=(1, 1), groups=2),
        "NHWC": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), "W", layouts=("NCHW",) * 3, pads=(1, 1)),
        "multiples of 8": make("fp16", (2, 12, 8, 8), (16, 12, 3, 3), "W", pads=(1, 1)),
    }
    for word, problem in reasons.items():
        reason = SOLVER.is_applicable(CTX, problem.conv_view())
        assert reason is not None and word in reason, (word, reason)


def test_registered_ahead_of_the_mma_sync_solver():
    names = [s.name for s in CONV_SOLVERS]
    assert names.index("ConvWgmmaWrwNhwc") < names.index("ConvIgemmWrwNhwc")
    assert by_name(242, "conv").name == SOLVER.name
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)


# ---- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", [*RESNET, ODD], ids=["L3", "L6", "L9", "L12", "odd"])
def test_search_space_and_default(problem):
    space = list(SOLVER.search_space(CTX, problem))
    assert space and all(SOLVER.is_valid_config(CTX, problem, c) for c in space)
    assert len({tuple(sorted(c.items())) for c in space}) == len(space)
    default = SOLVER.default_config(CTX, problem)
    assert SOLVER.is_valid_config(CTX, problem, default)
    assert k_tiles(problem) >= slices(default)  # every slice has pixels


def test_default_config_follows_the_problem():
    l3, l6, l9, l12 = (SOLVER.default_config(CTX, p) for p in RESNET)
    # the fastest of the H200 sweep on each layer
    # K = 64: one warpgroup row, 2 blocks per SM; the parts summed in the kernel
    assert l3 == wrw_config(64, 64, 1, 6, 1, 28, fix=1)
    assert l6 == wrw_config(128, 128, 1, 6, 1, 14, ws=2, fix=1)  # 8 producer threads per pixel row
    assert l9 == wrw_config(256, 128, 1, 4, 1, 7, fix=1)
    # 96 tiles of a short reduction: unsplit, producer warps, spread k-tile starts
    assert l12 == wrw_config(128, 192, 1, 4, ws=1, rot=1)
    for problem, config in zip(RESNET, (l3, l6, l9, l12), strict=True):
        slots = 132 * blocks_per_sm(config, CTX.info.max_dynamic_shared)
        assert tiles(problem, config) * slices(config) <= slots  # one wave
        assert k_tiles(problem) >= 4 * slices(config)
    # a long reduction over few tiles: more slices than parts alone sum in clusters first
    config = SOLVER.default_config(CTX, LONG)
    assert config["cluster"] > 1 and slices(config) > 32 and tiles(LONG, config) == 3
    assert SOLVER.defers(CTX, make("fp16", (32, 64, 56, 56), (64, 64, 1, 1), "W"))
    assert not SOLVER.defers(CTX, RESNET[0])


def test_is_valid_config_rejects_garbage():
    good = wrw_config(128, 256, 2, 4, 2, 3)
    assert SOLVER.is_valid_config(CTX, RESNET[1], good)
    for bad in (
        None,
        {**good, "bm": 32},
        {**good, "wn": 3},
        {**good, "bn": 384},  # 4 warpgroups of 192 columns: 512 threads cannot hold 96 accumulators
        {**good, "bm": 256},  # 8 warpgroups
        {**good, "bn": 320},
        {**good, "stages": 2},
        {**good, "stages": 4.0},
        {**good, "cluster": 3},  # clusters of 3, 5, 7 fit GPCs badly
        {**good, "cluster": 16},
        {**good, "parts": 9},
        {**good, "ws": 1},  # warp-specialised: no clusters
        {**good, "ws": 2},
        {**good, "ws": 3},
        {**good, "rot": 2},
        {**good, "fix": 1},  # fix: no clusters
        {**good, "cluster": 1, "parts": 1, "fix": 1},  # fix: parts to sum
        {**good, "fix": 2},
        {k: v for k, v in good.items() if k != "parts"},
        {**good, "extra": 1},
    ):
        assert not SOLVER.is_valid_config(CTX, RESNET[1], bad), bad
    assert SOLVER.is_valid_config(CTX, RESNET[1], wrw_config(64, 384, 2, 3))  # 2 x 192 columns
    assert SOLVER.is_valid_config(CTX, RESNET[1], wrw_config(128, 192, 1, 5, 1, 3, ws=1))
    assert SOLVER.is_valid_config(CTX, RESNET[1], {**good, "cluster": 1, "fix": 1})
    old = {k: v for k, v in good.items() if k not in ("ws", "fix")}  # a record from before them: 0
    assert SOLVER.is_valid_config(CTX, RESNET[1], old)
    assert SOLVER.get_program(CTX, RESNET[1], old).steps[0].spec.local_size == (threads(good), 1)
    four = wrw_config(256, 128, 1, 4, 1, 3, ws=1)  # 4 MMA warpgroups
    assert not SOLVER.is_valid_config(CTX, RESNET[1], four)
    assert not SOLVER.is_valid_config(CTX, RESNET[1], wrw_config(64, 512, 2, 6))  # 6 x 72 KB stages
    assert not SOLVER.is_valid_config(support.fake_cuda_ctx(smem=100_000), RESNET[1], good)
    # ODD has 3*5*5 = 75 pixels: two k-tiles, so two slices at most
    assert k_tiles(ODD) == 2 and SOLVER.is_valid_config(CTX, ODD, wrw_config(64, 64, 1, 3, 2))
    assert not SOLVER.is_valid_config(CTX, ODD, wrw_config(64, 64, 1, 3, 4))
    assert not SOLVER.is_valid_config(CTX, ODD, wrw_config(64, 64, 1, 3, 1, 3))


def test_launch_geometry_of_each_split():
    problem = RESNET[1]  # dw 128 x 1152
    ways = {
        "unsplit": (wrw_config(128, 256, 2, 4), 1, 0, 0),
        "cluster": (wrw_config(128, 256, 2, 4, 4), 4, 0, 1),
        "parts": (wrw_config(64, 192, 1, 3, 1, 6), 6, 6, 0),
        "both": (wrw_config(64, 192, 1, 3, 8, 3), 24, 3, 0),
        "fix": (wrw_config(64, 192, 1, 3, 1, 6, fix=1), 6, 6, 0),
    }
    for way, (config, split, parts, pure) in ways.items():
        program = SOLVER.get_program(CTX, problem, config)
        gemm = program.steps[0]
        d = dict(gemm.spec.defines)
        assert gemm.spec.name == "wgmma_wrw" and gemm.spec.file == "wgmma_wrw", way
        assert gemm.spec.local_size == (threads(config), 1)
        n_tiles = -(-128 // config["bm"]) * -(-1152 // config["bn"])
        if config["fix"]:  # 1-D, a tile's parts side by side, summed in the kernel
            assert gemm.spec.global_size == (n_tiles * split * threads(config), 1)
            assert d["WG_FIX"] == 1 and len(program.steps) == 1
            flags = -(-(n_tiles * parts * parts * 8) // 256) * 256
            partials = parts * n_tiles * 64 * 192 * 4
            assert program.workspace == workspace_bytes(problem, config) == flags + partials
            continue
        assert gemm.spec.global_size == (n_tiles * threads(config), split), way
        assert gemm.shared_mem == smem_bytes(config)
        assert (d["WG_BM"], d["WG_BN"], d["WG_WN"]) == (config["bm"], config["bn"], config["wn"])
        assert d["IG_SPLIT_K"] == split
        assert d["WG_CLUSTER"] == config["cluster"] and d.get("IG_CLUSTER", 0) == pure, way
        assert program.workspace == workspace_bytes(problem, config) == parts * 128 * 1152 * 4
        assert SOLVER.workspace_size(CTX, problem, config) == program.workspace
        if parts:  # the parts' fp32 partials summed into dw, 8 values per work item
            reduce = program.steps[1]
            assert reduce.spec.name == "igemm_splitk_reduce" and reduce.spec.global_size[0] >= 128 * 1152 // 8
        else:
            assert len(program.steps) == 1, way
    assert threads(wrw_config(128, 256, 2)) == 512 and threads(wrw_config(64, 192)) == 128


# ---- the kernel builds for sm_90a ----------------------------------------------------------------
def test_kernel_file_targets_sm90a():
    from miopy.backends.base import KERNEL_ROOT
    from miopy.backends.cuda import source_target

    source = (KERNEL_ROOT / "cuda" / "wgmma_wrw.cu").read_text()
    assert source_target(source, "sm_90") == "sm_90a"


@support.needs_nvrtc
def test_default_config_compiles_for_sm90a():
    """NVRTC builds a default with clusters and workspace parts."""
    config = SOLVER.default_config(CTX, LONG)
    assert config["cluster"] > 1 and config["parts"] > 1
    support.assert_builds_for_sm90(SOLVER, CTX, LONG, [config], "wgmma_wrw")


# ---- on a GPU: against the reference ------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")
gpu = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    h = Handle("cuda")
    if SOLVER.is_applicable(h, RESNET[0]) is not None:
        pytest.skip(f"not an sm_90 device ({h.info.arch})")
    return h


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_wrw_random_problems(handle, dtype):
    """Default configs on random problems: odd channel multiples of 8, sizes, filters, strides,
    padding, dilation; dw rarely a multiple of the tile."""
    rng = np.random.default_rng({"fp16": 71, "bf16": 72}[dtype])

    def channels(r):
        return (8 * int(r.integers(1, 41)), 8 * int(r.integers(1, 21)))

    for _ in range(6):
        problem = support.random_nhwc_problem(rng, dtype, "W", channels, side=24)
        support.check_solver(handle, SOLVER, problem, rng)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_wrw_every_tile(handle):
    """Every block tile (bm, bn, wn: 16 valid ones) on a problem with partial tiles in K,
    R*S*C and the pixels (5 k-tiles), each unsplit, in a cluster of 4 or in 2 clusters of 2
    in turn."""
    problem = make(
        "fp16", (3, 40, 13, 15), (136, 40, 3, 3), "W", pads=(1, 2), strides=(1, 2), dilations=(2, 1)
    )
    rng = np.random.default_rng(73)
    splits = ((1, 1), (4, 1), (2, 2))
    done = 0
    for bm in DOMAIN["bm"]:
        for bn in DOMAIN["bn"]:
            for wn in DOMAIN["wn"]:
                config = wrw_config(bm, bn, wn, 3, *splits[done % 3])
                if SOLVER.is_valid_config(handle, problem, config):
                    support.check_solver(handle, SOLVER, problem, rng, config)
                    done += 1
    assert done == 16


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_wrw_splits(handle):
    """Clusters, workspace parts and both (uneven slices too), parts summed in the kernel
    (``fix``), spread k-tile starts (``rot``), give the unsplit answer, both data types, on a
    reduction of many k-tiles."""
    rng = np.random.default_rng(74)
    for dtype, config in (
        ("fp16", wrw_config(128, 128, 1, 4, 8)),
        ("bf16", wrw_config(64, 192, 1, 4, 1, 12)),
        ("fp16", wrw_config(64, 256, 2, 3, 8, 3)),
        ("bf16", wrw_config(128, 256, 2, 4, 4, 5)),
        ("fp16", wrw_config(256, 64, 1, 5, 2, 7)),
        ("bf16", wrw_config(128, 192, 1, 4, 1, 5, fix=1)),  # parts summed in the kernel
        ("fp16", wrw_config(64, 128, 1, 5, 1, 28, ws=1, fix=1)),
        ("bf16", wrw_config(128, 128, 1, 4, 1, 6, fix=1, rot=1)),  # spread k-tile starts
        ("fp16", wrw_config(128, 192, 1, 4, ws=2, rot=1)),
    ):
        problem = make(dtype, (6, 96, 17, 19), (72, 96, 3, 3), "W", pads=(1, 1))
        assert SOLVER.is_valid_config(handle, problem, config)
        support.check_solver(handle, SOLVER, problem, rng, config)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_wrw_resnet_layers_small_batch(handle):
    """The ResNet-50 3x3 layers at batch 2 with their batch-32 default configs (where valid)
    and their own defaults."""
    rng = np.random.default_rng(75)
    for big in RESNET:
        n, c, h, w = big.x.lens
        problem = make("bf16", (2, c, h, w), big.w.lens, "W", pads=(1, 1))
        config = SOLVER.default_config(handle, big)
        if SOLVER.is_valid_config(handle, problem, config):
            support.check_solver(handle, SOLVER, problem, rng, config)
        support.check_solver(handle, SOLVER, problem, rng)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_wrw_warp_specialised(handle):
    """Warp-specialised configs (a producer warpgroup, mbarriers; 2 or 8 producer threads per
    pixel row), every tile of at most two MMA warpgroups, unsplit and in parts summed in the
    kernel (uneven slices), fewer k-tiles than stages too, both data types."""
    rng = np.random.default_rng(76)
    odd = make("fp16", (3, 40, 13, 15), (136, 40, 3, 3), "W", pads=(1, 2), strides=(1, 2), dilations=(2, 1))
    long = make("bf16", (6, 96, 17, 19), (72, 96, 3, 3), "W", pads=(1, 1))
    done = 0
    for bm in DOMAIN["bm"]:
        for bn in DOMAIN["bn"]:
            for wn in DOMAIN["wn"]:
                for problem, stages, parts in ((odd, 6, 1), (long, 5, 7)):
                    # both producer layouts in turn, the long one's parts summed in the kernel
                    config = wrw_config(bm, bn, wn, stages, 1, parts, ws=1 + done % 2, fix=int(parts > 1))
                    if SOLVER.is_valid_config(handle, problem, config):
                        support.check_solver(handle, SOLVER, problem, rng, config)
                        done += 1
    assert done >= 12
