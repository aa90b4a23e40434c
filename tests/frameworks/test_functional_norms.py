"""miopy.functional's normalisations (batch norm, softmax, layer / group norm, LRN) on NumPy
arrays and PyTorch CPU tensors (OpenCL on the CPU), checked against PyTorch's own CPU ops where
the semantics coincide and against miopy's NumPy reference where MIOpen's differ."""

from __future__ import annotations

import numpy as np
import pytest

from miopy import BadParm
from miopy import functional as F
from miopy.functional import core
from miopy.problem.lrn import LRNProblem
from miopy.reference.lrn import lrn_backward, lrn_forward
from miopy.tensor import TensorDesc

torch = pytest.importorskip("torch")
TF = torch.nn.functional
TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _host_on_opencl(ocl, monkeypatch):
    monkeypatch.setenv("MIOPY_BACKEND", "opencl")


def _rand(*shape, seed=0, scale=1.0, offset=0.0):
    rng = np.random.default_rng(seed)
    return (offset + scale * rng.standard_normal(shape)).astype(np.float32)


def _close(got, want, **tol):
    got = got.detach().numpy() if isinstance(got, torch.Tensor) else got
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else want
    np.testing.assert_allclose(got, want, **(tol or TOL))


# ---- batch norm ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (2, 3, 2, 4, 4), (8, 5), (4, 5, 7)])
def test_batch_norm_training_and_inference_on_numpy_match_torch(shape):
    c = shape[1]
    x, w, b = _rand(*shape, scale=2.0, offset=1.0), _rand(c, seed=1), _rand(c, seed=2)
    rm, rv = _rand(c, seed=3), 1.0 + np.abs(_rand(c, seed=4))
    trm, trv = torch.from_numpy(rm.copy()), torch.from_numpy(rv.copy())
    tx, tw, tb = map(torch.from_numpy, (x, w, b))
    y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-4)
    want = TF.batch_norm(tx, trm, trv, tw, tb, training=True, momentum=0.3, eps=1e-4)
    assert isinstance(y, np.ndarray) and y.shape == shape
    _close(y, want)
    _close(rm, trm)  # updated in place, the variance unbiased as PyTorch's
    _close(rv, trv)
    y = F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-4)
    _close(y, TF.batch_norm(tx, trm, trv, tw, tb, training=False, eps=1e-4))


def test_batch_norm_momentum_is_a_run_time_scalar():
    x = _rand(4, 3, 4, 4, offset=2.0)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    trm, trv = torch.zeros(3), torch.ones(3)
    F.batch_norm(x, rm, rv, training=True, momentum=0.1)
    before = core.counters["plans"]
    for momentum in (0.5, 1.0 / 3, 0.0):
        F.batch_norm(x, rm, rv, training=True, momentum=momentum)
        TF.batch_norm(torch.from_numpy(x), trm, trv, training=True, momentum=momentum)
    assert core.counters["plans"] == before  # one plan for every momentum
    TF.batch_norm(torch.from_numpy(x), torch.zeros(3), torch.ones(3), training=True, momentum=0.1)
    trm0, trv0 = torch.zeros(3), torch.ones(3)
    for momentum in (0.1, 0.5, 1.0 / 3, 0.0):
        TF.batch_norm(torch.from_numpy(x), trm0, trv0, training=True, momentum=momentum)
    _close(rm, trm0)
    _close(rv, trv0)


def test_batch_norm_channels_last_torch_and_gradients():
    torch.manual_seed(0)
    x = (torch.randn(3, 4, 5, 6) * 2 + 1).to(memory_format=torch.channels_last).requires_grad_()
    w, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    y, mean, inv = F.batch_norm_forward(x, None, None, w, b, training=True, save=True)
    want = TF.batch_norm(x, None, None, w, b, training=True)
    assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    _close(y, want)
    _close(mean, x.detach().mean((0, 2, 3)))
    _close(inv, 1 / torch.sqrt(x.detach().var((0, 2, 3), unbiased=False) + 1e-5))
    dy = torch.randn_like(want)
    gx, gw, gb = torch.autograd.grad(want, (x, w, b), dy)
    for saved in ((mean, inv), (None, None)):  # saved statistics, or recomputed from x
        dx, dw, db = F.batch_norm_grad(dy, x, w, *saved)
        assert dx.is_contiguous(memory_format=torch.channels_last)
        _close(dx, gx)
        _close(dw, gw)
        _close(db, gb)


@pytest.mark.parametrize("channels_last", [False, True])
def test_batch_norm_per_activation_against_numpy(channels_last):
    x = torch.from_numpy(_rand(6, 3, 4, 5, scale=3.0, offset=1.0))
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w, b = torch.from_numpy(_rand(3, 4, 5, seed=1)), torch.from_numpy(_rand(3, 4, 5, seed=2))
    rm, rv = torch.zeros(3, 4, 5), torch.ones(3, 4, 5)
    y, mean, inv = F.batch_norm_forward(x, rm, rv, w, b, True, 0.25, 1e-5, spatial=False, save=True)
    xn = x.double().numpy()
    mu, var = xn.mean(0), xn.var(0)
    _close(y, (xn - mu) / np.sqrt(var + 1e-5) * w.numpy() + b.numpy())
    assert y.is_contiguous(memory_format=torch.channels_last) == channels_last
    _close(rm, 0.25 * mu)
    _close(rv, 0.75 + 0.25 * var * 6 / 5)
    _close(inv, 1 / np.sqrt(var + 1e-5))
    xg = x.clone().requires_grad_()
    wg, bg = w.clone().requires_grad_(), b.clone().requires_grad_()
    m = xg.mean(0, keepdim=True)
    ref = (xg - m) / torch.sqrt(xg.var(0, unbiased=False, keepdim=True) + 1e-5) * wg + bg
    dy = torch.randn_like(ref)
    gx, gw, gb = torch.autograd.grad(ref, (xg, wg, bg), dy)
    dx, dw, db = F.batch_norm_grad(dy, x, w, mean, inv, spatial=False)
    _close(dx, gx, rtol=1e-4, atol=1e-4)
    _close(dw, gw)
    _close(db, gb)


def test_batch_norm_fp16_data_fp32_parameters():
    x = _rand(4, 3, 6, 6, offset=1.0).astype(np.float16)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    y = F.batch_norm(x, rm, rv, np.ones(3, np.float32), np.zeros(3, np.float32), training=True)
    assert y.dtype == np.float16
    tx = torch.from_numpy(x.astype(np.float32))
    trm, trv = torch.zeros(3), torch.ones(3)
    _close(y.astype(np.float32), TF.batch_norm(tx, trm, trv, training=True), rtol=2e-3, atol=2e-3)
    _close(rm, trm, rtol=1e-3, atol=1e-3)


def test_batch_norm_refusals():
    x = _rand(2, 3, 4, 4)
    with pytest.raises(BadParm, match="running_mean"):
        F.batch_norm(x, None, None, training=False)
    with pytest.raises(BadParm, match="running_var"):
        F.batch_norm(x, np.zeros(3, np.float32), None, training=True)
    with pytest.raises(BadParm, match="running_mean"):  # updated in place: must be packed
        F.batch_norm(x, np.zeros(6, np.float32)[::2], np.ones(3, np.float32), training=True)
    with pytest.raises(BadParm, match="momentum"):
        F.batch_norm(x, np.zeros(3, np.float32), np.ones(3, np.float32), training=True, momentum=2.0)
    with pytest.raises(BadParm, match="weight"):
        F.batch_norm(x, None, None, np.ones(4, np.float32), training=True)


# ---- softmax -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [1, -1, 0, 2])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_dims_match_torch(dim, log):
    torch.manual_seed(1)
    x = (3 * torch.randn(2, 5, 3, 4)).to(memory_format=torch.channels_last).requires_grad_()
    ours, theirs = (F.log_softmax, TF.log_softmax) if log else (F.softmax, TF.softmax)
    y, want = ours(x, dim), theirs(x, dim)
    _close(y, want)
    if dim == 1:  # read in place: the result keeps the channels-last order
        assert y.is_contiguous(memory_format=torch.channels_last)
    dy = torch.randn_like(want)
    (gx,) = torch.autograd.grad(want, x, dy)
    _close(F.softmax_grad(dy, y, dim, log), gx)


def test_softmax_other_ranks_instance_mode_and_refusals():
    for shape, dim in (((7,), 0), ((3, 6), 1), ((3, 6), 0), ((2, 3, 4), 1), ((2, 3, 2, 2, 3), 1)):
        x = _rand(*shape, scale=2.0)
        _close(F.softmax(x, dim), TF.softmax(torch.from_numpy(x), dim))
    x = _rand(2, 3, 4, 5)
    want = TF.softmax(torch.from_numpy(x).flatten(1), 1).reshape(x.shape)
    _close(F.softmax(x, mode="instance"), want)
    y = F.softmax(x, mode="instance")
    dy = _rand(2, 3, 4, 5, seed=3)
    want = y * (dy - (y * dy).sum((1, 2, 3), keepdims=True))
    _close(F.softmax_grad(dy, y, mode="instance"), want)
    for kwargs, field in (
        (dict(), "dim"),
        (dict(dim=4), "dim"),
        (dict(dim=1, mode="instance"), "dim"),
        (dict(dim=1, mode="spatial"), "mode"),
        (dict(dim=1, dtype=torch.float64), "dtype"),
    ):
        with pytest.raises(BadParm, match=field):
            F.softmax(x, **kwargs)


# ---- layer norm and group norm -------------------------------------------------------------------------
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_matches_torch(affine):
    torch.manual_seed(2)
    x = (torch.randn(3, 4, 5, 6) + 0.5).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(5, 6, requires_grad=True) if affine != "none" else None
    b = torch.randn(5, 6, requires_grad=True) if affine == "both" else None
    y, mean, rstd = F.layer_norm_forward(x, (5, 6), w, b, 1e-4)
    want = TF.layer_norm(x, (5, 6), w, b, 1e-4)
    _close(y, want)
    assert y.stride() == x.stride()
    _close(mean, x.detach().mean((2, 3)))
    params = [p for p in (x, w, b) if p is not None]
    dy = torch.randn_like(want)
    grads = torch.autograd.grad(want, params, dy)
    dx, dw, db = F.layer_norm_grad(dy, x, (5, 6), w, mean, rstd, 1e-4, affine=affine != "none")
    _close(dx, grads[0])
    if w is not None:
        _close(dw, grads[1])
    if b is not None:
        _close(db, grads[2])
    xn = np.ascontiguousarray(x.detach().numpy())
    _close(F.layer_norm(xn, 6), TF.layer_norm(torch.from_numpy(xn), (6,)))


@pytest.mark.parametrize(
    "shape,groups", [((2, 6, 4, 5), 3), ((2, 4, 3, 2, 3), 2), ((5, 6), 3), ((3, 8, 7), 4)]
)
def test_group_norm_matches_torch(shape, groups):
    torch.manual_seed(3)
    x = torch.randn(*shape) * 2 + 1
    if len(shape) == 4:
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_()
    w, b = torch.randn(shape[1], requires_grad=True), torch.randn(shape[1], requires_grad=True)
    y, mean, rstd = F.group_norm_forward(x, groups, w, b, 1e-5)
    want = TF.group_norm(x, groups, w, b, 1e-5)
    _close(y, want)
    assert y.shape == x.shape and y.stride() == x.stride()
    assert tuple(mean.shape) == (shape[0], groups)
    dy = torch.randn_like(want)
    grads = torch.autograd.grad(want, (x, w, b), dy)
    for got, expect in zip(F.group_norm_grad(dy, x, groups, w, mean, rstd), grads):
        _close(got, expect)
    xn = _rand(*shape, seed=4)
    _close(F.group_norm(xn, groups), TF.group_norm(torch.from_numpy(xn), groups))


def test_norm_refusals():
    x = _rand(2, 6, 3, 3)
    with pytest.raises(BadParm, match="normalized_shape"):
        F.layer_norm(x, (4, 3))
    with pytest.raises(BadParm, match="num_groups"):
        F.group_norm(x, 4)
    with pytest.raises(BadParm, match="weight.dtype"):
        F.layer_norm(x, 3, np.ones(3, np.float16))
    with pytest.raises(BadParm, match="weight"):
        F.group_norm(x, 2, np.ones(5, np.float32))


# ---- LRN ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape,channels_last",
    [
        ((2, 7, 5, 6), False),
        ((2, 7, 5, 6), True),
        ((2, 7, 9), False),
        ((2, 6, 3, 4, 5), False),
        ((2, 6, 3, 4, 5), True),
    ],
)
def test_local_response_norm_matches_torch_for_odd_sizes(shape, channels_last):
    torch.manual_seed(4)
    x = torch.randn(*shape)
    if channels_last:
        x = x.to(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    x.requires_grad_()
    args = (5, 1e-2, 0.75, 2.0)
    y, scale = F.lrn_forward(x, *args, save_scale=True)
    want = TF.local_response_norm(x, *args)
    _close(y, want)
    assert y.stride() == x.stride()
    dy = torch.randn_like(want)
    (gx,) = torch.autograd.grad(want, x, dy)
    _close(F.lrn_grad(dy, x, y, scale, *args), gx)
    _close(F.local_response_norm(x, 3), TF.local_response_norm(x, 3))


@pytest.mark.parametrize("size,mode", [(4, "cross"), (3, "within"), (4, "within")])
def test_local_response_norm_even_size_and_within_channel_against_miopy_reference(size, mode):
    x = _rand(2, 6, 5, 7, scale=2.0)
    args = (size, 0.05, 0.75, 1.5)
    y, scale = F.lrn_forward(x, *args, mode=mode, save_scale=True)
    problem = LRNProblem.create(TensorDesc("fp32", x.shape), "cross" if mode == "cross" else "within", *args)
    want_y, want_scale = lrn_forward(problem, x)
    _close(y, want_y)
    _close(scale, want_scale)
    dy = _rand(2, 6, 5, 7, seed=5)
    back = LRNProblem.create(TensorDesc("fp32", x.shape), problem.mode, *args, direction="B")
    want_dx = lrn_backward(back, {"x": x, "y": y, "dy": dy, "scale": scale})
    _close(F.lrn_grad(dy, x, y, scale, *args, mode=mode), want_dx)
    if mode == "cross":  # PyTorch's even window starts one channel earlier
        assert not np.allclose(y, TF.local_response_norm(torch.from_numpy(x), *args).numpy(), atol=1e-4)


def test_lrn_refusals():
    with pytest.raises(BadParm, match="mode"):
        F.local_response_norm(_rand(1, 3, 4, 4), 3, mode="spatial")
    with pytest.raises(BadParm, match="input"):
        F.local_response_norm(_rand(1, 3, 4, 4, 4), 3, mode="within")
    with pytest.raises(BadParm, match="size"):
        F.local_response_norm(_rand(1, 3, 4, 4), 0)


def test_second_call_builds_no_plan():
    x = _rand(2, 4, 3, 3)
    calls = [
        lambda: F.softmax(x, 1),
        lambda: F.layer_norm(x, (3, 3)),
        lambda: F.group_norm(x, 2),
        lambda: F.local_response_norm(x, 3),
        lambda: F.batch_norm(x, None, None, training=True),
    ]
    for call in calls:
        call()
    before = core.counters["plans"]
    for call in calls:
        call()
    assert core.counters["plans"] == before
