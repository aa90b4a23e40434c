"""What a solver hands back: kernels to build (data), a workspace size, and an invoker factory."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from miopy.backends.base import Backend
    from miopy.handle import Handle
    from miopy.problem.conv import ConvProblem


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
        return [f"-D{k}={v}" for k, v in self.defines]


@dataclass
class CompiledKernel:
    spec: KernelSpec
    kernel: Any  # the backend's launchable object

    def launch(self, backend: Backend, args: list[Any], global_size=None, local_size=None) -> None:
        backend.launch(
            self.kernel, global_size or self.spec.global_size, local_size or self.spec.local_size, args
        )


# invoker(args by conv-view role: {"x": buf, "w": buf, "y": buf}, workspace buffer or None)
Invoker = Callable[[dict[str, Any], Any], None]
InvokerFactory = Callable[["Backend", list[CompiledKernel]], Invoker]


@dataclass
class Solution:
    """A way to compute one problem. ``problem`` is the user's problem; solvers see its
    ``conv_view()``. ``time_ms`` is filled in by find (or the find DB)."""

    solver: str
    algorithm: str
    problem: ConvProblem
    kernels: list[KernelSpec]
    workspace: int
    invoker_factory: InvokerFactory
    config: dict[str, Any] | None = None
    time_ms: float | None = None
    dynamic: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def config_key(self) -> str:
        return json.dumps(self.config, sort_keys=True) if self.config else ""

    def run(self, handle: Handle, tensors: dict[str, Any], workspace: Any = None) -> None:
        """Run on ``tensors`` = {"x": .., "w": .., "y": ..} (NumPy arrays, device arrays or buffers)."""
        from miopy.engine.candidates import check_handle

        check_handle(handle).run_solution(self, tensors, workspace)

    def __repr__(self) -> str:
        t = f", {self.time_ms:.4f} ms" if self.time_ms is not None else ""
        cfg = f", config={self.config}" if self.config else ""
        return f"Solution({self.solver}, {self.algorithm}, workspace={self.workspace}{t}{cfg})"
