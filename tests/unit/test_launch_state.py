"""``miopy kernels build`` on PoCL launches every solution once and takes the binaries again
(miopy.tool.launch_state): a kernel that does not load or a solution whose launch fails is
reported and keeps its first binary; the build goes on. The real thing on PoCL:
tests/tool/test_tool_kernels.py::test_pocl_package_carries_the_code_of_first_launches."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np

from miopy.errors import CompileError
from miopy.solution import KernelSpec
from miopy.tool import launch_state

GOOD = KernelSpec("activ", "good")
BAD_LOAD = KernelSpec("activ", "bad_load")
BAD_RUN = KernelSpec("pool", "bad_run")


def _solution(name: str, spec: KernelSpec, nbytes: int = 16):
    desc = SimpleNamespace(nbytes=nbytes)
    problem = SimpleNamespace(tensors=lambda: {"x": desc, "y": desc}, key=lambda: f"problem-{name}")
    return SimpleNamespace(solver=name, kernels=[spec], problem=problem, workspace=0)


class FakeHandle:
    def __init__(self):
        self.ran = []
        self.backend = SimpleNamespace(upload=lambda a: np.array(a), synchronize=lambda: None)

    def use_binary(self, file, name, options, binary):
        if name == "bad_load":
            raise RuntimeError("clBuildProgram failed: INVALID_BINARY")

    def run_solution(self, solution, tensors, workspace):
        if solution.solver == "crashes":
            raise ValueError("launch failed")
        assert set(tensors) == {"x", "y"} and all(not t.any() for t in tensors.values())  # zeros
        self.ran.append(solution.solver)


def test_failures_are_reported_and_the_rest_runs():
    binaries = {launch_state.spec_key(s): b"bin" for s in (GOOD, BAD_LOAD, BAD_RUN)}
    found = [_solution("fine", GOOD), _solution("unloadable", BAD_LOAD), _solution("crashes", BAD_RUN)]
    handle, err = FakeHandle(), io.StringIO()
    ran, failed = launch_state.launch_all(handle, found, binaries, err)
    assert ran == 1 and handle.ran == ["fine"]
    assert len(failed) == 2 and any("does not load" in f for f in failed)
    assert any("crashes on problem-crashes: launch failed" in f for f in failed)
    assert err.getvalue().count("first launch failed") == 2


def test_retake_keeps_the_first_binary_unless_the_new_one_holds_at_least_as_much():
    first = {launch_state.spec_key(s): b"0123456789" for s in (GOOD, BAD_LOAD, BAD_RUN)}
    answers = {"good": b"0123456789 and launch code", "bad_load": b"short", "bad_run": None}

    def rebuild(spec):
        if answers[spec.name] is None:
            raise CompileError("gone")
        return answers[spec.name]

    out, retaken = launch_state.retake([GOOD, BAD_LOAD, BAD_RUN], first, rebuild, map)
    assert retaken == 1
    assert out[launch_state.spec_key(GOOD)] == answers["good"]
    assert out[launch_state.spec_key(BAD_LOAD)] == out[launch_state.spec_key(BAD_RUN)] == b"0123456789"
