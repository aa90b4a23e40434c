"""ConvDirectNaive{Fwd,Bwd,Wrw}: one work item per output element; any layout, strides, groups,
dilation, 2-D or 3-D, every data type. Always applicable: the last resort."""

from __future__ import annotations

from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import Solver
from miopy.solvers.conv.common import grid_for, shape_args

_OUTPUT_ROLE = {Direction.FORWARD: "y", Direction.BACKWARD_DATA: "x", Direction.BACKWARD_WEIGHTS: "w"}


class _Naive(Solver):
    primitive = "conv"
    algorithm = "direct"
    dynamic = True
    direction: Direction
    kernel: str

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        if problem.direction is not self.direction:
            return f"direction is {problem.direction.name}"
        return None

    def get_program(self, ctx, problem: ConvProblem, config=None) -> Program:
        out = problem.tensors()[_OUTPUT_ROLE[self.direction]]
        global_size, local_size = grid_for(out.element_count)
        spec = KernelSpec(
            "conv_naive", self.kernel, {"MIOPY_DTYPE": problem.dtype.code}, global_size, local_size
        )
        args = (Tensor("x"), Tensor("w"), Tensor("y"), *shape_args(problem))
        return Program((Launch(spec, args),))


class ConvDirectNaiveFwd(_Naive):
    name = "ConvDirectNaiveFwd"
    id = 85
    direction = Direction.FORWARD
    kernel = "conv_naive_fwd"


class ConvDirectNaiveBwd(_Naive):
    name = "ConvDirectNaiveBwd"
    id = 86
    direction = Direction.BACKWARD_DATA
    kernel = "conv_naive_bwd"


class ConvDirectNaiveWrw(_Naive):
    name = "ConvDirectNaiveWrw"
    id = 87
    direction = Direction.BACKWARD_WEIGHTS
    kernel = "conv_naive_wrw"
