"""Before any kernel launches: every tensor a kernel touches lies inside its buffer.

``required_bytes`` lists, per tensor role of the problem and for the workspace ("ws"), how many
bytes of the buffer the solution's kernels may touch: the descriptor's element space (its lens,
strides and offsets) and every region a solver declares in ``solution.extra["regions"]``
(``(role in the solver's view, end in elements, itemsize)``, e.g. a GEMM operand with its offset,
batch and row/column strides). A region that leaves its tensor or the workspace is a solver bug:
InternalError, before anything runs.

``CheckedInvoker`` wraps an invoker with the sizes it was built for, and checks each buffer it is
handed on every call. Whatever path reaches a kernel (run, find's timing, a stale cache entry),
a buffer smaller than what the kernels were compiled or bound for is refused, never overrun.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from miopy.errors import BadParm, InternalError
from miopy.solution import InvokeArgs


def required_bytes(solution: Any) -> dict[str, int]:
    """Bytes touched per role of the user's problem and workspace; InternalError if a region
    leaves its buffer."""
    problem = solution.problem
    descs = problem.solver_view().tensors()
    need = {role: desc.nbytes for role, desc in descs.items()}
    need["ws"] = int(solution.workspace or 0)
    for role, end, itemsize in solution.extra.get("regions", ()):
        touched = int(end) * int(itemsize)
        if touched > need[role]:
            what = "the workspace" if role == "ws" else f"tensor {role}"
            raise InternalError(
                f"{solution.solver}: a kernel would touch {touched} bytes of {what}, which holds "
                f"{need[role]} bytes ({problem.key()})"
            )
    to_user = problem.view_roles()
    out = {to_user.get(role, role): size for role, size in need.items()}
    out.update(solution.extra.get("extra_tensors") or {})  # e.g. a fused epilogue's bias
    return out


class CheckedInvoker:
    """An invoker that refuses buffers smaller than what its kernels were built for."""

    def __init__(self, invoker: Callable[[InvokeArgs], None], need: dict[str, int], backend: Any):
        self.invoker = invoker
        self.need = dict(need)
        self.backend = backend

    def check(self, args: InvokeArgs) -> None:
        for role, size in self.need.items():
            if size <= 0:
                continue
            buf = args.workspace if role == "ws" else args.tensors.get(role)
            name = "workspace" if role == "ws" else role
            if buf is None:
                raise BadParm(f"{name}=None: the kernels need a buffer of {size} bytes")
            have = self.backend.nbytes(buf)
            if have < size:
                raise BadParm(f"{name}=buffer of {have} bytes: the kernels touch {size} bytes")

    def __call__(self, args: InvokeArgs) -> None:
        self.check(args)
        self.invoker(args)


__all__ = ["CheckedInvoker", "required_bytes"]
