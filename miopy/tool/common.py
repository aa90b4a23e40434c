"""What the tool's subcommands share: their error, sizes and ages in words, JSON output, a progress
bar on a terminal (a line every 10% otherwise)."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

from miopy.errors import MiopyError

_T = TypeVar("_T")


class ToolError(MiopyError):
    """A command that cannot do what was asked; the message says why and what to do."""

    status = "miopenStatusBadParm"


def human_size(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def human_age(created: float, now: float | None = None) -> str:
    if not created:
        return "?"
    seconds = max(0.0, (now or time.time()) - created)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def parse_duration(text: str) -> float:
    """Seconds in ``30``/``30d`` (days), ``12h``, ``15m`` or ``45s``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if m is None:
        raise ToolError(f"--older-than={text!r}: expected a number of days, or N followed by s, m, h or d")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 86400}[m.group(2)]


def write_json(value: Any, out: TextIO) -> None:
    json.dump(value, out, indent=2, sort_keys=True, default=str)
    out.write("\n")


def progress(items: Iterable[_T], total: int, desc: str, unit: str = "item") -> Iterator[_T]:
    """tqdm on a terminal; without one, a line on stderr every 10% (so that logs show progress)."""
    if total <= 0:
        return
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None and sys.stderr.isatty():
        yield from tqdm(items, total=total, desc=desc, unit=unit)
        return
    step = max(1, total // 10)
    for i, item in enumerate(items, 1):
        yield item
        if i % step == 0 or i == total:
            print(f"{desc}: {i}/{total} {unit}s", file=sys.stderr, flush=True)
