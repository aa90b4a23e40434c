"""What every functional call shares: the default handle of a device, the plan cache, and
running a plan on the caller's arrays.

A *plan* is a problem with its chosen solution and a compiled invoker. Plans are cached per handle
under a key made of the operation's name, its parameters, every operand's data type, lens and
strides, and the find settings in force (MIOPY_FIND_MODE, MIOPY_FIND_ENFORCE,
MIOPY_DEBUG_FIND_ONLY_SOLVER), so a second call with the same shapes builds no problem, runs no
find and compiles nothing. Which solution a plan gets follows the find mode, as
``miopy.find_solutions`` does: the find DB when it has a record, else a find.

A primitive's functional wrapper is one function: turn the arguments into Operands
(miopy.functional.arrays), give ``plan()`` a key and a way to build the problem, allocate the
outputs with ``arrays.empty`` and call ``run()``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from miopy import config, log
from miopy.errors import bad
from miopy.functional.arrays import HOST, Operand
from miopy.handle import Handle
from miopy.problem.base import Problem
from miopy.solution import Solution

_log = log.get("miopy.functional")

_local = threading.local()
_plans: weakref.WeakKeyDictionary[Handle, dict[tuple, Plan]] = weakref.WeakKeyDictionary()
_plans_lock = threading.Lock()
# How many plans were built (problem + find + compile), for tests and logs.
counters = {"plans": 0}


def default_handle(device: tuple[str, int] = HOST) -> Handle:
    """The calling thread's handle for ``device``: ("cuda", index) for CUDA arrays; ("host", 0)
    for host arrays, on the backend MIOPY_BACKEND picks (auto: CUDA when a GPU is usable, else
    OpenCL, i.e. PoCL on a CPU). Made on first use, kept for the thread's life."""
    handles = getattr(_local, "handles", None)
    if handles is None:
        handles = _local.handles = {}
    key = (device, config.backend() if device == HOST else "cuda")
    handle = handles.get(key)
    if handle is None:
        if device == HOST:
            handle = Handle()
        else:
            handle = Handle("cuda", device[1])
        handles[key] = handle
    return handle


def handle_for(operands: Iterable[Operand], handle: Handle | None) -> Handle:
    """The handle to run on: the caller's, else the default one of the operands' device (which
    must be one device)."""
    devices = {op.device for op in operands}
    if len(devices) > 1:
        raise bad("arrays", sorted(devices), "every array of one call must be on one device")
    if handle is not None:
        if not isinstance(handle, Handle):
            raise bad("handle", type(handle).__name__, "expected a miopy Handle")
        return handle
    return default_handle(devices.pop() if devices else HOST)


@dataclass(frozen=True)
class Plan:
    """A problem, its solution (compiled: its invoker is in the handle's cache) and the name of
    the operand each tensor role takes."""

    problem: Problem
    solution: Solution


def _find_settings() -> tuple:
    only = config.find_only_solvers()
    return (config.find_mode(), config.find_enforce(), tuple(only) if only else None)


def choose(handle: Handle, problem: Problem) -> Solution:
    """The solution find gives first, in the find mode in force."""
    from miopy.engine.find import find_solutions

    return find_solutions(handle, problem)[0]


def plan(handle: Handle, key: tuple, build: Callable[[], Problem]) -> Plan:
    """The cached plan under ``key`` (with the find settings added), else ``build()``'s problem
    with its chosen solution, compiled once."""
    full = (*key, _find_settings())
    with _plans_lock:
        plans = _plans.setdefault(handle, {})
        found = plans.get(full)
    if found is not None:
        return found
    problem = build()
    solution = choose(handle, problem)
    handle.prepare_invoker(solution)
    made = Plan(problem, solution)
    counters["plans"] += 1
    _log.info("plan: %s -> %s", problem.key(), solution.solver)
    with _plans_lock:
        plans[full] = made
    return made


def clear_plans(handle: Handle | None = None) -> None:
    """Forget cached plans (of one handle, or all); the next call finds again."""
    with _plans_lock:
        if handle is None:
            _plans.clear()
        else:
            _plans.pop(handle, None)


def run(
    handle: Handle,
    made: Plan,
    tensors: dict[str, Operand],
    scalars: dict | None = None,
    solution: Solution | None = None,
) -> None:
    """Run the plan's solution (or ``solution``, one derived from it: a fused epilogue) on the
    operands by role, on the handle's stream (the current PyTorch stream for CUDA tensors)."""
    args = {role: op.arg for role, op in tensors.items()}
    with _stream_of(handle, tensors.values()):
        handle.run_solution(solution or made.solution, args, None, scalars)


class _stream_of:
    """For CUDA tensors of PyTorch, enqueue on torch's current stream for the call."""

    def __init__(self, handle: Handle, operands: Iterable[Operand]):
        self.backend = handle.backend
        self.saved = None
        if self.backend.name != "cuda" or not any(op.kind == "torch" for op in operands):
            return
        import torch

        stream = torch.cuda.current_stream()
        if int(stream.cuda_stream) == 0:
            return  # the legacy default stream, which the backend uses unless told otherwise
        follow = getattr(self.backend, "set_stream", None)
        self.saved = getattr(self.backend, "stream", None)
        if follow is not None:
            self.restore = lambda: follow(self.saved)
            follow(stream)
        else:
            cp = __import__("cupy")
            self.restore = lambda: setattr(self.backend, "stream", self.saved)
            self.backend.stream = cp.cuda.ExternalStream(int(stream.cuda_stream), self.backend.device_id)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            self.restore()


__all__ = ["Plan", "clear_plans", "counters", "default_handle", "handle_for", "plan", "run"]
