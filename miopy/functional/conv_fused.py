"""``conv_bias_activation_forward``: y = act(alpha * conv(x, w) + bias) + beta * y, MIOpen's
miopenConvolutionBiasActivationForward (its alpha1 is ``alpha``; its alpha2 / z residual is not
taken, as MIOpen's own implementation refuses a z) with the conv scaling's ``beta`` / ``out``.

Where the chosen conv solution's solver has a fused epilogue for the activation
(miopy.solvers.conv.epilogue: the implicit-GEMM kernels on CUDA; PASTHRU, RELU, CLIPPED_RELU,
LEAKY_RELU), the conv kernels write the whole result themselves. Otherwise (every other solver,
every other activation, OpenCL) it runs as separate steps: the conv (scaled by alpha), the bias
added over the channels (TensorOp ADD with the bias broadcast), the activation in place, and for
beta != 0 the blend into ``out`` (the conv then writes a temporary).
"""

from __future__ import annotations

from typing import Any

from miopy.errors import bad
from miopy.functional import arrays, core
from miopy.functional.conv import _check_dims, _params, _scaling, plan_conv
from miopy.handle import Handle
from miopy.problem.activation import ActivationDesc, ActivationProblem
from miopy.problem.conv import Direction
from miopy.problem.passes import Pass
from miopy.problem.tensorop import TensorOp, TensorOpProblem
from miopy.solvers.conv.epilogue import Epilogue, scalars
from miopy.solvers.conv.scaled import _tensorop, _zero, fused_solution
from miopy.tensor import TensorDesc

# how the last call ran: "path" "fused" (the conv kernels' epilogue) or "unfused" (separate
# steps), and the conv's "solver"
last_path: dict[str, str] = {}


def conv_bias_activation_forward(
    input: Any,
    weight: Any,
    bias: Any,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    activation: str | int = "relu",
    activ_alpha: float = 1.0,
    activ_beta: float = 1.0,
    activ_gamma: float = 1.0,
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
    handle: Handle | None = None,
) -> Any:
    """y = act(alpha * conv(input, weight) + bias[k]) + beta * out for a 2-d or 3-d convolution
    (PyTorch's conv2d arguments), ``activation`` one of MIOpen's modes (name or code) with its
    alpha, beta, gamma; ``bias`` one value per output channel (any shape of K elements) in the
    input's data type. beta != 0 needs ``out``, which is then written in place and returned."""
    x = arrays.operand(input, "input")
    w = arrays.operand(weight, "weight")
    dims = x.desc.spatial_dims
    _check_dims("weight", w, dims)
    desc = ActivationDesc(activation, activ_alpha, activ_beta, activ_gamma)
    scaling = _scaling(alpha, beta, out) or {"alpha": 1.0, "beta": 0.0}
    a, b = scaling["alpha"], scaling["beta"]
    params = _params(dims, stride, padding, dilation, groups)
    h, made, tensors, result = plan_conv(
        Direction.FORWARD, {"x": x, "w": w}, "y", None, params, handle, x, out
    )
    ydesc = made.problem.y
    k = ydesc.lens[1]
    bop = arrays.vector(bias, "bias", k)
    if bop.desc.dtype != ydesc.dtype:
        raise bad("bias", bop.desc.dtype.value, f"expected {ydesc.dtype.value}, the input's data type")
    epilogue = Epilogue(bias=True, activation=desc.mode)
    fused = fused_solution(h, made.solution, epilogue)
    last_path["solver"] = made.solution.solver
    if fused is not None:
        last_path["path"] = "fused"
        core.run(h, made, {**tensors, "bias": bop}, scalars(a, b, desc.alpha), solution=fused)
        return arrays.finish(x, result)
    last_path["path"] = "unfused"
    _unfused(h, made, tensors, bop, desc, a, b, x)
    return arrays.finish(x, result)


def _unfused(
    h: Handle,
    made: core.Plan,
    tensors: dict[str, arrays.Operand],
    bop: arrays.Operand,
    desc: ActivationDesc,
    alpha: float,
    beta: float,
    like: arrays.Operand,
) -> None:
    """The conv, the bias, the activation (and the blend) as separate steps on ``h``."""
    ydesc = made.problem.y
    y = tensors["y"]
    target = y
    if beta != 0.0:
        tmp = arrays.empty(like, ydesc.lens, ydesc.layout if ydesc.packed else "NCHW")
        target = arrays.operand(tmp, "y")
        if target.desc.strides != ydesc.strides:  # a strided out: the temporary takes its strides
            target = arrays.with_strides(target, ydesc.strides, "y")
    conv_scalars = None if alpha == 1.0 else {"alpha": alpha, "beta": 0.0}
    core.run(h, made, {**tensors, "y": target}, conv_scalars)
    ones = (1,) * (len(ydesc.lens) - 2)
    bias_desc = TensorDesc(ydesc.dtype, (1, ydesc.lens[1], *ones))
    add = TensorOpProblem(TensorOp.ADD, a=ydesc, b=bias_desc, c=ydesc, alpha1=1.0, alpha2=1.0, beta=0.0)
    act = core.plan(
        h,
        ("activ", "F", desc, ("conv-out", ydesc.dtype.value, ydesc.lens, ydesc.strides)),
        lambda: ActivationProblem(desc, Pass.FORWARD, x=ydesc, y=ydesc),
    )
    with core._stream_of(h, [*tensors.values(), bop]):
        h.run_solution(_tensorop(h, add), {"a": target.arg, "b": bop.arg, "c": target.arg})
        h.run_solution(act.solution, {"x": target.arg, "y": target.arg})
        if beta != 0.0:
            zero_desc, zero = _zero(h, ydesc)
            blend = TensorOpProblem(
                TensorOp.ADD, a=ydesc, b=zero_desc, c=ydesc, alpha1=1.0, alpha2=0.0, beta=beta
            )
            h.run_solution(_tensorop(h, blend), {"a": target.arg, "b": zero, "c": y.arg})


__all__ = ["conv_bias_activation_forward"]
