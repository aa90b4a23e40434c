"""The CUDA backend's kernel arguments packed into one block (``pack_params``, no GPU needed):
every argument reads back as given, from a pointer at its natural alignment."""

from __future__ import annotations

import ctypes

import numpy as np

from miopy.backends.cuda import pack_params


def test_each_argument_reads_back_at_its_alignment():
    values = [np.uint8(7), np.uint64(0x7F00_0000_1234), np.float16(1.5), np.int32(-3), np.float64(2.25)]
    values += [np.int16(-2), np.float32(0.75), np.uint64(2**63 + 5)]
    params, storage = pack_params([v.tobytes() for v in values])
    assert len(params) == len(values)
    for pointer, value in zip(params, values):
        size = value.dtype.itemsize
        assert pointer % size == 0
        got = np.frombuffer(ctypes.string_at(pointer, size), dtype=value.dtype)[0]
        assert got == value
    # every pointer lies inside the storage the caller keeps
    start = ctypes.addressof(storage)
    assert all(start <= p and p + 8 <= start + ctypes.sizeof(storage) + 7 for p in params)


def test_no_arguments_still_gives_a_params_array():
    params, _ = pack_params([])
    assert len(params) == 1


def test_the_same_signature_packs_other_values_and_odd_sizes_align_at_8():
    """The layout is kept per list of sizes: a second launch of the same signature holds its own
    values; an argument of another size (a 12-byte struct) starts at an 8-byte boundary."""
    first = pack_params([np.int32(1).tobytes(), b"\x01" * 12, np.uint64(5).tobytes()])
    second = pack_params([np.int32(2).tobytes(), b"\x02" * 12, np.uint64(6).tobytes()])
    for (params, _), (small, odd, big) in zip((first, second), ((1, 1, 5), (2, 2, 6))):
        assert params[1] % 8 == 0
        assert np.frombuffer(ctypes.string_at(params[0], 4), np.int32)[0] == small
        assert ctypes.string_at(params[1], 12) == bytes([odd]) * 12
        assert np.frombuffer(ctypes.string_at(params[2], 8), np.uint64)[0] == big
