"""benchmarks/timing.py's arithmetic and call order, on a simulated device clock."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import timing  # noqa: E402


class FakeClock:
    """A device whose clock advances only by what is enqueued: each call costs what ``cost`` says,
    a flush costs ``flush_us``; events read the clock when they are marked."""

    def __init__(self, flush_us: float = 0.0) -> None:
        self.now_us = 0.0
        self.flush_us = flush_us
        self.log: list[str] = []

    def synchronize(self) -> None:
        self.log.append("sync")

    def sleep(self, cycles: int) -> None:
        self.log.append(f"sleep {cycles}")
        self.now_us += cycles / 1000.0

    def mark(self) -> float:
        return self.now_us

    def wait(self, event: float) -> None:
        assert event <= self.now_us

    def elapsed_ms(self, start: float, end: float) -> float:
        return (end - start) / 1000.0

    def flush_l2(self) -> None:
        self.log.append("flush")
        self.now_us += self.flush_us

    def launch(self, name: str, us: float):
        def fn():
            self.log.append(name)
            self.now_us += us

        return fn

    def copy_pair(self, nbytes: int):
        return self.launch("copy", nbytes / 2000.0)  # 2000 bytes per µs each way


def test_timer_warms_up_then_cycles_through_the_calls():
    clock = FakeClock()
    timer = timing.Timer(iters=5, reps=2, sleep_cycles=7, clock=clock)
    us = timer([clock.launch("a", 1.0), clock.launch("b", 3.0)])
    loop = ["sleep 7", "a", "b", "a", "b", "a"]
    assert clock.log == ["a", "b", "sync", *loop, *loop]
    assert us == pytest.approx((3 * 1.0 + 2 * 3.0) / 5)


def test_timer_iters_override_and_median_of_reps():
    clock = FakeClock()
    costs = iter([10.0, 1.0, 2.0, 100.0])  # warm-up, then one cost per loop of one launch

    def varying():
        clock.now_us += next(costs)

    timer = timing.Timer(iters=50, reps=3, sleep_cycles=0, clock=clock)
    assert timer([varying], iters=1) == pytest.approx(2.0)


def test_flush_is_outside_the_timed_launches():
    clock = FakeClock(flush_us=1000.0)
    timer = timing.Timer(iters=4, reps=1, sleep_cycles=0, flush_l2=True, clock=clock)
    assert timer([clock.launch("a", 2.0)]) == pytest.approx(2.0)
    assert clock.log[3:] == ["flush", "a"] * 4


def test_copy_rate_counts_read_and_write():
    clock = FakeClock()
    timer = timing.Timer(iters=3, reps=1, sleep_cycles=0, clock=clock)
    nbytes = 1 << 20
    assert timer.copy_rate(nbytes) == pytest.approx(2 * nbytes / (nbytes / 2000.0))
    assert clock.log.count("copy") == timing.copy_buffers(nbytes) + 3


@pytest.mark.parametrize(
    ("nbytes", "most", "want"),
    [(1, 16, 16), (timing.L2_BYTES, 16, 2), (timing.L2_BYTES // 3, 16, 6), (10 * timing.L2_BYTES, 16, 2)],
)
def test_n_sets(nbytes, most, want):
    assert timing.n_sets(nbytes, most) == want


def test_copy_buffers_bounds():
    assert timing.copy_buffers(1 << 30) == 2
    assert timing.copy_buffers(1 << 10) == timing.COPY_BUFFERS_MOST
    assert timing.copy_buffers(2 << 20) == math.ceil(2 * timing.L2_BYTES / (2 << 20))


def test_runs_for():
    assert timing.runs_for(10.0, 1.0) == 10
    assert timing.runs_for(10.0, 100.0) == 5
    assert timing.runs_for(10.0, 0.0) == 100


def test_best_interleaved_alternates_and_keeps_the_best():
    calls = []
    times = {"m": iter([3.0, 2.0]), "t": iter([1.0, 4.0])}

    def measure(fn):
        calls.append(fn)
        return next(times[fn])

    assert timing.best_interleaved(measure, {"m": "m", "t": "t"}) == {"m": 2.0, "t": 1.0}
    assert calls == ["m", "t", "m", "t"]


def test_torch_clock_drives_torch_cuda(monkeypatch):
    """TorchClock through a stand-in of the torch.cuda calls it makes (no GPU here)."""
    import types

    calls = []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.at = None

        def record(self):
            calls.append("record")
            self.at = len(calls)

        def synchronize(self):
            calls.append("event sync")

        def elapsed_time(self, end):
            return float(end.at - self.at)

    class Buffer:
        def zero_(self):
            calls.append("zero")

        def copy_(self, src):
            calls.append("copy")

    cuda = types.SimpleNamespace(
        synchronize=lambda: calls.append("sync"),
        _sleep=lambda cycles: calls.append(f"sleep {cycles}"),
        Event=Event,
    )
    fake = types.SimpleNamespace(
        cuda=cuda,
        uint8="uint8",
        empty=lambda n, dtype, device: calls.append(f"empty {n} {dtype} {device}") or Buffer(),
        empty_like=lambda t: Buffer(),
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    clock = timing.TorchClock(l2_bytes=10)
    timer = timing.Timer(iters=2, reps=1, sleep_cycles=5, clock=clock)
    us = timer([lambda: calls.append("fn")])
    assert calls == ["fn", "sync", "sleep 5", "record", "fn", "fn", "record", "event sync"]
    assert us == pytest.approx(3 * 1000.0 / 2)  # three calls between the two records
    calls.clear()
    clock.flush_l2()
    clock.flush_l2()
    assert calls == ["empty 20 uint8 cuda", "zero", "zero"]
    calls.clear()
    clock.copy_pair(8)()
    assert calls == ["empty 8 uint8 cuda", "copy"]
    calls.clear()
    timing.sync()
    assert calls == ["sync"]


def test_interleaved_samples_spread_and_verdict():
    order = []
    values = {"m": iter([3.0, 1.0, 2.0]), "t": iter([2.5, 2.6, 2.4])}

    def measure(name: str) -> float:
        order.append(name)
        return next(values[name])

    samples = timing.interleaved_samples(measure, {"m": "m", "t": "t"}, rounds=3)
    assert order == ["m", "t"] * 3
    assert samples == {"m": [3.0, 1.0, 2.0], "t": [2.5, 2.6, 2.4]}
    assert timing.spread(samples["m"]) == (2.0, 1.0, 3.0)
    assert timing.verdict(samples["m"], samples["t"]) == "within noise"
    assert timing.verdict([1.0, 1.1], [1.2, 1.3]) == "faster"
    assert timing.verdict([1.4, 1.5], [1.2, 1.3]) == "slower"


def test_settle_l2_before_each_loop():
    """settle_l2: the cache is read over before every loop's hold, never inside a timed loop."""
    clock = FakeClock()
    clock.settle_l2 = lambda: clock.log.append("settle")  # type: ignore[method-assign]
    timer = timing.Timer(iters=2, reps=3, sleep_cycles=1000, settle_l2=True, clock=clock)
    timer([lambda: None])
    holds = [i for i, what in enumerate(clock.log) if what.startswith("sleep")]
    assert len(holds) == 3 and all(clock.log[i - 1] == "settle" for i in holds)
    assert clock.log.count("settle") == 3
