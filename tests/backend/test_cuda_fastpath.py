"""On a GPU: device-true timing, asynchronous runs with prepared calls (cached per buffers),
streams, and the cuBLASLt 1x1 solvers in every direction and type against the NumPy reference."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from miopy import backends, config
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.reference.conv import conv_reference_buffers, rms_range, store_logical, view
from miopy.tensor import DataType, TensorDesc, from_storage

_WHY = backends.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]

TOL = {"fp32": 1.5e-6, "fp16": 8.2e-3, "bf16": 8.2e-3 * 8}


@pytest.fixture(scope="module")
def handle():
    from miopy.handle import Handle

    return Handle("cuda")


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def problem_1x1(dtype: str, layout: str, direction: str, n=3, c=24, hw=5, k=40) -> ConvProblem:
    x = TensorDesc(dtype, (n, c, hw, hw + 2), layout=layout)
    w = TensorDesc(dtype, (k, c, 1, 1), layout=layout)
    return ConvProblem.create(x, w, ConvDesc((0, 0)), direction, y_layout=layout)


def host_buffers(problem: ConvProblem, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for role, desc in (("x", problem.x), ("w", problem.w), ("y", problem.y)):
        values = rng.uniform(-1, 1, desc.lens).astype(np.float32)
        if role == problem.output_role:
            values[...] = np.nan  # an unwritten output shows up
        out[role] = store_logical(values, desc)
    return out


def error(problem: ConvProblem, bufs: dict[str, np.ndarray]) -> float:
    desc = {"x": problem.x, "w": problem.w, "y": problem.y}[problem.output_role]
    got = from_storage(view(bufs[problem.output_role], desc), problem.dtype)
    return rms_range(got, conv_reference_buffers(problem, bufs))


def tol(problem: ConvProblem) -> float:
    t = TOL[problem.dtype.value.lower()]
    return t * 2 if problem.direction.value == "W" else t


# ---- timing ---------------------------------------------------------------------------------------
def test_device_time_excludes_host_cost(handle):
    """A call that sleeps on the host for 2 ms and enqueues a short GEMM: device time stays far
    below the host's 2 ms; with the L2 flush it is still a per-run median."""
    import time

    be = handle.backend
    a = be.upload(np.ones(512 * 512, np.float32))
    c = be.alloc(512 * 512 * 4)
    gemm = be.prepare_gemm(DataType.FP32, False, False, 512, 512, 512, a, 0, 512, a, 0, 512, c, 0, 512)

    def slow_host():
        time.sleep(0.002)
        gemm()

    ms = be.device_time_ms(slow_host, 10)
    flushed = be.device_time_ms(slow_host, 10, flush_l2=True)
    assert 0 < ms < 1.0 and 0 < flushed < 1.0, (ms, flushed)
    out = np.empty(512 * 512, np.float32)
    be.download(c, out)
    np.testing.assert_allclose(out, 512.0)


# ---- asynchronous runs and prepared calls -------------------------------------------------------
@pytest.mark.parametrize("solver", ["ConvDirectNaiveFwd", "GemmFwd1x1_0_1", "GemmLtFwd1x1"])
def test_run_on_device_arrays_is_prepared_once(handle, cp, solver):
    from miopy.engine.find import solution_for

    problem = problem_1x1("fp16", "NHWC", "F")
    sol = solution_for(handle, problem, solver)
    host = host_buffers(problem, 1)
    dev = {r: cp.asarray(b) for r, b in host.items()}
    before = len(handle._prepared)
    sol.run(handle, dev)
    assert len(handle._prepared) == before + 1
    dev["y"][...] = 0
    dev["x"][...] = cp.asarray(host_buffers(problem, 2)["x"])  # new data, same buffers: a cache hit
    sol.run(handle, dev)
    assert len(handle._prepared) == before + 1
    handle.backend.synchronize()
    got = {r: cp.asnumpy(b) for r, b in dev.items()}
    assert error(problem, got) < tol(problem)
    other = {**dev, "y": cp.empty_like(dev["y"])}  # another output buffer: another entry
    sol.run(handle, other)
    assert len(handle._prepared) == before + 2


def test_graph_is_captured_at_the_second_run(handle, cp):
    """A prepared run's first replay runs its calls directly (a call made once pays for no
    graph); the second captures them into a CUDA graph and launches it; later ones launch that
    graph. Each run computes the reference result."""
    from miopy.engine.find import get_solutions

    problem = problem_1x1("fp32", "NCHW", "F", n=4, c=32, hw=8, k=48)
    host = host_buffers(problem, 7)
    dev = {r: cp.asarray(b) for r, b in host.items()}
    be = handle.backend
    saved = be.graph_single_launch, be.graph_single_library
    be.graph_single_launch = be.graph_single_library = True  # even a lone call gets a graph here
    try:
        sol = get_solutions(handle, problem)[0]
        states = []
        for run in range(3):
            dev["y"][...] = cp.nan
            sol.run(handle, dev)
            handle.backend.synchronize()
            assert error(problem, {r: cp.asnumpy(b) for r, b in dev.items()}) < tol(problem), run
            entry = next(e for e in handle._prepared.entries.values() if e[0]() is sol)
            (replay,) = entry[1]
            state = replay.keep[0]
            states.append((state["runs"], state["graph"] is not None))
    finally:
        be.graph_single_launch, be.graph_single_library = saved
    assert states == [(1, False), (2, True), (2, True)], states


def test_lone_library_call_runs_directly(handle, cp):
    """By default (MIOPY_GRAPH_SINGLE_LIBRARY unset) a run of one library call replays that call
    itself, never a graph (whose kernel starts later on the device), and computes the result."""
    from miopy.engine.find import solution_for

    problem = problem_1x1("fp32", "NCHW", "F", n=4, c=32, hw=8, k=48)
    host = host_buffers(problem, 9)
    dev = {r: cp.asarray(b) for r, b in host.items()}
    be = handle.backend
    saved = be.graph_single_library
    be.graph_single_library = config.graph_single_library()
    try:
        assert be.graph_single_library is (os.environ.get("MIOPY_GRAPH_SINGLE_LIBRARY") == "1")
        sol = solution_for(handle, problem, "GemmFwd1x1_0_1")  # one cuBLAS call
        for run in range(3):
            dev["y"][...] = cp.nan
            sol.run(handle, dev)
            handle.backend.synchronize()
            assert error(problem, {r: cp.asnumpy(b) for r, b in dev.items()}) < tol(problem), run
        entry = next(e for e in handle._prepared.entries.values() if e[0]() is sol)
        (call,) = entry[1]
        if not be.graph_single_library:
            assert getattr(call, "library", False), sol.solver  # the library call itself
    finally:
        be.graph_single_library = saved


def test_run_follows_cupy_stream(handle, cp):
    from miopy.engine.find import solution_for

    problem = problem_1x1("fp32", "NCHW", "F", n=8, c=64, hw=32, k=64)
    sol = solution_for(handle, problem, "GemmLtFwd1x1")
    host = host_buffers(problem, 4)
    dev = {r: cp.asarray(b) for r, b in host.items()}
    be = handle.backend
    side = cp.cuda.Stream(non_blocking=True)
    try:
        be.follow_stream("cupy")
        with side:
            sol.run(handle, dev)
            assert be._sptr == side.ptr
            sol.run(handle, dev)  # a replay, on the same stream
        side.synchronize()
    finally:
        be.set_stream(None)
    assert be._sptr == 0
    assert error(problem, {r: cp.asnumpy(b) for r, b in dev.items()}) < tol(problem)


def torch_stream_check() -> float:
    """Runs on a torch side stream with the handle following torch; returns the error. Called in
    a fresh process that imports torch first (torch 2.11 fails when imported after CuPy)."""
    import torch

    from miopy.engine.find import solution_for
    from miopy.handle import Handle

    handle = Handle("cuda")
    problem = problem_1x1("fp32", "NCHW", "F", n=8, c=64, hw=32, k=64)
    sol = solution_for(handle, problem, "GemmLtFwd1x1")
    x = torch.randn(problem.x.lens, device="cuda")
    w = torch.randn(problem.w.lens, device="cuda")
    y = torch.full(problem.y.lens, float("nan"), device="cuda")
    side = torch.cuda.Stream()
    handle.backend.follow_stream("torch")
    with torch.cuda.stream(side):
        for _ in range(3):
            sol.run(handle, {"x": x, "w": w, "y": y})
        assert handle.backend._sptr == side.cuda_stream
    side.synchronize()
    ref = torch.nn.functional.conv2d(x.double(), w.double())
    return float((y.double() - ref).norm() / ref.norm())


def test_run_follows_torch_stream():
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    code = (
        "import sys\n"
        "try:\n"
        "    import torch\n"
        "    ok = torch.cuda.is_available()\n"
        "except Exception as exc:\n"
        "    print('SKIP torch cannot be imported:', exc); sys.exit(0)\n"
        "if not ok:\n"
        "    print('SKIP torch has no CUDA'); sys.exit(0)\n"
        f"sys.path.insert(0, {str(here)!r})\n"
        "import test_cuda_fastpath as t\n"
        "print('OK', t.torch_stream_check())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=here.parent.parent
    )
    assert out.returncode == 0, out.stdout + out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip(out.stdout.strip())
    err = float(out.stdout.split("OK", 1)[1].split()[0])
    assert err < 1e-5, out.stdout


def test_numpy_output_is_waited_for(handle):
    from miopy.engine.find import solution_for

    problem = problem_1x1("bf16", "NHWC", "B")
    sol = solution_for(handle, problem, "GemmLtBwd1x1")
    bufs = host_buffers(problem, 3)
    sol.run(handle, bufs)
    assert error(problem, bufs) < tol(problem)


# ---- cuBLASLt 1x1 solvers ------------------------------------------------------------------------
LT = {"F": "GemmLtFwd1x1", "B": "GemmLtBwd1x1", "W": "GemmLtWrw1x1"}


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("direction", ["F", "B", "W"])
def test_lt_every_candidate(handle, dtype, layout, direction):
    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name

    problem = problem_1x1(dtype, layout, direction)
    solver = by_name(LT[direction])
    view_ = problem.solver_view()
    reason = solver.is_applicable(handle, view_)
    if layout == "NCHW" and direction == "W":
        assert reason is not None  # the sum over images is not one product: GemmWrwUniversal
        return
    assert reason is None, reason
    configs = solver.search_space(handle, view_)
    assert configs and all(solver.is_valid_config(handle, view_, c) for c in configs)
    assert solver.default_config(handle, view_) == configs[0]
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs)
    for cfg in configs[:3]:  # what the perf DB writes and reads back names the same algorithm
        assert solver.is_valid_config(handle, view_, json.loads(json.dumps(cfg)))
    for stale in stale_configs(configs[0]):
        assert not solver.is_valid_config(handle, view_, stale), stale
    for i, cfg in enumerate(configs):
        sol = make_solution(handle, problem, solver, cfg)
        bufs = host_buffers(problem, 10 + i)
        sol.run(handle, bufs)
        assert error(problem, bufs) < tol(problem), cfg


def stale_configs(good: dict) -> list:
    """Configs a perf DB could hold that must be refused: the old index format, wrong types,
    unknown keys, and attribute values no cuBLASLt algorithm has (another library or device)."""
    return [
        {"algo": 0},
        None,
        [good],
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "tile"},
        {**good, "order": "diagonal"},
        {**good, "id": True},
        {**good, "tile": "1"},
        {**good, "id": 1 << 40},
        {**good, "id": -1},
        {**good, "id": 100_000},
        {**good, "tile": 100_000},
        {**good, "stages": 100_000},
        {**good, "cluster": 1 << 20},
        {**good, "splitk": 1 << 30, "reduction": 1},
    ]


def test_lt_stale_perf_db_record_is_refused(handle, monkeypatch, tmp_path):
    """A perf DB record naming an algorithm this library does not have is ignored with a
    warning, and the solution falls back to the default config and computes the right result."""
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(tmp_path))
    from miopy.engine.candidates import make_solution
    from miopy.handle import Handle
    from miopy.solvers import by_name

    h = Handle("cuda")
    problem = problem_1x1("fp16", "NHWC", "F")
    solver = by_name("GemmLtFwd1x1")
    view_ = problem.solver_view()
    default = solver.default_config(h, view_)
    h.perf_db.store(view_.key(), solver.name, {**default, "id": 100_000}, primitive="conv")
    sol = make_solution(h, problem, solver)
    assert sol.config == default
    bufs = host_buffers(problem, 5)
    sol.run(h, bufs)
    assert error(problem, bufs) < tol(problem)


@pytest.mark.parametrize("dims", [(8, 24, 8, 40), (3, 9, 3, 13)])
def test_lt_wrw_nchw_every_mode_and_candidate(handle, dims):
    """fp32 NCHW 1x1 backward weights: batched + sum, packed, packed and split + sum; every
    cuBLASLt candidate of each against the reference, on device arrays (recorded and replayed)
    and on NumPy arrays. (3, 9, 3x5, 13): 15 positions, so no 16-byte rows and no split."""
    import cupy

    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name

    n, c, hw, k = dims
    problem = problem_1x1("fp32", "NCHW", "W", n=n, c=c, hw=hw, k=k)
    solver = by_name("GemmLtWrw1x1Nchw")
    view_ = problem.solver_view()
    reason = solver.is_applicable(handle, view_)
    assert reason is None, reason
    configs = solver.search_space(handle, view_)
    modes = {cfg["mode"] for cfg in configs}
    if n == 8:
        assert modes == {"batched", "packed", "split32"}, modes
    else:  # cuBLASLt may refuse batches of misaligned images; packing realigns them
        assert {"packed"} <= modes <= {"batched", "packed"}, modes
    assert not solver.is_valid_config(handle, view_, {"mode": "batched", "algo": len(configs)})
    assert solver.is_valid_config(handle, view_, solver.default_config(handle, view_))
    for i, cfg in enumerate(configs):
        sol = make_solution(handle, problem, solver, cfg)
        bufs = host_buffers(problem, 20 + i)
        sol.run(handle, bufs)
        assert error(problem, bufs) < tol(problem), cfg
        dev = {r: cupy.asarray(b) for r, b in bufs.items()}
        dev["w"][...] = cupy.nan
        ws = cupy.empty(max(sol.workspace, 1), cupy.uint8)
        for _ in range(2):  # the second run replays the recorded calls
            sol.run(handle, dev, workspace=ws)
        handle.backend.synchronize()
        assert error(problem, {r: cupy.asnumpy(b) for r, b in dev.items()}) < tol(problem), cfg
    for fp16 in ("fp16", "bf16"):
        assert solver.is_applicable(handle, problem_1x1(fp16, "NCHW", "W").solver_view()) is not None
    assert solver.is_applicable(handle, problem_1x1("fp32", "NHWC", "W").solver_view()) is not None


def test_find_times_lt_candidates_and_keeps_winner(handle, monkeypatch, tmp_path):
    from miopy.engine.find import FindOptions, find_solutions
    from miopy.solvers.conv.gemm_lt import CONFIG_KEYS

    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(tmp_path))
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    from miopy.handle import Handle

    h = Handle("cuda")
    problem = problem_1x1("fp16", "NHWC", "W", n=16, c=64, hw=28, k=128)
    found = find_solutions(h, problem, FindOptions())
    names = [s.solver for s in found]
    assert "GemmLtWrw1x1" in names and all(s.time_ms > 0 for s in found)
    stored = h.perf_db.load(problem.solver_view().key(), "GemmLtWrw1x1", "conv")
    assert stored is not None and set(stored) == CONFIG_KEYS
    lt = next(s for s in found if s.solver == "GemmLtWrw1x1")
    assert lt.config == stored


@pytest.mark.parametrize("direction", ["F", "B", "W"])
def test_find_on_device_arrays_leaves_them_and_its_winner_is_right(
    handle, cp, monkeypatch, tmp_path, direction
):
    """Find times the read-only inputs in place (engine.bench.device_args): every tensor the
    caller gave is bit for bit as it was afterwards, and the first solution computes the
    reference on them."""
    from miopy.engine.find import FindOptions, find_solutions
    from miopy.handle import Handle

    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(tmp_path))
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    h = Handle("cuda")
    problem = problem_1x1("bf16", "NHWC", direction, n=4, c=32, hw=6, k=48)
    host = host_buffers(problem, 11)
    device = {role: cp.asarray(a) for role, a in host.items()}
    found = find_solutions(h, problem, FindOptions(), tensors=device)
    for role, a in host.items():
        np.testing.assert_array_equal(cp.asnumpy(device[role]).view(np.uint8), a.view(np.uint8))
    found[0].run(h, device)
    got = {role: cp.asnumpy(d) for role, d in device.items()}
    assert error(problem, got) <= tol(problem)


@pytest.mark.parametrize(
    "name,direction,layout", [("GemmLtFwd1x1", "F", "NHWC"), ("GemmLtWrw1x1Nchw", "W", "NCHW")]
)
def test_a_recorded_lt_config_runs_without_the_heuristics(handle, monkeypatch, name, direction, layout):
    """What a fresh process does with a kernel package's choice or a find record: the cuBLASLt
    algorithm is rebuilt from its attribute values and checked, applicability is shown by that
    config, and no heuristics query is made; the result is right."""
    from miopy.backends import cuda_libs
    from miopy.engine.candidates import make_solution
    from miopy.solvers import by_name
    from miopy.solvers.conv import gemm_lt

    problem = problem_1x1("fp32", layout, direction, n=4, c=24, hw=6, k=40)
    solver = by_name(name)
    view_ = problem.solver_view()
    recorded = json.loads(json.dumps(solver.default_config(handle, view_)))  # what a record holds
    assert isinstance(recorded.get("algo", recorded.get("id")), list | int)
    if name == "GemmLtWrw1x1Nchw":
        assert isinstance(recorded["algo"], list) and len(recorded["algo"]) == len(cuda_libs.ALGO_FIELDS)
    gemm_lt._lt_gemm.cache_clear()  # as in a fresh process: no product known yet
    asked = []
    real = cuda_libs.LtGemm._heuristic
    monkeypatch.setattr(cuda_libs.LtGemm, "_heuristic", lambda self, n: asked.append(n) or real(self, n))
    assert solver.applicability(handle, view_, recorded) is None
    sol = make_solution(handle, problem, solver, recorded)
    bufs = host_buffers(problem, 31)
    sol.run(handle, bufs)
    assert asked == []
    assert error(problem, bufs) < tol(problem)
    assert solver.applicability(handle, view_) is None and asked  # no config: the heuristics, as before


def test_the_set_up_thread_pays_cublaslt_initialization():
    """Every handle's BLAS set-up thread makes cuBLASLt's first algorithm checks (its one-time
    initialization, about 0.07 s on the H200 for the first): the same checks made again on this
    thread then cost a small part of that, and a recorded config still checks. (Run alone in a
    fresh process the timing shows it; after other tests it holds trivially.)"""
    from miopy.backends import cuda_libs
    from miopy.handle import Handle

    h = Handle("cuda")
    h.backend._blas_thread.join()
    ahead = h.backend.lt_initialized_s
    assert isinstance(ahead, float) and ahead > 0
    again = cuda_libs.initialize()  # the same products' checks, on the main thread
    assert again < max(0.02, ahead / 3), f"set-up thread {ahead:.4f} s, then this thread {again:.4f} s"
    gemm = cuda_libs.LtGemm(cuda_libs.CUDA_R_32F, cuda_libs.OP_N, cuda_libs.OP_N, 48, 40, 24, 48, 24, 48)
    picks = gemm.picks()
    fresh = cuda_libs.LtGemm(cuda_libs.CUDA_R_32F, cuda_libs.OP_N, cuda_libs.OP_N, 48, 40, 24, 48, 24, 48)
    found = fresh.resolve(picks[0])  # rebuilt from its values and checked
    assert found is not None and found.config == tuple(picks[0])
