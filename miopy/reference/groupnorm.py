"""Reference group norm (float64): layer norm's reference over (N, G) rows."""

from __future__ import annotations

from miopy.problem.layernorm import GroupNormProblem
from miopy.reference.layernorm import norm_reference, random_buffers, reference


def samples() -> list[GroupNormProblem]:
    from miopy.problem.nd import NdDesc, channels_last_strides

    out = []
    for d in "FB":
        out.append(GroupNormProblem(NdDesc("fp32", (2, 8, 3, 5)), 4, 1e-5, 1, d))
        out.append(GroupNormProblem(NdDesc("fp16", (3, 6, 2, 2, 3)), 3, 1e-5, 0, d))
        out.append(GroupNormProblem(NdDesc("bf16", (2, 8, 7)), 2, 1e-5, 1, d))
        out.append(GroupNormProblem(NdDesc("fp32", (2, 4, 3, 3), (80, 18, 6, 2)), 2, 1e-5, 1, d))
        # channels-last (the packed NHWC path) and a 3-D one
        out.append(
            GroupNormProblem(NdDesc("fp16", (3, 8, 4, 5), channels_last_strides((3, 8, 4, 5))), 2, 1e-5, 1, d)
        )
        out.append(
            GroupNormProblem(NdDesc("fp32", (2, 12, 7), channels_last_strides((2, 12, 7))), 3, 1e-5, 1, d)
        )
    return out


__all__ = ["norm_reference", "random_buffers", "reference", "samples"]
