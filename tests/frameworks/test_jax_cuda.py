"""miopy.functional on JAX GPU arrays (CUDA backend): JAX arrays on the GPU in, JAX arrays on the
same GPU out, read and written in place through DLPack; values against PyTorch's CUDA ops on the
same data (TF32 off). Skipped without a GPU build of JAX."""

from __future__ import annotations

import numpy as np
import pytest

from miopy import backends

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
torch = pytest.importorskip("torch")

_WHY = backends.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=f"cuda unavailable: {_WHY}")]

from miopy import functional as F  # noqa: E402

TF = torch.nn.functional


@pytest.fixture(scope="module")
def gpu():
    try:
        devices = jax.devices("gpu")
    except RuntimeError as exc:
        pytest.skip(f"JAX has no GPU here: {exc}")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return devices[0]


def _both(gpu, shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return jax.device_put(x, gpu), torch.from_numpy(x).cuda()


def _check(gpu, got, want, tol=1e-4):
    assert isinstance(got, jax.Array), type(got)
    assert got.devices() == {gpu}, got.devices()
    np.testing.assert_allclose(np.asarray(got), want.cpu().numpy(), rtol=tol, atol=tol)


def test_conv_relu_pool_on_jax_gpu_arrays(gpu):
    xj, xt = _both(gpu, (2, 8, 12, 12), 0)
    wj, wt = _both(gpu, (16, 8, 3, 3), 1)
    bj, bt = _both(gpu, (16,), 2)
    y = F.conv2d(xj, wj, bj, padding=1)
    want = TF.conv2d(xt, wt, bt, padding=1)
    _check(gpu, y, want)
    _check(gpu, F.relu(y), TF.relu(want))
    _check(gpu, F.max_pool2d(F.relu(y), 3, 2, 1), TF.max_pool2d(TF.relu(want), 3, 2, 1))
    _check(gpu, F.avg_pool2d(y, 2), TF.avg_pool2d(want, 2))
    gj, gt = _both(gpu, (16, 4, 3, 3), 5)  # two groups of 4 input channels
    _check(gpu, F.conv2d(xj, gj, None, stride=2, groups=2), TF.conv2d(xt, gt, None, stride=2, groups=2))


def test_norms_on_jax_gpu_arrays(gpu):
    xj, xt = _both(gpu, (4, 6, 5, 7), 3)
    _check(gpu, F.softmax(xj, 1), TF.softmax(xt, 1))
    _check(gpu, F.layer_norm(xj, (5, 7)), TF.layer_norm(xt, (5, 7)))
    _check(gpu, F.group_norm(xj, 3), TF.group_norm(xt, 3))
    _check(gpu, F.local_response_norm(xj, 3), TF.local_response_norm(xt, 3))
    _check(gpu, F.batch_norm(xj, None, None, training=True), TF.batch_norm(xt, None, None, training=True))
    mj, mt = _both(gpu, (6,), 4)
    vj, vt = jnp.abs(mj) + 1, mt.abs() + 1
    _check(gpu, F.batch_norm(xj, mj, vj, training=False), TF.batch_norm(xt, mt, vt, training=False))
