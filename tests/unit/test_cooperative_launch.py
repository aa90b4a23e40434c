"""Cooperative launches (every block resident at once, for kernels with a grid-wide barrier): the
invoker passes a Launch's ``cooperative`` to the backend, directly and through a prepared run, and
OpenCL, which cannot promise residency, refuses such a launch by name. The CUDA side runs on the
GPU in tests/backend/test_cuda_runtime.py."""

from __future__ import annotations

import numpy as np
import pytest

from miopy.backends.base import Backend
from miopy.backends.prepared import Recorder
from miopy.errors import BadParm
from miopy.invoker import ProgramInvoker
from miopy.solution import InvokeArgs, KernelSpec, Launch, Program, Tensor


class FakeKernel:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


PLAIN, GRID = FakeKernel("plain"), FakeKernel("grid")


class FakeBackend:
    name = "fake"

    def __init__(self):
        self.enqueued = []

    def launch(self, kernel, global_size, local_size, args, shared_mem=0, cooperative=False):
        self.enqueued.append((kernel, tuple(args), shared_mem, cooperative))

    prepare_launch = Backend.prepare_launch


def _program() -> tuple[Program, dict]:
    plain, grid = KernelSpec("k", "plain", global_size=(8,), local_size=(4,)), KernelSpec("k", "grid")
    steps = (
        Launch(plain, (Tensor("x"), np.int32(1))),
        Launch(grid, (Tensor("x"),), global_size=(16,), local_size=(8,), shared_mem=64, cooperative=True),
    )
    return Program(steps=steps), {plain: PLAIN, grid: GRID}


@pytest.mark.parametrize("prepared", [False, True])
def test_invoker_passes_cooperative_to_the_backend(prepared):
    program, kernels = _program()
    backend = FakeBackend()
    args = InvokeArgs(tensors={"x": "X"})
    if prepared:
        rec = Recorder(backend)
        ProgramInvoker(rec, program, kernels)(args)
        assert rec.ok and backend.enqueued == []
        for call in rec.calls:
            call()
    else:
        ProgramInvoker(backend, program, kernels)(args)
    assert backend.enqueued == [
        (PLAIN, ("X", np.int32(1)), 0, False),
        (GRID, ("X",), 64, True),
    ]


def test_opencl_refuses_a_cooperative_launch(ocl):
    be = ocl.backend
    kernel = be.load(be.build("__kernel void k(__global float* y) { y[0] = 1.0f; }", "k.cl", []), "k")
    buf = be.alloc(4)
    with pytest.raises(BadParm, match="cooperative"):
        be.launch(kernel, (1,), (1,), [buf], cooperative=True)
