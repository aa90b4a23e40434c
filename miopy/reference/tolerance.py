"""The one verification tolerance rule, used by the driver (-V 1) and the tests.

The error measure is MIOpen's ``rms_range``: ||got - ref||_2 / (sqrt(n) * max|ref|).

    tol = max(base, 2**-24 * sqrt(L)) * 2 (backward weights) * solver factor

- ``base`` is MIOpen's: 1.5e-6 for fp32, 8.2e-3 for fp16, 8.2e-3 * 8 for bf16 (the rounding of
  the stored inputs and output).
- ``2**-24 * sqrt(L)`` is the accumulation error: every kernel sums ``L`` products in fp32, and
  rounding errors of a long fp32 sum grow like sqrt(L) times the unit roundoff 2**-24 relative to
  the result's scale. ``L`` is the reduction length of one output element: C/G times the filter
  size forward, K/G times the filter size backward data, N times the output size for backward
  weights (of the problem the kernels see: a transposed convolution swaps forward and backward
  data). Below L = 5.6e3 (fp32) the base dominates; with 100000 input channels and a 1x1
  filter fp32 allows 1.9e-5 where the observed error is about 5e-6.
- backward weights doubles it (MIOpen's rule: its sums are the longest); a solver may declare a
  documented ``tolerance_factor`` (on the solver or in ``solution.extra``).

The same length rule serves every primitive that sums (``accumulation_tolerance``): a reduction
sums ``reduce_length()`` elements into each output (``reduce_tolerance``); fp64 accumulates in
fp64, whose unit roundoff is 2**-53.
"""

from __future__ import annotations

import math
from typing import Any

from miopy.problem.conv import ConvProblem, Direction
from miopy.tensor import DataType

BASE = {DataType.FP32: 1.5e-6, DataType.FP16: 8.2e-3, DataType.BF16: 8.2e-3 * 8, DataType.FP64: 1e-12}
FP32_ROUNDOFF = 2.0**-24
FP64_ROUNDOFF = 2.0**-53


def accumulation_tolerance(dtype: DataType, length: int, base: float | None = None) -> float:
    """max(base, roundoff * sqrt(length)): ``base`` (default BASE[dtype]) covers the rounding of
    stored values, the second term a sum of ``length`` terms in the accumulator's precision."""
    dtype = DataType.parse(dtype)
    roundoff = FP64_ROUNDOFF if dtype is DataType.FP64 else FP32_ROUNDOFF
    return max(BASE[dtype] if base is None else base, roundoff * math.sqrt(max(int(length), 1)))


def reduction_length(problem: ConvProblem) -> int:
    """How many products are summed into one output element."""
    v = problem.conv_view()
    taps = math.prod(v.w.lens[2:])
    g = v.conv.groups
    if v.direction is Direction.FORWARD:
        return v.x.lens[1] // g * taps
    if v.direction is Direction.BACKWARD_DATA:
        return v.w.lens[0] // g * taps
    return v.y.lens[0] * math.prod(v.y.lens[2:])


def tolerance(problem: ConvProblem, solution: Any = None) -> float:
    """The largest rms_range error that verifies ``problem`` (run by ``solution``, if given)."""
    tol = accumulation_tolerance(problem.dtype, reduction_length(problem))
    if problem.direction is Direction.BACKWARD_WEIGHTS:
        tol *= 2
    if solution is not None:
        from miopy.solvers import by_name

        solver = by_name(solution.solver)
        tol *= float(solution.extra.get("tolerance_factor", getattr(solver, "tolerance_factor", 1.0)))
    return tol


def reduce_tolerance(problem: Any, base: float | None = None) -> float:
    """The rule for a reduction (a ReduceProblem): each output sums ``reduce_length()`` inputs."""
    return accumulation_tolerance(problem.dtype, problem.reduce_length(), base)


__all__ = ["BASE", "accumulation_tolerance", "reduce_tolerance", "reduction_length", "tolerance"]
