"""Backends, one module each, found by name: ``miopy.backends.<name>.Backend``."""

from __future__ import annotations

import importlib

from miopy.backends.base import Backend, DeviceInfo
from miopy.errors import BackendUnavailable, bad

NAMES = ("cuda", "opencl")  # auto picks the first one that can run here


def backend_class(name: str) -> type[Backend]:
    if name not in NAMES:
        raise bad("backend", name, f"expected auto or one of {', '.join(NAMES)}")
    return importlib.import_module(f"miopy.backends.{name}").Backend


def unavailable_reason(name: str) -> str | None:
    try:
        cls = backend_class(name)
    except ImportError as exc:
        return f"cannot import its package ({exc})"
    return cls.unavailable_reason()


def create(name: str = "auto", device: int = 0) -> Backend:
    if not isinstance(device, int) or isinstance(device, bool):
        raise bad("device", device, "expected a device index (an integer)")
    if name == "auto":
        reasons = []
        for candidate in NAMES:
            why = unavailable_reason(candidate)
            if why is None:
                return backend_class(candidate)(device)
            reasons.append(f"{candidate}: {why}")
        raise BackendUnavailable("no backend can run here: " + "; ".join(reasons))
    why = unavailable_reason(name)
    if why is not None:
        raise BackendUnavailable(f"backend={name!r}: {why}")
    return backend_class(name)(device)


__all__ = ["Backend", "DeviceInfo", "NAMES", "backend_class", "create", "unavailable_reason"]
