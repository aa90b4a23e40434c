"""Grouped convolution in the tensor-core implicit-GEMM solvers (ConvIgemmFwdNhwc,
ConvIgemmBwdNhwc, ConvIgemmWrwNhwc): each group is its own run of blocks working on its slice of
the channels (IG_G in kernels/common/igemm_defines.h).

On the CPU: applicability (C and K of a group multiples of 8; the padded solvers stay
ungrouped), the grid (one run of blocks per group), the defines, and NVRTC builds for sm_90. On
a GPU (marked ``gpu``): random grouped problems in every direction, default configs and a spread
of the search space (splits and cluster splits included), against the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
import support

from miopy import backends
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.solvers import by_name
from miopy.tensor import TensorDesc

make = support.conv_problem
CTX = support.fake_cuda_ctx()
SOLVERS = {"F": "ConvIgemmFwdNhwc", "B": "ConvIgemmBwdNhwc", "W": "ConvIgemmWrwNhwc"}
FILES = {"F": "igemm_fwd", "B": "igemm_bwd", "W": "igemm_wrw"}
PADDED = {"F": "ConvIgemmPadFwdNhwc", "B": "ConvIgemmPadBwdNhwc", "W": "ConvIgemmPadWrwNhwc"}
DIRECTIONS = list(SOLVERS)


def grouped(direction: str, dtype="fp16", groups=4, cg=16, kg=24, n=2, hw=(9, 7), f=3, **conv):
    conv.setdefault("pads", (f // 2, f // 2))
    return make(dtype, (n, cg * groups, *hw), (kg * groups, cg, f, f), direction, groups=groups, **conv)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_applicability(direction):
    solver = by_name(SOLVERS[direction], "conv")
    assert solver.is_applicable(CTX, grouped(direction).conv_view()) is None
    assert solver.is_applicable(CTX, grouped(direction, groups=32, cg=8, kg=8).conv_view()) is None
    reason = solver.is_applicable(CTX, grouped(direction, cg=4, kg=8).conv_view())
    assert reason is not None and "per group" in reason, reason
    reason = solver.is_applicable(CTX, grouped(direction, cg=16, kg=12).conv_view())
    assert reason is not None and "per group" in reason, reason
    # the channel-padding solvers (odd C) keep to groups = 1
    pad = by_name(
        {"F": "ConvIgemmPadFwdNhwc", "B": "ConvIgemmPadBwdNhwc", "W": "ConvIgemmPadWrwNhwc"}[direction]
    )
    reason = pad.is_applicable(CTX, grouped(direction, cg=3, kg=8).conv_view())
    assert reason is not None and "groups" in reason, reason


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_one_run_of_blocks_per_group(direction):
    """The grid of G groups is G times the grid of one group's problem, with the group's C and K
    as the kernel's shape and IG_G set; an ungrouped problem gets no IG_G."""
    solver = by_name(SOLVERS[direction], "conv")
    problem = grouped(direction, groups=3, cg=16, kg=24).conv_view()
    one = grouped(direction, groups=1, cg=16, kg=24).conv_view()
    config = solver.default_config(CTX, one)
    config["split_k"] = 1
    (spec,) = solver.get_program(CTX, problem, config).kernels
    (spec1,) = solver.get_program(CTX, one, config).kernels
    assert spec.global_size == (3 * spec1.global_size[0], *spec1.global_size[1:])
    defines, defines1 = dict(spec.defines), dict(spec1.defines)
    assert defines.pop("IG_G") == 3 and "IG_G" not in defines1
    assert defines == defines1


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_grouped_configs_compile_for_sm90(direction):
    rng = np.random.default_rng(7)
    solver = by_name(SOLVERS[direction], "conv")
    problem = grouped(direction, groups=4, cg=16, kg=24, n=3, hw=(13, 11), strides=(2, 1)).conv_view()
    configs = support.config_spread(solver, CTX, problem, rng)[:3]
    support.assert_builds_for_sm90(solver, CTX, problem, configs, FILES[direction])


# ---- on a GPU: against the reference ------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


def random_grouped(rng: np.random.Generator, dtype: str, direction: str):
    while True:
        groups = int(rng.choice([2, 3, 4, 8, 32]))
        cg, kg = 8 * int(rng.integers(1, 5)), 8 * int(rng.integers(1, 5))
        if groups == 32:
            cg = kg = 8  # depth-wise-like: ResNeXt's 32 groups of 8 channels
        try:
            x = TensorDesc(
                dtype, (int(rng.integers(1, 4)), cg * groups, *rng.integers(1, 16, 2)), layout="NHWC"
            )
            w = TensorDesc(dtype, (kg * groups, cg, *rng.integers(1, 5, 2)), layout="NHWC")
            conv = ConvDesc(
                pads=tuple(rng.integers(0, 3, 2)),
                strides=tuple(rng.integers(1, 3, 2)),
                dilations=tuple(rng.integers(1, 3, 2)),
                groups=groups,
            )
            return ConvProblem.create(x, w, conv, direction, y_layout="NHWC")
        except ValueError:
            continue


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_random_grouped_problems(handle, dtype, direction):
    """Default configs on random grouped problems (2 to 32 groups, strides, padding, dilation)."""
    solver = by_name(SOLVERS[direction], "conv")
    rng = np.random.default_rng({"fp16": 61, "bf16": 62}[dtype] + 10 * DIRECTIONS.index(direction))
    for _ in range(6):
        support.check_solver(handle, solver, random_grouped(rng, dtype, direction), rng)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.gpu
@pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")
def test_grouped_search_space_sample(handle, direction):
    """A spread of the search space (splits, cluster splits) on a grouped problem with partial
    tiles, and a ResNeXt-like layer (32 groups of 8 channels)."""
    solver = by_name(SOLVERS[direction], "conv")
    rng = np.random.default_rng(71 + DIRECTIONS.index(direction))
    problem = grouped(direction, groups=4, cg=24, kg=40, n=3, hw=(13, 15), dilations=(2, 1))
    view = problem.conv_view()
    space = list(solver.search_space(handle, view))
    splits = [c for c in space if c["split_k"] > 1]
    picks = [space[0], space[-1], *(space[i] for i in rng.choice(len(space), 6, replace=False))]
    picks += splits[:2] + splits[-2:]
    for config in picks:
        support.check_solver(handle, solver, problem, rng, config)
    resnext = grouped(direction, groups=32, cg=8, kg=8, n=4, hw=(14, 14))
    support.check_solver(handle, solver, resnext, rng)
