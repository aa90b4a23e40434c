"""Reference convolution in every direction: loops only over filter taps, each tap one einsum
over whole tensors, accumulated in float64."""

from __future__ import annotations

import itertools

import numpy as np

from miopy.problem.conv import ConvProblem, Direction
from miopy.reference.common import rms_range, store_logical, view
from miopy.tensor import TensorDesc, from_storage

__all__ = [
    "conv_reference",
    "conv_reference_buffers",
    "reference",
    "rms_range",
    "samples",
    "store_logical",
    "view",
]


def _as5(a: np.ndarray) -> np.ndarray:
    return a if a.ndim == 5 else a[:, :, None]


def _taps(p: ConvProblem):
    """(tap index, input slices) for every filter position of a conv-view problem."""
    _, _, do, ho, wo = p.y.lens5()
    z, y, x = p.w.lens5()[2:]
    pads = (0, *p.pads) if p.spatial_dims == 2 else p.pads
    strides = (1, *p.conv.strides) if p.spatial_dims == 2 else p.conv.strides
    dils = (1, *p.conv.dilations) if p.spatial_dims == 2 else p.conv.dilations
    for tap in itertools.product(range(z), range(y), range(x)):
        slices = tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dils, (do, ho, wo), strides)
        )
        yield tap, slices, pads


def _padded_shape(p: ConvProblem) -> tuple[int, int, int]:
    _, _, do, ho, wo = p.y.lens5()
    _, _, di, hi, wi = p.x.lens5()
    z, y, x = p.w.lens5()[2:]
    pads = (0, *p.pads) if p.spatial_dims == 2 else p.pads
    strides = (1, *p.conv.strides) if p.spatial_dims == 2 else p.conv.strides
    dils = (1, *p.conv.dilations) if p.spatial_dims == 2 else p.conv.dilations
    return tuple(
        max(i + pd, (o - 1) * s + (f - 1) * d + 1)  # type: ignore[return-value]
        for i, pd, o, s, f, d in zip((di, hi, wi), pads, (do, ho, wo), strides, (z, y, x), dils)
    )


def conv_reference(problem: ConvProblem, tensors: dict[str, np.ndarray]) -> np.ndarray:
    """Compute the output of ``problem`` from float input tensors in logical shape.

    ``tensors`` maps roles to arrays of logical shape (the output role is ignored). Returns the
    output in float64, logical shape."""
    p = problem.conv_view()
    roles = problem.roles
    t = {
        view_role: np.asarray(tensors[user_role], dtype=np.float64)
        for view_role, user_role in roles.items()
        if user_role in tensors and user_role != problem.output_role
    }
    g = p.conv.groups
    n, c, di, hi, wi = p.x.lens5()
    k = p.w.lens[0]
    cg, kg = c // g, k // g
    _, _, do, ho, wo = p.y.lens5()
    pd_, ph_, pw_ = _padded_shape(p)
    zl, yl, xl = (0, *p.pads) if p.spatial_dims == 2 else p.pads
    w = _as5(t["w"]).reshape(g, kg, cg, *p.w.lens5()[2:]) if "w" in t else None
    if p.direction is Direction.FORWARD:
        xp = np.zeros((n, g, cg, pd_, ph_, pw_))
        xp[:, :, :, zl : zl + di, yl : yl + hi, xl : xl + wi] = _as5(t["x"]).reshape(n, g, cg, di, hi, wi)
        out = np.zeros((n, g, kg, do, ho, wo))
        for tap, sl, _ in _taps(p):
            out += np.einsum("ngcdhw,gkc->ngkdhw", xp[(...,) + sl], w[(...,) + tap], optimize=True)
        return out.reshape(p.y.lens)
    if p.direction is Direction.BACKWARD_DATA:
        dy = _as5(t["y"]).reshape(n, g, kg, do, ho, wo)
        dxp = np.zeros((n, g, cg, pd_, ph_, pw_))
        for tap, sl, _ in _taps(p):
            dxp[(...,) + sl] += np.einsum("ngkdhw,gkc->ngcdhw", dy, w[(...,) + tap], optimize=True)
        return dxp[:, :, :, zl : zl + di, yl : yl + hi, xl : xl + wi].reshape(p.x.lens)
    xp = np.zeros((n, g, cg, pd_, ph_, pw_))
    xp[:, :, :, zl : zl + di, yl : yl + hi, xl : xl + wi] = _as5(t["x"]).reshape(n, g, cg, di, hi, wi)
    dy = _as5(t["y"]).reshape(n, g, kg, do, ho, wo)
    dw = np.zeros((g, kg, cg, *p.w.lens5()[2:]))
    for tap, sl, _ in _taps(p):
        dw[(...,) + tap] = np.einsum("ngcdhw,ngkdhw->gkc", xp[(...,) + sl], dy, optimize=True)
    return dw.reshape(p.w.lens)


def conv_reference_buffers(problem: ConvProblem, buffers: dict[str, np.ndarray]) -> np.ndarray:
    """Like ``conv_reference`` but from flat stored buffers (the device's bytes)."""
    descs = {"x": problem.x, "w": problem.w, "y": problem.y}
    logical = {
        role: from_storage(view(buf, descs[role]), problem.dtype)
        for role, buf in buffers.items()
        if role != problem.output_role
    }
    return conv_reference(problem, logical)


def reference(problem: ConvProblem, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The pipeline's reference contract: expected outputs by role (float64, logical shape)
    from flat stored buffers."""
    return {problem.output_role: conv_reference_buffers(problem, buffers)}


def samples() -> list[ConvProblem]:
    """Small problems on which every registered convolution solver applies at least once (the
    registry-walking test runs each solver on each of these it takes)."""
    from miopy.problem.conv import ConvDesc

    def make(dtype, xlens, wlens, direction, layout=None, **conv) -> ConvProblem:
        x = TensorDesc(dtype, xlens, layout=layout)
        w = TensorDesc(dtype, wlens, layout=layout)
        return ConvProblem.create(x, w, ConvDesc(**conv), direction)

    out = []
    for d in "FBW":
        out.append(make("fp32", (2, 4, 6, 7), (4, 4, 3, 3), d, pads=(1, 1)))  # im2col GEMMs, tiled
        out.append(make("fp16", (2, 4, 5, 5), (6, 4, 1, 1), d, "NHWC", pads=(0, 0)))  # 1x1 GEMMs
        out.append(
            make("bf16", (1, 4, 5, 6), (4, 1, 3, 2), d, pads=(1, 0), strides=(2, 1), groups=2, mode="trans")
        )
        out.append(make("fp32", (1, 2, 3, 4, 4), (2, 2, 2, 2, 2), d, "NDHWC", pads=(1, 0, 1)))
    out.append(make("fp16", (2, 8, 6, 6), (8, 8, 3, 3), "F", "NHWC", pads=(1, 1)))  # tensor cores
    for d in "FBW":  # tensor cores on NCHW (transposed around the NHWC kernels)
        out.append(make("fp16", (2, 8, 6, 6), (8, 8, 3, 3), d, pads=(1, 1)))
    return out
