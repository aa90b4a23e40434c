"""The solver contract (MIOpen's SolverBase / SolverBaseTunable)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from miopy.handle import Handle
    from miopy.problem.conv import ConvProblem
    from miopy.solution import Solution

# Algorithm families and MIOpen's miopenConvAlgorithm_t numbers for them.
ALGORITHM_IDS = {"gemm": 0, "direct": 1, "fft": 2, "winograd": 3, "implicit_gemm": 5}


class Solver:
    """Stateless. ``name`` is a DB key and never changes. Solvers see ``problem.conv_view()``:
    mode is always conv, pads are resolved."""

    name: ClassVar[str]
    id: ClassVar[int]  # stable number for the driver's -S (MIOpen's where a counterpart exists)
    algorithm: ClassVar[str]
    dynamic: ClassVar[bool] = False  # shapes are run-time arguments: no compile per shape
    tunable: ClassVar[bool] = False

    def is_applicable(self, ctx: Handle, problem: ConvProblem) -> str | None:
        """None when applicable, else the reason it is not (logged at debug level)."""
        raise NotImplementedError

    def workspace_size(self, ctx: Handle, problem: ConvProblem) -> int:
        return 0

    def get_solution(
        self, ctx: Handle, problem: ConvProblem, config: dict[str, Any] | None = None
    ) -> Solution:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


class TunableSolver(Solver):
    tunable: ClassVar[bool] = True

    def default_config(self, ctx: Handle, problem: ConvProblem) -> dict[str, Any]:
        raise NotImplementedError

    def search_space(self, ctx: Handle, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """Every config to try when tuning (only valid ones need be yielded)."""
        raise NotImplementedError

    def is_valid_config(self, ctx: Handle, problem: ConvProblem, config: Any) -> bool:
        raise NotImplementedError
