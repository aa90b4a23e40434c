"""miopy.functional on NumPy arrays and PyTorch CPU tensors (OpenCL on the CPU), checked
against PyTorch's own convolutions (the reference here) and against miopy's NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from miopy import BadParm
from miopy import functional as F
from miopy.engine import bench
from miopy.functional import core

torch = pytest.importorskip("torch")
TF = torch.nn.functional


@pytest.fixture(autouse=True)
def _host_on_opencl(ocl, monkeypatch):
    monkeypatch.setenv("MIOPY_BACKEND", "opencl")


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CASES = [
    # (x shape, w shape, kwargs)
    ((2, 3, 9, 9), (4, 3, 3, 3), dict(stride=2, padding=1)),
    ((1, 4, 7, 8), (6, 2, 3, 2), dict(padding=(1, 0), dilation=(2, 1), groups=2)),
    ((2, 3, 8, 8), (4, 3, 4, 4), dict(padding="same")),
    ((2, 3, 8, 8), (4, 3, 3, 3), dict(padding="valid")),
]


@pytest.mark.parametrize("xs,ws,kw", CASES)
def test_conv2d_numpy_matches_torch(xs, ws, kw):
    x, w, b = _rand(*xs), _rand(*ws, seed=1), _rand(ws[0], seed=2)
    y = F.conv2d(x, w, b, **kw)
    want = TF.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), **kw).numpy()
    assert isinstance(y, np.ndarray) and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_conv3d_and_transposed_match_torch():
    x, w = _rand(1, 2, 4, 5, 5), _rand(3, 2, 3, 3, 3, seed=1)
    np.testing.assert_allclose(
        F.conv3d(x, w, padding=1, stride=(1, 2, 2)),
        TF.conv3d(torch.from_numpy(x), torch.from_numpy(w), padding=1, stride=(1, 2, 2)).numpy(),
        rtol=1e-4,
        atol=1e-4,
    )
    x, w = _rand(2, 4, 5, 6), _rand(4, 3, 3, 3, seed=1)  # (C_in, C_out/groups, kh, kw)
    kw = dict(stride=2, padding=1, output_padding=1, groups=2, dilation=1)
    want = TF.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), **kw).numpy()
    np.testing.assert_allclose(F.conv_transpose2d(x, w, **kw), want, rtol=1e-4, atol=1e-4)
    x, w = _rand(1, 2, 3, 4, 4), _rand(2, 2, 2, 3, 3, seed=1)
    want = TF.conv_transpose3d(torch.from_numpy(x), torch.from_numpy(w), stride=2).numpy()
    np.testing.assert_allclose(F.conv_transpose3d(x, w, stride=2), want, rtol=1e-4, atol=1e-4)


def test_channels_last_and_strided_inputs_are_read_in_place():
    x = torch.randn(2, 3, 10, 10).to(memory_format=torch.channels_last)
    w = torch.randn(5, 3, 3, 3)
    y = F.conv2d(x, w, padding=1)
    assert isinstance(y, torch.Tensor) and y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y, TF.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
    # a strided view (every other column of a bigger tensor): no copy, a strided descriptor
    big = torch.randn(2, 3, 10, 20)
    view = big[:, :, :, ::2]
    torch.testing.assert_close(F.conv2d(view, w), TF.conv2d(view, w), rtol=1e-4, atol=1e-4)
    # a broadcast (zero-stride) input is copied first
    flat = torch.randn(1, 3, 10, 10).expand(2, 3, 10, 10)
    torch.testing.assert_close(F.conv2d(flat, w), TF.conv2d(flat, w), rtol=1e-4, atol=1e-4)


def test_gradients_match_torch():
    x = torch.randn(2, 4, 9, 9, requires_grad=True)
    w = torch.randn(6, 2, 3, 3, requires_grad=True)
    kw = dict(stride=2, padding=1, groups=2)
    y = TF.conv2d(x, w, **kw)
    dy = torch.randn_like(y)
    gx, gw = torch.autograd.grad(y, (x, w), dy)
    torch.testing.assert_close(F.conv_input_grad(x.shape, w, dy, **kw), gx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(F.conv_weight_grad(x, w.shape, dy, **kw), gw, rtol=1e-4, atol=1e-4)


def test_second_call_plans_nothing():
    x, w = _rand(1, 3, 6, 6), _rand(2, 3, 3, 3, seed=1)
    F.conv2d(x, w, padding=1)
    handle = F.default_handle()
    plans, benchmarks = core.counters["plans"], bench.counters["benchmarks"]
    invokers, programs = len(handle._invokers), len(handle._programs)
    y = F.conv2d(_rand(1, 3, 6, 6, seed=5), w, padding=1)
    assert core.counters["plans"] == plans
    assert bench.counters["benchmarks"] == benchmarks  # no find
    assert (len(handle._invokers), len(handle._programs)) == (invokers, programs)  # no compile
    assert y.shape == (1, 2, 6, 6)
    F.conv2d(_rand(2, 3, 6, 6), w, padding=1)  # a new shape plans once more
    assert core.counters["plans"] == plans + 1


def test_default_handle_is_per_thread():
    import threading

    mine = F.default_handle()
    assert F.default_handle() is mine
    other = []
    t = threading.Thread(target=lambda: other.append(F.default_handle()))
    t.start()
    t.join()
    assert other[0] is not mine and other[0].backend_name == mine.backend_name


def test_errors_name_the_argument():
    x, w = _rand(1, 3, 6, 6), _rand(2, 3, 3, 3)
    with pytest.raises(BadParm, match="input"):
        F.conv2d(x.astype(np.float64), w)
    with pytest.raises(BadParm, match="input"):
        F.conv2d([[1.0]], w)
    with pytest.raises(BadParm, match="padding"):
        F.conv2d(x, w, stride=2, padding="same")
    with pytest.raises(BadParm, match="stride"):
        F.conv2d(x, w, stride=(1, 1, 1))
    with pytest.raises(BadParm, match="w.lens"):
        F.conv2d(x, _rand(2, 4, 3, 3))


def test_activations_and_pooling_on_numpy():
    x = 2 * _rand(2, 3, 7, 7)
    t = torch.from_numpy(x)
    pairs = [
        (F.relu(x), TF.relu(t)),
        (F.leaky_relu(x, 0.2), TF.leaky_relu(t, 0.2)),
        (F.elu(x, 0.7), TF.elu(t, 0.7)),
        (F.sigmoid(x), torch.sigmoid(t)),
        (F.tanh(x), torch.tanh(t)),
        (F.softplus(x), TF.softplus(t)),
        (F.relu6(x), TF.relu6(t)),
        (F.hardtanh(x, 0.0, 2.5), TF.hardtanh(t, 0.0, 2.5)),
        (F.max_pool2d(x, 3, 2, 1), TF.max_pool2d(t, 3, 2, 1)),
        (F.avg_pool2d(x, 2), TF.avg_pool2d(t, 2)),
        (
            F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
            TF.avg_pool2d(t, 3, 2, 1, count_include_pad=False),
        ),
        (F.max_pool3d(x[None], 2), TF.max_pool3d(t[None], 2)),
    ]
    for got, want in pairs:
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    x_ = torch.from_numpy(x).requires_grad_()
    y = TF.elu(x_, 0.7)
    dy = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x_, dy)
    got = F.activation_grad(dy.numpy(), x, F.elu(x, 0.7), "ELU", alpha=0.7)
    np.testing.assert_allclose(got, gx.numpy(), rtol=1e-5, atol=1e-6)


def test_unsupported_pooling_options_are_refused():
    x = _rand(1, 1, 6, 6)
    for kwargs, field in (
        (dict(ceil_mode=True), "ceil_mode"),
        (dict(dilation=2), "dilation"),
        (dict(return_indices=True), "return_indices"),
        (dict(padding=2), "padding"),
    ):
        with pytest.raises(BadParm, match=field):
            F.max_pool2d(x, 3, **kwargs)
    with pytest.raises(BadParm, match="inplace"):
        F.relu(x, inplace=True)
