"""The one invoker: runs any Program on a backend, given InvokeArgs (MIOpen's Invoker, without a
hand-written closure per solver)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from miopy.errors import BadParm
from miopy.solution import Call, Gemm, InvokeArgs, KernelSpec, Launch, Program, Scalar, Tensor, Workspace


def _resolve(arg: Any, args: InvokeArgs, backend: Any = None) -> Any:
    if isinstance(arg, Tensor):
        try:
            return args.tensors[arg.role]
        except KeyError:
            raise BadParm(f"tensors: missing {arg.role!r}, which the solution uses") from None
    if isinstance(arg, Workspace):
        if arg.offset:
            return backend.buffer_at(args.workspace, arg.offset)
        return args.workspace
    if isinstance(arg, Scalar):
        value = args.scalars.get(arg.name, arg.default)
        return np.dtype(arg.dtype).type(value)
    return arg


_REFS = (Tensor, Workspace, Scalar)


def _slots(args: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(i for i, a in enumerate(args) if isinstance(a, _REFS))


def step_plan(program: Program) -> tuple[tuple[Any, ...], ...]:
    """What an invoker resolves from the program alone, per step: (step type, the spec, Gemm or
    Call, the argument template, the positions of its Tensor / Workspace / Scalar arguments, the
    launch geometry, shared memory, cooperative); worked out once per Program object and kept on
    it (not a field: equality ignores it), so that a package's decoded programs have it made on
    the handle's set-up thread (``PackageChoices.read_ahead``) rather than at their first run."""
    plan = program.__dict__.get("_step_plan")
    if plan is not None:
        return plan
    out = []
    for step in program.steps:
        if isinstance(step, Launch):
            out.append(
                (
                    Launch,
                    step.spec,
                    step.args,
                    _slots(step.args),
                    step.global_size or step.spec.global_size,
                    step.local_size or step.spec.local_size,
                    int(step.shared_mem),
                    bool(step.cooperative),
                )
            )
        elif isinstance(step, Gemm):
            out.append((Gemm, step, step, (), (), (), 0, False))
        elif isinstance(step, Call):
            out.append((Call, step, step.args, _slots(step.args), (), (), 0, False))
        else:
            raise BadParm(f"step={type(step).__name__}: not a Launch, a Gemm or a Call")
    plan = tuple(out)
    object.__setattr__(program, "_step_plan", plan)
    return plan


class ProgramInvoker:
    """``invoker(InvokeArgs)`` runs the program's steps in order on ``backend`` (enqueued only:
    the caller synchronises). Everything that does not depend on the call's buffers and scalars
    is resolved once, here."""

    def __init__(self, backend: Any, program: Program, kernels: Mapping[KernelSpec, Any]):
        self.backend = backend
        self.program = program
        self.kernels = kernels
        self._launches: list[tuple[Any, Any, Any, tuple[int, ...], tuple[int, ...], int, bool]] = [
            (kernels[what] if kind is Launch else None if kind is Gemm else what.method, *rest)
            for kind, what, *rest in step_plan(program)
        ]

    def on(self, backend: Any) -> ProgramInvoker:
        """The same invoker on another backend (e.g. a recorder of prepared calls): what was
        resolved once is shared, nothing is resolved again."""
        other = object.__new__(ProgramInvoker)
        other.backend, other.program, other.kernels = backend, self.program, self.kernels
        other._launches = self._launches
        return other

    def __call__(self, args: InvokeArgs) -> None:
        backend = self.backend
        for kernel, what, slots, global_size, local_size, shared_mem, cooperative in self._launches:
            if kernel is None:
                g: Gemm = what
                backend.gemm(
                    g.dtype,
                    g.trans_a,
                    g.trans_b,
                    g.m,
                    g.n,
                    g.k,
                    _resolve(g.a, args),
                    g.a_offset,
                    g.lda,
                    _resolve(g.b, args),
                    g.b_offset,
                    g.ldb,
                    _resolve(g.c, args),
                    g.c_offset,
                    g.ldc,
                    batch=g.batch,
                    stride_a=g.stride_a,
                    stride_b=g.stride_b,
                    stride_c=g.stride_c,
                )
                continue
            call_args = list(what)
            for i in slots:
                call_args[i] = _resolve(what[i], args, backend)
            if isinstance(kernel, str):  # a Call: the backend method's name
                getattr(backend, kernel)(*call_args)
            elif cooperative:
                backend.launch(
                    kernel, global_size, local_size, call_args, shared_mem=shared_mem, cooperative=True
                )
            elif shared_mem:
                backend.launch(kernel, global_size, local_size, call_args, shared_mem=shared_mem)
            else:
                backend.launch(kernel, global_size, local_size, call_args)


__all__ = ["ProgramInvoker", "step_plan"]
