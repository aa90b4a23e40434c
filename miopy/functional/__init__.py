"""One call per operation, on the caller's arrays (NumPy, PyTorch, CuPy, JAX), with PyTorch's
argument names and semantics. Problems, chosen solutions and compiled invokers are cached per
shape, so only a call with new shapes finds and compiles.

    import numpy as np
    from miopy import functional as F

    x = np.random.rand(2, 3, 8, 8).astype(np.float32)
    w = np.random.rand(4, 3, 3, 3).astype(np.float32)
    y = F.conv2d(x, w, padding=1)  # (2, 4, 8, 8), a NumPy array
"""

from miopy.functional.activ import (
    activation,
    activation_grad,
    elu,
    hardtanh,
    leaky_relu,
    relu,
    relu6,
    sigmoid,
    softplus,
    tanh,
)
from miopy.functional.bnorm import batch_norm, batch_norm_forward, batch_norm_grad
from miopy.functional.conv import (
    conv2d,
    conv3d,
    conv_input_grad,
    conv_transpose2d,
    conv_transpose3d,
    conv_weight_grad,
)
from miopy.functional.conv_fused import conv_bias_activation_forward
from miopy.functional.core import clear_plans, default_handle
from miopy.functional.lrn import local_response_norm, lrn_forward, lrn_grad
from miopy.functional.norm import (
    group_norm,
    group_norm_forward,
    group_norm_grad,
    layer_norm,
    layer_norm_forward,
    layer_norm_grad,
)
from miopy.functional.pooling import (
    avg_pool2d,
    avg_pool3d,
    max_pool2d,
    max_pool3d,
    pool_forward,
    pool_grad,
)
from miopy.functional.softmaxes import log_softmax, softmax, softmax_grad

__all__ = [
    "activation",
    "activation_grad",
    "avg_pool2d",
    "avg_pool3d",
    "batch_norm",
    "batch_norm_forward",
    "batch_norm_grad",
    "conv_bias_activation_forward",
    "clear_plans",
    "conv2d",
    "conv3d",
    "conv_input_grad",
    "conv_transpose2d",
    "conv_transpose3d",
    "conv_weight_grad",
    "default_handle",
    "elu",
    "group_norm",
    "group_norm_forward",
    "group_norm_grad",
    "hardtanh",
    "layer_norm",
    "layer_norm_forward",
    "layer_norm_grad",
    "leaky_relu",
    "local_response_norm",
    "log_softmax",
    "lrn_forward",
    "lrn_grad",
    "max_pool2d",
    "max_pool3d",
    "pool_forward",
    "pool_grad",
    "relu",
    "relu6",
    "sigmoid",
    "softmax",
    "softmax_grad",
    "softplus",
    "tanh",
]
