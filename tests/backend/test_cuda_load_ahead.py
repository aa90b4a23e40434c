"""CUDA: a kernel loaded ahead (``Backend.finish_load``: cuFuncLoad) is fully loaded before its
first launch, and a prepared launch (its arguments packed into one block) computes the right
result and follows the buffers it was prepared with."""

from __future__ import annotations

import numpy as np
import pytest

from miopy import backends

_WHY = backends.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]

_SOURCE = r"""
extern "C" __global__ void axpb(const float* x, float* y, float a, int n, double b, unsigned char c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + (float)b + (float)c;
}
"""


@pytest.fixture(scope="module")
def be():
    from miopy.backends.cuda import Backend

    return Backend(0)


def test_finish_load_loads_the_function_before_its_first_launch(be):
    kernel = be.load(be.build(_SOURCE, "axpb_ahead.cu", []), "axpb")
    be.finish_load(kernel)
    assert be.is_loaded(kernel) in (True, None)  # None: a driver without cuFuncIsLoaded


def test_prepared_launch_packs_mixed_arguments(be):
    kernel = be.load(be.build(_SOURCE, "axpb_packed.cu", []), "axpb")
    n = 1000
    x = np.arange(n, dtype=np.float32)
    dx, dy = be.upload(x), be.alloc(4 * n)
    args = [dx, dy, np.float32(2.0), np.int32(n), np.float64(0.5), np.uint8(3)]
    call = be.prepare_launch(kernel, (1024,), (256,), args)
    call()
    out = np.empty(n, np.float32)
    be.download(dy, out)
    np.testing.assert_allclose(out, 2 * x + 3.5)
    dy2 = be.alloc(4 * n)  # another output buffer: a new prepared call writes there, not in dy
    other = [dx, dy2, np.float32(-1.0), np.int32(n), np.float64(0), np.uint8(0)]
    be.prepare_launch(kernel, (1024,), (256,), other)()
    out2 = np.empty(n, np.float32)
    be.download(dy2, out2)
    be.download(dy, out)
    np.testing.assert_allclose(out2, -x)
    np.testing.assert_allclose(out, 2 * x + 3.5)
