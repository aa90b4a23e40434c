"""MIOPY_ENABLE_LOGGING_CMD=1: print, for each problem the engine solves, the miopy-driver command
that reproduces it (MIOpen's ``[LogCmdConvolution]``, ``[LogCmdPooling]``, ...). Any primitive:
the problem writes its own command line (``Problem.driver_args``)."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING

from miopy import config

if TYPE_CHECKING:
    from miopy.problem.base import Problem


def driver_args(problem: Problem, solver_id: int | None = None) -> list[str]:
    """``[subcommand, flags...]`` of the miopy-driver command running ``problem``."""
    return problem.driver_args(solver_id)


def command(problem: Problem, solver_id: int | None = None) -> str:
    return shlex.join(["miopy-driver", *problem.driver_args(solver_id)])


def log_command(problem: Problem, solver_id: int | None = None) -> None:
    """One line on stderr when MIOPY_ENABLE_LOGGING_CMD is set; a no-op otherwise."""
    try:
        if not config.enable_logging_cmd():
            return
        line = f"miopy: Command [LogCmd{problem.log_name}] {command(problem, solver_id)}\n"
    except Exception:  # logging a command must never fail the call it describes
        return
    sys.stderr.write(line)
    sys.stderr.flush()


# The name the convolution-only version had (kept for callers of the public helper).
log_conv_command = log_command

__all__ = ["command", "driver_args", "log_command", "log_conv_command"]
