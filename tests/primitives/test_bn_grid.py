"""BnFwdTrainingGrid / BnBwdGrid (solvers/norm/bn_grid.py): the plan on a fake H200 (every row in
exactly one step of one work-group, the grid resident at once, shared memory within the SM's),
and on a CUDA GPU against the NumPy reference: random channels-last shapes with odd sizes, fp16
data with fp32 statistics, backward with and without saved statistics, a large mean, tensors not
16 bytes aligned."""

from __future__ import annotations

import numpy as np
import pytest
import support

from miopy import backends
from miopy.problem.bnorm import BatchNormProblem
from miopy.solvers.norm.bn_grid import BnBwdGrid, BnBwdGridL2, BnFwdTrainingGrid, grid_plan, grid_workspace
from miopy.tensor import TensorDesc

KINDS = {"T": "bn_train", "B": "bn_bwd"}


def _problem(lens, dtype="fp16", direction="T", layout="NHWC", save=True, pdtype="fp32"):
    return BatchNormProblem(
        "SPATIAL",
        direction,
        TensorDesc(dtype, lens, layout=layout),
        param_dtype=pdtype,
        save=save,
        running=save and direction == "T",
        exp_avg_factor=0.3,
    )


@pytest.mark.parametrize("lens", [(32, 64, 112, 112), (32, 2048, 7, 7), (3, 40, 5, 7), (2, 3, 5, 5)])
@pytest.mark.parametrize("direction", ["T", "B"])
def test_plan_covers_every_row_once(lens, direction):
    ctx = support.fake_cuda_ctx()
    p = _problem(lens, direction=direction)
    plan = grid_plan(ctx, p, KINDS[direction])
    assert not isinstance(plan, str), plan
    ty = plan.local // plan.tx
    rows = plan.geo.rows
    assert plan.rps % ty == 0 and plan.tiles * plan.tx * plan.vw >= plan.geo.K
    assert plan.blocks <= 132 * plan.minb  # all resident
    # static shared memory: the reduction table, the tile's shifts and coefficients, the sums' table
    rows_table = plan.local // 32 if plan.tx < 32 else ty
    table = (rows_table + 4) * plan.tx * plan.vw * 4 + 4 * (plan.local // 32) * 4
    assert plan.shared + 1024 + table <= (232448 + 1024) // plan.minb
    covered = np.zeros(rows, np.int64)
    for r in range(plan.slices):
        row0 = r * plan.rps
        steps = -(-max(0, min(rows - row0, plan.rps)) // ty)
        held = min(plan.hold, steps) + min(plan.hs, steps - min(plan.hold, steps))
        assert 0 <= held <= steps
        for j in range(steps):
            rr = row0 + j * ty + np.arange(ty)
            np.add.at(covered, rr[rr < rows], 1)
    assert np.all(covered == 1)
    nbytes, counter = grid_workspace(p, plan)
    assert nbytes == (counter + 2) * 4


def test_not_applicable():
    ctx = support.fake_cuda_ctx()
    assert "channels-last" in grid_plan(ctx, _problem((4, 8, 5, 5), layout="NCHW"), "bn_train")
    assert "CUDA" in grid_plan(support.fake_cuda_ctx(backend="opencl"), _problem((4, 8, 5, 5)), "bn_train")
    assert "pass" in grid_plan(ctx, _problem((4, 8, 5, 5), direction="B"), "bn_train")
    assert BnFwdTrainingGrid().is_applicable(ctx, _problem((4, 8, 5, 5), direction="B")) is not None
    assert BnBwdGrid().is_applicable(ctx, _problem((4, 8, 5, 5), direction="B")) is None
    big = _problem((32, 256, 56, 56), direction="B")
    assert grid_plan(ctx, big, "bn_bwd").hs > 0
    assert grid_plan(ctx, big, "bn_bwd", BnBwdGridL2.shape).hs == 0


# the fastest solver on the H200 (fp16 NHWC, batch 32; benchmarks/norms.py, 2026-11-23)
FASTEST = {
    ("T", 64, 56): "BnFwdTrainingGrid",
    ("T", 128, 28): "BnFwdTrainingFused",
    ("T", 512, 28): "BnFwdTrainingGrid",
    ("T", 512, 7): "BnFwdTrainingFused",
    ("B", 128, 28): "BnBwdGrid",
    ("B", 256, 14): "BnBwdFused",
    ("B", 1024, 14): "BnBwdGrid",
    ("B", 2048, 7): "BnBwdFused",
}


@pytest.mark.parametrize("case", list(FASTEST), ids=lambda c: f"{c[0]}{c[1]}x{c[2]}")
def test_immediate_mode_puts_the_fastest_first(case):
    """Without find records, immediate mode lists the applicable solvers in registry order, those
    that defer last: the grid solvers defer to the one-kernel ones where those won (fused_wins)."""
    from miopy.solvers import solvers_for

    direction, c, hw = case
    ctx = support.fake_cuda_ctx()
    view = _problem((32, c, hw, hw), direction=direction).solver_view()
    found = [s for s in solvers_for(view) if s.is_applicable(ctx, view) is None]
    found.sort(key=lambda s: s.defers(ctx, view))
    assert found[0].name == FASTEST[case], [s.name for s in found]


# ---- on the GPU ------------------------------------------------------------------------------
_WHY = backends.unavailable_reason("cuda")
gpu = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]


@pytest.fixture(scope="module")
def cuda():
    from miopy.handle import Handle

    return Handle("cuda")


def _run(handle, problem, solver, rng, offset=0.0, misalign=False, tol=None):
    from test_norms_cuda import run_solver

    assert solver.is_applicable(handle, problem) is None, solver.is_applicable(handle, problem)
    run_solver(handle, problem, solver, rng, offset, tol, misalign)


def _variant(base, defines: dict):
    """``base`` with kernel defines of its own (the code paths the defaults leave out)."""
    name = base.name + "_" + "_".join(f"{k}{v}" for k, v in defines.items())
    return type(name, (base,), {"name": name, "defines": defines})()


# the defaults, and the zeroed counter, sleeping polls, a warp per channel's sums and plain loads
# into shared memory (BNG_DRV / BNG_SLEEP / BNG_GS / BNG_ASYNC off)
OLD_PATHS = {"BNG_DRV": 0, "BNG_SLEEP": 32, "BNG_GS": 32, "BNG_ASYNC": 0}
SOLVERS = [BnFwdTrainingGrid(), BnBwdGrid(), BnBwdGridL2()]
SOLVERS += [_variant(BnFwdTrainingGrid, OLD_PATHS), _variant(BnBwdGrid, OLD_PATHS)]


@pytest.mark.parametrize("solver", SOLVERS, ids=[s.name for s in SOLVERS])
def test_random_shapes(cuda, solver):
    rng = np.random.default_rng(23)
    direction = "T" if solver.kind == "bn_train" else "B"
    cases = [
        ((32, 64, 56, 56), "fp16"),
        ((7, 24, 13, 11), "fp16"),
        ((5, 3, 9, 7), "fp32"),
        ((3, 40, 5, 7), "bf16"),
    ]
    for _ in range(2):
        n, h, w = (int(v) for v in rng.integers(1, 20, 3))
        c = int(rng.choice([8, 16, 72, 136, 520, 1032]))
        cases.append(((n, c, h, w), str(rng.choice(["fp16", "fp32"]))))
    for lens, dtype in cases:
        for save in (True, False):
            _run(cuda, _problem(lens, dtype, direction, save=save), solver, rng)


@pytest.mark.parametrize("solver", SOLVERS, ids=[s.name for s in SOLVERS])
def test_large_mean_and_misaligned(cuda, solver):
    rng = np.random.default_rng(4)
    direction = "T" if solver.kind == "bn_train" else "B"
    _run(cuda, _problem((16, 32, 14, 14), "fp32", direction), solver, rng, offset=1000.0, tol=1e-5)
    _run(cuda, _problem((8, 64, 28, 28), "fp16", direction), solver, rng, offset=300.0)
    _run(cuda, _problem((4, 32, 8, 8), "fp16", direction, save=False), solver, rng, misalign=True)
    _run(cuda, _problem((4, 16, 8, 8), "fp16", direction, pdtype="fp16"), solver, rng)


for _f in (test_random_shapes, test_large_mean_and_misaligned):
    for _m in gpu:
        _m(_f)
