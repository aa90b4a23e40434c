"""On a GPU: user tensors that start off the 16-byte boundary (views one element into an
allocation) run on aligned copies, for every solver find offers, instead of faulting in a vector
load; the outputs land in the user's views."""

from __future__ import annotations

import numpy as np
import pytest
from support import output_of, random_buffers

from miopy import backends
from miopy.engine.find import get_solutions
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.reference.conv import conv_reference_buffers, rms_range
from miopy.tensor import TensorDesc

_WHY = backends.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]

TOL = {"fp32": 2e-5, "fp16": 8.2e-3, "bf16": 8.2e-3 * 8}  # Winograd and 3xTF32 among the solvers


@pytest.mark.parametrize(
    "dtype, layout, direction, ksize",
    [
        ("fp16", "NHWC", "F", 3),
        ("fp16", "NHWC", "B", 3),
        ("bf16", "NHWC", "W", 3),
        ("fp16", "NHWC", "F", 1),
        ("fp16", "NCHW", "F", 3),
        ("fp32", "NCHW", "B", 3),
    ],
)
def test_views_off_the_boundary_run_on_copies(dtype, layout, direction, ksize):
    cp = pytest.importorskip("cupy")
    from miopy.handle import Handle

    handle = Handle("cuda")
    x = TensorDesc(dtype, (4, 64, 10, 10), layout=layout)
    w = TensorDesc(dtype, (64, 64, ksize, ksize), layout=layout)
    problem = ConvProblem.create(x, w, ConvDesc((ksize // 2, ksize // 2)), direction, y_layout=layout)
    host = random_buffers(problem, np.random.default_rng(11))
    expected = conv_reference_buffers(problem, host)
    out = problem.output_role
    ran = 0
    for solution in get_solutions(handle, problem)[:6]:
        dev = {}
        for role, arr in host.items():
            raw = cp.zeros(arr.size + 1, dtype=arr.dtype)
            raw[1:] = cp.asarray(arr.reshape(-1))
            dev[role] = raw[1:]  # 2 or 4 bytes past a 256-byte aligned start
            assert dev[role].data.ptr % 16 != 0
        solution.run(handle, dev)
        got = dict(host, **{out: cp.asnumpy(dev[out]).reshape(host[out].shape)})
        err = rms_range(output_of(problem, got), expected)
        assert err < TOL[dtype] * (64 if direction == "W" else 8), (solution.solver, err)
        ran += 1
    assert ran >= 2
