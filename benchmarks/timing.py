"""Device timing shared by the benchmarks (benchmarks/*.py) and scripts/bench_*.py.

``Timer(iters, reps, sleep_cycles)`` is what every side-by-side benchmark here measures with: a
sleep kernel holds the stream while the host queues ``iters`` launches (so the GPU never waits for
the host), one event pair around them, cycling through the given calls (input sets that together
miss L2), the mean per launch; the median of ``reps`` such loops. With ``flush_l2=True`` the L2
cache is overwritten before every launch instead, outside that launch's own event pair.
``Timer.copy_rate(nbytes)`` is the reference those benchmarks divide by: the bytes a
device-to-device copy of ``nbytes`` moves (read plus write) per microsecond, timed the same way.

The events, the sleep kernel and the flush come from a ``Clock``; ``TorchClock`` (torch's current
stream) is the default, and tests give a clock of their own. Nothing here imports torch or CuPy
until a clock or ``sync`` needs it, so the arithmetic can be tested on a machine without a GPU.

    from timing import Timer, sync     # benchmarks/ is on sys.path (the script's own folder)
    device_us = Timer(iters=50, reps=7, sleep_cycles=20_000_000)
    us = device_us([functools.partial(fn, args) for args in input_sets])
"""

from __future__ import annotations

import functools
import math
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

L2_BYTES = 60 << 20  # a little more than the H200's L2 (50 MiB)
COPY_BUFFERS_MOST = 64  # buffer pairs copy_rate cycles through at the most


class Clock(Protocol):
    """Device events and helpers on one stream."""

    def synchronize(self) -> None: ...

    def sleep(self, cycles: int) -> None:
        """Enqueue a kernel that spins for ``cycles`` clock cycles."""

    def mark(self) -> Any:
        """Record an event now on the stream and return it."""

    def wait(self, event: Any) -> None:
        """Block the host until ``event`` has happened."""

    def elapsed_ms(self, start: Any, end: Any) -> float: ...

    def flush_l2(self) -> None:
        """Enqueue a write over more than the L2 cache."""

    def settle_l2(self) -> None:
        """Enqueue a read of more than the L2 cache (it then holds clean lines of no use to anyone;
        unlike ``flush_l2`` nothing is left to write back)."""


class TorchClock:
    """Torch's current CUDA stream."""

    def __init__(self, l2_bytes: int = L2_BYTES) -> None:
        import torch

        self._torch = torch
        self._l2_bytes = l2_bytes
        self._scratch: Any = None

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def sleep(self, cycles: int) -> None:
        self._torch.cuda._sleep(int(cycles))

    def mark(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def wait(self, event: Any) -> None:
        event.synchronize()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def flush_l2(self) -> None:
        if self._scratch is None:
            self._scratch = self._torch.empty(2 * self._l2_bytes, dtype=self._torch.uint8, device="cuda")
        self._scratch.zero_()

    def settle_l2(self) -> None:
        if self._scratch is None:
            self._scratch = self._torch.zeros(2 * self._l2_bytes, dtype=self._torch.uint8, device="cuda")
        self._torch.amax(self._scratch)

    def copy_pair(self, nbytes: int) -> Callable[[], Any]:
        """A device-to-device copy of ``nbytes`` between two fresh buffers, as a call."""
        src = self._torch.empty(nbytes, dtype=self._torch.uint8, device="cuda")
        return functools.partial(self._torch.empty_like(src).copy_, src)


@functools.cache
def torch_clock() -> TorchClock:
    return TorchClock()


def sync() -> None:
    """Wait for all work on the device (every stream): through torch when the process has loaded
    it, else through CuPy."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.cuda.synchronize()
        return
    import cupy

    cupy.cuda.runtime.deviceSynchronize()


def loop_us(clock: Clock, fns: Sequence[Callable[[], Any]], iters: int, flush_l2: bool = False) -> float:
    """Mean device microseconds per launch of ``iters`` launches cycling through ``fns``, enqueued
    now (after whatever holds the stream). Without ``flush_l2``: one event pair around them all;
    with it: the L2 flushed before each launch, outside that launch's own event pair."""
    if not flush_l2:
        start = clock.mark()
        for i in range(iters):
            fns[i % len(fns)]()
        end = clock.mark()
        clock.wait(end)
        return clock.elapsed_ms(start, end) * 1000.0 / iters
    pairs = []
    for i in range(iters):
        clock.flush_l2()
        start = clock.mark()
        fns[i % len(fns)]()
        pairs.append((start, clock.mark()))
    clock.wait(pairs[-1][1])
    return sum(clock.elapsed_ms(s, e) for s, e in pairs) * 1000.0 / iters


@dataclass(frozen=True)
class Timer:
    """Median over ``reps`` of the mean device time (µs) of ``iters`` launches cycling through the
    calls, each loop queued behind a sleep kernel of ``sleep_cycles`` cycles (about 2 GHz on an
    H200: 20 000 000 cycles hold the stream ~10 ms, time enough to queue every launch).
    ``settle_l2``: a read of more than the L2 before each loop (outside its events), so that no
    loop starts with lines the calls timed before it left behind (benchmarks that time several
    sides on the same inputs: a side whose loads are marked evict-first keeps hitting such lines
    for its whole loop, as they outrank its own)."""

    iters: int
    reps: int
    sleep_cycles: int
    flush_l2: bool = False
    settle_l2: bool = False
    clock: Clock | None = field(default=None, compare=False)

    def _clock(self) -> Clock:
        return self.clock if self.clock is not None else torch_clock()

    def __call__(self, fns: Sequence[Callable[[], Any]], iters: int | None = None) -> float:
        clock = self._clock()
        iters = self.iters if iters is None else iters
        for fn in fns:  # warm-up: compiles, allocator, cuDNN's algorithm choice
            fn()
        clock.synchronize()
        times = []
        for _ in range(self.reps):
            if self.settle_l2:
                clock.settle_l2()
            clock.sleep(self.sleep_cycles)
            times.append(loop_us(clock, fns, iters, self.flush_l2))
        return statistics.median(times)

    def copy_rate(self, nbytes: int, l2_bytes: int = L2_BYTES) -> float:
        """Bytes moved (read + written) per microsecond by a device-to-device copy of ``nbytes``,
        cycling through enough buffer pairs that they do not sit in L2."""
        clock = self._clock()
        copies = [clock.copy_pair(nbytes) for _ in range(copy_buffers(nbytes, l2_bytes))]
        return 2 * nbytes / self(copies)


def n_sets(nbytes: int, most: int, l2_bytes: int = L2_BYTES) -> int:
    """How many input sets of ``nbytes`` to cycle through so that together they cover twice the L2
    cache: at least 2, at most ``most``."""
    return max(2, min(most, math.ceil(2 * l2_bytes / nbytes)))


def copy_buffers(nbytes: int, l2_bytes: int = L2_BYTES) -> int:
    """How many buffer pairs ``Timer.copy_rate`` cycles through for a copy of ``nbytes``."""
    return n_sets(nbytes, COPY_BUFFERS_MOST, l2_bytes)


def runs_for(target_ms: float, estimate_ms: float, least: int = 5, most: int = 100) -> int:
    """How many runs fill ``target_ms`` of device time at ``estimate_ms`` a run, within bounds."""
    return max(least, min(most, int(target_ms / max(estimate_ms, 1e-3))))


def interleaved_samples(
    measure: Callable[[Callable[[], Any]], float], fns: Mapping[str, Callable[[], Any]], rounds: int
) -> dict[str, list[float]]:
    """``measure`` each of ``fns`` in turn, ``rounds`` times round (a slow spell of the device
    hits every side): name -> every sample, in round order."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(measure(fn))
    return samples


def spread(samples: Sequence[float]) -> tuple[float, float, float]:
    """(median, lowest, highest) of a side's samples."""
    return float(statistics.median(samples)), float(min(samples)), float(max(samples))


def verdict(ours: Sequence[float], theirs: Sequence[float]) -> str:
    """How two sides' interleaved samples compare: "faster" / "slower" where every sample of one
    side beats every sample of the other, else "within noise" (the ranges overlap)."""
    if max(ours) < min(theirs):
        return "faster"
    if min(ours) > max(theirs):
        return "slower"
    return "within noise"


def best_interleaved(
    measure: Callable[[Callable[[], Any]], float], fns: Mapping[str, Callable[[], Any]], rounds: int = 2
) -> dict[str, float]:
    """``measure`` each of ``fns`` in turn, ``rounds`` times round (so that a slow spell of the
    device hits every side), and keep each one's best."""
    best = dict.fromkeys(fns, math.inf)
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], measure(fn))
    return best
