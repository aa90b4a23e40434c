"""What a first run works out once and keeps (the invoker's step plan, a program's kernels, a spec's
options, a tensor's byte size, a knob's encoded key) gives the same answers as before, and a knob
changed after its first read is read again."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miopy import config
from miopy.backends.prepared import Recorder
from miopy.invoker import ProgramInvoker, step_plan
from miopy.solution import Call, InvokeArgs, KernelSpec, Launch, Program, Scalar, Tensor, Workspace
from miopy.tensor import TensorDesc


@dataclass(frozen=True)
class _Kernel:
    name: str


class _Backend:
    def __init__(self):
        self.launched = []
        self.called = []

    def launch(self, kernel, global_size, local_size, args, shared_mem=0, cooperative=False):
        self.launched.append((kernel, global_size, local_size, list(args), shared_mem, cooperative))

    def lt_matmul(self, *args):
        self.called.append(args)

    def prepare_launch(self, *args, **kwargs):
        return lambda: self.launch(*args, **kwargs)


def _program() -> Program:
    a = KernelSpec("k", "a", {"B": 2, "A": np.int32(1)}, (64,), (32,))
    b = KernelSpec("k", "b", {}, (8,), (8,))
    steps = (
        Launch(a, (Tensor("x"), np.int32(3), Workspace(), Scalar("alpha", "float32", 1.0), Tensor("y"))),
        Launch(b, (Tensor("y"),), (16,), (4,), shared_mem=128),
        Launch(a, (Tensor("y"), np.int32(4), Workspace(), Scalar("beta"), Tensor("x"))),
        Call("lt_matmul", ("product", Tensor("x"), 0, Workspace())),
    )
    return Program(steps, workspace=256, notes={"n": 1})


def test_step_plan_kept_and_invisible_to_equality():
    program = _program()
    plan = step_plan(program)
    assert step_plan(program) is plan  # kept on the program
    assert [entry[3] for entry in plan] == [(0, 2, 3, 4), (0,), (0, 2, 3, 4), (1, 3)]
    assert plan[1][4:7] == ((16,), (4,), 128) and plan[0][4:6] == ((64,), (32,))
    assert program == _program() and program.kernels == _program().kernels
    assert [s.name for s in program.kernels] == ["a", "b"]
    program.kernels.append("not kept")  # a copy each time
    assert len(program.kernels) == 2


def test_invoker_runs_the_plan_like_the_steps():
    program = _program()
    backend = _Backend()
    kernels = {spec: _Kernel(spec.name) for spec in program.kernels}
    args = InvokeArgs({"x": "X", "y": "Y"}, "WS", {"alpha": 2.0})
    ProgramInvoker(backend, program, kernels)(args)
    first, second, third = backend.launched
    assert first[0] == _Kernel("a") and first[1:3] == ((64,), (32,))
    assert first[3][0] == "X" and first[3][1] == 3 and first[3][2] == "WS" and first[3][4] == "Y"
    assert first[3][3] == np.float32(2.0) and type(first[3][3]) is np.float32
    assert second == (_Kernel("b"), (16,), (4,), ["Y"], 128, False)
    assert third[3][3] == np.float32(0.0)  # beta's default
    assert backend.called == [("product", "X", 0, "WS")]
    recorder = Recorder(backend)
    ProgramInvoker(recorder, program, kernels)(args)
    assert not recorder.ok  # lt_matmul has no prepare_ here: not recordable
    recorder = Recorder(backend)
    ProgramInvoker(recorder, Program(program.steps[:3]), kernels)(args)
    assert recorder.ok and len(recorder.calls) == 3  # the cached ``launch`` records each launch


def test_spec_options_kept():
    spec = KernelSpec("k", "a", {"B": 2, "A": np.int32(1)})
    assert spec.option_tuple() == ("-DA=1", "-DB=2") and spec.options() == ["-DA=1", "-DB=2"]
    assert spec.option_tuple() is spec.option_tuple()
    assert spec == KernelSpec("k", "a", {"A": np.int32(1), "B": 2}) and hash(spec) == hash(
        KernelSpec("k", "a", {"A": np.int32(1), "B": 2})
    )


def test_tensor_nbytes_set_at_construction():
    packed = TensorDesc("fp16", (2, 3, 4, 5))
    strided = TensorDesc("fp32", (2, 3, 4, 5), (100, 1, 20, 4))
    assert packed.nbytes == 2 * 3 * 4 * 5 * 2 and packed.element_space == 120
    assert strided.element_space == 1 + 100 + 2 + 60 + 16 and strided.nbytes == strided.element_space * 4
    assert packed == TensorDesc("fp16", (2, 3, 4, 5))


def test_knob_read_again_after_a_change(monkeypatch):
    monkeypatch.delenv("MIOPY_DEBUG_DISABLE_FIND_DB", raising=False)
    assert config.disable_find_db() is False
    monkeypatch.setenv("MIOPY_DEBUG_DISABLE_FIND_DB", "1")
    assert config.disable_find_db() is True
    monkeypatch.setenv("MIOPY_DEBUG_DISABLE_FIND_DB", "")
    assert config.disable_find_db() is False
    monkeypatch.setenv("MIOPY_DEBUG_FIND_ONLY_SOLVER", "A;B")
    assert config.find_only_solvers() == ["A", "B"]
