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


class _Buffer:
    """A stand-in device buffer: its address."""

    def __init__(self, ptr: int):
        self.ptr = ptr


def _read(params, n: int, sizes: list[int]) -> list[bytes]:
    return [ctypes.string_at(params[i], size) for i, size in zip(range(n), sizes)]


def test_the_arg_packer_gives_the_bytes_pack_params_gives():
    """ArgPacker (one struct call per launch, a plan per list of argument types) lays out every
    argument as pack_params does from each argument's own bytes: integers of every width, half,
    single and double floats (their bits, NaN and -0.0 included), buffers as their addresses and
    None as a null pointer; an argument of another type (a Python int) is left to the caller."""
    from miopy.backends.cuda import ArgPacker

    packer = ArgPacker({_Buffer: lambda b: b.ptr, type(None): lambda _: 0})
    nan = np.frombuffer(b"\x01\x00\xc0\x7f", np.float32)[0]  # a NaN with a payload
    for ptr in (0x7F00_0000_1000, 0x7F00_0000_2000):  # the same signature twice
        args = [_Buffer(ptr), np.int32(-7), np.uint8(3), np.float16(1.5), np.int64(-(2**40)), None]
        args += [np.float32(-0.0), nan, np.float64(2.5), np.uint64(2**64 - 1), np.int16(-2), np.bool_(True)]
        args += [np.uint32(2**32 - 1), np.int8(-1), np.uint16(9), _Buffer(ptr + 64)]
        args += [np.intc(-3), np.longlong(-4), np.uintc(5), np.int_(6)]
        raws = [
            a.ptr.to_bytes(8, "little") if isinstance(a, _Buffer) else bytes(8) if a is None else a.tobytes()
            for a in args
        ]
        want, _ = pack_params(raws)
        got, storage = packer.pack(args)
        sizes = [len(r) for r in raws]
        assert len(got) == len(args)
        assert _read(got, len(args), sizes) == raws == _read(want, len(args), sizes)
        assert all(p % min(8, s) == 0 for p, s in zip(got, sizes))
        start = ctypes.addressof(storage)
        assert all(start <= p and p + s <= start + ctypes.sizeof(storage) for p, s in zip(got, sizes))
    assert packer.pack([np.int32(1), 5]) is None  # a Python int: the checked path says what is wrong
    assert packer.pack([np.longdouble(1)]) is None and packer.pack([np.complex64(1)]) is None
    assert packer.pack([])[0] is not None
