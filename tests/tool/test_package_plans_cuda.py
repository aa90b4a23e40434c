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
