"""On a GPU: a CUDA kernel package built on the device carries the programs of its chosen
solutions; a fresh handle runs them without asking the solvers, the same programs the solvers
make there, computing the right convolutions; the checked path gives the same solutions."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from miopy import backends
from miopy.db import package_plans
from miopy.engine import find
from miopy.problem.conv import ConvProblem
from miopy.tool import kernels, target, workload
from tests.support import check

_WHY = backends.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]

WORKLOAD = """conv -n 2 -c 16 -H 10 -W 10 -k 16 -y 3 -x 3 -p 1 -q 1 -F 1
activ -n 2 -c 16 -H 10 -W 10 -m 3 -F 1
"""


def test_a_cuda_package_runs_its_programs(isolated, tmp_path, monkeypatch):
    from miopy.handle import Handle

    (tmp_path / "w.txt").write_text(WORKLOAD)
    work = workload.load(str(tmp_path / "w.txt"))
    manifest = kernels.build(target.target("cuda"), work, tmp_path / "out")
    assert manifest["plans"] >= 1
    shutil.copyfile(manifest["path"], isolated / "kdb" / f"{manifest['db_basename']}.kdb")
    h = Handle("cuda")
    h._prefetch_thread.join()  # the set-up thread loads the package's kernels (cuFuncLoad)
    assert h.kernels_loaded_ahead == manifest["kernels"]
    assert all(h.backend.is_loaded(k) in (True, None) for k in h._loaded_ahead.values())
    got = [find.get_solutions(h, p) for p in work.problems]
    assert h.package_choices.trusted and h.package_choices.planned == manifest["plans"]
    monkeypatch.setattr(package_plans, "_code", ["0" * 64])  # another miopy: the checked path
    plain = Handle("cuda")
    want = [find.get_solutions(plain, p) for p in work.problems]
    assert plain.package_choices.planned == 0
    for a, b in zip(got, want):
        assert [(s.solver, s.config, s.program) for s in a] == [(s.solver, s.config, s.program) for s in b]
    for p, solutions in zip(work.problems, got):
        if isinstance(p, ConvProblem):
            check(h, solutions[0], np.random.default_rng(6))
    assert h.kernel_cache.misses == 0 and h.kernels_ahead_used == h.kernel_cache.hits > 0


# the problems of test_cuda_fastpath's recorded-config test, whose default algorithms rebuild
LT_WORKLOAD = """conv -n 4 -c 24 -H 6 -W 8 -k 40 -y 1 -x 1 -p 0 -q 0 -F 1 -I NHWC -f NHWC -O NHWC
conv -n 4 -c 24 -H 6 -W 8 -k 40 -y 1 -x 1 -p 0 -q 0 -F 4
"""


def test_a_package_with_cublaslt_programs_runs_them_without_the_heuristics(isolated, tmp_path, monkeypatch):
    """A package whose chosen solutions are cuBLASLt products (GemmLtFwd1x1 on NHWC,
    GemmLtWrw1x1Nchw on NCHW fp32: the build is limited to the cuBLASLt solvers so that they are
    the choices) carries their programs as data; a fresh handle binds them (descriptor, layouts
    and algorithm rebuilt from the row, checked) and computes the right results with no
    heuristics query and no solver asked."""
    from miopy.backends import cuda_libs
    from miopy.handle import Handle
    from miopy.solvers.conv import gemm_lt

    (tmp_path / "w.txt").write_text(LT_WORKLOAD)
    work = workload.load(str(tmp_path / "w.txt"))
    real, real_applicable = kernels.solvers_for, kernels.applicable
    monkeypatch.setattr(kernels, "solvers_for", lambda p: [s for s in real(p) if s.name.startswith("GemmLt")])
    monkeypatch.setattr(  # and only their kernels compiled: a cheap build
        kernels, "applicable", lambda c, p: [s for s in real_applicable(c, p) if s.name.startswith("GemmLt")]
    )
    manifest = kernels.build(target.target("cuda"), work, tmp_path / "out")
    monkeypatch.setattr(kernels, "solvers_for", real)
    monkeypatch.setattr(kernels, "applicable", real_applicable)
    assert manifest["plans"] == len(work.problems) == 2
    shutil.copyfile(manifest["path"], isolated / "kdb" / f"{manifest['db_basename']}.kdb")
    gemm_lt._lt_gemm.cache_clear()  # as in a fresh process: no product known yet
    monkeypatch.delenv("MIOPY_LIBRARY_STREAM_WARM_UP", raising=False)  # on by default
    before = cuda_libs.heuristic_calls
    h = Handle("cuda")
    h._prefetch_thread.join()
    got = [find.get_solutions(h, p)[0] for p in work.problems]
    assert [s.solver for s in got] == ["GemmLtFwd1x1", "GemmLtWrw1x1Nchw"]
    assert h.package_choices.planned == 2
    assert not any(package_plans.library_steps(s.program) for s in got)  # bound
    for solution in got:
        check(h, solution, np.random.default_rng(7))
    assert cuda_libs.heuristic_calls == before
    h.backend._precheck_thread.join()
    # the set-up thread's cuBLASLt calls on the handle's stream (one per distinct algorithm)
    assert h.backend.library_prechecked == 2 and h.backend.library_stream_warmed >= 1
    assert h.backend._lt_stream_ready is None  # the first call waited for them, once


def test_no_cublaslt_call_runs_ahead_without_a_package(isolated):
    """Without a kernel package the handle's stream gets no warm-up call, and a cuBLASLt
    solution's first call does not wait for one."""
    from miopy.handle import Handle

    h = Handle("cuda")
    assert h.package_choices.path is None and h.backend._lt_stream_ready is None
    h.backend._precheck_thread.join()
    assert h.backend.library_stream_warmed == 0
