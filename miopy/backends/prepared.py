"""Prepared runs: an invoker run once against a ``Recorder`` instead of the backend turns into a
list of prepared calls (``Backend.prepare_launch`` / ``prepare_gemm`` / any ``prepare_<method>``)
whose arguments, buffers included, were converted once. Running a solution again on the same
buffers then costs the calls themselves and nothing else.

An invoker that does anything else through the backend (allocates, copies, synchronises) is not
recordable: ``Recorder.ok`` turns False and the caller keeps the ordinary path."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

# What an invoker may read from the backend without doing anything.
_PURE = frozenset(
    {"name", "info", "nbytes", "has_vendor_gemm", "kernel_dir", "kernel_ext", "device_id", "buffer_at"}
)


class Recorder:
    """Stands in for ``backend`` while an invoker runs: ``launch``, ``gemm`` and every method X
    with a ``prepare_X`` become prepared calls in ``calls``, in order; nothing is enqueued."""

    def __init__(self, backend: Any):
        self._backend = backend
        self.calls: list[Callable[[], None]] = []
        self.ok = True

    def __getattr__(self, name: str) -> Any:
        backend = self._backend
        prepare = getattr(backend, f"prepare_{name}", None)
        if prepare is not None:
            calls = self.calls

            def record(*args: Any, **kwargs: Any) -> None:
                calls.append(prepare(*args, **kwargs))

            self.__dict__[name] = record  # the next call of ``name`` finds it without this lookup
            return record
        attr = getattr(backend, name)
        if name.startswith("prepare_") or name in _PURE or not callable(attr):
            return attr
        self.ok = False  # a side effect we cannot replay: let it happen, give up recording
        return attr


class PreparedCache:
    """Prepared calls by key, least recently used dropped past ``capacity`` entries."""

    # A training iteration of ResNet-50 runs 121 problems, each solution on its own buffers: the
    # cache holds a few such networks before it drops anything.
    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        # Public for the caller's hit path (a lookup and ``move_to_end``, no method call between).
        self.entries: OrderedDict[Any, tuple[Any, list[Callable[[], None]], Any]] = OrderedDict()

    def get(self, key: Any) -> tuple[Any, list[Callable[[], None]], Any] | None:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def put(self, key: Any, entry: tuple[Any, list[Callable[[], None]], Any]) -> None:
        self.entries[key] = entry
        self.entries.move_to_end(key)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        self.entries.clear()

    def __len__(self) -> int:
        return len(self.entries)
