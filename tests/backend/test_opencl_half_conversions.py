"""The OpenCL fp16 conversions of kernels/common (miopy_types.h's LOAD / STORE, both of LOAD's
variants, and cpu_vec.h's load_f8 / load_f8_loop (F16C) / store_f8 on aligned and unaligned
addresses) against NumPy: every half value, and fp32 values around every rounding boundary,
overflow and the subnormals."""

from __future__ import annotations

import numpy as np
import pytest

SOURCE = """
#define MIOPY_DTYPE 1
#include "common/cpu_vec.h"
#include "common/vec.h"
#define ITEM long i = get_global_id(0);
__kernel void load_even(const __global half* x, __global float* y) { ITEM y[i] = LOAD(x, i); }
__kernel void load_odd(const __global half* x, __global float* y) {
    ITEM (void)__COUNTER__; /* LOAD's other variant */
    y[i] = LOAD(x, i); }
__kernel void store(const __global float* x, __global half* y) { ITEM STORE(y, i, x[i]); }
__kernel void load8(const __global half* x, __global float* y, long shift) {
    long i = get_global_id(0) * 8 + shift; vstore8(load_f8(x, i), 0, y + i); }
__kernel void store8(const __global float* x, __global half* y, long shift) {
    long i = get_global_id(0) * 8 + shift; store_f8(y, i, vload8(0, x + i)); }
__kernel void load8_loop(const __global half* x, __global float* y, long shift) {
    long i = get_global_id(0) * 8 + shift; vstore8(load_f8_loop(x, i), 0, y + i); }
__kernel void load_vec8(const __global half* x, __global float* y, long shift) {
    long i = get_global_id(0) * 8 + shift; float v[8]; load_vec(x, i, v);
    for(int e = 0; e < 8; ++e) y[i + e] = v[e]; }
__kernel void store_vec8(const __global float* x, __global half* y, long shift) {
    long i = get_global_id(0) * 8 + shift; float v[8];
    for(int e = 0; e < 8; ++e) v[e] = x[i + e];
    store_vec(y, i, v); }
"""


@pytest.fixture(scope="module")
def kernels():
    from miopy import backends
    from miopy.backends.opencl import Backend

    why = backends.unavailable_reason("opencl")
    if why is not None:
        pytest.skip(f"opencl unavailable: {why}")
    be = Backend()
    binary = be.build(SOURCE, "half_conversions.cl", [])
    names = ("load_even", "load_odd", "store", "load8", "load8_loop", "store8", "load_vec8", "store_vec8")
    return be, {name: be.load(binary, name) for name in names}


def _run(be, kernel, n_items, src: np.ndarray, out: np.ndarray, *extra) -> np.ndarray:
    a, b = be.upload(src), be.upload(out)
    be.launch(kernel, (n_items,), (1,), [a, b, *extra])
    be.synchronize()
    be.download(b, out)
    return out


def _same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    bits = np.uint16 if got.itemsize == 2 else np.uint32
    return (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))


def test_every_half_loads_exactly(kernels):
    be, k = kernels
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    want = halves.astype(np.float32)
    for name in ("load_even", "load_odd"):
        got = _run(be, k[name], halves.size, halves, np.zeros(halves.size, np.float32))
        assert _same_bits(got, want).all(), name
    # every 16-byte misalignment of the 8-element vector loads (PoCL's vload_half8 assumes 16)
    for name, shift in ((name, shift) for name in ("load8", "load8_loop", "load_vec8") for shift in range(8)):
        n = halves.size - 8
        got = _run(be, k[name], n // 8, halves, np.zeros(halves.size, np.float32), np.int64(shift))
        part = slice(shift, shift + n)
        assert _same_bits(got[part], want[part]).all(), f"{name} shift {shift}"


def _floats() -> np.ndarray:
    rng = np.random.default_rng(5)
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    h = halves[np.isfinite(halves)].astype(np.float32)
    nxt = np.nextafter(h, np.float32(np.inf))
    mids = ((h.astype(np.float64) + np.roll(h, -1).astype(np.float64)) / 2).astype(np.float32)
    extra = [65504, 65519.996, 65520, 1e6, np.inf, -np.inf, np.nan, 2**-25, 2**-26, 3 * 2**-26]
    extra = np.array(extra, np.float32)
    scaled = (rng.standard_normal(1 << 16) * 2.0 ** rng.integers(-30, 18, 1 << 16)).astype(np.float32)
    out = np.concatenate([h, nxt, mids, np.nextafter(mids, np.float32(0)), extra, -extra, scaled])
    return out[: out.size // 8 * 8]


def test_floats_store_rounded_to_nearest_even(kernels):
    be, k = kernels
    x = _floats()
    with np.errstate(all="ignore"):
        want = x.astype(np.float16)
    got = _run(be, k["store"], x.size, x, np.zeros(x.size, np.float16))
    bad = ~_same_bits(got, want)
    assert not bad.any(), f"STORE: {x[bad][:5]} -> {got[bad][:5]}, want {want[bad][:5]}"
    for name, shift in ((name, shift) for name in ("store8", "store_vec8") for shift in range(8)):
        n = x.size - 8
        got = _run(be, k[name], n // 8, x, np.zeros(x.size, np.float16), np.int64(shift))
        part = slice(shift, shift + n)
        bad = ~_same_bits(got[part], want[part])
        assert not bad.any(), f"{name} shift {shift}: {x[part][bad][:5]}"


BF16_SOURCE = """
#define MIOPY_DTYPE 2
#include "common/cpu_vec.h"
__kernel void load8(const __global ushort* x, __global float* y, long shift) {
    long i = get_global_id(0) * 8 + shift; vstore8(load_f8(x, i), 0, y + i); }
__kernel void store8(const __global float* x, __global ushort* y, long shift) {
    long i = get_global_id(0) * 8 + shift; store_f8(y, i, vload8(0, x + i)); }
"""


def test_bf16_vectors_round_to_nearest_even(kernels):
    """cpu_vec.h's bf16 load_f8 (exact) and store_f8 (nearest even, NaN kept) at every shift."""
    be, _ = kernels
    binary = be.build(BF16_SOURCE, "bf16_conversions.cl", [])
    load8, store8 = be.load(binary, "load8"), be.load(binary, "store8")
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    x = _floats()
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    rounded[np.isnan(x)] = 0x7FC0
    for shift in range(8):
        n = bits.size - 8
        got = _run(be, load8, n // 8, bits, np.zeros(bits.size, np.float32), np.int64(shift))
        part = slice(shift, shift + n)
        assert _same_bits(got[part], want[part]).all(), f"bf16 load_f8 shift {shift}"
        n = x.size - 8
        got = _run(be, store8, n // 8, x, np.zeros(x.size, np.uint16), np.int64(shift))
        part = slice(shift, shift + n)
        assert (got[part] == rounded[part]).all(), f"bf16 store_f8 shift {shift}"
