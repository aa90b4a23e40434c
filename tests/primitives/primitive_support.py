"""Running activation and pooling solutions on a handle and checking them against the NumPy
references: random inputs, outputs pre-filled with NaN so that unwritten elements show."""

from __future__ import annotations

import numpy as np

from miopy.problem.activation import ActivationProblem
from miopy.problem.passes import Pass
from miopy.problem.pooling import IndexDesc, PoolingProblem
from miopy.reference.activ import activ_reference
from miopy.reference.common import store_logical, view
from miopy.reference.pool import pool_forward, pool_reference
from miopy.tensor import from_storage

# |got - want| <= TOL * max(1, |want|): fp32 transcendentals are within a few ulps
TOL = {"FP32": 2e-5, "FP16": 2e-3, "BF16": 1.6e-2}


def run(handle, solution, host: dict[str, np.ndarray]) -> None:
    """Run on the ``host`` buffers; the outputs are written back into them."""
    solution.run(handle, host)


def logical(problem, role: str, flat: np.ndarray) -> np.ndarray:
    desc = problem.tensors()[role]
    if isinstance(desc, IndexDesc):
        return view(flat, desc).astype(np.int64)
    return from_storage(view(flat, desc), desc.dtype).astype(np.float64)


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, what: str) -> None:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    assert np.all(np.isfinite(got)), f"{what}: non-finite output (unwritten elements?)"
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    worst = np.unravel_index(np.argmax(err), err.shape)
    assert err[worst] <= TOL[dtype], f"{what}: error {err[worst]} at {worst}: {got[worst]} vs {want[worst]}"


def activ_inputs(problem: ActivationProblem, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Stored buffers: inputs random, outputs NaN. Backward's y is f(x) as a forward pass left it."""
    from miopy.reference.activ import activ_forward

    shape = problem.lens
    x = rng.uniform(-2, 2, shape)
    values = {"x": x, "y": activ_forward(problem.desc, x), "dy": rng.uniform(-0.5, 0.5, shape)}
    out = {}
    for role, desc in problem.tensors().items():
        if role in problem.outputs:
            out[role] = store_logical(np.full(shape, np.nan), desc)
        else:
            out[role] = store_logical(values[role], desc)
    return out


def check_activ(handle, solution, rng: np.random.Generator) -> None:
    problem = solution.problem
    host = activ_inputs(problem, rng)
    given = {r: logical(problem, r, host[r]) for r in problem.tensors() if r not in problem.outputs}
    want = activ_reference(problem, given)
    run(handle, solution, host)
    (out,) = problem.outputs
    assert_close(logical(problem, out, host[out]), want, problem.dtype.value, f"{solution.solver} {problem}")


def pool_inputs(problem: PoolingProblem, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Stored buffers. Backward gets the index the reference forward pass computes."""
    t = problem.tensors()
    out = {}
    if problem.direction is Pass.FORWARD:
        out["x"] = store_logical(rng.uniform(0, 1, problem.x.lens), problem.x)
        out["y"] = store_logical(np.full(problem.y.lens, np.nan), problem.y)
        if "index" in t:
            out["index"] = np.full(t["index"].element_space, 77, t["index"].index_type.numpy)
        return out
    out["dy"] = store_logical(rng.uniform(-0.5, 0.5, problem.y.lens), problem.y)
    out["dx"] = store_logical(np.full(problem.x.lens, np.nan), problem.x)
    if "index" in t:
        fwd = PoolingProblem(problem.desc, problem.x, problem.y, "F")
        _, index = pool_forward(fwd, rng.uniform(0, 1, problem.x.lens))
        flat = np.zeros(t["index"].element_space, t["index"].index_type.numpy)
        view(flat, t["index"])[...] = index
        out["index"] = flat
    return out


def check_pool(handle, solution, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Run and compare every output (the index exactly); returns the outputs in logical shape."""
    problem = solution.problem
    host = pool_inputs(problem, rng)
    given = {r: logical(problem, r, host[r]) for r in problem.inputs}
    want = pool_reference(problem, given)
    run(handle, solution, host)
    got = {r: logical(problem, r, host[r]) for r in problem.outputs}
    for role in problem.outputs:
        what = f"{solution.solver} {problem} {role}"
        if role == "index":
            mismatch = np.argwhere(got[role] != want[role])
            assert mismatch.size == 0, f"{what}: {len(mismatch)} differ, first at {tuple(mismatch[0])}"
        else:
            assert_close(got[role], want[role], problem.dtype.value, what)
    return got
