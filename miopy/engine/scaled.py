"""Convolution alpha / beta (MIOpen's conv scaling): out = alpha * conv(...) + beta * out, for
every solver of every direction (forward y, backward data dx, backward weights dw).

MIOpen classifies a call's (alpha, beta) as DEFAULT (1, 0), SCALE (beta 0) or BILINEAR. No conv
solver of miopy reads them: DEFAULT runs the solution as it is (no extra cost), and the others
wrap it with one elementwise tensor operation (miopy's TensorOp solvers), chosen in immediate
mode and cached per handle like any other choice:

- SCALE: the solution writes the output, then out = alpha * out in place (TensorOp SCALE);
- BILINEAR: the solution writes a temporary of the output's descriptor, then
  out = alpha * tmp + beta * out (TensorOp ADD with b's factor 0).

The choice of the conv solver does not depend on alpha / beta, so problem keys, the find DB and
the perf DB are the same for every (alpha, beta).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from miopy.errors import bad
from miopy.problem.keys import finite


def conv_scaling(scalars: Mapping[str, Any]) -> tuple[float, float]:
    """(alpha, beta) of a conv call's scalars (defaults 1 and 0); BadParm naming the field when
    one is not a finite number."""
    if not isinstance(scalars, Mapping):
        raise bad("scalars", type(scalars).__name__, "expected a dict of numbers by name")
    return finite("alpha", scalars.get("alpha", 1.0)), finite("beta", scalars.get("beta", 0.0))


def run_scaled(handle: Any, solution: Any, tensors: dict, workspace: Any, alpha: float, beta: float) -> None:
    """Run the conv ``solution`` with out = alpha * result + beta * out (see the module)."""
    from miopy.engine.find import get_solutions
    from miopy.problem.tensorop import TensorOp, TensorOpProblem

    problem = solution.problem
    role = problem.output_role
    desc = problem.tensors()[role]
    if role not in tensors or tensors[role] is None:
        raise bad("tensors", f"missing {role!r}", f"the convolution writes {role}")
    if beta == 0.0:
        handle.run_solution(solution, tensors, workspace)
        scale = TensorOpProblem(TensorOp.SCALE, y=desc, value=alpha)
        handle.run_solution(get_solutions(handle, scale)[0], {"y": tensors[role]})
        return
    backend = handle.backend
    owner = backend.alloc(desc.nbytes)
    tmp = backend.wrap(owner)  # a plain buffer (CUDA: the allocation's pointer)
    inner = dict(tensors)
    inner[role] = tmp
    handle.run_solution(solution, inner, workspace)
    blend = TensorOpProblem(TensorOp.ADD, a=desc, b=desc, c=desc, alpha1=alpha, alpha2=0.0, beta=beta)
    handle.run_solution(get_solutions(handle, blend)[0], {"a": tmp, "b": tmp, "c": tensors[role]})
    del owner  # freed as the handle frees a workspace it allocated for one call


__all__ = ["conv_scaling", "run_scaled"]
