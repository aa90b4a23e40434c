"""``miopy-driver <subcommand> [flags]``: MIOpenDriver's command line (driver-flags.md).

Subcommands are looked up in ``SUBCOMMANDS``; each family module parses its own flag table with
``parse_flags`` and returns an exit status. Errors never show a traceback: one line on stderr.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any, TextIO

from miopy import config
from miopy.errors import BadParm, MiopyError, NotImplementedStatus

PROG = "miopy-driver"

EXIT_OK = 0
EXIT_ERROR = 1  # bad parameters, unsupported options, library errors
EXIT_VERIFY_FAILED = 3  # a direction ran but did not match the CPU reference

# subcommand -> (module, function name, argument); the function is called as fn(arg, argv, out).
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "conv": ("miopy.driver.conv", "run", "FP32"),
    "convfp16": ("miopy.driver.conv", "run", "FP16"),
    "convbfp16": ("miopy.driver.conv", "run", "BF16"),
    "pool": ("miopy.driver.pool", "run", "FP32"),
    "poolfp16": ("miopy.driver.pool", "run", "FP16"),
    "poolbfp16": ("miopy.driver.pool", "run", "BF16"),
    "activ": ("miopy.driver.activ", "run", "FP32"),
    "activfp16": ("miopy.driver.activ", "run", "FP16"),
    "activbfp16": ("miopy.driver.activ", "run", "BF16"),
    "bnorm": ("miopy.driver.bnorm", "run", "bnorm"),
    "bnormfp16": ("miopy.driver.bnorm", "run", "bnormfp16"),
    "bnormfp16fp32": ("miopy.driver.bnorm", "run", "bnormfp16fp32"),
    "bnormbfp16fp32": ("miopy.driver.bnorm", "run", "bnormbfp16fp32"),
    "bnormbfp16": ("miopy.driver.bnorm", "run", "bnormbfp16"),
    "tensorop": ("miopy.driver.tensorop", "run", "FP32"),
    "tensoropfp16": ("miopy.driver.tensorop", "run", "FP16"),
    "tensoropbfp16": ("miopy.driver.tensorop", "run", "BF16"),
    "softmax": ("miopy.driver.softmax", "run", "FP32"),
    "softmaxfp16": ("miopy.driver.softmax", "run", "FP16"),
    "softmaxbfp16": ("miopy.driver.softmax", "run", "BF16"),
    "reduce": ("miopy.driver.reduce", "run", "FP32"),
    "reducefp16": ("miopy.driver.reduce", "run", "FP16"),
    "reducebfp16": ("miopy.driver.reduce", "run", "BF16"),
    "reducefp64": ("miopy.driver.reduce", "run", "FP64"),
    "lrn": ("miopy.driver.lrn", "run", "FP32"),
    "lrnfp16": ("miopy.driver.lrn", "run", "FP16"),
    "lrnbfp16": ("miopy.driver.lrn", "run", "BF16"),
    "layernorm": ("miopy.driver.layernorm", "run", "FP32"),
    "layernormfp16": ("miopy.driver.layernorm", "run", "FP16"),
    "layernormbfp16": ("miopy.driver.layernorm", "run", "BF16"),
    "groupnorm": ("miopy.driver.groupnorm", "run", "FP32"),
    "groupnormfp16": ("miopy.driver.groupnorm", "run", "FP16"),
    "groupnormbfp16": ("miopy.driver.groupnorm", "run", "BF16"),
}

_INT = re.compile(r"^[+-]?[0-9]+$")


@dataclass(frozen=True)
class Flag:
    """One flag: every flag takes a value, as in MIOpenDriver's InputFlags."""

    short: str  # one character after "-"
    long: str  # without the leading "--"
    default: Any
    help: str
    kind: type = int  # int, float or str

    @property
    def label(self) -> str:
        return f"-{self.short}/--{self.long}"

    def convert(self, text: str) -> Any:
        if self.kind is int:
            if not _INT.match(text.strip()):
                raise BadParm(f"{self.label}={text!r}: expected an integer")
            return int(text)
        if self.kind is float:
            try:
                return float(text)
            except ValueError:
                raise BadParm(f"{self.label}={text!r}: expected a number") from None
        return text


def parse_flags(argv: list[str], flags: list[Flag]) -> dict[str, Any]:
    """Values by long name, defaults filled in. Accepts ``-n 32``, ``--batchsize 32`` and
    ``--batchsize=32``; a value may start with "-" (``-S -1``). Exact names only (no prefixes)."""
    by_short = {f.short: f for f in flags}
    by_long = {f.long: f for f in flags}
    values = {f.long: f.default for f in flags}
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, value = None, None
        if token.startswith("--") and len(token) > 2:
            name, eq, inline = token[2:].partition("=")
            flag = by_long.get(name)
            if eq:
                value = inline
        elif token.startswith("-") and len(token) == 2:
            flag = by_short.get(token[1])
        if flag is None:
            if token.startswith("-"):
                raise BadParm(f"{token}: unknown flag (--help lists them)")
            raise BadParm(f"{token!r}: unexpected argument; every flag takes the form -f VALUE")
        if value is None:
            if i + 1 >= len(argv):
                raise BadParm(f"{flag.label}: missing value")
            value = argv[i + 1]
            i += 1
        values[flag.long] = flag.convert(value)
        i += 1
    return values


def wants_help(argv: list[str]) -> bool:
    return any(a in ("-h", "--help", "-?") for a in argv)


def print_flags(subcommand: str, flags: list[Flag], out: TextIO) -> None:
    print(f"Usage: {PROG} {subcommand} [flags]", file=out)
    for f in flags:
        default = f"{f.default!r}" if f.kind is str else f"{f.default}"
        print(f"  -{f.short}  --{f.long:<22} {f.help} (default {default})", file=out)


def usage() -> str:
    return f"usage: {PROG} <{'|'.join(SUBCOMMANDS)}> [flags]; {PROG} <subcommand> --help lists the flags"


def _one_line(text: str) -> str:
    lines = [line for line in str(text).splitlines() if line.strip()] or [""]
    if len(lines) == 1:
        return lines[0]
    return f"{lines[0]} ... ({len(lines) - 1} more lines; MIOPY_LOG_LEVEL=5 prints them)"


def _verbose() -> bool:
    try:
        return config.log_level() >= 5
    except MiopyError:
        return False


def error(message: str, err: TextIO | None = None) -> None:
    print(f"{PROG}: {message}", file=err or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the driver; returns the exit status (the console script's entry point)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = sys.stdout
    if not argv:
        error(usage())
        return EXIT_ERROR
    if argv[0] in ("-h", "--help", "-?"):
        print(usage(), file=out)
        return EXIT_OK
    sub, rest = argv[0], argv[1:]
    entry = SUBCOMMANDS.get(sub)
    if entry is None:
        error(f"subcommand={sub!r}: unknown (expected one of {', '.join(SUBCOMMANDS)})")
        return EXIT_ERROR
    try:
        module, name, arg = entry
        fn: Callable[[str, list[str], TextIO], int] = getattr(import_module(module), name)
        return fn(arg, rest, out)
    except NotImplementedStatus as exc:
        error(f"not supported: {_one_line(exc)}")
    except MiopyError as exc:
        message = str(exc)
        error(message if _verbose() else _one_line(message))
    except KeyboardInterrupt:
        error("interrupted")
        return 130
    except BrokenPipeError:  # `miopy-driver ... | head`: stop quietly
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_ERROR
    except Exception as exc:  # a bug: still one line, the traceback only when asked for
        if _verbose():
            traceback.print_exc()
        error(f"internal error: {type(exc).__name__}: {_one_line(exc)}")
    return EXIT_ERROR


def command_line(subcommand: str, argv: list[str]) -> str:
    """The command as one would type it again."""
    return shlex.join([PROG, subcommand, *argv])


def begin(subcommand: str, argv: list[str], flags: list[Flag], out: TextIO) -> dict[str, Any] | None:
    """What every subcommand does first: with -h, --help or -?, print its flags and return None;
    else echo the command line (flushed, so that it comes before anything the run prints) and
    return the flag values."""
    if wants_help(argv):
        print_flags(subcommand, flags, out)
        return None
    print(command_line(subcommand, argv), file=out)
    out.flush()
    return parse_flags(argv, flags)


__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_VERIFY_FAILED", "Flag", "SUBCOMMANDS", "main", "parse_flags"]
