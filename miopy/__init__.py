"""miopy: MIOpen's deep-learning primitives in Python, on CUDA and OpenCL."""

from miopy.config import VERSION as __version__
from miopy.errors import (
    AllocFailed,
    BackendUnavailable,
    BadParm,
    CompileError,
    InternalError,
    MiopyError,
    NotApplicable,
    NotImplementedStatus,
    UnsupportedOp,
)
from miopy.handle import Handle
from miopy.problem.activation import ActivationDesc, ActivationMode, ActivationProblem
from miopy.problem.base import Problem
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.problem.lrn import LRNMode, LRNProblem
from miopy.problem.passes import Pass
from miopy.problem.pooling import IndexMode, IndexType, PoolingDesc, PoolingMode, PoolingProblem
from miopy.problem.reduce import ReduceOp, ReduceProblem
from miopy.problem.softmax import SoftmaxAlgorithm, SoftmaxMode, SoftmaxProblem
from miopy.problem.tensorop import TensorOp, TensorOpProblem
from miopy.solution import InvokeArgs, KernelSpec, Program, Solution
from miopy.tensor import DataType, TensorDesc


def __getattr__(name: str):
    # The engine pulls in the DBs: load it on first use, not at import.
    if name in ("FindOptions", "find_solutions", "get_solutions", "compile_solution", "solution_for"):
        from miopy.engine import find

        return getattr(find, name)
    if name == "tune":
        from miopy.engine.tune import tune

        return tune
    raise AttributeError(name)


__all__ = [
    "ActivationDesc",
    "ActivationMode",
    "ActivationProblem",
    "IndexMode",
    "IndexType",
    "LRNMode",
    "LRNProblem",
    "ReduceOp",
    "ReduceProblem",
    "SoftmaxAlgorithm",
    "SoftmaxMode",
    "SoftmaxProblem",
    "TensorOp",
    "TensorOpProblem",
    "Pass",
    "PoolingDesc",
    "PoolingMode",
    "PoolingProblem",
    "AllocFailed",
    "BackendUnavailable",
    "BadParm",
    "CompileError",
    "ConvDesc",
    "ConvProblem",
    "DataType",
    "Direction",
    "FindOptions",
    "Handle",
    "InternalError",
    "InvokeArgs",
    "KernelSpec",
    "MiopyError",
    "NotApplicable",
    "NotImplementedStatus",
    "Problem",
    "Program",
    "Solution",
    "TensorDesc",
    "UnsupportedOp",
    "__version__",
    "compile_solution",
    "find_solutions",
    "get_solutions",
    "solution_for",
    "tune",
]
