"""Exceptions mirroring miopenStatus_t. Every message names the offending field and its value."""

from __future__ import annotations


class MiopyError(Exception):
    """Base of every miopy error; ``status`` is the miopenStatus_t name."""

    status = "miopenStatusUnknownError"


class NotInitialized(MiopyError):
    status = "miopenStatusNotInitialized"


class InvalidValue(MiopyError, ValueError):
    status = "miopenStatusInvalidValue"


class BadParm(MiopyError, ValueError):
    status = "miopenStatusBadParm"


class NotApplicable(BadParm):
    """The chosen solver cannot run this problem; the message carries its reason."""


class AllocFailed(MiopyError, MemoryError):
    status = "miopenStatusAllocFailed"


class InternalError(MiopyError):
    status = "miopenStatusInternalError"


class NotImplementedStatus(MiopyError):
    status = "miopenStatusNotImplemented"


class UnknownError(MiopyError):
    status = "miopenStatusUnknownError"


class UnsupportedOp(MiopyError):
    status = "miopenStatusUnsupportedOp"


class BackendUnavailable(MiopyError):
    """The requested backend cannot run here (no driver, no device, package missing)."""

    status = "miopenStatusNotInitialized"


class CompileError(InternalError):
    """A kernel failed to build; the message carries the compiler log."""


def bad(field: str, value: object, why: str) -> BadParm:
    """A BadParm whose message reads ``<field>=<value>: <why>``, on one line (a long value, such
    as a NumPy array, is shortened)."""
    text = " ".join(repr(value).split())
    if len(text) > 160:
        text = text[:150] + " ..." + text[-6:]
    return BadParm(f"{field}={text}: {why}")
