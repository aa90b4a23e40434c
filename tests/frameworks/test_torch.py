"""miopy.torch on CPU tensors (OpenCL on the CPU): modules against torch.nn, gradients against
finite differences, and a small CNN trained with miopy's layers and with PyTorch's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from cnn import make_net, synthetic_cifar, train  # noqa: E402

import miopy.torch as mt  # noqa: E402


@pytest.fixture(autouse=True)
def _host_on_opencl(ocl, monkeypatch):
    monkeypatch.setenv("MIOPY_BACKEND", "opencl")


def _kw(cin, cout, k, **extra):
    return dict(in_channels=cin, out_channels=cout, kernel_size=k, **extra)


MODULES = [
    (mt.Conv2d, torch.nn.Conv2d, (2, 3, 9, 9), _kw(3, 4, 3, stride=2, padding=1)),
    (mt.Conv2d, torch.nn.Conv2d, (2, 4, 8, 8), _kw(4, 4, 3, padding="same", groups=2, dilation=2)),
    (mt.Conv2d, torch.nn.Conv2d, (1, 2, 6, 6), _kw(2, 3, 3, padding=1, padding_mode="reflect")),
    (
        mt.ConvTranspose2d,
        torch.nn.ConvTranspose2d,
        (2, 3, 5, 5),
        _kw(3, 4, 3, stride=2, padding=1, output_padding=1),
    ),
    (mt.Conv3d, torch.nn.Conv3d, (1, 2, 5, 6, 6), _kw(2, 3, 3, padding=1)),
    (mt.ConvTranspose3d, torch.nn.ConvTranspose3d, (1, 2, 3, 4, 4), _kw(2, 2, 2, stride=2)),
]
LAYERS = [
    (mt.ReLU(), torch.nn.ReLU(), (2, 3, 5, 5)),
    (mt.LeakyReLU(0.1), torch.nn.LeakyReLU(0.1), (2, 3, 5, 5)),
    (mt.ELU(0.5), torch.nn.ELU(0.5), (2, 3, 5, 5)),
    (mt.Sigmoid(), torch.nn.Sigmoid(), (2, 3, 5, 5)),
    (mt.Tanh(), torch.nn.Tanh(), (1, 2, 3, 4, 4)),
    (mt.ReLU6(), torch.nn.ReLU6(), (2, 3, 5, 5)),
    (mt.MaxPool2d(3, 2, 1), torch.nn.MaxPool2d(3, 2, 1), (2, 3, 9, 9)),
    (mt.AvgPool2d(3, 2, 1), torch.nn.AvgPool2d(3, 2, 1), (2, 3, 9, 9)),
    (
        mt.AvgPool2d(3, 2, 1, count_include_pad=False),
        torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
        (2, 3, 9, 9),
    ),
    (mt.MaxPool3d(2), torch.nn.MaxPool3d(2), (1, 2, 4, 6, 6)),
    (mt.AvgPool3d((1, 2, 2)), torch.nn.AvgPool3d((1, 2, 2)), (1, 2, 4, 6, 6)),
]


@pytest.mark.parametrize("ours,theirs,shape", LAYERS, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("channels_last", [False, True])
def test_activation_and_pooling_modules_match_torch_nn(ours, theirs, shape, channels_last):
    torch.manual_seed(5)
    x = 3 * torch.randn(*shape)  # continuous values: no ties inside a max-pooling window
    if channels_last:
        x = x.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    x.requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    ya, yb = ours(x), theirs(x2)
    torch.testing.assert_close(ya, yb, rtol=1e-5, atol=1e-6)
    dy = torch.randn_like(yb)  # NCHW even when y is channels-last
    ya.backward(dy)
    yb.backward(dy)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ours,theirs,shape,kw", MODULES, ids=lambda v: getattr(v, "__name__", None))
def test_module_forward_and_backward_match_torch_nn(ours, theirs, shape, kw):
    torch.manual_seed(3)
    a = ours(**kw)
    torch.manual_seed(3)
    b = theirs(**kw)
    torch.testing.assert_close(a.weight, b.weight, rtol=0, atol=0)  # same initialisation
    x = torch.randn(*shape, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    ya, yb = a(x), b(x2)
    torch.testing.assert_close(ya, yb, rtol=1e-4, atol=1e-4)
    ya.square().sum().backward()
    yb.square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a.weight.grad, b.weight.grad, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(a.bias.grad, b.bias.grad, rtol=1e-4, atol=1e-3)


@pytest.mark.filterwarnings("ignore:Input #")
def test_gradcheck_fp32():
    """miopy has no float64: gradcheck in fp32 with a step and tolerances fp32 can resolve
    (central differences with eps 1e-2 on a small problem: errors ~1e-3 relative)."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 5, requires_grad=True)
    w = torch.randn(3, 2, 3, 3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)

    def f(x, w, b):
        return mt.conv_function(x, w, b, stride=2, padding=1)

    assert torch.autograd.gradcheck(f, (x, w, b), eps=1e-2, atol=2e-2, rtol=1e-2, fast_mode=False)
    xt = torch.randn(1, 2, 3, 3, requires_grad=True)
    wt = torch.randn(2, 3, 3, 3, requires_grad=True)

    def g(x, w):
        return mt.conv_function(x, w, None, stride=2, padding=1, output_padding=1, transposed=True)

    assert torch.autograd.gradcheck(g, (xt, wt), eps=1e-2, atol=2e-2, rtol=1e-2, fast_mode=False)


def test_channels_last_training_step():
    torch.manual_seed(0)
    a = mt.Conv2d(3, 4, 3, padding=1).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last).requires_grad_()
    y = a(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    y.sum().backward()
    ref = torch.nn.functional.conv2d(x.detach(), a.weight.detach(), a.bias.detach(), padding=1)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    assert x.grad.shape == x.shape and a.weight.grad.shape == a.weight.shape


# Loss curves: with the same initialisation and data, miopy's fp32 convolutions differ from
# PyTorch's only by summation order (~1e-7 relative per layer); over 20 SGD steps the losses stay
# within 1e-4 of each other.
LOSS_TOLERANCE = 1e-4


def test_small_cnn_trains_like_torch():
    data = synthetic_cifar(batches=4, batch=16)
    ours, t_ours = train(make_net("miopy"), data, steps=20)
    theirs, t_theirs = train(make_net("torch"), data, steps=20)
    print(f"\nstep time (CPU, batch 16): miopy {t_ours * 1e3:.1f} ms, torch {t_theirs * 1e3:.1f} ms")
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    assert worst <= LOSS_TOLERANCE, (ours, theirs)
    assert sum(ours[-4:]) < sum(ours[:4])  # it learns
