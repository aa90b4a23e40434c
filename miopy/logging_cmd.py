"""MIOPY_ENABLE_LOGGING_CMD=1: print, for each problem the engine solves, the miopy-driver command
that reproduces it (MIOpen's ``[LogCmdConvolution]``)."""

from __future__ import annotations

import shlex
import sys

from miopy import config
from miopy.problem.conv import ConvProblem, Direction
from miopy.tensor import DataType

SUBCOMMAND = {DataType.FP32: "conv", DataType.FP16: "convfp16", DataType.BF16: "convbfp16"}
_FORW = {Direction.FORWARD: "1", Direction.BACKWARD_DATA: "2", Direction.BACKWARD_WEIGHTS: "4"}


def driver_args(problem: ConvProblem, solver_id: int | None = None) -> list[str]:
    """``[subcommand, flags...]`` of the miopy-driver command running ``problem`` (one direction).

    2-D problems use MIOpen's short flags; the depth flags of 3-D ones are long (as MIOpen logs
    them). Pads are the descriptor's, with ``-z`` when the pad mode is not default. Layouts are
    given when not the default; a strided (non-packed) tensor cannot be written as flags and is
    logged with the default layout."""
    c = problem.conv
    x, w, y = problem.x, problem.w, problem.y
    three = problem.spatial_dims == 3

    def axes(values) -> dict[str, int]:
        return dict(zip("dhw" if three else "hw", values))

    ins, fil, pads = axes(x.lens[2:]), axes(w.lens[2:]), axes(c.pads)
    strides, dils, opads = axes(c.strides), axes(c.dilations), axes(c.trans_output_pads)
    args = [SUBCOMMAND[problem.dtype], "-n", x.lens[0], "-c", x.lens[1]]
    if three:
        args += ["--in_d", ins["d"]]
    args += ["-H", ins["h"], "-W", ins["w"], "-k", y.lens[1]]
    if three:
        args += ["--fil_d", fil["d"]]
    args += ["-y", fil["h"], "-x", fil["w"]]
    if three:
        args += ["--pad_d", pads["d"]]
    args += ["-p", pads["h"], "-q", pads["w"]]
    if three:
        args += ["--conv_stride_d", strides["d"]]
    args += ["-u", strides["h"], "-v", strides["w"]]
    if three:
        args += ["--dilation_d", dils["d"]]
    args += ["-l", dils["h"], "-j", dils["w"]]
    if c.mode == "trans":
        if three:
            args += ["--trans_output_pad_d", opads["d"]]
        args += ["-Y", opads["h"], "-X", opads["w"]]
    if three:
        args += ["--spatial_dim", 3]
    default = "NCDHW" if three else "NCHW"
    for flag, desc in (("--in_layout", x), ("--out_layout", y), ("--fil_layout", w)):
        if desc.packed and desc.layout != default:
            args += [flag, desc.layout]
    args += ["-m", c.mode, "-g", c.groups]
    if c.pad_mode != "default":
        args += ["-z", c.pad_mode]
    args += ["-F", _FORW[problem.direction], "-t", 1]
    if solver_id is not None:
        args += ["-S", solver_id]
    return [str(a) for a in args]


def command(problem: ConvProblem, solver_id: int | None = None) -> str:
    return shlex.join(["miopy-driver", *driver_args(problem, solver_id)])


def log_conv_command(problem: ConvProblem, solver_id: int | None = None) -> None:
    """One line on stderr when MIOPY_ENABLE_LOGGING_CMD is set; a no-op otherwise."""
    try:
        if not config.enable_logging_cmd():
            return
        line = f"miopy: Command [LogCmdConvolution] {command(problem, solver_id)}\n"
    except Exception:  # logging a command must never fail the call it describes
        return
    sys.stderr.write(line)
    sys.stderr.flush()


__all__ = ["command", "driver_args", "log_conv_command"]
