"""Launch geometry of grid-stride kernels, and whether to compile run-time constants in."""

from __future__ import annotations

from typing import Any

LOCAL = 256
MAX_GROUPS = 65535  # kernels loop grid-stride past this many work-groups


def grid_1d(work_items: int, local: int = LOCAL) -> tuple[tuple[int], tuple[int]]:
    groups = min(max(1, -(-work_items // local)), MAX_GROUPS)
    return (groups * local,), (local,)


def specialize(ctx: Any) -> bool:
    """Compile modes and windows into the kernel (one binary per value) on CUDA, where NVRTC is
    quick and bandwidth is precious; elsewhere (PoCL compiles slowly, a CPU branches cheaply) pass
    them as run-time arguments to one binary."""
    return getattr(ctx, "backend_name", None) == "cuda"
