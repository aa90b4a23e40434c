"""ConvDirectTiledFwd, the tunable tiled direct forward convolution, against the NumPy reference
on OpenCL (PoCL in CI), and its configs: the search space, validation and the default.

Every (problem, config) pair is a separate build (shape and config are compiled in), about a
second each on PoCL, so the problems are small and the configs run are a sample."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import support

from miopy.backends.base import DeviceInfo
from miopy.engine.candidates import make_solution
from miopy.errors import BadParm
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.solvers import CONV_SOLVERS, by_name
from miopy.solvers.conv.direct_tiled import DOMAIN, FIELDS, ConvDirectTiledFwd, local_bytes, threads
from miopy.tensor import TensorDesc

SOLVER = ConvDirectTiledFwd()


@pytest.fixture(scope="module")
def handle(ocl):
    return ocl


def make(dtype, xlens, wlens, direction="F", layouts=("NCHW",) * 3, **conv) -> ConvProblem:
    x = TensorDesc(dtype, xlens, layout=layouts[0])
    w = TensorDesc(dtype, wlens, layout=layouts[1])
    return ConvProblem.create(x, w, ConvDesc(**conv), direction, y_layout=layouts[2])


def check(handle, problem: ConvProblem, rng: np.random.Generator, config=None) -> float:
    """Run the solver with ``config`` on random data (the output starts as NaN) vs the reference."""
    view_ = problem.conv_view()
    assert SOLVER.is_applicable(handle, view_) is None, SOLVER.is_applicable(handle, view_)
    solution = make_solution(handle, problem, SOLVER, config or SOLVER.default_config(handle, view_))
    assert solution.config == (config or SOLVER.default_config(handle, view_))
    assert solution.workspace == 0
    return support.check(handle, solution, rng)


def fake_ctx(max_work_group_size=1024, local_mem_size=49152):
    info = DeviceInfo(
        "fake", "fake", 1, "", max_work_group_size=max_work_group_size, local_mem_size=local_mem_size
    )
    return SimpleNamespace(info=info, backend=None)


# Small problems, and ResNet-like ones for the config checks that build nothing.
SMALL = [
    make("fp32", (1, 3, 5, 5), (2, 3, 3, 3), pads=(0, 0)),
    make("fp32", (2, 6, 7, 9), (6, 3, 3, 2), pads=(1, 0), strides=(2, 1), dilations=(1, 2), groups=2),
    make("fp16", (2, 4, 6, 6), (4, 1, 3, 3), layouts=("NHWC",) * 3, pads=(1, 1), groups=4),
    make("bf16", (1, 16, 12, 12), (24, 16, 3, 3), pads=(1, 1)),
    make("fp32", (1, 1, 1, 1), (1, 1, 1, 1), pads=(0, 0)),
]
TYPICAL = [
    make("fp32", (32, 64, 56, 56), (64, 64, 3, 3), pads=(1, 1)),
    make("fp16", (32, 128, 56, 56), (128, 128, 3, 3), pads=(1, 1), strides=(2, 2)),
    make("fp32", (32, 512, 7, 7), (512, 512, 3, 3), pads=(1, 1)),
    make("fp32", (16, 3, 224, 224), (64, 3, 7, 7), pads=(3, 3), strides=(2, 2)),
    make("fp32", (8, 256, 14, 14), (256, 1, 3, 3), layouts=("NHWC",) * 3, pads=(1, 1), groups=256),
]


# ---- correctness ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_tiled_random_problems(handle, dtype):
    """Default configs on random 2-d forward problems: layouts, strides, padding, dilation, groups."""
    rng = np.random.default_rng({"fp32": 21, "fp16": 22, "bf16": 23}[dtype])
    done = 0
    while done < 7:
        g = int(rng.choice([1, 2, 3]))
        c, k = g * int(rng.integers(1, 5)), g * int(rng.integers(1, 5))
        if rng.random() < 0.2:
            c = k = g = int(rng.integers(2, 6))  # depthwise
        layouts = [str(rng.choice(["NCHW", "NHWC"])) for _ in range(3)]
        try:
            problem = make(
                dtype,
                (int(rng.integers(1, 3)), c, *rng.integers(3, 12, 2)),
                (k, c // g, *rng.integers(1, 4, 2)),
                "F",
                layouts,
                pads=tuple(rng.integers(0, 3, 2)),
                strides=tuple(rng.integers(1, 3, 2)),
                dilations=tuple(rng.integers(1, 3, 2)),
                groups=g,
            )
        except ValueError:
            continue
        check(handle, problem, rng)
        done += 1


def test_tiled_strided_tensors_and_same_padding(handle):
    rng = np.random.default_rng(24)
    x = TensorDesc("fp32", (2, 3, 6, 7), strides=(200, 60, 9, 1))  # padded rows and channels
    w = TensorDesc("fp32", (4, 3, 3, 3), strides=(40, 12, 3, 1))
    check(handle, ConvProblem.create(x, w, ConvDesc((1, 1), (1, 2)), "F", y_strides=(300, 70, 10, 2)), rng)
    same = make(
        "fp16",
        (2, 6, 8, 7),
        (6, 1, 2, 3),
        "F",
        ("NHWC",) * 3,
        pads=(0, 0),
        strides=(2, 2),
        groups=6,
        pad_mode="same",
    )
    check(handle, same, rng)


def test_tiled_transposed_problem(handle):
    """Backward data of a transposed convolution is a forward convolution in its conv view."""
    rng = np.random.default_rng(25)
    x = TensorDesc("fp32", (2, 4, 5, 4), layout="NHWC")
    w = TensorDesc("fp32", (4, 3, 3, 2), layout="NHWC")
    problem = ConvProblem.create(x, w, ConvDesc((1, 0), (2, 1), (1, 1), 1, "trans", (1, 0)), "B")
    assert problem.conv_view().direction is Direction.FORWARD
    check(handle, problem, rng)


@pytest.mark.parametrize("index", [1, 3])
def test_tiled_search_space_configs_run(handle, index):
    """A spread of the search space (first, last and random picks) computes the right answer."""
    problem = SMALL[index]
    space = list(SOLVER.search_space(handle, problem.conv_view()))
    rng = np.random.default_rng(26 + index)
    picks = {0, len(space) - 1, *rng.choice(len(space), 5, replace=False).tolist()}
    for i in sorted(picks):
        check(handle, problem, rng, space[i])


def test_tiled_largest_blocks_run(handle):
    """Configs at the edges of the domain: the biggest blocks and register tiles, and 1x1x1
    (each where the device takes it: 256 work items and 22 KB of local memory at most)."""
    rng = np.random.default_rng(27)
    problem = make("fp32", (1, 20, 9, 33), (34, 20, 3, 3), pads=(1, 1))
    ran = 0
    for config in (
        {"tile_h": 4, "tile_w": 32, "tile_k": 32, "out_w": 4, "out_k": 4, "c_block": 8},
        {"tile_h": 1, "tile_w": 1, "tile_k": 1, "out_w": 1, "out_k": 1, "c_block": 1},
        {"tile_h": 16, "tile_w": 16, "tile_k": 1, "out_w": 1, "out_k": 1, "c_block": 16},
    ):
        if SOLVER.is_valid_config(handle, problem.conv_view(), config):
            check(handle, problem, rng, config)
            ran += 1
    assert ran >= 2
    too_many = {"tile_h": 16, "tile_w": 32, "tile_k": 32, "out_w": 4, "out_k": 4, "c_block": 1}
    assert threads(too_many) == 1024 and not SOLVER.is_valid_config(handle, problem.conv_view(), too_many)


# ---- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", SMALL + TYPICAL, ids=lambda p: p.key())
def test_search_space_is_valid_and_large_enough(handle, problem):
    view_ = problem.conv_view()
    space = list(SOLVER.search_space(handle, view_))
    assert len(space) >= 8
    assert len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
    for config in space:
        assert SOLVER.is_valid_config(handle, view_, config), config
        assert SOLVER.is_valid_config(handle, view_, json.loads(json.dumps(config)))  # a DB round trip
        assert threads(config) <= 256
    default = SOLVER.default_config(handle, view_)
    assert SOLVER.is_valid_config(handle, view_, default)


def test_default_config_fits_small_devices():
    for problem in SMALL + TYPICAL:
        view_ = problem.conv_view()
        for ctx in (fake_ctx(), fake_ctx(64, 16384), fake_ctx(16, 4096)):
            if SOLVER.is_applicable(ctx, view_) is None:
                config = SOLVER.default_config(ctx, view_)
                assert SOLVER.is_valid_config(ctx, view_, config), (problem.key(), config)
                assert all(SOLVER.is_valid_config(ctx, view_, c) for c in SOLVER.search_space(ctx, view_))


def test_is_valid_config_rejects_garbage(handle):
    view_ = SMALL[1].conv_view()
    good = SOLVER.default_config(handle, view_)
    assert SOLVER.is_valid_config(handle, view_, good)
    bad_values = [
        None,
        [],
        "tile_h=4",
        42,
        {},
        list(good.items()),
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "c_block"},
    ]
    for field in FIELDS:
        bad_values += [
            {**good, field: str(good[field])},
            {**good, field: float(good[field])},
            {**good, field: True},
            {**good, field: None},
            {**good, field: 0},
            {**good, field: -good[field]},
            {**good, field: 3},
            {**good, field: max(DOMAIN[field]) * 2},
        ]
    bad_values += [{**good, "tile_w": 2, "out_w": 4}, {**good, "tile_k": 1, "out_k": 2}]
    for config in bad_values:
        assert not SOLVER.is_valid_config(handle, view_, config), config


def test_is_valid_config_checks_the_device():
    view_ = TYPICAL[0].conv_view()
    big = {"tile_h": 16, "tile_w": 32, "tile_k": 16, "out_w": 1, "out_k": 1, "c_block": 16}
    assert threads(big) == 16 * 32 * 16 and not SOLVER.is_valid_config(fake_ctx(), view_, big)
    cfg = {"tile_h": 8, "tile_w": 32, "tile_k": 4, "out_w": 2, "out_k": 2, "c_block": 16}
    assert SOLVER.is_valid_config(fake_ctx(1024, 1 << 20), view_, cfg)
    assert not SOLVER.is_valid_config(fake_ctx(1024, local_bytes(view_, cfg) - 4), view_, cfg)
    assert not SOLVER.is_valid_config(fake_ctx(threads(cfg) - 1, 1 << 20), view_, cfg)


def test_get_program_uses_the_config(handle):
    view_ = SMALL[3].conv_view()
    config = {"tile_h": 2, "tile_w": 8, "tile_k": 8, "out_w": 2, "out_k": 4, "c_block": 2}
    solution = make_solution(handle, SMALL[3], SOLVER, config)
    (spec,) = solution.kernels
    defines = dict(spec.defines)
    assert all(defines[f"CT_{f.upper()}"] == v for f, v in config.items())
    assert spec.local_size == (threads(config),) and spec.global_size[0] % threads(config) == 0
    assert solution.config == config
    with pytest.raises(BadParm):
        SOLVER.get_program(handle, view_, {**config, "tile_h": 3})


# ---- applicability -----------------------------------------------------------------------------
def test_applicability(handle):
    for direction in "BW":
        reason = SOLVER.is_applicable(
            handle, make("fp32", (1, 3, 5, 5), (2, 3, 3, 3), direction, pads=(1, 1)).conv_view()
        )
        assert reason is not None and "direction" in reason
    p3 = make("fp32", (1, 2, 3, 4, 4), (2, 2, 1, 3, 3), "F", ("NCDHW",) * 3, pads=(0, 1, 1))
    assert "3-d" in SOLVER.is_applicable(handle, p3.conv_view())
    dilated = make("fp32", (1, 2, 200, 200), (2, 2, 5, 5), pads=(0, 0), dilations=(40, 40)).conv_view()
    assert "local memory" in SOLVER.is_applicable(fake_ctx(local_mem_size=32768), dilated)
    assert SOLVER.is_applicable(handle, SMALL[2].conv_view()) is None


def test_registered_as_a_tunable_direct_solver():
    assert isinstance(by_name("ConvDirectTiledFwd"), ConvDirectTiledFwd)
    assert isinstance(by_name("11"), ConvDirectTiledFwd)
    names = [s.name for s in CONV_SOLVERS]
    assert names.index("ConvDirectTiledFwd") < names.index("ConvDirectNaiveFwd")
    assert SOLVER.tunable and SOLVER.algorithm == "direct" and SOLVER.id == 11
