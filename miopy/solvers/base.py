"""The solver contract (MIOpen's SolverBase / SolverBaseTunable), for every primitive."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from miopy.handle import Handle
    from miopy.problem.base import Problem
    from miopy.solution import KernelSpec, Program

# Algorithm families and MIOpen's miopenConvAlgorithm_t numbers for them.
ALGORITHM_IDS = {"gemm": 0, "direct": 1, "fft": 2, "winograd": 3, "implicit_gemm": 5}


class Solver:
    """Stateless. ``name`` is a DB key and never changes. Solvers see ``problem.solver_view()``
    (convolution: mode is always conv, pads are resolved) and describe their work as a Program
    on the view's roles; the engine makes the Solution."""

    primitive: ClassVar[str]  # the key of its list in miopy.solvers.SOLVERS
    name: ClassVar[str]
    id: ClassVar[int]  # stable number for the driver's -S (MIOpen's where a counterpart exists)
    algorithm: ClassVar[str]
    dynamic: ClassVar[bool] = False  # shapes are run-time arguments: no compile per shape
    tunable: ClassVar[bool] = False
    # Largest element count any tensor or the workspace may span: kernels that index with 32-bit
    # integers set 2**31 - 1, so a problem past it goes to another solver instead of wrapping
    # an index (and writing outside a buffer). None: no such limit.
    max_elements: ClassVar[int | None] = None
    # A fused conv epilogue (miopy.solvers.conv.epilogue): the kernel files whose kernels take
    # its arguments and make every write of the output (none: the solver has no fused epilogue),
    # and whether a per-output-channel bias applies (forward).
    epilogue_files: ClassVar[frozenset[str]] = frozenset()
    epilogue_bias: ClassVar[bool] = False

    def is_applicable(self, ctx: Handle, problem: Problem) -> str | None:
        """None when applicable, else the reason it is not (logged at debug level)."""
        raise NotImplementedError

    def is_applicable_with(self, ctx: Handle, problem: Problem, config: Any) -> str | None:
        """``is_applicable`` when the engine already holds the config it means to run (a kernel
        package's choice, a find record): the same answer, which a solver may reach more cheaply
        through the config. The cuBLASLt solvers do: a config naming an algorithm that
        cublasLtMatmulAlgoCheck accepts shows that the library has one, all that their heuristics
        query would tell. An invalid config proves nothing: then ``is_applicable`` answers."""
        return self.is_applicable(ctx, problem)

    def applicability(self, ctx: Handle, problem: Problem, config: Any = None) -> str | None:
        """What the engine asks: ``is_applicable`` (``is_applicable_with`` when it holds a
        ``config`` for a tunable solver) plus the solver's index limit."""
        if config is not None and self.tunable:
            reason = self.is_applicable_with(ctx, problem, config)
        else:
            reason = self.is_applicable(ctx, problem)
        if reason is not None or self.max_elements is None:
            return reason
        for role, desc in problem.tensors().items():
            span = getattr(desc, "element_space", 0)
            if span > self.max_elements:
                return f"{role} spans {span} elements > {self.max_elements} (32-bit indices)"
        # The smallest element (2 bytes) gives the most elements a workspace can hold.
        if self.workspace_size(ctx, problem) // 2 > self.max_elements:
            return f"workspace exceeds {self.max_elements} elements (32-bit indices)"
        return None

    def workspace_size(self, ctx: Handle, problem: Problem) -> int:
        return 0

    def defers(self, ctx: Handle, problem: Problem) -> bool:
        """Applicable, but likely slower here than a later solver of the list: immediate mode
        (no find DB record) then lists it after the others. A hint, never a refusal."""
        return False

    def get_program(self, ctx: Handle, problem: Problem, config: dict[str, Any] | None = None) -> Program:
        """The steps that compute ``problem`` (with ``config`` for tunable solvers)."""
        raise NotImplementedError

    def without_library(self, ctx: Handle, problem: Problem) -> list[KernelSpec] | None:
        """None, unless this solver is not applicable here only because a vendor library it
        calls cannot be loaded (a machine that builds a kernel package for another): then the
        kernels its programs would launch where the library is, so that the package holds them
        and does not claim to know whether the solver applies."""
        return None

    def __repr__(self) -> str:
        return self.name


class TunableSolver(Solver):
    tunable: ClassVar[bool] = True

    def default_config(self, ctx: Handle, problem: Problem) -> dict[str, Any]:
        raise NotImplementedError

    def search_space(self, ctx: Handle, problem: Problem) -> Iterable[dict[str, Any]]:
        """Every config to try when tuning (only valid ones need be yielded)."""
        raise NotImplementedError

    def is_valid_config(self, ctx: Handle, problem: Problem, config: Any) -> bool:
        raise NotImplementedError
