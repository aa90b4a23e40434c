"""ConvWgmmaFwdNhwc, the Hopper wgmma implicit-GEMM forward convolution (sm_90 only).

On the CPU: applicability (sm_90 only), the config space (validation, defaults, search space),
the launch geometry, the sm_90a target of its kernel file, and NVRTC builds of a sample of
configs. On a GPU (marked ``gpu``, skipped where the device is not sm_90): random problems
(strides, padding, dilation, partial tiles, both data types), a sample of the search space and
every tile shape, split reductions, against the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
import support

from miopy import backends
from miopy.errors import BadParm
from miopy.problem.conv import ConvProblem
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.igemm_common import cluster_split
from miopy.solvers.conv.implicit_gemm_wgmma import (
    DOMAIN,
    ConvWgmmaBwdNhwc,
    ConvWgmmaFwdNhwc,
    blocks_per_sm,
    grid_blocks,
    k_tiles,
    min_blocks,
    smem_bytes,
    threads,
    wg_config,
)

SOLVER = ConvWgmmaFwdNhwc()
BWD = ConvWgmmaBwdNhwc()
make = support.conv_problem
CTX = support.fake_cuda_ctx()
RESNET = [
    make("fp16", (32, c, hw, hw), (k, c, 3, 3), pads=(1, 1))
    for c, hw, k in [(64, 56, 64), (128, 28, 128), (256, 14, 256), (512, 7, 512)]
]
ODD = make("bf16", (3, 24, 9, 11), (40, 24, 2, 3), pads=(1, 0), strides=(2, 2), dilations=(2, 1))


# ---- applicability -------------------------------------------------------------------------------
def test_applicable_on_sm90_only():
    assert SOLVER.is_applicable(CTX, RESNET[0]) is None
    assert SOLVER.is_applicable(CTX, ODD) is None
    for arch in ("sm_80", "sm_89", "sm_100", "sm_120"):
        reason = SOLVER.is_applicable(support.fake_cuda_ctx(arch=arch), RESNET[0])
        assert reason is not None and "sm_90" in reason, (arch, reason)
    assert "cuda" in SOLVER.is_applicable(support.fake_cuda_ctx("opencl"), RESNET[0])
    reasons = {
        "direction": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), "B", pads=(1, 1)),
        "dtype": make("fp32", (2, 16, 8, 8), (16, 16, 3, 3), pads=(1, 1)),
        "groups": make("fp16", (2, 16, 8, 8), (16, 8, 3, 3), pads=(1, 1), groups=2),
        "NHWC": make("fp16", (2, 16, 8, 8), (16, 16, 3, 3), layouts=("NCHW",) * 3, pads=(1, 1)),
        "multiples of 8": make("fp16", (2, 12, 8, 8), (16, 12, 3, 3), pads=(1, 1)),
    }
    for word, problem in reasons.items():
        reason = SOLVER.is_applicable(CTX, problem.conv_view())
        assert reason is not None and word in reason, (word, reason)


def test_registered_ahead_of_the_mma_sync_solver():
    names = [s.name for s in CONV_SOLVERS]
    assert names.index("ConvWgmmaFwdNhwc") < names.index("ConvIgemmFwdNhwc")
    assert by_name("ConvWgmmaFwdNhwc", "conv") is not None and by_name(240, "conv").name == SOLVER.name


# ---- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", [*RESNET, ODD], ids=["L3", "L6", "L9", "L12", "odd"])
def test_search_space_and_default(problem):
    space = list(SOLVER.search_space(CTX, problem))
    assert space and all(SOLVER.is_valid_config(CTX, problem, c) for c in space)
    assert len({tuple(sorted(c.items())) for c in space}) == len(space)
    default = SOLVER.default_config(CTX, problem)
    assert SOLVER.is_valid_config(CTX, problem, default)
    k = problem.w.lens[0]
    assert all(c["bn"] <= max(64, 1 << (k - 1).bit_length()) for c in space)


def test_default_config_follows_the_problem():
    l3, l6, l9, l12 = (SOLVER.default_config(CTX, p) for p in RESNET)
    assert l3 == wg_config(128, 64, 4, ws=1)  # K = 64: two blocks per SM
    # the wave model: 131 blocks of 192 rows on 132 SMs rather than 98 of 256
    assert l6 == wg_config(192, 128, 4, ws=1) and grid_blocks(RESNET[1], l6) == 131
    assert l9 == wg_config(192, 64, 4, ws=2) and grid_blocks(RESNET[2], l9) == 132
    # 7x7 images: fewer tiles than SMs, so the reduction is split in a cluster
    assert l12["split_k"] > 1 and cluster_split(CTX, l12)
    for problem, config in zip(RESNET, (l3, l6, l9, l12)):
        assert SOLVER.launch_smem(CTX, config) <= CTX.info.max_dynamic_shared
        assert k_tiles(problem, config) >= config["split_k"] * 6
        if config["bn"] > 64:  # one wave of blocks
            assert grid_blocks(problem, config) <= CTX.info.compute_units
    # no clusters (an sm_80 view of the same device): the 7x7 layer unsplit
    old = support.fake_cuda_ctx(arch="sm_80")
    assert SOLVER.wave_config(old, RESNET[3])["split_k"] == 1


def test_is_valid_config_rejects_garbage():
    good = wg_config(128, 128, 4)
    assert SOLVER.is_valid_config(CTX, RESNET[1], good)
    for bad in (
        None,
        {**good, "bm": 512},
        {**good, "bm": 192},  # three warpgroups only warp-specialized
        {**good, "bm": 256, "bn": 256},
        {**good, "bn": 96},
        {**good, "stages": 2},
        {**good, "stages": 4.0},
        {**good, "split_k": 5},
        {k: v for k, v in good.items() if k != "stages"},
        {**good, "extra": 1},
    ):
        assert not SOLVER.is_valid_config(CTX, RESNET[1], bad), bad
    # shared memory: 8 stages of 128 x 256 tiles are 384 KB
    assert not SOLVER.is_valid_config(CTX, RESNET[2], wg_config(128, 256, 8))
    assert not SOLVER.is_valid_config(support.fake_cuda_ctx(smem=100_000), RESNET[2], wg_config(128, 128, 4))
    # more slices than k-tiles: R*S*C = 2*3*24 = 144 taps are 3 k-tiles
    assert SOLVER.is_valid_config(CTX, ODD, wg_config(64, 64, 3, 3))
    assert not SOLVER.is_valid_config(CTX, ODD, wg_config(64, 64, 3, 4))


def test_launch_geometry():
    problem = RESNET[1]
    config = wg_config(128, 64, 4)
    program = SOLVER.get_program(CTX, problem, config)
    (launch,) = program.steps
    spec = launch.spec
    assert spec.name == "wgmma_fwd" and spec.file == "wgmma_fwd"
    assert spec.local_size == (threads(config), 1) == (256, 1)
    tiles = -(-32 * 28 * 28 // 128) * 2
    assert spec.global_size == (tiles * 256, 1)
    assert launch.shared_mem == smem_bytes(config) == 4 * (128 + 64) * 128 + 1024
    d = dict(spec.defines)
    assert (d["WG_BM"], d["WG_BN"], d["WG_STAGES"], d["IG_SPLIT_K"]) == (128, 64, 4, 1)
    assert (d["IG_C"], d["IG_K"], d["IG_R"], d["IG_PH"]) == (128, 128, 3, 1)
    assert "IG_BM" not in d  # the kernel derives its m16n8 view itself
    assert program.workspace == 0


def test_warp_specialized_geometry():
    problem = RESNET[1]
    config = wg_config(256, 128, 4, ws=1)
    assert SOLVER.is_valid_config(CTX, problem, config)
    (launch,) = SOLVER.get_program(CTX, problem, config).steps
    assert launch.spec.local_size == (640, 1) and dict(launch.spec.defines)["WG_WS"] == 1
    assert launch.spec.global_size == (98 * 640, 1)
    assert launch.shared_mem == 4 * (256 + 128) * 128 + 16 * 4 + 1024  # ring, mbarriers, slack
    # splits only in a cluster (sm_90), which the search space holds too
    assert SOLVER.is_valid_config(CTX, problem, wg_config(256, 128, 4, split_k=2, ws=1))
    no_clusters = support.fake_cuda_ctx(arch="sm_80")
    assert not SOLVER.is_valid_config(no_clusters, problem, wg_config(256, 128, 4, split_k=2, ws=1))
    space = list(SOLVER.search_space(CTX, RESNET[3]))
    assert any(c["ws"] and c["split_k"] > 1 for c in space)
    assert all(cluster_split(CTX, c) for c in space if c["ws"] and c["split_k"] > 1)
    defaults = [SOLVER.default_config(CTX, p) for p in RESNET]
    want = [(128, 1, 1), (192, 1, 1), (192, 1, 2), (128, 2, 1)]
    assert [(d["bm"], d["split_k"], d["ws"]) for d in defaults] == want


def test_swapped_operands_geometry():
    """``swap``: bn / 64 consumer warpgroups plus the producer, WG_SWAP defined, valid only
    warp-specialized, unsplit, 128 or 256 rows by 64 or 128 columns; the default of grids of
    many waves (the 112x112 VGG layer), not of the ResNet-50 layers."""
    big = make("fp16", (32, 128, 112, 112), (128, 128, 3, 3), pads=(1, 1))
    config = wg_config(256, 128, 4, ws=1, swap=1)
    assert SOLVER.default_config(CTX, big) == {**config, "swap": 2}
    assert threads(config) == 384 and min_blocks(config) == 1
    (launch,) = SOLVER.get_program(CTX, big, config).steps
    assert launch.spec.local_size == (384, 1) and dict(launch.spec.defines)["WG_SWAP"] == 1
    assert launch.spec.global_size == (1568 * 384, 1)
    wide = make("fp16", (32, 64, 224, 224), (64, 64, 3, 3), pads=(1, 1))
    assert SOLVER.default_config(CTX, wide) == wg_config(128, 64, 4, ws=1, swap=2)
    assert BWD.default_config(CTX, wide) == wg_config(128, 64, 4, ws=1, swap=2)
    deep = make("fp16", (32, 256, 56, 56), (256, 256, 3, 3), pads=(1, 1))
    assert SOLVER.default_config(CTX, deep) == wg_config(256, 128, 4, ws=1, swap=2)
    assert BWD.default_config(CTX, deep) == wg_config(128, 256, 4, ws=1)
    # no tap-mask copies where a k-tile spans taps (C = 200): the general ones
    odd_big = make("fp16", (32, 200, 112, 112), (128, 200, 3, 3), pads=(1, 1))
    assert SOLVER.default_config(CTX, odd_big) == config
    # 2: the tap-mask copies, where a k-tile is 64 channels of one tap
    assert SOLVER.is_valid_config(CTX, big, wg_config(256, 128, 4, ws=1, swap=2))
    assert dict(SOLVER.kernel_specs(big, wg_config(256, 128, 4, ws=1, swap=2))[0].defines)["WG_TAP_MASK"] == 1
    assert not SOLVER.is_valid_config(CTX, ODD, wg_config(128, 64, 4, ws=1, swap=2))  # C = 24
    assert SOLVER.is_valid_config(CTX, ODD, wg_config(128, 64, 4, ws=1, swap=1))
    for bad in (
        wg_config(256, 128, 4, swap=1),  # not warp-specialized
        wg_config(256, 128, 4, 2, ws=1, swap=1),  # split
        wg_config(192, 128, 4, ws=1, swap=1),
        wg_config(128, 256, 4, ws=1, swap=1),
        {**wg_config(256, 128, 4, ws=1), "swap": 3},
    ):
        assert not SOLVER.is_valid_config(CTX, big, bad), bad
    assert "swap" not in wg_config(256, 128, 4, ws=1)  # the configs of before stay as they were
    assert SOLVER.is_valid_config(CTX, big, {**wg_config(256, 128, 4, ws=1), "swap": 0})
    space = list(SOLVER.search_space(CTX, RESNET[1]))
    assert wg_config(256, 128, 4, ws=1, swap=1) in space and wg_config(256, 128, 4, ws=2, swap=2) in space
    assert all("swap" not in SOLVER.default_config(CTX, p) for p in RESNET)


def test_debug_knob_forces_default_fields(monkeypatch):
    """MIOPY_DEBUG_WGMMA_CONFIG replaces the default's fields where the result is valid."""
    l6 = SOLVER.default_config(CTX, RESNET[1])
    monkeypatch.setenv("MIOPY_DEBUG_WGMMA_CONFIG", '{"ws": 2, "stages": 5}')
    assert SOLVER.default_config(CTX, RESNET[1]) == {**l6, "ws": 2, "stages": 5}
    monkeypatch.setenv("MIOPY_DEBUG_WGMMA_CONFIG", '{"stages": 8}')  # 8 stages of 192 x 128: too big
    assert SOLVER.default_config(CTX, RESNET[1]) == l6
    monkeypatch.setenv("MIOPY_DEBUG_WGMMA_CONFIG", "[5]")
    with pytest.raises(BadParm, match="MIOPY_DEBUG_WGMMA_CONFIG"):
        SOLVER.default_config(CTX, RESNET[1])


def test_three_warpgroup_geometry():
    """192-row blocks: three consumer warpgroups and the producer (512 threads), one cluster per
    tile when split."""
    problem = RESNET[2]
    config = wg_config(192, 128, 4, 2, ws=1)
    assert SOLVER.is_valid_config(CTX, problem, config)
    (launch,) = SOLVER.get_program(CTX, problem, config).steps
    d = dict(launch.spec.defines)
    assert (d["WG_BM"], d["WG_WS"], d["IG_SPLIT_K"], d["IG_CLUSTER"]) == (192, 1, 2, 1)
    assert launch.spec.local_size == (512, 1) == (threads(config), 1) == (threads({**config, "ws": 2}), 1)
    assert launch.spec.global_size == (33 * 2 * 512, 2)  # 6272 rows / 192, 256 columns / 128
    assert launch.shared_mem == 4 * (192 + 128) * 128 + 16 * 4 + 1024
    assert not SOLVER.is_valid_config(CTX, problem, {**config, "ws": 0})
    assert not SOLVER.is_valid_config(CTX, problem, wg_config(192, 256, 4, ws=1))  # 128 accumulators
    assert SOLVER.workspace_size(CTX, problem, config) == 0


def test_cluster_split_geometry():
    problem = RESNET[3]
    config = wg_config(128, 128, 4, 2)
    program = SOLVER.get_program(CTX, problem, config)
    (launch,) = program.steps  # the slices sum in the cluster: no workspace, no second kernel
    assert dict(launch.spec.defines)["IG_CLUSTER"] == 1
    assert launch.spec.global_size == (13 * 4 * 256, 2)
    assert launch.shared_mem >= 128 * (128 + 4) * 4
    assert SOLVER.workspace_size(CTX, problem, config) == 0


# ---- backward data (stride 1) -------------------------------------------------------------------
def test_bwd_applicability_and_geometry():
    l6 = make("fp16", (32, 128, 28, 28), (128, 128, 3, 3), "B", pads=(1, 1))
    assert BWD.is_applicable(CTX, l6) is None
    strided = make("fp16", (2, 16, 9, 9), (16, 16, 3, 3), "B", pads=(1, 1), strides=(2, 2))
    assert "stride 1" in BWD.is_applicable(CTX, strided)
    assert "sm_90" in BWD.is_applicable(support.fake_cuda_ctx(arch="sm_80"), l6)
    assert "direction" in BWD.is_applicable(CTX, RESNET[1])
    problem = make("bf16", (3, 40, 13, 15), (24, 40, 3, 2), "B", pads=(1, 0), dilations=(2, 1))
    config = wg_config(128, 64, 4)
    (launch,) = BWD.get_program(CTX, problem, config).steps
    d = dict(launch.spec.defines)
    # the GEMM: dx pixels by C, reduction over taps by K; dy is the kernel's input
    assert (d["IG_C"], d["IG_K"], d["IG_H"], d["IG_P"]) == (24, 40, problem.y.lens[2], 13)
    assert (d["IG_PH"], d["IG_PW"], d["IG_DH"], d["IG_DW"], d["WG_B_MN"]) == (-1, 0, -2, -1, 1)
    assert launch.spec.global_size == (-(-3 * 13 * 15 // 128) * 1 * 256, 1)
    assert BWD.default_config(CTX, l6)["bn"] == 128
    assert not BWD.defers(CTX, l6)
    l3 = make("fp16", (32, 64, 56, 56), (64, 64, 3, 3), "B", pads=(1, 1))
    assert BWD.defers(CTX, l3)  # the mma.sync solver was faster there
    l12 = make("fp16", (32, 512, 7, 7), (512, 512, 3, 3), "B", pads=(1, 1))
    assert not BWD.defers(CTX, l12) and BWD.default_config(CTX, l12)["split_k"] > 1
    assert BWD.default_config(CTX, l12)["ws"] == 2  # BWD_DEFAULT_TILES: copy-signalled there
    assert all(BWD.is_valid_config(CTX, l6, c) for c in BWD.search_space(CTX, l6))


# ---- the kernel builds for sm_90a ----------------------------------------------------------------
def test_kernel_file_targets_sm90a():
    from miopy.backends.base import KERNEL_ROOT
    from miopy.backends.cuda import source_target

    source = (KERNEL_ROOT / "cuda" / "wgmma_fwd.cu").read_text()
    assert source_target(source, "sm_90") == "sm_90a"
    assert source_target(source, "sm_100") == "sm_100"  # the line names sm_90a only
    plain = (KERNEL_ROOT / "cuda" / "igemm_fwd.cu").read_text()
    assert source_target(plain, "sm_90") == "sm_90"


@support.needs_nvrtc
def test_wgmma_needs_sm90a():
    """The header refuses a plain sm_90 build (wgmma would not assemble there)."""
    from miopy.backends.cuda import compile_cubin
    from miopy.errors import CompileError

    src = '#include "common/wgmma_sm90.h"\nKERNEL void k(float* p) { wgmma_fence(); }\n'
    with pytest.raises(CompileError, match="sm_90a"):
        compile_cubin(src, "t.cu", ["-DMIOPY_DTYPE=1"], arch="sm_90")
    assert compile_cubin(src, "t.cu", ["-DMIOPY_DTYPE=1"], arch="sm_90a")[:4] == b"\x7fELF"


@support.needs_nvrtc
def test_sample_of_configs_compiles_for_sm90a():
    """NVRTC builds the kernels of the default, every tile shape and a spread of the search space."""
    rng = np.random.default_rng(7)
    for problem in (RESNET[3], ODD):
        configs = support.config_spread(SOLVER, CTX, problem, rng)
        # 192-row blocks: the kernel file's compile-test lines
        tiles = [(bm, bn) for bm in DOMAIN["bm"] if bm != 192 for bn in DOMAIN["bn"]]
        configs += [wg_config(bm, bn, 3, ws=ws) for bm, bn in tiles for ws in (0, 1)]
        configs = [c for c in configs if SOLVER.is_valid_config(CTX, problem, c)]
        support.assert_builds_for_sm90(SOLVER, CTX, problem, configs, "wgmma_fwd")
    problem = make("fp16", (2, 24, 9, 11), (40, 24, 3, 3), "B", pads=(1, 1))
    configs = [BWD.default_config(CTX, problem), wg_config(128, 256, 3), wg_config(64, 64, 3, 2)]
    support.assert_builds_for_sm90(BWD, CTX, problem, configs, "wgmma_fwd")


# ---- on a GPU: against the reference ------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    h = Handle("cuda")
    if SOLVER.is_applicable(h, RESNET[0]) is not None:
        pytest.skip(f"not an sm_90 device ({h.info.arch})")
    return h


def check(handle, problem: ConvProblem, rng, config=None) -> float:
    return support.check_solver(handle, SOLVER, problem, rng, config)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_random_problems(handle, dtype):
    """Default configs on random problems: odd channel multiples of 8, sizes, filters, strides,
    padding, dilation; M rarely a multiple of the tile."""
    rng = np.random.default_rng({"fp16": 51, "bf16": 52}[dtype])

    def channels(r):
        return (8 * int(r.integers(1, 13)), 8 * int(r.integers(1, 41)))

    for _ in range(12):
        check(handle, support.random_nhwc_problem(rng, dtype, "F", channels, side=24), rng)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_every_tile_and_a_search_sample(handle):
    """Every tile shape and a spread of the search space on a problem with partial tiles in M,
    N and the reduction."""
    problem = make("fp16", (3, 40, 13, 15), (136, 40, 3, 3), pads=(1, 2), strides=(1, 2), dilations=(2, 1))
    rng = np.random.default_rng(53)
    tiles = [(bm, bn) for bm in DOMAIN["bm"] for bn in DOMAIN["bn"]]
    configs = [wg_config(bm, bn, s, ws=ws) for bm, bn in tiles for s in (3, 5) for ws in (0, 1)]
    space = list(SOLVER.search_space(handle, problem))
    configs += [space[i] for i in rng.choice(len(space), 6, replace=False)]
    configs = [c for c in configs if SOLVER.is_valid_config(handle, problem, c)]
    assert len(configs) >= 24
    for config in configs:
        check(handle, problem, rng, config)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_split_reduction(handle):
    """Cluster splits (uneven slices too) give the unsplit answer, both data types."""
    rng = np.random.default_rng(54)
    for dtype, config in (
        ("fp16", wg_config(128, 128, 4, 2)),
        ("bf16", wg_config(64, 256, 3, 3)),
        ("fp16", wg_config(128, 64, 5, 8)),
    ):
        problem = make(dtype, (4, 96, 7, 7), (200, 96, 3, 3), pads=(1, 1))
        assert SOLVER.is_valid_config(handle, problem, config)
        check(handle, problem, rng, config)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_warp_specialized_cluster_split(handle):
    """The warp-specialized kernel split in a cluster (uneven slices too) and 192-row blocks,
    forward and backward data, both data types, on problems with partial tiles, padding,
    stride and dilation."""
    rng = np.random.default_rng(56)
    cases = [
        (SOLVER, make("fp16", (4, 96, 7, 7), (200, 96, 3, 3), pads=(1, 1)), wg_config(128, 128, 4, 2, ws=1)),
        (
            SOLVER,
            make("bf16", (3, 64, 11, 9), (136, 64, 3, 3), pads=(2, 1), dilations=(2, 1)),
            wg_config(192, 128, 4, 3, ws=1),
        ),
        (
            SOLVER,
            make("fp16", (2, 48, 13, 15), (72, 48, 3, 2), pads=(1, 0), strides=(2, 1)),
            wg_config(192, 64, 5, 2, ws=1),
        ),
        (SOLVER, make("bf16", (5, 40, 9, 9), (64, 40, 3, 3), pads=(1, 1)), wg_config(192, 64, 4, ws=1)),
        (
            BWD,
            make("bf16", (4, 200, 7, 7), (96, 200, 3, 3), "B", pads=(1, 1)),
            wg_config(128, 128, 4, 2, ws=1),
        ),
        (
            BWD,
            make("fp16", (3, 136, 11, 9), (64, 136, 3, 3), "B", pads=(2, 1), dilations=(2, 1)),
            wg_config(192, 128, 4, 3, ws=1),
        ),
        (BWD, make("bf16", (3, 72, 10, 13), (48, 72, 3, 3), "B", pads=(1, 1)), wg_config(192, 64, 4, ws=1)),
        # two blocks per SM (WG_MINB 2) with a cluster split
        (BWD, make("fp16", (4, 200, 7, 7), (96, 200, 3, 3), "B", pads=(1, 0)), wg_config(128, 64, 4, 2, 1)),
    ]
    for solver, problem, config in cases:
        for ws in (1, 2):  # 2: the copies complete the stages' barriers themselves
            assert solver.is_valid_config(handle, problem, {**config, "ws": ws}), (problem.key(), config)
            support.check_solver(handle, solver, problem, rng, {**config, "ws": ws})


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_swapped_operands(handle):
    """The swapped operands (``swap``: the filter tile as wgmma's A, the epilogue through
    stmatrix .trans; 2: with the tap-mask copies where valid), every valid tile and both
    pipelines, forward and backward data, both data types, on problems with partial tiles in M,
    N and the reduction, padding, stride and dilation. (The fused epilogue reads the same
    staging tile: its build is a compile test.)"""
    rng = np.random.default_rng(57)
    masked = 0
    cases = [
        (
            SOLVER,
            make("fp16", (2, 128, 11, 13), (72, 128, 3, 3), pads=(1, 1), strides=(2, 1), dilations=(1, 2)),
        ),
        (
            SOLVER,
            make("fp16", (3, 40, 13, 15), (136, 40, 3, 3), pads=(1, 2), strides=(1, 2), dilations=(2, 1)),
        ),
        (SOLVER, make("bf16", (2, 64, 17, 19), (64, 64, 3, 3), pads=(1, 1))),
        (BWD, make("fp16", (3, 136, 11, 9), (64, 136, 3, 3), "B", pads=(2, 1), dilations=(2, 1))),
        (BWD, make("bf16", (2, 72, 10, 13), (48, 72, 3, 3), "B", pads=(1, 1))),
    ]
    for solver, problem in cases:
        for bm, bn, stages, ws in ((256, 128, 4, 1), (256, 64, 5, 2), (128, 64, 3, 1), (128, 128, 4, 2)):
            config = wg_config(bm, bn, stages, ws=ws, swap=1)
            assert solver.is_valid_config(handle, problem, config), (problem.key(), config)
            support.check_solver(handle, solver, problem, rng, config)
            if solver.is_valid_config(handle, problem, {**config, "swap": 2}):
                support.check_solver(handle, solver, problem, rng, {**config, "swap": 2})
                masked += 1
    assert masked == 12  # three of the problems, four tiles each


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_resnet_layers_small_batch(handle):
    """The ResNet-50 3x3 layers at batch 2 with their batch-32 default configs."""
    rng = np.random.default_rng(55)
    for big in RESNET:
        n, c, h, w = big.x.lens
        problem = make("bf16", (2, c, h, w), big.w.lens, pads=(1, 1))
        config = SOLVER.default_config(handle, big)
        if SOLVER.is_valid_config(handle, problem, config):
            check(handle, problem, rng, config)
        check(handle, problem, rng)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_bwd_random_problems(handle, dtype):
    """Backward data, stride 1: default configs on random problems (padding, dilation, odd
    multiples of 8), then every tile shape on one with partial tiles everywhere."""
    rng = np.random.default_rng({"fp16": 61, "bf16": 62}[dtype])
    done = 0
    while done < 10:
        c, k = 8 * int(rng.integers(1, 41)), 8 * int(rng.integers(1, 13))
        try:
            problem = make(
                dtype,
                (int(rng.integers(1, 5)), c, *rng.integers(1, 24, 2)),
                (k, c, *rng.integers(1, 6, 2)),
                "B",
                pads=tuple(rng.integers(0, 3, 2)),
                dilations=tuple(rng.integers(1, 3, 2)),
            )
        except ValueError:
            continue
        support.check_solver(handle, BWD, problem, rng)
        done += 1
    problem = make(dtype, (3, 136, 13, 15), (40, 136, 3, 3), "B", pads=(1, 2), dilations=(2, 1))
    for bm in DOMAIN["bm"]:
        for bn in DOMAIN["bn"]:
            for ws in DOMAIN["ws"]:
                if BWD.is_valid_config(handle, problem, wg_config(bm, bn, 4, ws=ws)):
                    support.check_solver(handle, BWD, problem, rng, wg_config(bm, bn, 4, ws=ws))
    support.check_solver(handle, BWD, problem, rng, wg_config(128, 128, 4, 3))


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_fast_copies(handle):
    """Backward data's copies of whole one-tap k-tiles (WG_FAST_LOAD: dy's channels a multiple of
    64), every pipeline (ws 0, 1, 2), split in a cluster and stream-K, on a problem with partial
    tiles in M and N, padding and dilation."""
    rng = np.random.default_rng(59)
    problem = make("bf16", (3, 72, 10, 13), (128, 72, 3, 3), "B", pads=(2, 1), dilations=(2, 1))
    for config in (
        wg_config(128, 64, 3),
        wg_config(192, 64, 4, 2, ws=1),
        wg_config(128, 128, 4, ws=2),
        wg_config(64, 256, 3, ws=1),
        {**wg_config(128, 64, 4, ws=1), "sk": 5},
    ):
        assert BWD.is_valid_config(handle, problem, config), config
        support.check_solver(handle, BWD, problem, rng, config)


def test_two_blocks_per_sm_register_bound():
    """64-wide blocks of up to 384 threads that two fit an SM's shared memory are compiled for two
    blocks per SM (WG_MINB 2: the backward kernel's registers bounded as the forward's are)."""
    l3b = make("fp16", (32, 64, 56, 56), (64, 64, 3, 3), "B", pads=(1, 1))
    config = BWD.default_config(CTX, l3b)
    assert config == wg_config(128, 64, 4, ws=1) and min_blocks(config) == blocks_per_sm(CTX, config) == 2
    (launch,) = BWD.get_program(CTX, l3b, config).steps
    assert dict(launch.spec.defines)["WG_MINB"] == 2 and 2 * (launch.shared_mem + 1024) <= 233_472
    assert min_blocks(wg_config(128, 64, 4, 2, ws=1)) == 2  # a cluster split's fp32 tile fits too
    for one in (
        wg_config(128, 128, 4, ws=1),  # 64 accumulators
        wg_config(192, 64, 4, ws=2),  # 512 threads
        wg_config(128, 64, 5, ws=1),  # 5 stages: 120 KB
        wg_config(128, 64, 4, ws=1, sk=132),
    ):
        assert min_blocks(one) == 1, one
        (launch,) = SOLVER.get_program(CTX, RESNET[3], one).steps
        assert "WG_MINB" not in dict(launch.spec.defines)


# ---- stream-K ------------------------------------------------------------------------------------
def test_stream_k_configs_and_geometry():
    """sk: warp-specialized, unsplit, within the resident blocks and the (tile, k-tile) steps; one
    launch of sk blocks on the workspace (64-bit flags, one fp32 partial tile per block), shared
    memory for its own output tile; configs from before the field (no sk) stay valid."""
    l12 = RESNET[3]
    config = wg_config(128, 128, 4, ws=1, sk=132)
    assert SOLVER.is_valid_config(CTX, l12, config)
    (gemm,) = SOLVER.get_program(CTX, l12, config).steps
    assert gemm.spec.name == "wgmma_fwd" and dict(gemm.spec.defines)["WG_SK"] == 132
    assert gemm.spec.global_size == (132 * 384, 1) and grid_blocks(l12, config) == 132
    assert SOLVER.workspace_size(CTX, l12, config) == 4 * (320 + 132 * 128 * 128)
    assert gemm.shared_mem == 4 * 256 * 128 + 256 + 128 * 136 * 2 + 1024
    unsplit = SOLVER.get_program(CTX, l12, wg_config(128, 128, 4, ws=1)).steps[0]
    assert "WG_SK" not in dict(unsplit.spec.defines)
    for bad in (
        {**config, "ws": 0},
        {**config, "split_k": 2},
        {**config, "sk": 133},  # more than one block per SM
        {**config, "sk": 1},
        {**config, "sk": -1},
        {**config, "sk": 132.0},
    ):
        assert not SOLVER.is_valid_config(CTX, l12, bad), bad
    assert not SOLVER.is_valid_config(CTX, ODD, wg_config(64, 64, 3, ws=1, sk=7))  # 2 tiles x 3 k-tiles
    assert SOLVER.is_valid_config(CTX, ODD, wg_config(64, 64, 3, ws=1, sk=6))
    legacy = {k: v for k, v in wg_config(128, 128, 4, 2, ws=1).items() if k != "sk"}
    assert SOLVER.is_valid_config(CTX, l12, legacy) and len(SOLVER.get_program(CTX, l12, legacy).steps) == 1
    space = list(SOLVER.search_space(CTX, l12))
    assert any(c["sk"] for c in space) and all(c["ws"] and c["split_k"] == 1 for c in space if c["sk"])
    l12b = make("fp16", (32, 512, 7, 7), (512, 512, 3, 3), "B", pads=(1, 1))
    (gemm,) = BWD.get_program(CTX, l12b, config).steps
    assert dict(gemm.spec.defines)["WG_B_MN"] == 1 and BWD.workspace_size(CTX, l12b, config) > 0


@support.needs_nvrtc
def test_stream_k_compiles_for_sm90a():
    problem = make("bf16", (3, 40, 13, 15), (136, 40, 3, 3), "B", pads=(1, 1))
    support.assert_builds_for_sm90(BWD, CTX, problem, [wg_config(128, 128, 4, ws=2, sk=7)], "wgmma_fwd")


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_wgmma_stream_k(handle):
    """Stream-K against the reference, forward and backward data, both pipelines and data types:
    runs of whole tiles and pieces (a few blocks), a step or two per block (many blocks: a tile
    summed from up to 13 partials), runs that do not divide the steps, partial tiles in M, N and
    the reduction; each twice on one workspace filled with random bytes first (the flags need no
    clearing and are left cleared)."""
    import cupy as cp

    from miopy.engine.candidates import make_solution

    rng = np.random.default_rng(57)
    fwd = make("fp16", (4, 96, 7, 7), (200, 96, 3, 3), pads=(1, 1))  # 4 tiles of 128 x 128, 14 k-tiles
    bwd = make("bf16", (3, 136, 11, 9), (64, 136, 3, 3), "B", pads=(2, 1), dilations=(2, 1))
    odd = make("bf16", (3, 40, 9, 11), (72, 40, 3, 2), pads=(1, 0), strides=(2, 1))
    c200 = make("fp16", (4, 200, 7, 7), (96, 200, 3, 3), "B", pads=(1, 1))
    cases = [
        (SOLVER, fwd, wg_config(128, 128, 4, ws=1, sk=3)),
        (SOLVER, fwd, wg_config(128, 128, 4, ws=2, sk=11)),
        (SOLVER, fwd, wg_config(128, 128, 4, ws=1, sk=56)),
        (
            SOLVER,
            make("bf16", (4, 96, 7, 7), (200, 96, 3, 3), pads=(1, 1)),
            wg_config(192, 64, 4, ws=2, sk=13),
        ),
        (SOLVER, odd, wg_config(64, 128, 3, ws=1, sk=5)),
        (BWD, bwd, wg_config(128, 128, 4, ws=1, sk=9)),
        (BWD, bwd, wg_config(64, 256, 3, ws=2, sk=17)),
        (BWD, c200, wg_config(128, 64, 5, ws=1, sk=31)),
    ]
    for solver, problem, config in cases:
        assert solver.is_valid_config(handle, problem, config), (problem.key(), config)
        solution = make_solution(handle, problem, solver, config)
        workspace = handle.backend.alloc(solution.workspace)
        workspace[:] = cp.asarray(rng.integers(0, 256, workspace.size, dtype=np.uint8))
        for _ in range(2):
            bufs = support.random_buffers(problem, rng)
            expected = support.conv_reference_buffers(problem, bufs)
            solution.run(handle, bufs, workspace)
            err = support.rms_range(support.output_of(problem, bufs), expected)
            assert err < support.tolerance(problem), (problem.key(), config, err)
