"""Every solver of every primitive in the registry against its NumPy reference, on every available
backend. A primitive brings ``miopy.reference.<primitive>`` with ``samples()`` (problems that,
together, every one of its solvers takes) and ``reference(problem, buffers)``; a new registry line
is then covered here without a new test. A primitive whose tensors are not all random floats (e.g.
pooling's index) adds ``random_buffers(problem, rng)`` and ``read_output(problem, role, buffer)``;
integer outputs must match exactly."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from miopy import backends
from miopy.engine.candidates import make_solution
from miopy.reference.common import rms_range, store_logical, view
from miopy.reference.tolerance import BASE
from miopy.solvers import SOLVERS
from miopy.tensor import from_storage

BACKENDS = [name for name in ("opencl", "cuda") if backends.unavailable_reason(name) is None]


@pytest.fixture(scope="module", params=BACKENDS or [pytest.param("none", marks=pytest.mark.skip)])
def handle(request, ocl):
    if request.param == "opencl":
        return ocl
    from miopy.handle import Handle

    return Handle(request.param)


def _tolerance(problem, solution) -> float:
    """The shared rule (miopy.reference.tolerance) where it knows the primitive, else its base."""
    if problem.primitive == "conv":
        from miopy.reference.tolerance import tolerance

        return tolerance(problem, solution)
    return BASE[problem.dtype] * float(solution.extra.get("tolerance_factor", 1.0))


def _random_buffers(problem, rng) -> dict[str, np.ndarray]:
    """Stored buffers for every tensor; outputs that are not also inputs start as NaN."""
    out = {}
    for role, desc in problem.tensors().items():
        values = rng.uniform(-1, 1, desc.lens).astype(np.float32)
        if role in problem.outputs and role not in problem.inputs:
            values[...] = np.nan
        out[role] = store_logical(values, desc)
    return out


# The default walk runs each solver on the first of its primitive's samples that it takes (every
# solver runs once, one test each, so that pytest-xdist spreads them over its workers): on PoCL
# every (sample, solver) pair compiles its own kernel, and the whole cross product was a fifth of
# the suite's CPU time with a cold PoCL cache. The slow test below walks all of it.
SOLVER_IDS = [(primitive, solver.name) for primitive in sorted(SOLVERS) for solver in SOLVERS[primitive]]


@pytest.mark.parametrize("primitive, solver", SOLVER_IDS, ids=[f"{p}-{s}" for p, s in SOLVER_IDS])
def test_every_solver_against_its_reference(handle, primitive, solver):
    _walk(handle, primitive, most=1, only=solver)


@pytest.mark.slow
@pytest.mark.parametrize("primitive", sorted(SOLVERS))
def test_every_solver_on_every_sample(handle, primitive):
    _walk(handle, primitive, most=None)


def _walk(handle, primitive: str, most: int | None, only: str | None = None) -> None:
    ref = importlib.import_module(f"miopy.reference.{primitive}")
    problems = ref.samples()
    assert all(p.primitive == primitive for p in problems)
    rng = np.random.default_rng(11)
    make_buffers = getattr(ref, "random_buffers", _random_buffers)
    read = getattr(ref, "read_output", None)
    ran: dict[str, int] = {}
    refused: dict[str, set[str]] = {}
    for problem in problems:
        view_ = problem.solver_view()
        for solver in SOLVERS[primitive]:
            if only is not None and solver.name != only:
                continue
            if most is not None and ran.get(solver.name, 0) >= most:
                continue
            reason = solver.is_applicable(handle, view_)
            if reason is not None:
                refused.setdefault(solver.name, set()).add(reason)
                continue
            solution = make_solution(handle, problem, solver)
            bufs = make_buffers(problem, rng)
            expected = ref.reference(problem, bufs)
            assert set(expected) == set(problem.outputs)
            solution.run(handle, bufs)
            descs = problem.tensors()
            for role, want in expected.items():
                if read is not None:
                    got = read(problem, role, bufs[role])
                else:
                    got = from_storage(view(bufs[role], descs[role]), descs[role].dtype)
                if np.issubdtype(np.asarray(want).dtype, np.integer):
                    differ = int(np.count_nonzero(np.asarray(got) != want))
                    assert differ == 0, f"{solver.name} on {problem.key()}: {differ} of {role} differ"
                    continue
                err = rms_range(got, want)
                tol = _tolerance(problem, solution)
                assert err < tol, f"{solver.name} on {problem.key()} ({handle.backend_name}): {role} {err}"
            ran[solver.name] = ran.get(solver.name, 0) + 1
    # a solver may refuse a whole backend (e.g. CUDA-only tensor-core kernels); any other solver
    # that no sample reaches is a hole in samples()
    missing = {
        s.name: sorted(refused.get(s.name, ()))
        for s in SOLVERS[primitive]
        if (only is None or s.name == only)
        and s.name not in ran
        and not all(r.startswith("backend ") for r in refused.get(s.name, {""}))
    }
    assert not missing, f"no sample of miopy.reference.{primitive}.samples() runs {missing}"
    if only is not None and not ran:
        pytest.skip(f"{only} refuses the {handle.backend_name} backend: {sorted(refused.get(only, ()))}")
