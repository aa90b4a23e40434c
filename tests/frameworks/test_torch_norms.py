"""miopy.torch's normalisation layers on CPU tensors (OpenCL on the CPU): forward, backward and
running statistics against their torch.nn namesakes, train and eval modes, gradcheck in fp32, and
the small CNN with batch norm trained beside PyTorch's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from cnn import make_net, synthetic_cifar, train  # noqa: E402

import miopy.torch as mt  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _host_on_opencl(ocl, monkeypatch):
    monkeypatch.setenv("MIOPY_BACKEND", "opencl")


def _pair(ours_cls, theirs_cls, *args, **kwargs):
    """Both modules with the same (perturbed) parameters."""
    a, b = ours_cls(*args, **kwargs), theirs_cls(*args, **kwargs)
    torch.manual_seed(11)
    with torch.no_grad():
        for p in a.parameters():
            p.add_(0.3 * torch.randn_like(p))
    b.load_state_dict(a.state_dict())
    return a, b


def _step(a, b, x, tol=TOL):
    """One forward and backward through both: outputs and every gradient agree."""
    xa = x.detach().clone().requires_grad_()
    xb = x.detach().clone().requires_grad_()
    ya, yb = a(xa), b(xb)
    torch.testing.assert_close(ya, yb, **tol)
    dy = torch.randn_like(yb)
    ya.backward(dy)
    yb.backward(dy)
    torch.testing.assert_close(xa.grad, xb.grad, **tol)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, **tol, msg=name)
    return ya


BATCH_NORMS = [
    (mt.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 5, 5), {}),
    (mt.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 5, 5), dict(momentum=None)),
    (mt.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 5, 5), dict(affine=False, eps=1e-3)),
    (mt.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 5, 5), dict(track_running_stats=False)),
    (mt.BatchNorm3d, torch.nn.BatchNorm3d, (2, 3, 3, 4, 4), dict(momentum=0.3)),
    (mt.BatchNorm1d, torch.nn.BatchNorm1d, (8, 5), {}),
    (mt.BatchNorm1d, torch.nn.BatchNorm1d, (4, 5, 6), {}),
]


@pytest.mark.parametrize("ours,theirs,shape,kw", BATCH_NORMS, ids=lambda v: getattr(v, "__name__", None))
def test_batch_norm_modules_train_and_eval_match_torch(ours, theirs, shape, kw):
    a, b = _pair(ours, theirs, shape[1], **kw)
    torch.manual_seed(0)
    for step in range(3):  # running statistics after several steps
        _step(a, b, torch.randn(*shape) * (1 + step) + step)
    for name, buf in b.named_buffers():
        torch.testing.assert_close(dict(a.named_buffers())[name], buf, **TOL, msg=name)
    a.eval()
    b.eval()
    _step(a, b, torch.randn(*shape) + 0.5)  # running statistics; PyTorch's elementwise backward


def test_batch_norm2d_channels_last():
    a, b = _pair(mt.BatchNorm2d, torch.nn.BatchNorm2d, 4)
    x = torch.randn(3, 4, 6, 5).to(memory_format=torch.channels_last)
    y = _step(a, b, x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(a.running_var, b.running_var, **TOL)


@pytest.mark.parametrize(
    "ours,theirs,args",
    [
        (mt.Softmax, torch.nn.Softmax, (1,)),
        (mt.Softmax, torch.nn.Softmax, (-1,)),
        (mt.LogSoftmax, torch.nn.LogSoftmax, (1,)),
        (mt.LogSoftmax, torch.nn.LogSoftmax, (2,)),
        (mt.LayerNorm, torch.nn.LayerNorm, ((5, 6),)),
        (mt.LayerNorm, torch.nn.LayerNorm, (6,)),
        (mt.GroupNorm, torch.nn.GroupNorm, (2, 4)),
        (mt.GroupNorm, torch.nn.GroupNorm, (4, 4, 1e-5, False)),
        (mt.LocalResponseNorm, torch.nn.LocalResponseNorm, (3, 0.01, 0.75, 2.0)),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
@pytest.mark.parametrize("channels_last", [False, True])
def test_norm_modules_match_torch(ours, theirs, args, channels_last):
    a, b = _pair(ours, theirs, *args)
    torch.manual_seed(1)
    x = 2 * torch.randn(2, 4, 5, 6) + 0.5
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    y = _step(a, b, x)
    # read in place and written in the input's order, but for a softmax over another dim than
    # C (a channels-last array is then read row-major, a copy)
    in_place = not (ours in (mt.Softmax, mt.LogSoftmax) and args[0] != 1)
    assert y.stride() == (x.stride() if in_place else x.contiguous().stride())


@pytest.mark.filterwarnings("ignore:Input #")
def test_gradcheck_fp32():
    """miopy has no float64: gradcheck in fp32 with a step of 1e-2 on small problems, atol 2e-2
    and rtol 1e-2 (central differences in fp32 are good to ~1e-3 relative here)."""
    torch.manual_seed(0)
    kw = dict(eps=1e-2, atol=2e-2, rtol=1e-2, fast_mode=False)
    x = torch.randn(2, 2, 2, 3, requires_grad=True)
    w, b = torch.randn(2, requires_grad=True), torch.randn(2, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w, b: mt.batch_norm_function(x, None, None, w, b, training=True), (x, w, b), **kw
    )
    assert torch.autograd.gradcheck(lambda x: mt.softmax_function(x, 1), (x,), **kw)
    assert torch.autograd.gradcheck(lambda x: mt.softmax_function(x, -1, log=True), (x,), **kw)
    w3, b3 = torch.randn(2, 3, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w, b: mt.layer_norm_function(x, (2, 3), w, b), (x, w3, b3), **kw
    )
    x4 = torch.randn(1, 4, 2, 3, requires_grad=True)
    w4, b4 = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: mt.group_norm_function(x, 2, w, b), (x4, w4, b4), **kw)
    assert torch.autograd.gradcheck(lambda x: mt.lrn_function(x, 3, 0.1, 0.75, 1.0), (x4,), **kw)


# With batch norm the losses stay as close as without: the statistics are exact sums in fp32
# either way; 12 steps on small batches keep the test short.
LOSS_TOLERANCE = 1e-4


def test_small_cnn_with_batch_norm_trains_like_torch():
    data = synthetic_cifar(batches=3, batch=8)
    ours, _ = train(make_net("miopy", channels=8, batch_norm=True), data, steps=12)
    theirs, _ = train(make_net("torch", channels=8, batch_norm=True), data, steps=12)
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    assert worst <= LOSS_TOLERANCE, (ours, theirs)
    assert sum(ours[-3:]) < sum(ours[:3])  # it learns
