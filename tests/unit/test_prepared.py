"""Prepared runs without a device: the Recorder turns launches into prepared calls, and gives up
on anything it cannot replay; the cache drops the least recently used entry."""

from __future__ import annotations

from miopy.backends.prepared import PreparedCache, Recorder


class FakeBackend:
    name = "fake"

    def __init__(self):
        self.enqueued = []

    def launch(self, kernel, global_size, local_size, args):
        self.enqueued.append(("launch", kernel, tuple(args)))

    def prepare_launch(self, kernel, global_size, local_size, args):
        frozen = tuple(args)
        return lambda: self.enqueued.append(("launch", kernel, frozen))

    def nbytes(self, buffer):
        return len(buffer)

    def alloc(self, nbytes):
        self.enqueued.append(("alloc", nbytes))
        return bytearray(nbytes)


def test_recorder_prepares_launches_in_order_and_enqueues_nothing():
    backend = FakeBackend()
    rec = Recorder(backend)
    args = [1, 2]
    rec.launch("k1", (4,), (4,), args)
    args.append(3)  # the prepared call holds the arguments as they were
    rec.launch("k2", (4,), (4,), args)
    assert rec.nbytes(b"abc") == 3 and rec.name == "fake"
    assert rec.ok and backend.enqueued == [] and len(rec.calls) == 2
    for call in rec.calls:
        call()
    assert backend.enqueued == [("launch", "k1", (1, 2)), ("launch", "k2", (1, 2, 3))]


def test_recorder_gives_up_on_side_effects():
    backend = FakeBackend()
    rec = Recorder(backend)
    rec.launch("k", (1,), (1,), [])
    buf = rec.alloc(8)  # still done, but the invoker is not recordable
    assert len(buf) == 8 and not rec.ok


def test_cache_drops_least_recently_used():
    cache = PreparedCache(capacity=2)
    cache.put("a", (None, [], None))
    cache.put("b", (None, [], None))
    assert cache.get("a") is not None  # "a" is now the most recent
    cache.put("c", (None, [], None))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert len(cache) == 2


def test_device_array_in_logical_shape_with_the_layouts_strides_is_accepted():
    """A torch channels_last tensor is (N, C, H, W) with NHWC strides: accepted for an NHWC
    descriptor; the same shape with NCHW strides is not."""
    import pytest

    from miopy.arrays import check_device
    from miopy.errors import BadParm
    from miopy.tensor import TensorDesc

    class Tensor:  # the attributes a torch tensor shows
        dtype = "torch.float16"

        def __init__(self, shape, strides):
            self.shape, self._strides = shape, strides

        def stride(self):
            return self._strides

    desc = TensorDesc("fp16", (2, 3, 4, 5), layout="NHWC")
    check_device(Tensor((2, 3, 4, 5), (60, 1, 15, 3)), desc, "x")
    check_device(Tensor((2, 4, 5, 3), (60, 15, 3, 1)), desc, "x")
    with pytest.raises(BadParm):
        check_device(Tensor((2, 3, 4, 5), (60, 20, 5, 1)), desc, "x")
    w = TensorDesc("fp16", (8, 3, 1, 1), layout="NHWC")  # 1x1: torch gives (3, 1, 3, 3)
    check_device(Tensor((8, 3, 1, 1), (3, 1, 3, 3)), w, "w")


def test_an_invoker_on_a_recorder_records_what_a_new_invoker_would():
    """A first run records its prepared calls through the solution's own invoker moved onto the
    recorder (ProgramInvoker.on), not through a second invoker: the same calls, same order,
    same resolved buffers, and the original still runs on its backend."""
    import numpy as np

    from miopy.invoker import ProgramInvoker
    from miopy.solution import InvokeArgs, KernelSpec, Launch, Program, Tensor, Workspace

    a, b = KernelSpec("f", "a", {"X": 1}, (8,), (4,)), KernelSpec("f", "b", {}, (16,), (8,))
    program = Program(
        (
            Launch(a, (Tensor("x"), np.int32(3), Workspace())),
            Launch(b, (Tensor("y"), Tensor("x"))),
            Launch(a, (Tensor("y"), np.int32(5), Workspace())),
        )
    )
    ka, kb = ("kernel a",), ("kernel b",)  # kernel handles (a str would name a library call)
    kernels = {a: ka, b: kb}
    args = InvokeArgs({"x": b"xx", "y": b"yyy"}, b"ws")
    own = ProgramInvoker(FakeBackend(), program, kernels)
    records = []
    for invoker in (own.on, lambda rec: ProgramInvoker(rec, program, kernels)):
        backend = FakeBackend()
        rec = Recorder(backend)
        invoker(rec)(args)
        assert rec.ok and backend.enqueued == []
        for call in rec.calls:
            call()
        records.append(backend.enqueued)
    assert records[0] == records[1] and [r[1] for r in records[0]] == [ka, kb, ka]
    own(args)
    assert own.backend.enqueued == records[0]
