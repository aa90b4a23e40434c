"""ConvDirectTiledFwd: a tunable direct forward convolution (the role of MIOpen's
ConvOclDirectFwd). The shape, the strides and the config are compiled in (kernels/common/conv_tiled.h);
the config picks the output block a work-group computes, the outputs each work item keeps in
registers and how many input channels are staged in local memory at a time."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any, ClassVar

from miopy.errors import bad
from miopy.problem.conv import ConvProblem, Direction
from miopy.solution import KernelSpec, Launch, Program, Tensor
from miopy.solvers.base import TunableSolver

# Every value a config field may take; search_space narrows these to the problem.
DOMAIN: dict[str, tuple[int, ...]] = {
    "tile_h": (1, 2, 4, 8, 16),  # output rows per work-group
    "tile_w": (1, 2, 4, 8, 16, 32),  # output columns per work-group
    "tile_k": (1, 2, 4, 8, 16, 32),  # output channels per work-group
    "out_w": (1, 2, 4),  # output columns per work item
    "out_k": (1, 2, 4),  # output channels per work item
    "c_block": (1, 2, 4, 8, 16),  # input channels staged in local memory per step
}
FIELDS = tuple(DOMAIN)
# With 256 work items a work-group launches on any GPU whatever the compiler's register count
# (64K registers per block / 256 = 255, the per-thread maximum); 1024 failed to launch on NVIDIA
# OpenCL with 16 outputs per item (OUT_OF_RESOURCES), and validity cannot see registers.
MAX_THREADS = 256
SEARCH_MAX_OUTPUTS = 8  # per work item: more spills registers on most GPUs
# Tried in order by default_config, each first shrunk to the problem. The first was the fastest of
# an eighth of the search space on a 3x3 ResNet layer (H100, 1.6x the next one here).
_PREFERRED = (
    {"tile_h": 8, "tile_w": 8, "tile_k": 16, "out_w": 4, "out_k": 1, "c_block": 8},
    {"tile_h": 4, "tile_w": 16, "tile_k": 8, "out_w": 2, "out_k": 2, "c_block": 4},
    {"tile_h": 2, "tile_w": 16, "tile_k": 4, "out_w": 2, "out_k": 2, "c_block": 2},
    {"tile_h": 1, "tile_w": 8, "tile_k": 2, "out_w": 1, "out_k": 1, "c_block": 1},
    {"tile_h": 1, "tile_w": 1, "tile_k": 1, "out_w": 1, "out_k": 1, "c_block": 1},
)


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def threads(config: dict[str, int]) -> int:
    return (config["tile_k"] // config["out_k"]) * config["tile_h"] * (config["tile_w"] // config["out_w"])


def local_bytes(problem: ConvProblem, config: dict[str, int]) -> int:
    """Local memory the kernel declares: the input window and the weights of one channel block."""
    sh, sw = problem.conv.strides
    dh, dw = problem.conv.dilations
    fy, fx = problem.w.lens[2:]
    in_h = (config["tile_h"] - 1) * sh + (fy - 1) * dh + 1
    in_w = (config["tile_w"] - 1) * sw + (fx - 1) * dw + 1
    return 4 * config["c_block"] * (in_h * in_w + config["tile_k"] * fy * fx)


def _limits(ctx) -> tuple[int, int]:
    info = getattr(ctx, "info", None)
    if info is None:
        return MAX_THREADS, 32768
    return min(info.max_work_group_size, MAX_THREADS), info.local_mem_size


class ConvDirectTiledFwd(TunableSolver):
    max_elements: ClassVar[int | None] = 2**31 - 1  # its kernel indexes with int32
    primitive = "conv"
    name = "ConvDirectTiledFwd"
    id = 11
    algorithm = "direct"

    def is_applicable(self, ctx, problem: ConvProblem) -> str | None:
        if problem.direction is not Direction.FORWARD:
            return f"direction is {problem.direction.name}"
        if problem.spatial_dims != 2:
            return "3-d convolution"
        smallest = _PREFERRED[-1]
        if local_bytes(problem, smallest) > _limits(ctx)[1]:
            return "the filter window (with dilation) does not fit in local memory"
        return None

    # ---- configs ---------------------------------------------------------------------------------
    def is_valid_config(self, ctx, problem: ConvProblem, config: Any) -> bool:
        if not isinstance(config, dict) or set(config) != set(FIELDS):
            return False
        for key, value in config.items():
            # bool is an int subclass, but True is no tile size
            if type(value) is not int or value not in DOMAIN[key]:
                return False
        if config["tile_w"] % config["out_w"] or config["tile_k"] % config["out_k"]:
            return False
        max_threads, local_mem = _limits(ctx)
        return threads(config) <= max_threads and local_bytes(problem, config) <= local_mem

    def default_config(self, ctx, problem: ConvProblem) -> dict[str, Any]:
        _, _, ho, wo = problem.y.lens
        cg = problem.x.lens[1] // problem.conv.groups
        kg = problem.w.lens[0] // problem.conv.groups
        # shrink the preferred shapes to the problem: no block much larger than what it covers
        caps = {
            "tile_h": _pow2_at_least(ho),
            "tile_w": _pow2_at_least(wo),
            "tile_k": _pow2_at_least(kg),
            "c_block": _pow2_at_least(cg),
        }
        for preferred in _PREFERRED:
            config = {key: min(value, caps.get(key, value)) for key, value in preferred.items()}
            config["out_w"] = min(config["out_w"], config["tile_w"])
            config["out_k"] = min(config["out_k"], config["tile_k"])
            if self.is_valid_config(ctx, problem, config):
                return config
        return dict(_PREFERRED[-1])

    def search_space(self, ctx, problem: ConvProblem) -> Iterable[dict[str, Any]]:
        """The valid configs whose blocks suit the problem: tiles up to the next power of two of
        what they cover (at least 4, so that small problems still have a choice), at least 8
        columns and 4 channels wide where the output has them, at most 8 outputs per work item,
        and work-groups of at most 256 and at least a quarter of the largest possible (max 64)."""
        _, _, ho, wo = problem.y.lens
        cg = problem.x.lens[1] // problem.conv.groups
        kg = problem.w.lens[0] // problem.conv.groups
        caps = {
            "tile_h": min(8, max(4, _pow2_at_least(ho))),
            "tile_w": max(4, _pow2_at_least(wo)),
            "tile_k": min(16, max(4, _pow2_at_least(kg))),
            "c_block": min(8, max(2, _pow2_at_least(cg))),
            "out_w": 4,
            "out_k": 4,
        }
        floors = {
            "tile_w": min(8, _pow2_at_least(wo)),
            "tile_k": min(4, _pow2_at_least(kg)),
            "c_block": min(2, _pow2_at_least(cg)),
        }
        candidates = []
        for values in itertools.product(*(DOMAIN[f] for f in FIELDS)):
            config = dict(zip(FIELDS, values))
            if any(not floors.get(f, 1) <= config[f] <= caps[f] for f in FIELDS):
                continue
            if config["out_w"] * config["out_k"] > SEARCH_MAX_OUTPUTS:
                continue
            if self.is_valid_config(ctx, problem, config):
                candidates.append(config)
        if not candidates:
            return [self.default_config(ctx, problem)]
        low = min(64, max(threads(c) for c in candidates) // 4)
        return [c for c in candidates if threads(c) >= low]

    # ---- solution --------------------------------------------------------------------------------
    def get_program(self, ctx, problem: ConvProblem, config: dict[str, Any] | None = None) -> Program:
        if config is None:
            config = self.default_config(ctx, problem)
        elif not self.is_valid_config(ctx, problem, config):
            raise bad("config", config, f"not a valid {self.name} config for {problem.key()}")
        n, c, hi, wi = problem.x.lens
        k, _, fy, fx = problem.w.lens
        _, _, ho, wo = problem.y.lens
        g = problem.conv.groups
        defines: dict[str, Any] = {"MIOPY_DTYPE": problem.dtype.code}
        values = (
            n,
            c,
            k,
            g,
            hi,
            wi,
            ho,
            wo,
            fy,
            fx,
            *problem.pads,
            *problem.conv.strides,
            *problem.conv.dilations,
            *problem.x.strides,
            *problem.w.strides,
            *problem.y.strides,
        )
        names = ("N C K G HI WI HO WO Y X PH PW SH SW DH DW XN XC XH XW WK WC WY WX YN YK YH YW").split()
        defines.update({f"CT_{name}": int(v) for name, v in zip(names, values)})
        defines.update({f"CT_{f.upper()}": config[f] for f in FIELDS})
        tiles = (
            math.ceil(wo / config["tile_w"])
            * math.ceil(ho / config["tile_h"])
            * math.ceil(k // g / config["tile_k"])
            * g
            * n
        )
        local = threads(config)
        spec = KernelSpec("conv_tiled", "conv_tiled_fwd", defines, (tiles * local,), (local,))
        return Program((Launch(spec, (Tensor("x"), Tensor("w"), Tensor("y"))),))
