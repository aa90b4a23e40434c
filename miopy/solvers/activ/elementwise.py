"""Activation as one elementwise kernel (kernels/common/activ.h).

Packed: every tensor dense with the same strides, so the data are one flat array: 16-byte vector
loads and stores (4 fp32 or 8 fp16/bf16 per vector), a grid that covers the data once (with no
bounds checks when it covers them exactly). Tunable: the work-group size, the vectors per work
item and, on CUDA, cache hints (``"stream"``, STREAM_HINTS; 1: ld.global.cs / st.global.cs, evict
first). Defaults from H200 runs of benchmarks/activ_pool.py (ResNet-50 ReLUs at batch 32 against
torch, interleaved rounds, rotating outputs / one output buffer, µs):

* forward, up to 4 Mi elements: 256 work items of 16 elements, no hints (fp32 128x28x28: 8.81
  against 9.08 with one vector);
* forward above that: 256 work items of one vector, with streaming hints up to 80 MB moved (fp32
  64x56x56, 51 MB: 14.90 / 13.08 against 15.00 / 14.12 without, torch 15.25 / 14.00; fp16
  128x56x56: 14.92 / 13.06, torch 15.76 / 15.11), none above (fp32 64x112x112, 103 MB: 51.09
  without, 51.86 with);
* backward: 256 work items with streaming hints up to 24 MiB moved (fp16 512x7x7: 3.56 / 3.37,
  torch 4.00 / 3.59), 512 without above: from 38.5 MB on the hints win with one output buffer
  (fp16 64x56x56 backward 10.44 against 11.10) but lose 1-2 % with rotating outputs (12.14 against
  12.03).

On CUDA, ReLU on fp16/bf16 works on the bits (ACTIV_RAW: one packed comparison per two values;
Nsight Compute, fp16 256x28x28 backward: 0.73 M warp instructions, the integer mask 1.43 M,
torch's threshold_backward 1.43 M; the same DRAM bytes). Strided: any lens and strides, one
element per step; the fallback."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from miopy.problem.activation import ActivationProblem
from miopy.problem.passes import Pass
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import Solver, TunableSolver
from miopy.solvers.launch import LOCAL, MAX_GROUPS, cpu_grid, cpu_kernels, grid_1d, specialize

VEC_BYTES = 16
PACKED_LOCALS = (64, 128, 256, 512)
PACKED_UNROLLS = (1, 2, 4)
SMALL_ELEMENTS = 4 << 20  # forward: up to here, 16 elements per work item
RELU = 3  # miopenActivationRELU
# On CUDA, streaming cache hints ("stream": 1) by default up to these many bytes moved
STREAM_MAX_BYTES_FWD = 80_000_000  # forward, beyond SMALL_ELEMENTS
STREAM_MAX_BYTES_BWD = 24 << 20  # backward
# "stream" config values: (load hint, store hint) of kernels/common/vec.h. 0: none; 1: ld.global.cs
# and st.global.cs (evict first); 2: ld.global.cs only (inputs leave L2 first, outputs stay);
# 3: ld.global.nc.L2::256B (the L2 fetches 256-byte blocks), plain stores.
STREAM_HINTS = {0: (0, 0), 1: (1, 1), 2: (1, 0), 3: (3, 0)}
TUNED_STREAMS = (0, 1)
CPU_RUN = 64  # ACTIV_CPU_RUN: elements a work item of activ_*_cpu takes


def _dense_alike(problem: ActivationProblem) -> str | None:
    descs = [d for _, d in problem.descs]
    first = descs[0]
    if first.element_space != first.element_count:
        return "tensors are not dense"
    if any(d.strides != first.strides for d in descs[1:]):
        return "tensors have different strides"
    return None


def _cpu(ctx, problem: ActivationProblem | None) -> bool:
    """activ_*_cpu for this call (CPU OpenCL devices; not fp64, which cpu_vec.h lacks)."""
    return cpu_kernels(ctx) and problem is not None and problem.dtype.itemsize < 8


def _scalars(problem: ActivationProblem) -> list:
    """The kernels' trailing mode, alpha, beta, gamma."""
    d = problem.desc
    return [np.int32(int(d.mode)), np.float32(d.alpha), np.float32(d.beta), np.float32(d.gamma)]


def _shape(problem: ActivationProblem) -> list:
    n, c, d, h, w = problem.descs[0][1].lens5()
    return [np.int32(v) for v in (n, c, d, h, w)]


def _strides(problem: ActivationProblem, role: str) -> list:
    return [np.int64(s) for s in problem.tensors()[role].strides5()]


class _Activ(Solver):
    primitive = "activ"
    algorithm = "direct"
    dynamic = True
    direction: Pass
    packed: bool

    def is_applicable(self, ctx, problem) -> str | None:
        if not isinstance(problem, ActivationProblem):
            return "not an activation"
        if problem.direction is not self.direction:
            return f"direction is {problem.direction.name}"
        if self.packed:
            return _dense_alike(problem)
        return None

    def _spec(self, ctx, problem: ActivationProblem, kernel: str, work: int) -> KernelSpec:
        global_size, local_size = grid_1d(work)
        defines = {"MIOPY_DTYPE": problem.dtype.code}
        if not self.packed and work + MAX_GROUPS * LOCAL < 2**31:
            defines["ACTIV_IDX32"] = 1
        if specialize(ctx):
            defines["ACTIV_MODE"] = int(problem.desc.mode)
        return KernelSpec("activ", kernel, defines, global_size, local_size)


class _Packed(_Activ, TunableSolver):
    """One flat array; the grid covers it with ``unroll`` vectors per work item."""

    packed = True
    kernel: str

    def default_config(self, ctx, problem) -> dict[str, Any]:
        backward = self.direction is Pass.BACKWARD
        most = STREAM_MAX_BYTES_BWD if backward else STREAM_MAX_BYTES_FWD
        streaming = specialize(ctx) and problem is not None and problem.bytes() <= most
        if backward:
            if streaming:
                return {"local": 256, "unroll": 1, "stream": 1}
            return {"local": 512, "unroll": 1, "stream": 0}
        if problem is not None and problem.descs[0][1].element_count <= SMALL_ELEMENTS:
            return {"local": 256, "unroll": 16 * problem.dtype.itemsize // VEC_BYTES, "stream": 0}
        return {"local": 256, "unroll": 1, "stream": 1 if streaming else 0}

    def search_space(self, ctx, problem) -> Iterable[dict[str, Any]]:
        # OpenCL has no cache hints here; on CUDA, settings 2 and 3 never won a ResNet-50 ReLU on
        # the H200 (benchmarks/activ_probe.py --configs): valid configs, not searched
        streams = TUNED_STREAMS if specialize(ctx) else (0,)
        return [
            {"local": lo, "unroll": u, "stream": st}
            for lo in PACKED_LOCALS
            for u in PACKED_UNROLLS
            for st in streams
        ]

    def is_valid_config(self, ctx, problem, config: Any) -> bool:
        """``{"local", "unroll", "stream"}``; a record without ``stream`` (written before it
        existed) means 0."""
        if not isinstance(config, dict) or set(config) - {"stream"} != {"local", "unroll"}:
            return False
        lo, u, st = config["local"], config["unroll"], config.get("stream", 0)
        return (
            type(lo) is int
            and type(u) is int
            and type(st) is int
            and lo in PACKED_LOCALS
            and u in PACKED_UNROLLS
            and st in STREAM_HINTS
        )

    def packed_spec(self, ctx, problem: ActivationProblem, config: dict | None) -> KernelSpec:
        if _cpu(ctx, problem):  # the CPU kernels (kernels/common/activ.h): float8 runs, any config
            n = problem.descs[0][1].element_count
            kernel = self.kernel.replace("_packed", "_cpu")
            defines = {"MIOPY_DTYPE": problem.dtype.code}
            return KernelSpec("activ", kernel, defines, *cpu_grid(-(-n // CPU_RUN)))
        cfg = config or self.default_config(ctx, problem)
        local, unroll = cfg["local"], cfg["unroll"]
        n = problem.descs[0][1].element_count
        nvec = n // (VEC_BYTES // problem.dtype.itemsize)
        groups = max(1, -(-nvec // (local * unroll)))
        defines = {"MIOPY_DTYPE": problem.dtype.code, "ACTIV_LOCAL": local, "ACTIV_UNROLL": unroll}
        if n + groups * local < 2**31:
            defines["ACTIV_IDX32"] = 1
        if n % (groups * local * unroll * (VEC_BYTES // problem.dtype.itemsize)) == 0:
            defines["ACTIV_EXACT"] = 1  # the grid covers n exactly: no bounds checks, no tail
        if specialize(ctx):
            defines["ACTIV_MODE"] = int(problem.desc.mode)
            if int(problem.desc.mode) == RELU and problem.dtype.itemsize == 2:
                defines["ACTIV_RAW"] = 1  # on the bits, no fp32 round trip (kernels/common/activ.h)
            ld, st = STREAM_HINTS[cfg.get("stream", 0)]  # cache hints (kernels/common/vec.h)
            if ld:
                defines["VEC_LD_HINT"] = ld
            if st:
                defines["VEC_ST_HINT"] = st
        return KernelSpec("activ", self.kernel, defines, (groups * local,), (local,))


class ActivFwdPacked(_Packed):
    name = "ActivFwdPacked"
    id = 300
    direction = Pass.FORWARD
    kernel = "activ_fwd_packed"

    def get_program(self, ctx, problem: ActivationProblem, config=None) -> Program:
        n = problem.descs[0][1].element_count
        spec = self.packed_spec(ctx, problem, config)
        tail = [np.int64(n), *_scalars(problem)]
        return Program((Launch(spec, (Tensor("x"), Tensor("y"), *tail)),))


class ActivFwdStrided(_Activ):
    name = "ActivFwdStrided"
    id = 301
    direction = Pass.FORWARD
    packed = False

    def get_program(self, ctx, problem: ActivationProblem, config=None) -> Program:
        spec = self._spec(ctx, problem, "activ_fwd_strided", problem.descs[0][1].element_count)
        tail = [*_shape(problem), *_strides(problem, "x"), *_strides(problem, "y"), *_scalars(problem)]
        return Program((Launch(spec, (Tensor("x"), Tensor("y"), *tail)),))


_BWD_TENSORS = (Tensor("x"), Tensor("y"), Tensor("dy"), Tensor("dx"))


class ActivBwdPacked(_Packed):
    name = "ActivBwdPacked"
    id = 302
    direction = Pass.BACKWARD
    kernel = "activ_bwd_packed"

    def get_program(self, ctx, problem: ActivationProblem, config=None) -> Program:
        n = problem.descs[0][1].element_count
        spec = self.packed_spec(ctx, problem, config)
        tail = [np.int64(n), *_scalars(problem)]
        return Program((Launch(spec, (*_BWD_TENSORS, *tail)),))


class ActivBwdStrided(_Activ):
    name = "ActivBwdStrided"
    id = 303
    direction = Pass.BACKWARD
    packed = False

    def get_program(self, ctx, problem: ActivationProblem, config=None) -> Program:
        spec = self._spec(ctx, problem, "activ_bwd_strided", problem.descs[0][1].element_count)
        strides = [s for r in ("x", "y", "dy", "dx") for s in _strides(problem, r)]
        tail = [*_shape(problem), *strides, *_scalars(problem)]
        return Program((Launch(spec, (*_BWD_TENSORS, *tail)),))
