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


def cpu_kernels(ctx: Any) -> bool:
    """Use the kernels written for CPU OpenCL devices (``*_cpu``, kernels/common/cpu_vec.h):
    one work item per run of elements, explicit float8 vectors. Any backend but CUDA (as the
    norm kernels' 2-D apply), so that PoCL, the OpenCL CPU device, gets them."""
    return getattr(ctx, "backend_name", None) != "cuda"


def cpu_grid(work_items: int, local: int = 16) -> tuple[tuple[int], tuple[int]]:
    """Small work-groups for CPU kernels whose work items each do a long run: PoCL runs a
    work-group on one core, so every core needs several groups."""
    local = min(local, 1 << max(0, (work_items - 1).bit_length()))
    return (-(-work_items // local) * local,), (local,)
