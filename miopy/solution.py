"""What a solver describes and the engine hands back: data only, no code.

A solver's work is a ``Program``: an ordered list of steps, each a kernel launch (``Launch``)
whose arguments name tensors by role (``Tensor``), the workspace (``Workspace``), run-time
scalars (``Scalar``) or are plain values (shape numbers, offsets: NumPy scalars), or a library
call (``Gemm``: the backend's vendor GEMM). One generic invoker (miopy/invoker.py) runs any
program with ``InvokeArgs``: tensors by role, a workspace, and scalars by name (alpha, beta,
gamma, epsilon, momentum...). A multi-step solution (transform, GEMM, transform; statistics then
normalise) is just a longer list, and fusing means joining lists.

The engine wraps a program into a ``Solution`` once (solver, config, problem, roles mapped from
the solver's view to the user's problem) and never changes it afterwards; find returns copies
with their time.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from miopy.errors import BadParm

if TYPE_CHECKING:
    from miopy.problem.base import Problem


@dataclass(frozen=True)
class KernelSpec:
    """One kernel to build: source file (no extension: the backend picks its own), kernel name,
    compile-time defines and launch geometry (OpenCL semantics: total work items)."""

    file: str
    name: str
    defines: tuple[tuple[str, Any], ...] = ()
    global_size: tuple[int, ...] = (1,)
    local_size: tuple[int, ...] = (1,)

    def __init__(
        self, file: str, name: str, defines: dict[str, Any] | None = None, global_size=(1,), local_size=(1,)
    ):
        object.__setattr__(self, "file", file)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "defines", tuple(sorted((defines or {}).items())))
        object.__setattr__(self, "global_size", tuple(int(v) for v in global_size))
        object.__setattr__(self, "local_size", tuple(int(v) for v in local_size))

    def options(self) -> list[str]:
        return list(self.option_tuple())

    def option_tuple(self) -> tuple[str, ...]:
        """``options()`` as a tuple, worked out once per spec and kept on it (not a field)."""
        found = self.__dict__.get("_options")
        if found is None:
            found = tuple(f"-D{k}={v}" for k, v in self.defines)
            object.__setattr__(self, "_options", found)
        return found


# ---- arguments of a step -------------------------------------------------------------------------
@dataclass(frozen=True)
class Tensor:
    """The buffer of a tensor, by role ("x", "w", "y", "dy", ...)."""

    role: str


@dataclass(frozen=True)
class Workspace:
    """The solution's workspace buffer (offsets into it are plain arguments beside it: OpenCL
    sub-buffers must be aligned, so kernels take element offsets). A non-zero ``offset`` (bytes)
    passes the buffer from there on instead (``Backend.buffer_at``; CUDA only), so that a kernel
    written for whole tensors can read or write one part of the workspace."""

    offset: int = 0


@dataclass(frozen=True)
class Scalar:
    """A run-time scalar by name (alpha, beta, gamma, epsilon, momentum...), passed as ``dtype``;
    ``default`` when the caller gives none."""

    name: str
    dtype: str = "float32"
    default: float = 0.0


# ---- steps ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Launch:
    """One kernel launch; ``global_size`` / ``local_size`` default to the spec's.
    ``shared_mem``: bytes of dynamic shared memory per block (CUDA; see Backend.launch).
    ``cooperative``: every block must be resident at once (the kernel meets itself at a grid-wide
    barrier): CUDA's cooperative launch, which the driver co-schedules or refuses with an error,
    where a plain launch of such a kernel could wait forever on a GPU shared with other work."""

    spec: KernelSpec
    args: tuple[Any, ...]
    global_size: tuple[int, ...] | None = None
    local_size: tuple[int, ...] | None = None
    shared_mem: int = 0
    cooperative: bool = False


@dataclass(frozen=True)
class Gemm:
    """A vendor GEMM (``Backend.gemm``), row-major: for each of ``batch`` matrices,
    C[m, n] = op(A)[m, k] @ op(B)[k, n]. Operands are Tensor or Workspace references; offsets,
    leading dimensions and batch strides are in elements of ``dtype`` (a miopy DataType)."""

    dtype: Any
    trans_a: bool
    trans_b: bool
    m: int
    n: int
    k: int
    a: Tensor | Workspace
    a_offset: int
    lda: int
    b: Tensor | Workspace
    b_offset: int
    ldb: int
    c: Tensor | Workspace
    c_offset: int
    ldc: int
    batch: int = 1
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0


@dataclass(frozen=True)
class Call:
    """A library call through the backend: ``backend.<method>(*args)``, with Tensor, Workspace and
    Scalar arguments resolved like a Launch's (e.g. a cuBLASLt product, ``lt_matmul``)."""

    method: str
    args: tuple[Any, ...]


Step = Launch | Gemm | Call


def _rename(arg: Any, roles: Mapping[str, str]) -> Any:
    return Tensor(roles.get(arg.role, arg.role)) if isinstance(arg, Tensor) else arg


@dataclass(frozen=True)
class Program:
    """A solution's work: ``steps`` run in order, with a workspace of ``workspace`` bytes.
    ``notes`` are facts about it for callers (e.g. {"vendor_gemm": True}), never read by the
    invoker."""

    steps: tuple[Step, ...]
    workspace: int = 0
    notes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "steps", tuple(self.steps))

    @property
    def kernels(self) -> list[KernelSpec]:
        """Every kernel the program launches, once each, in order of first use (worked out once
        per Program object and kept on it; not a field)."""
        found = self.__dict__.get("_kernels")
        if found is None:
            out: list[KernelSpec] = []
            for step in self.steps:
                if isinstance(step, Launch) and step.spec not in out:
                    out.append(step.spec)
            found = tuple(out)
            object.__setattr__(self, "_kernels", found)
        return list(found)

    def with_roles(self, roles: Mapping[str, str]) -> Program:
        """The same program with tensor roles renamed (a solver's view -> the user's problem)."""
        if all(k == v for k, v in roles.items()):
            return self
        steps: list[Step] = []
        for step in self.steps:
            if isinstance(step, (Launch, Call)):
                steps.append(dataclasses.replace(step, args=tuple(_rename(a, roles) for a in step.args)))
            else:
                steps.append(
                    dataclasses.replace(
                        step, a=_rename(step.a, roles), b=_rename(step.b, roles), c=_rename(step.c, roles)
                    )
                )
        return dataclasses.replace(self, steps=tuple(steps))


@dataclass(frozen=True)
class InvokeArgs:
    """What an invoker runs on: device buffers by role, the workspace, scalars by name."""

    tensors: Mapping[str, Any]
    workspace: Any = None
    scalars: Mapping[str, float] = field(default_factory=dict)


# ---- solutions -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Solution:
    """A way to compute one problem, built once by the engine. ``problem`` is the user's problem
    and ``program`` uses its roles. ``time_ms`` comes from find (or the find DB)."""

    solver: str
    solver_id: int | None
    algorithm: str
    problem: Problem
    program: Program
    config: Mapping[str, Any] | None = None
    dynamic: bool = False
    time_ms: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def deferred(cls, build: Callable[[], Program], **fields: Any) -> Solution:
        """A solution whose ``program`` (and ``extra``, its notes) ``build()`` makes at their first
        use: reading ``program``, ``workspace``, ``kernels`` or ``extra``, comparing, copying,
        running. Every other field is given now. Immediate mode hands these out for every ranked
        solution but the first, which is all a first iteration runs; the result is the same
        Solution as one built at once (an error of the build is raised at that first use)."""
        solution = object.__new__(cls)
        for name, value in fields.items():
            object.__setattr__(solution, name, value)
        object.__setattr__(solution, "_build", build)
        return solution

    def __getattr__(self, name: str) -> Any:
        # Only reached when an attribute is missing: a deferred solution's program and extra.
        build = self.__dict__.get("_build") if name in ("program", "extra") else None
        if build is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        program = build()
        object.__setattr__(self, "program", program)
        object.__setattr__(self, "extra", dict(program.notes))
        self.__dict__.pop("_build", None)
        return self.__dict__[name]

    @property
    def built(self) -> bool:
        """False while a deferred solution's program is not made yet."""
        return "program" in self.__dict__

    @property
    def primitive(self) -> str:
        return self.problem.primitive

    @property
    def workspace(self) -> int:
        return self.program.workspace

    @property
    def kernels(self) -> list[KernelSpec]:
        return self.program.kernels

    def config_key(self) -> str:
        return json.dumps(self.config, sort_keys=True) if self.config else ""

    def with_time(self, time_ms: float | None) -> Solution:
        return dataclasses.replace(self, time_ms=time_ms)

    def run(
        self,
        handle: Any,
        tensors: dict[str, Any],
        workspace: Any = None,
        scalars: Mapping[str, float] | None = None,
    ) -> None:
        """Run on ``tensors`` by role (NumPy arrays, device arrays or buffers); NumPy outputs are
        written back. ``scalars`` are run-time numbers by name; a convolution takes "alpha" and
        "beta" (MIOpen's conv scaling, defaults 1 and 0): its output (y forward, x backward data,
        w backward weights) becomes alpha * result + beta * output, and a non-finite one is a
        BadParm naming it."""
        run = getattr(handle, "run_solution", None)
        if run is None:
            raise BadParm(f"handle={type(handle).__name__}: expected a miopy Handle")
        run(self, tensors, workspace, scalars)

    def __repr__(self) -> str:
        t = f", {self.time_ms:.4f} ms" if self.time_ms is not None else ""
        cfg = f", config={dict(self.config)}" if self.config else ""
        return f"Solution({self.solver}, {self.algorithm}, workspace={self.workspace}{t}{cfg})"


__all__ = [
    "Call",
    "Gemm",
    "InvokeArgs",
    "KernelSpec",
    "Launch",
    "Program",
    "Scalar",
    "Solution",
    "Step",
    "Tensor",
    "Workspace",
]
