"""Convolution alpha / beta (MIOpen's conv scaling): out = alpha * conv(...) + beta * out, for
every solver of every direction (forward y, backward data dx, backward weights dw).

MIOpen classifies a call's (alpha, beta) as DEFAULT (1, 0), SCALE (beta 0) or BILINEAR. DEFAULT
runs the solution as it is (no extra cost). Where the solution's solver has a fused epilogue
(``epilogue_files``, miopy.solvers.conv.epilogue: the implicit-GEMM kernels), SCALE and BILINEAR
run the same kernels built with it: they write alpha * result + beta * out themselves (beta 0
never reads out), at no extra launch or pass over memory; ``fused_solution`` makes that
solution once per handle. Every other solver is wrapped with one elementwise tensor operation
(miopy's TensorOp solvers, the packed one where it applies), its solution cached per handle:

- SCALE: the solution writes the output, then out = alpha * out in place (TensorOp SCALE);
- BILINEAR: the solution writes a temporary of the output's descriptor, then
  out = alpha * tmp + beta * out (TensorOp ADD whose b is one zero broadcast over the output,
  its factor 0: 0 * 0 adds nothing, so a conv result of +-inf stays +-inf).

The choice of the conv solver does not depend on alpha / beta, so problem keys, the find DB and
the perf DB are the same for every (alpha, beta). ``Handle.run_solution`` calls ``scale_conv``
for a conv solution given scalars (registered below, when the solver registry loads).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from miopy.errors import bad
from miopy.handle import Handle, register_output_scaling
from miopy.problem.keys import finite
from miopy.problem.tensorop import TensorOp, TensorOpProblem
from miopy.solution import Solution
from miopy.solvers.conv.epilogue import Epilogue, fused_program, scalars, supports
from miopy.solvers.tensorop.elementwise import TensorOpPacked, TensorOpStrided
from miopy.tensor import TensorDesc

_solutions: weakref.WeakKeyDictionary[Handle, dict[TensorOpProblem, Solution]] = weakref.WeakKeyDictionary()
_fused: weakref.WeakKeyDictionary[Handle, dict[tuple, Solution | None]] = weakref.WeakKeyDictionary()
# the registry's lookup of a solver by name and primitive (miopy.solvers.by_name), handed over by
# the registry when it loads: it imports this module, so this module cannot import it
_solver_named: list[Callable[[str, str], Any]] = []
_zeros: weakref.WeakKeyDictionary[Handle, dict[Any, tuple[Any, Any]]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _zero(handle: Handle, desc: TensorDesc) -> tuple[TensorDesc, Any]:
    """A one-element tensor broadcast over ``desc`` (every length 1) holding 0, and its buffer,
    made once per handle and data type."""
    one = TensorDesc(desc.dtype, (1,) * len(desc.lens))
    with _lock:
        found = _zeros.setdefault(handle, {}).get(desc.dtype)
    if found is None:
        owner = handle.backend.upload(np.zeros(64, dtype=np.uint8))  # 0 in every data type
        found = (owner, handle.backend.wrap(owner))
        with _lock:
            _zeros[handle][desc.dtype] = found
    return one, found[1]


def conv_scaling(scalars: Mapping[str, Any]) -> tuple[float, float]:
    """(alpha, beta) of a conv call's scalars (defaults 1 and 0); BadParm naming the field when
    one is not a finite number."""
    if not isinstance(scalars, Mapping):
        raise bad("scalars", type(scalars).__name__, "expected a dict of numbers by name")
    return finite("alpha", scalars.get("alpha", 1.0)), finite("beta", scalars.get("beta", 0.0))


def _tensorop(handle: Handle, problem: TensorOpProblem) -> Solution:
    """The TensorOp solution of ``problem`` on ``handle`` (packed where it applies), made once."""
    with _lock:
        found = _solutions.setdefault(handle, {}).get(problem)
    if found is not None:
        return found
    packed = TensorOpPacked()
    solver = packed if packed.is_applicable(handle, problem) is None else TensorOpStrided()
    program = solver.get_program(handle, problem)
    found = Solution(solver.name, solver.id, solver.algorithm, problem, program, extra=dict(program.notes))
    with _lock:
        _solutions[handle][problem] = found
    return found


def fused_solution(handle: Handle, solution: Solution, epilogue: Epilogue | None = None) -> Solution | None:
    """The conv ``solution`` with ``epilogue`` (default: alpha / beta alone) fused into its
    kernels: the same solver, config and problem, its program built with the epilogue (run with
    the scalars of ``miopy.solvers.conv.epilogue.scalars`` and, with a bias, the tensor "bias").
    None where the solver has no such epilogue. Made once per handle."""
    epilogue = epilogue or Epilogue()
    solver = _solver_named[0](solution.solver, solution.problem.primitive) if _solver_named else None
    if solver is None or not supports(solver, epilogue):
        return None
    key = (solution.solver, solution.problem, solution.config_key(), epilogue)
    with _lock:
        cache = _fused.setdefault(handle, {})
        if key in cache:
            return cache[key]
    problem = solution.problem
    program = fused_program(solver, handle, problem.solver_view(), solution.config, epilogue)
    program = program.with_roles(problem.view_roles())
    found = Solution(
        solution.solver,
        solution.solver_id,
        solution.algorithm,
        problem,
        program,
        config=solution.config,
        dynamic=solution.dynamic,
        time_ms=solution.time_ms,
        extra=dict(program.notes),
    )
    with _lock:
        _fused[handle][key] = found
    return found


def use_registry(lookup: Callable[[str, str], Any]) -> None:
    """The solver registry's ``by_name`` (it calls this as it loads)."""
    _solver_named[:] = [lookup]


def run_scaled(
    handle: Handle,
    solution: Solution,
    tensors: dict,
    workspace: Any,
    alpha: float,
    beta: float,
    fuse: bool = True,
) -> None:
    """Run the conv ``solution`` with out = alpha * result + beta * out (see the module); with
    ``fuse`` False always the generic way (to compare the two)."""
    problem = solution.problem
    role = problem.output_role
    desc = problem.tensors()[role]
    if tensors.get(role) is None:
        raise bad("tensors", f"missing {role!r}", f"the convolution writes {role}")
    fused = fused_solution(handle, solution) if fuse else None
    if fused is not None:
        handle.run_solution(fused, tensors, workspace, scalars(alpha, beta))
        return
    if beta == 0.0:
        handle.run_solution(solution, tensors, workspace)
        scale = TensorOpProblem(TensorOp.SCALE, y=desc, value=alpha)
        handle.run_solution(_tensorop(handle, scale), {"y": tensors[role]})
        return
    backend = handle.backend
    owner = backend.alloc(desc.nbytes)
    tmp = backend.wrap(owner)  # a plain buffer of bytes
    inner = dict(tensors)
    inner[role] = tmp
    handle.run_solution(solution, inner, workspace)
    zero_desc, zero = _zero(handle, desc)
    blend = TensorOpProblem(TensorOp.ADD, a=desc, b=zero_desc, c=desc, alpha1=alpha, alpha2=0.0, beta=beta)
    handle.run_solution(_tensorop(handle, blend), {"a": tmp, "b": zero, "c": tensors[role]})
    del owner  # freed as the handle frees a workspace it allocated for one call


def scale_conv(handle: Handle, solution: Solution, tensors: Any, workspace: Any, scalars: Any) -> bool:
    """``Handle.run_solution``'s hook: True when it ran the call with a non-default scaling."""
    alpha, beta = conv_scaling(scalars)
    if alpha == 1.0 and beta == 0.0:
        return False
    if not isinstance(tensors, dict):
        raise bad("tensors", type(tensors).__name__, "expected a dict of arrays by role")
    run_scaled(handle, solution, tensors, workspace, alpha, beta)
    return True


register_output_scaling("conv", scale_conv)

__all__ = ["conv_scaling", "fused_solution", "run_scaled", "scale_conv", "use_registry"]
