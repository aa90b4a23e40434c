"""How the norm kernels (kernels/common/norm.h) see a problem's tensors.

A problem lists its dims (``Dim``): length, whether the dim indexes the statistics' key or is
reduced over, and each tensor role's stride along it ("x", "y", "dy", "dx", "stat" for the
statistics, "param" for per-element weights). ``view8`` orders the key dims and the reduction dims
by x's strides (memory order), merges neighbours that every role steps through as one, adds the
linear key index as role "k" and pads to the kernels' 4 + 4 dims. ``packed_geometry`` says whether
the dense kernels apply (rows: reduction contiguous; cols: key contiguous) and with what numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from miopy.errors import bad
from miopy.problem.nd import Dim

DATA_ROLES = ("x", "y", "dy", "dx")
MAX_GROUP_DIMS = 4


def with_key_index(dims: list[Dim]) -> list[Dim]:
    """The dims with role "k": the linear key index, row-major over the key dims in x's memory
    order (how the kernels number keys and store per-key values)."""
    keys = sorted((d for d in dims if d.key and d.length > 1), key=lambda d: -d.stride("x"))
    step, kstride = 1, {}
    for d in reversed(keys):
        kstride[id(d)] = step
        step *= d.length
    return [Dim(d.length, d.key, {**d.strides, "k": kstride.get(id(d), 0)}) for d in dims]


def _merge(group: list[Dim], roles: tuple[str, ...]) -> list[Dim]:
    out: list[Dim] = []
    for d in group:
        if out:
            o = out[-1]
            if all(o.stride(r) == d.stride(r) * d.length for r in roles):
                out[-1] = Dim(o.length * d.length, o.key, {r: d.stride(r) for r in roles})
                continue
        out.append(d)
    return out


def ordered(dims: list[Dim], roles: tuple[str, ...]) -> tuple[list[Dim], list[Dim]]:
    """(key dims, reduction dims), each in x's memory order with mergeable neighbours merged."""
    live = [d for d in dims if d.length > 1]
    key = sorted((d for d in live if d.key), key=lambda d: -d.stride("x"))
    red = sorted((d for d in live if not d.key), key=lambda d: -d.stride("x"))
    return _merge(key, roles), _merge(red, roles)


@dataclass(frozen=True)
class View8:
    lens: tuple[int, ...]
    strides: dict[str, tuple[int, ...]]

    @property
    def K(self) -> int:
        return math.prod(self.lens[:4])

    @property
    def R(self) -> int:
        return math.prod(self.lens[4:])

    def lens_args(self) -> list:
        return [np.int64(v) for v in self.lens]

    def stride_args(self, role: str) -> list:
        return [np.int64(v) for v in self.strides.get(role, (0,) * 8)]


def view8(dims: list[Dim], roles: tuple[str, ...], what: str = "x.lens") -> View8:
    """The kernels' 8-dim view (``dims`` must carry role "k" already where it is used)."""
    key, red = ordered(dims, roles)
    for name, group in (("key", key), ("reduction", red)):
        if len(group) > MAX_GROUP_DIMS:
            raise bad(
                what, [d.length for d in dims], f"more than {MAX_GROUP_DIMS} {name} dims that cannot merge"
            )
    pad = Dim(1, False, {})
    key = [pad] * (4 - len(key)) + key
    red = [pad] * (4 - len(red)) + red
    all8 = key + red
    return View8(tuple(d.length for d in all8), {r: tuple(d.stride(r) for d in all8) for r in roles})


@dataclass(frozen=True)
class PackedGeometry:
    """Numbers of the dense kernels. rows: key k's data are S segments of L contiguous elements
    at (k / klo) * khi + (k % klo) * kstride + s*sstride (a key of two dims: an outermost one of
    stride khi and an inner one of klo keys; klo = K and khi = 0 for a key of one block); cols:
    x[row * rstride + k]. Apply: key of element i is (i / kd) % km + (i / kd2) * kmul2."""

    kind: str
    K: int
    n: int
    S: int = 1
    L: int = 1
    kstride: int = 0
    sstride: int = 0
    rows: int = 1
    rstride: int = 0
    kd: int = 1
    km: int = 1
    klo: int = 0  # 0: K
    khi: int = 0
    kd2: int = 0  # 0: n
    kmul2: int = 0


def packed_geometry(dims: list[Dim], data_roles: tuple[str, ...]) -> PackedGeometry | str:
    """The dense kernels' geometry, or why they do not apply."""
    first = data_roles[0]
    for r in data_roles[1:]:
        if any(d.stride(r) != d.stride(first) for d in dims if d.length > 1):
            return f"{r} and {first} have different strides"
    lens = [d.length for d in dims]
    n = math.prod(lens)
    space = 1 + sum((d.length - 1) * d.stride(first) for d in dims)
    if space != n:
        return "tensors are not dense"
    if n >= 2**31:
        return "more than 2^31 elements"
    key, red = ordered(dims, ("x",))
    K = math.prod(d.length for d in key)
    if len(key) == 2 and red and red[-1].stride("x") == 1 and len(red) <= 2:
        # an outer key dim around everything (N of NHWC group norm) and an inner one (its groups)
        hi, lo = key
        if hi.stride("x") * hi.length != n or any(d.stride("x") > hi.stride("x") for d in red):
            return "the key dims are not one block of memory"
        S, sstride = (red[0].length, red[0].stride("x")) if len(red) == 2 else (1, 0)
        return PackedGeometry(
            "rows",
            K,
            n,
            S=S,
            L=red[-1].length,
            kstride=lo.stride("x"),
            sstride=sstride,
            kd=lo.stride("x"),
            km=lo.length,
            klo=lo.length,
            khi=hi.stride("x"),
            kd2=hi.stride("x"),
            kmul2=lo.length,
        )
    if len(key) > 1:
        return "the key dims are not one block of memory"
    if not red:
        return "nothing to reduce"
    if not key:
        return (
            PackedGeometry(
                "rows",
                1,
                n,
                S=red[0].length if len(red) == 2 else 1,
                L=red[-1].length,
                sstride=red[0].stride("x") if len(red) == 2 else 0,
                kd=n,
                km=1,
            )
            if red[-1].stride("x") == 1 and len(red) <= 2
            else "layout"
        )
    k = key[0]
    if red[-1].stride("x") == 1 and len(red) <= 2:
        S, sstride = (red[0].length, red[0].stride("x")) if len(red) == 2 else (1, 0)
        return PackedGeometry(
            "rows",
            K,
            n,
            S=S,
            L=red[-1].length,
            kstride=k.stride("x"),
            sstride=sstride,
            kd=k.stride("x"),
            km=K,
        )
    if k.stride("x") == 1 and len(red) == 1:
        return PackedGeometry("cols", K, n, rows=red[0].length, rstride=red[0].stride("x"), kd=1, km=K)
    return "neither the key nor the reduction is contiguous"


__all__ = [
    "DATA_ROLES",
    "Dim",
    "PackedGeometry",
    "View8",
    "ordered",
    "packed_geometry",
    "view8",
    "with_key_index",
]
