"""miopy.functional on JAX CPU arrays (OpenCL on the CPU): JAX arrays in, JAX arrays out, values
against PyTorch's CPU ops. JAX is optional (miopy never imports it; this file is skipped without
it). On a GPU a JAX array is read through DLPack as CuPy, in place; on the CPU through NumPy."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
torch = pytest.importorskip("torch")

from miopy import BadParm  # noqa: E402
from miopy import functional as F  # noqa: E402

TF = torch.nn.functional


@pytest.fixture(autouse=True)
def _host_on_opencl(ocl, monkeypatch):
    monkeypatch.setenv("MIOPY_BACKEND", "opencl")


def _both(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return jnp.asarray(x), torch.from_numpy(x)


def _check(got, want):
    assert isinstance(got, jax.Array), type(got)
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_relu_pool_on_jax_arrays():
    xj, xt = _both((2, 3, 10, 10), 0)
    wj, wt = _both((4, 3, 3, 3), 1)
    bj, bt = _both((4,), 2)
    y = F.conv2d(xj, wj, None, padding=1)
    _check(y, TF.conv2d(xt, wt, padding=1))
    _check(F.relu(y), TF.relu(TF.conv2d(xt, wt, padding=1)))
    _check(F.max_pool2d(F.relu(y), 2), TF.max_pool2d(TF.relu(TF.conv2d(xt, wt, padding=1)), 2))
    _check(F.conv2d(xj, wj, bj, stride=2), TF.conv2d(xt, wt, bt, stride=2))


def test_norms_on_jax_arrays():
    xj, xt = _both((4, 3, 5, 6), 3)
    _check(F.softmax(xj, 1), TF.softmax(xt, 1))
    _check(F.layer_norm(xj, (5, 6)), TF.layer_norm(xt, (5, 6)))
    _check(F.group_norm(xj, 3), TF.group_norm(xt, 3))
    _check(F.local_response_norm(xj, 3), TF.local_response_norm(xt, 3))
    _check(F.batch_norm(xj, None, None, training=True), TF.batch_norm(xt, None, None, training=True))
    mj, mt = _both((3,), 4)
    vj, vt = jnp.abs(mj) + 1, mt.abs() + 1
    _check(F.batch_norm(xj, mj, vj, training=False), TF.batch_norm(xt, mt, vt, training=False))
    with pytest.raises(BadParm, match="immutable"):  # running statistics are updated in place
        F.batch_norm(xj, mj, vj, training=True)
