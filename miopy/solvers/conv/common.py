"""Pieces every convolution kernel shares: shape arguments and launch geometry."""

from __future__ import annotations

import numpy as np

from miopy.problem.conv import ConvProblem

LOCAL = 256
MAX_GROUPS = 65535  # kernels loop grid-stride past this many work-groups


def shape_args(p: ConvProblem) -> list:
    """The CONV_SHAPE_ARGS of kernels/common/conv_shape.h, from a conv-view problem."""
    n, c, di, hi, wi = p.x.lens5()
    k, _, z, y, x = p.w.lens5()
    _, _, do, ho, wo = p.y.lens5()
    pads = (0, *p.pads) if p.spatial_dims == 2 else p.pads
    strides = (1, *p.conv.strides) if p.spatial_dims == 2 else p.conv.strides
    dils = (1, *p.conv.dilations) if p.spatial_dims == 2 else p.conv.dilations
    ints = [n, c, k, p.conv.groups, di, hi, wi, do, ho, wo, z, y, x, *pads, *strides, *dils]
    longs = [*p.x.strides5(), *p.w.strides5(), *p.y.strides5()]
    return [np.int32(v) for v in ints] + [np.int64(v) for v in longs]


def grid_for(work_items: int, local: int = LOCAL) -> tuple[tuple[int], tuple[int]]:
    groups = min(max(1, -(-work_items // local)), MAX_GROUPS)
    return (groups * local,), (local,)
