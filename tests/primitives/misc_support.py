"""Running every applicable solver of a tensorop / softmax / LRN / reduce problem on a handle
against its NumPy reference (rms_range under the primitive's tolerance)."""

from __future__ import annotations

import numpy as np

from miopy.engine.candidates import make_solution
from miopy.reference.common import rms_range, store_logical, view
from miopy.solvers import solvers_for
from miopy.tensor import from_storage


def random_buffers(problem, rng, low=-1.0, high=1.0) -> dict[str, np.ndarray]:
    out = {}
    for role, desc in problem.tensors().items():
        values = rng.uniform(low, high, desc.lens)
        if role in problem.outputs and role not in problem.inputs:
            values[...] = np.nan
        out[role] = store_logical(values, desc)
    return out


def run_all(handle, problem, ref, tol: float, buffers=None, rng=None, only=None) -> list[str]:
    """Every applicable solver (of those named in ``only``, if given) on copies of ``buffers``;
    returns the solvers that ran."""
    rng = rng or np.random.default_rng(0)
    base = buffers if buffers is not None else random_buffers(problem, rng)
    expected = ref.reference(problem, {r: b.copy() for r, b in base.items()})
    ran = []
    for solver in solvers_for(problem):
        if only is not None and solver.name not in only:
            continue
        if solver.is_applicable(handle, problem.solver_view()) is not None:
            continue
        bufs = {r: b.copy() for r, b in base.items()}
        make_solution(handle, problem, solver).run(handle, bufs)
        descs = problem.tensors()
        for role, want in expected.items():
            got = view(bufs[role], descs[role])
            if np.issubdtype(np.asarray(want).dtype, np.integer):
                assert np.array_equal(got, want), f"{solver.name} {problem.key()} {role}: indices differ"
                continue
            err = rms_range(from_storage(got, descs[role].dtype), want)
            assert err < tol, f"{solver.name} on {problem.key()}: {role} error {err} >= {tol}"
        ran.append(solver.name)
    assert ran, f"no solver ran {problem.key()}"
    return ran
