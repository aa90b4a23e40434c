"""Conv1x1StreamFwd / Bwd / Wrw, the streaming 1x1 convolutions (kernels/cuda/gemm1x1_stream.cu).

On the CPU: applicability, configs (search spaces, defaults, garbage refused), launch geometry
(persistent grids, the split of the weights' reduction and its workspace). On a GPU (marked
``gpu``): defaults and configs that take every path of the kernels, on problems whose rows end
inside a tile, both data types, and a long split reduction, against the NumPy reference. The
kernel builds are the file's miopy-compile-test lines (tests/backend/test_cuda_compile.py)."""

from __future__ import annotations

import numpy as np
import pytest
import support

from miopy import backends
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.gemm1x1_stream import (
    Conv1x1StreamBwd,
    Conv1x1StreamFwd,
    Conv1x1StreamWrw,
    rows_config,
    rows_smem,
    wrw_config,
    wrw_split,
)

FWD, BWD, WRW = Conv1x1StreamFwd(), Conv1x1StreamBwd(), Conv1x1StreamWrw()
SOLVERS = {"F": FWD, "B": BWD, "W": WRW}
make = support.conv_problem
CTX = support.fake_cuda_ctx()


def layer(direction: str, c: int, hw: int, k: int, dtype: str = "fp16", n: int = 32):
    return make(dtype, (n, c, hw, hw), (k, c, 1, 1), direction).conv_view()


# ---- applicability -------------------------------------------------------------------------------
def test_registered_once_with_unique_ids():
    names = [s.name for s in CONV_SOLVERS]
    for solver in SOLVERS.values():
        assert names.count(solver.name) == 1
        assert by_name(solver.id, "conv").name == solver.name
    assert len({s.id for s in CONV_SOLVERS}) == len(CONV_SOLVERS)


def test_applicability():
    for d, solver in SOLVERS.items():
        assert solver.is_applicable(CTX, layer(d, 64, 56, 64)) is None, d
        reasons = {
            "direction": layer({"F": "B", "B": "W", "W": "F"}[d], 64, 56, 64),
            "dtype": layer(d, 64, 8, 64, "fp32"),
            "1x1": make("fp16", (2, 64, 8, 8), (64, 64, 3, 3), d, pads=(1, 1)).conv_view(),
            "stride": make("fp16", (2, 64, 8, 8), (64, 64, 1, 1), d, strides=(2, 2)).conv_view(),
            "NHWC": make("fp16", (2, 64, 8, 8), (64, 64, 1, 1), d, layouts=("NCHW",) * 3).conv_view(),
            "groups": make("fp16", (2, 64, 8, 8), (32, 32, 1, 1), d, groups=2).conv_view(),
            "sm_80": layer(d, 64, 8, 64),
        }
        for word, problem in reasons.items():
            ctx = support.fake_cuda_ctx(arch="sm_75") if word == "sm_80" else CTX
            reason = solver.is_applicable(ctx, problem)
            assert reason is not None and word in reason, (d, word, reason)
    # the rows kernel holds a whole reduction in shared memory: 256 channels at most
    assert FWD.is_applicable(CTX, layer("F", 512, 28, 256)) is not None
    assert BWD.is_applicable(CTX, layer("B", 256, 14, 1024)) is not None
    assert BWD.is_applicable(CTX, layer("B", 64, 56, 256)) is None
    assert FWD.is_applicable(CTX, layer("F", 64, 8, 40)) is not None  # K not a multiple of 64
    assert FWD.is_applicable(CTX, layer("F", 64, 56, 256)) is None
    assert WRW.is_applicable(CTX, layer("W", 96, 7, 64)) is not None
    # larger filters are cuBLAS's: more than 64 x 256 elements (64 x 64 for the weights)
    for d, solver in SOLVERS.items():
        for c, k in ((512, 2048), (128, 256)):
            reason = solver.is_applicable(CTX, layer(d, c, 7, k))
            assert reason is not None and "filter elements" in reason, (d, reason)
    assert "filter elements" in WRW.is_applicable(CTX, layer("W", 64, 56, 256))


# ---- configs -------------------------------------------------------------------------------------
RESNET = [(64, 56, 64), (64, 56, 256), (32, 56, 512), (256, 14, 64)]


@pytest.mark.parametrize("direction", ["F", "B", "W"])
def test_search_spaces_are_small_and_valid(direction):
    solver = SOLVERS[direction]
    for c, hw, k in RESNET:
        problem = layer(direction, c, hw, k)
        if solver.is_applicable(CTX, problem) is not None:
            continue
        space = list(solver.search_space(CTX, problem))
        assert 1 <= len(space) <= 8
        assert len({tuple(sorted(s.items())) for s in space}) == len(space)
        assert all(solver.is_valid_config(CTX, problem, s) for s in space)
        assert solver.default_config(CTX, problem) == space[0]


def test_rows_configs_refused():
    problem = layer("B", 64, 56, 256)  # NI = 256
    good = rows_config(64, 1, 64, 64, 4)
    assert BWD.is_valid_config(CTX, problem, good)
    assert BWD.is_valid_config(CTX, problem, rows_config(128, 2, 64, 256, 2))  # whole rows
    for bad in (
        None,
        {**good, "bm": 96},
        {**good, "stages": 4.0},
        {**good, "bno": 128},  # dx has 64 columns
        {**good, "kw": 96},
        rows_config(128, 2, 64, 256, 4),  # 4 tiles of 128 x 256 halves: more than 227 KB
        {**good, "extra": 1},
    ):
        assert not BWD.is_valid_config(CTX, problem, bad), bad
    assert not BWD.is_valid_config(support.fake_cuda_ctx(smem=60_000), problem, good)
    assert rows_smem(256, good) == (64 * 256 + 4 * 64 * 64) * 2 + 4 * 16 * 72 * 2
    wide = layer("F", 128, 14, 128)  # several steps per tile: one 64-column chunk per block
    assert FWD.is_valid_config(CTX, wide, rows_config(128, 2, 64, 64, 6))
    assert not FWD.is_valid_config(CTX, wide, rows_config(128, 2, 128, 64, 6))


def test_wrw_configs_refused():
    problem = layer("W", 64, 56, 256)  # dw 256 x 64
    good = wrw_config(256, 64, 4, 2, 64, 4, 1)
    assert WRW.is_valid_config(CTX, problem, good)
    for bad in (
        None,
        {**good, "tc": 128},  # C = 64
        {**good, "wk": 2},  # warp tiles of 128 x 32: too many accumulators
        {**good, "occ": 2},  # two blocks of 160 KB do not fit
        {**good, "bm": 48},
        {k: v for k, v in good.items() if k != "occ"},
        {**good, "cluster": 1},
    ):
        assert not WRW.is_valid_config(CTX, problem, bad), bad


def test_launch_geometry():
    problem = layer("F", 64, 56, 256)  # 100352 rows: 784 tiles of 128
    program = FWD.get_program(CTX, problem, rows_config(128, 2, 64, 64, 4))
    (step,) = program.steps
    d = dict(step.spec.defines)
    assert (d["G1_NI"], d["G1_NO"], d["G1_WT"], d["G1_M"]) == (64, 256, 0, 100352)
    blocks, columns = step.spec.global_size[0] // 128, step.spec.global_size[1]
    assert columns == 4 and step.spec.local_size == (128, 1)
    assert blocks * columns <= 132 * 4 and -(-784 // blocks) * blocks >= 784  # one wave covers every tile
    assert program.workspace == 0 and step.shared_mem == rows_smem(64, rows_config(128, 2, 64, 64, 4))
    bwd = dict(BWD.get_program(CTX, layer("B", 64, 56, 256)).steps[0].spec.defines)
    assert (bwd["G1_NI"], bwd["G1_NO"], bwd["G1_WT"], bwd["G1_KW"]) == (256, 64, 1, 64)

    wproblem = layer("W", 64, 56, 64)  # 1568 row tiles of 64
    config = wrw_config(64, 64, 4, 2, 64, 4, 1)
    split = wrw_split(CTX, wproblem, config)
    assert split == 132  # one block per multiprocessor over the one dw tile
    gemm, total = WRW.get_program(CTX, wproblem, config).steps
    assert gemm.spec.global_size == (split * 256, 1) and dict(gemm.spec.defines)["G1_SPLIT"] == split
    assert total.spec.name == "gemm1x1_wrw_sum" and total.spec.global_size == (64 * 64 // 64 * 256,)
    assert WRW.workspace_size(CTX, wproblem, config) == split * 64 * 64 * 4
    # dw tiles along the grid's second dimension share the multiprocessors
    assert wrw_split(CTX, layer("W", 64, 56, 256), wrw_config(128, 64, 4, 2, 64, 4, 1)) == 66
    # a reduction shorter than the blocks: no split, no workspace, one kernel
    tiny = layer("W", 64, 3, 64, n=2)
    program = WRW.get_program(CTX, tiny, wrw_config(64, 64, 4, 2, 64, 4, 1))
    assert len(program.steps) == 1 and program.workspace == 0


# ---- on a GPU: against the reference ------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    h = Handle("cuda")
    if FWD.is_applicable(h, layer("F", 64, 8, 64)) is not None:
        pytest.skip(f"not an sm_80+ device ({h.info.arch})")
    return h


# (dtype, C, K, configs) per direction: 3 x 13 x 11 = 429 rows, ending inside a row tile; the
# default config (None) and the others each exercise one more path: 8 warps of 16 rows, column
# blocks, shallow rings, narrow rows (C = 32), steps of part of a row, warp tiles of each shape,
# two blocks per SM.
CASES = {
    "F": [
        ("fp16", 64, 256, [None, rows_config(128, 2, 64, 64, 4), rows_config(128, 1, 256, 64, 4)]),
        ("bf16", 32, 64, [None]),
        ("fp16", 256, 64, [None, rows_config(64, 1, 64, 64, 8)]),
    ],
    "B": [
        ("bf16", 64, 256, [None, rows_config(128, 2, 64, 256, 2), rows_config(128, 1, 64, 64, 6)]),
        ("fp16", 128, 128, [None, rows_config(128, 2, 128, 128, 2)]),  # 16384 filter elements
    ],
    "W": [
        ("fp16", 64, 64, [None, wrw_config(64, 64, 4, 2, 32, 5, 2)]),
        ("bf16", 64, 64, [None, wrw_config(64, 64, 2, 2, 64, 3, 2), wrw_config(64, 64, 2, 4, 128, 3, 1)]),
    ],
}


def test_gpu_cases_are_valid_configs():
    for direction, cases in CASES.items():
        for dtype, c, k, configs in cases:
            view = make(dtype, (3, c, 13, 11), (k, c, 1, 1), direction).conv_view()
            assert SOLVERS[direction].is_applicable(CTX, view) is None
            assert all(SOLVERS[direction].is_valid_config(CTX, view, cfg) for cfg in configs if cfg)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
@pytest.mark.parametrize("direction", ["F", "B", "W"])
def test_configs(handle, direction):
    rng = np.random.default_rng({"F": 81, "B": 82, "W": 83}[direction])
    solver = SOLVERS[direction]
    for dtype, c, k, configs in CASES[direction]:
        problem = make(dtype, (3, c, 13, 11), (k, c, 1, 1), direction)
        for config in configs:
            assert config is None or solver.is_valid_config(handle, problem.conv_view(), config)
            support.check_solver(handle, solver, problem, rng, config)


@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_long_reduction_split(handle):
    """The weights of a long reduction (2 x 40 x 40 = 3200 rows) over many blocks: the fp32
    partials summed by the second kernel."""
    rng = np.random.default_rng(84)
    problem = make("bf16", (2, 64, 40, 40), (64, 64, 1, 1), "W")
    config = WRW.default_config(handle, problem.conv_view())
    assert wrw_split(handle, problem.conv_view(), config) > 16
    support.check_solver(handle, WRW, problem, rng, config)
