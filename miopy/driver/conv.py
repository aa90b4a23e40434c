"""``conv``, ``convfp16``, ``convbfp16``: MIOpenDriver's convolution driver.

For each direction chosen by ``-F``: pick a solution (Find API, immediate mode or a named solver),
run it ``-i`` times, print the kernel time and stats (``-t 1``), the wall-clock time (``-w``), and
verify against the NumPy reference (``-V 1``)."""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from miopy.checks import INDEX_MAX
from miopy.driver import harness
from miopy.driver.cli import (
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    Flag,
    begin,
    parse_flags,
)
from miopy.errors import BadParm, NotImplementedStatus
from miopy.problem.conv import DRIVER_SUBCOMMAND as SUBCOMMAND
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.reference.conv import conv_reference_buffers
from miopy.reference.tolerance import tolerance as shared_tolerance
from miopy.tensor import LAYOUTS_2D, LAYOUTS_3D, DataType, TensorDesc

FLAGS: list[Flag] = [
    Flag("n", "batchsize", 100, "mini-batch size"),
    Flag("c", "in_channels", 3, "input channels"),
    Flag("H", "in_h", 32, "input height"),
    Flag("W", "in_w", 32, "input width"),
    Flag("!", "in_d", 32, "input depth (3-D)"),
    Flag("k", "out_channels", 32, "output channels"),
    Flag("y", "fil_h", 3, "filter height"),
    Flag("x", "fil_w", 3, "filter width"),
    Flag("@", "fil_d", 3, "filter depth (3-D)"),
    Flag("p", "pad_h", 0, "zero padding, height"),
    Flag("q", "pad_w", 0, "zero padding, width"),
    Flag("$", "pad_d", 0, "zero padding, depth"),
    Flag("u", "conv_stride_h", 1, "stride, height"),
    Flag("v", "conv_stride_w", 1, "stride, width"),
    Flag("#", "conv_stride_d", 1, "stride, depth"),
    Flag("l", "dilation_h", 1, "dilation, height"),
    Flag("j", "dilation_w", 1, "dilation, width"),
    Flag("^", "dilation_d", 1, "dilation, depth"),
    Flag("g", "group_count", 1, "groups"),
    Flag("m", "mode", "conv", "conv or trans (transposed convolution)", str),
    Flag("z", "pad_mode", "default", "default, same or valid", str),
    Flag("Y", "trans_output_pad_h", 0, "output padding of a transposed conv, height"),
    Flag("X", "trans_output_pad_w", 0, "output padding of a transposed conv, width"),
    Flag("%", "trans_output_pad_d", 0, "output padding of a transposed conv, depth"),
    Flag("_", "spatial_dim", 2, "2 or 3"),
    Flag("F", "forw", 0, "0 fwd+bwd+wrw, 1 fwd, 2 bwd data, 4 wrw, 3 fwd+bwd, 5 fwd+wrw, 6 bwd+wrw"),
    Flag("I", "in_layout", "", "input layout: NCHW, NHWC (2-D), NCDHW, NDHWC (3-D)", str),
    Flag("O", "out_layout", "", "output layout", str),
    Flag("f", "fil_layout", "", "filter layout", str),
    Flag("i", "iter", 10, "timed iterations"),
    Flag("t", "time", 0, "print the kernel time (device events)"),
    Flag("w", "wall", 0, "1: wall-clock time too; 2: with a warm-up run first"),
    Flag("V", "verify", 1, "verify each direction against the CPU reference"),
    Flag("C", "verification_cache", "", "directory caching reference results", str),
    Flag("s", "search", 0, "1: tune (search the perf-config space)"),
    Flag("S", "solution", "-1", "<0 Find API; 0 immediate mode, fastest; N or a name: that solver", str),
    Flag("P", "printconv", 1, "print the convolution dimensions"),
    Flag("o", "dump_output", 0, "dump output buffers to files"),
    Flag("d", "in_data", "", "input data file (raw stored dtype, or .npy)", str),
    Flag("e", "weights", "", "weights file", str),
    Flag("D", "dout_data", "", "dy data file", str),
    Flag("b", "bias", 0, "use bias"),
    Flag("a", "in_bias", "", "bias file", str),
    Flag("r", "pad_val", 0.0, "padding value", float),
    Flag("G", "gpualloc", 0, "1: initialise buffers on the device (then -V 1 cannot pass)"),
    Flag("Z", "tensor_vect", 0, "vectorised tensor type"),
    Flag("L", "vector_length", 1, "vector length"),
    Flag("U", "in_cast_type", -1, "input cast type"),
    Flag("T", "out_cast_type", -1, "output cast type"),
    Flag("R", "wei_cast_type", -1, "weights cast type"),
]
_BY_LONG = {f.long: f for f in FLAGS}

FORW = {0: "FBW", 1: "F", 2: "B", 3: "FB", 4: "W", 5: "FW", 6: "BW"}
FORW_OF = {Direction.FORWARD: 1, Direction.BACKWARD_DATA: 2, Direction.BACKWARD_WEIGHTS: 4}
# run label, verify label, stats prefix, dump file
_NAMES = {
    Direction.FORWARD: ("Forward Conv.", "Forward Convolution", "fwd-conv", "dump_fwd_out_gpu.bin"),
    Direction.BACKWARD_DATA: (
        "Backward Data Conv.",
        "Backward Convolution Data",
        "bwdd-conv",
        "dump_bwd_din_gpu.bin",
    ),
    Direction.BACKWARD_WEIGHTS: (
        "Backward Weights Conv.",
        "Backward Convolution Weights",
        "bwdw-conv",
        "dump_bwd_dwei_gpu.bin",
    ),
}


def _label(long: str) -> str:
    return _BY_LONG[long].label


def _bad(long: str, value: Any, why: str) -> BadParm:
    return BadParm(f"{_label(long)}={value}: {why}")


# ---- problem ------------------------------------------------------------------------------------


def parse(argv: list[str]) -> dict[str, Any]:
    return parse_flags(argv, FLAGS)


def directions(values: dict[str, Any]) -> list[Direction]:
    forw = values["forw"]
    if forw not in FORW:
        raise _bad("forw", forw, "expected 0 (all), 1 (fwd), 2 (bwd data), 4 (wrw), 3, 5 or 6")
    return [Direction(d) for d in FORW[forw]]


def _layout(values: dict[str, Any], long: str, dims: int) -> str:
    text = str(values[long]).strip().upper()
    valid = LAYOUTS_3D if dims == 3 else LAYOUTS_2D
    if not text:
        return valid[0]
    if text not in valid:
        raise _bad(
            long, values[long], f"unknown layout for a {dims}-d convolution (expected {' or '.join(valid)})"
        )
    return text


_SIZE_FLAGS = tuple(
    f"{name}_{a}" if a else name
    for name, axes in (
        ("batchsize", ""),
        ("in_channels", ""),
        ("out_channels", ""),
        ("group_count", ""),
        ("in", "dhw"),
        ("fil", "dhw"),
        ("pad", "dhw"),
        ("conv_stride", "dhw"),
        ("dilation", "dhw"),
        ("trans_output_pad", "dhw"),
    )
    for a in (axes or [""])
)


def build_problem(
    values: dict[str, Any], dtype: DataType | str, direction: Direction | str = Direction.FORWARD
) -> ConvProblem:
    """The ConvProblem a driver command line describes; bad values raise BadParm naming the flag."""
    dtype = DataType.parse(dtype)
    dims = values["spatial_dim"]
    if dims not in (2, 3):
        raise _bad("spatial_dim", dims, "expected 2 or 3")
    axes = "dhw" if dims == 3 else "hw"
    for long in (
        "batchsize",
        "in_channels",
        "out_channels",
        "group_count",
        *(f"in_{a}" for a in axes),
        *(f"fil_{a}" for a in axes),
        *(f"conv_stride_{a}" for a in axes),
        *(f"dilation_{a}" for a in axes),
    ):
        if values[long] < 1:
            raise _bad(long, values[long], "must be positive")
    for long in (*(f"pad_{a}" for a in axes), *(f"trans_output_pad_{a}" for a in axes)):
        if values[long] < 0:
            raise _bad(long, values[long], "must be >= 0")
    for long in _SIZE_FLAGS:
        if values[long] > INDEX_MAX and (dims == 3 or not long.endswith("_d")):
            raise _bad(long, values[long], f"exceeds {INDEX_MAX}, the largest size the kernels index (int32)")
    mode = str(values["mode"]).strip().lower()
    if mode not in ("conv", "trans"):
        raise _bad("mode", values["mode"], "expected conv or trans")
    pad_mode = str(values["pad_mode"]).strip().lower()
    if pad_mode not in ("default", "same", "valid"):
        raise _bad("pad_mode", values["pad_mode"], "expected default, same or valid")
    n, c, k, g = (values[f] for f in ("batchsize", "in_channels", "out_channels", "group_count"))
    if c % g:
        raise _bad("group_count", g, f"input channels (-c {c}) are not divisible by the group count")
    if k % g:
        raise _bad("group_count", g, f"output channels (-k {k}) are not divisible by the group count")
    for a in axes:
        size, fil, pad = values[f"in_{a}"], values[f"fil_{a}"], values[f"pad_{a}"]
        stride, dil = values[f"conv_stride_{a}"], values[f"dilation_{a}"]
        opad = values[f"trans_output_pad_{a}"]
        span = dil * (fil - 1) + 1
        if mode == "conv":
            if opad:
                raise _bad(f"trans_output_pad_{a}", opad, "output padding needs -m trans")
            padded = size if pad_mode == "valid" else size + 2 * pad
            if pad_mode != "same" and padded < span:
                what = f"filter (dilation {dil}: span {span})" if dil > 1 else "filter"
                raise _bad(
                    f"fil_{a}",
                    fil,
                    f"{what} is larger than the padded input "
                    f"({size} + 2*{0 if pad_mode == 'valid' else pad})",
                )
        else:
            if opad >= max(stride, dil):
                raise _bad(f"trans_output_pad_{a}", opad, "must be smaller than the stride or the dilation")
            if pad_mode == "default" and (size - 1) * stride + span - 2 * pad + opad <= 0:
                raise _bad(f"pad_{a}", pad, "too large: the transposed convolution's output is empty")
    in_sp = [values[f"in_{a}"] for a in axes]
    fil = [values[f"fil_{a}"] for a in axes]
    conv = ConvDesc(
        [values[f"pad_{a}"] for a in axes],
        [values[f"conv_stride_{a}"] for a in axes],
        [values[f"dilation_{a}"] for a in axes],
        g,
        mode,
        [values[f"trans_output_pad_{a}"] for a in axes] if mode == "trans" else None,
        pad_mode,
    )
    wlens = (k, c // g, *fil) if mode == "conv" else (c, k // g, *fil)
    x = TensorDesc(dtype, (n, c, *in_sp), layout=_layout(values, "in_layout", dims))
    w = TensorDesc(dtype, wlens, layout=_layout(values, "fil_layout", dims))
    return ConvProblem.create(x, w, conv, direction, y_layout=_layout(values, "out_layout", dims))


def problem_from_args(
    argv: list[str], dtype: DataType | str | None = None, direction: Direction | str | None = None
) -> ConvProblem:
    """Parse ``[subcommand] flags...`` into the problem of the single direction ``-F`` selects
    (or ``direction``); the subcommand, when given first, sets the data type."""
    argv = list(argv)
    if argv and argv[0] in _DTYPE_OF:
        sub_dtype = _DTYPE_OF[argv.pop(0)]
        dtype = dtype or sub_dtype
    values = parse(argv)
    if direction is None:
        dirs = directions(values)
        if len(dirs) != 1:
            raise _bad("forw", values["forw"], "selects more than one direction")
        direction = dirs[0]
    return build_problem(values, dtype or DataType.FP32, direction)


_DTYPE_OF = {name: dtype for dtype, name in SUBCOMMAND.items()}


# ---- data and verification ---------------------------------------------------------------------

_FILES = {"x": "in_data", "w": "weights", "y": "dout_data"}


def _inputs(problem: ConvProblem, values: dict[str, Any]) -> dict[str, np.ndarray]:
    files = {role: (values[long], _label(long)) for role, long in _FILES.items()}
    return harness.inputs(problem, files, {role: "xwy".index(role) for role in "xwy"})


def tolerance(problem: ConvProblem, solution: Any = None) -> float:
    """The shared rule of miopy.reference.tolerance (scales with the reduction length)."""
    return shared_tolerance(problem, solution)


def reference(problem: ConvProblem, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The expected output by role (float64, logical shape)."""
    return {problem.output_role: conv_reference_buffers(problem, inputs)}


def case(problem: ConvProblem) -> harness.Case:
    """How the harness runs, times, dumps and verifies one direction."""
    run_name, verify_name, _, dump_name = _NAMES[problem.direction]
    return harness.Case(
        problem,
        run_name,
        verify_name,
        dump_name,
        reference=reference,
        tolerance=tolerance,
        stats=lambda ms: list(_stats(problem, ms)),
        solution_flag=_label("solution"),
        what=problem.direction.title,
    )


# ---- running ------------------------------------------------------------------------------------


def _check_supported(values: dict[str, Any]) -> None:
    if values["bias"]:
        raise NotImplementedStatus(f"{_label('bias')}={values['bias']}: bias is not implemented")
    if values["pad_val"]:
        raise NotImplementedStatus(
            f"{_label('pad_val')}={values['pad_val']:g}: only zero padding is implemented"
        )
    if values["tensor_vect"]:
        raise NotImplementedStatus(
            f"{_label('tensor_vect')}={values['tensor_vect']}: vectorised tensors are not implemented"
        )
    if values["vector_length"] != 1:
        raise NotImplementedStatus(
            f"{_label('vector_length')}={values['vector_length']}: vectorised tensors are not implemented"
        )
    for long in ("in_cast_type", "out_cast_type", "wei_cast_type"):
        if values[long] != -1:
            raise NotImplementedStatus(f"{_label(long)}={values[long]}: cast types are not implemented")
    harness.check_common(values, _label)
    for long in ("printconv", "gpualloc"):
        if values[long] not in (0, 1):
            raise _bad(long, values[long], "expected 0 or 1")
    if values["gpualloc"] and values["verify"]:
        raise BadParm(
            f"{_label('gpualloc')}=1 with {_label('verify')}=1: buffers initialised on the "
            "device have no host copy, so verification cannot pass; add -V 0"
        )


def _describe(problem: ConvProblem) -> str:
    c = problem.conv

    def dims(t: tuple[int, ...]) -> str:
        return "x".join(map(str, t))

    x, w, y = problem.x, problem.w, problem.y
    text = (
        f"{SUBCOMMAND[problem.dtype]}: {problem.dtype.value} {c.mode} {problem.spatial_dims}-d, "
        f"input {x.layout} {dims(x.lens)}, filter {w.layout} {dims(w.lens)}, "
        f"output {y.layout} {dims(y.lens)}, pads {dims(problem.pads)}, "
        f"strides {dims(c.strides)}, dilations {dims(c.dilations)}, groups {c.groups}"
    )
    if c.pad_mode != "default":
        text += f", pad mode {c.pad_mode}"
    if c.mode == "trans":
        text += f", output pads {dims(c.trans_output_pads)}"
    return text


def _stats(problem: ConvProblem, ms: float) -> tuple[str, str]:
    """MIOpen's two ``stats:`` lines (GFLOPs and GB/s from the average kernel time)."""
    prefix = _NAMES[problem.direction][2]
    fil = problem.w.lens[2:]
    u = problem.conv.strides[-2]
    name = f"{prefix}{'x'.join(map(str, fil))}u{u}"
    flops, read, written = problem.flops(), problem.bytes_read(), problem.bytes_written()
    gflops = flops / ms / 1e6 if ms > 0 else 0.0
    gbs = (read + written) / ms / 1e6 if ms > 0 else 0.0
    n, c = problem.x.lens[:2]
    k = problem.y.lens[1]
    out_sp = problem.y.lens[2:]
    if problem.spatial_dims == 3:
        head = "stats: name, n, c, do, ho, wo, z, x, y, k, "
        shape = [n, c, *out_sp, fil[0], fil[2], fil[1], k]
    else:
        head = "stats: name, n, c, ho, wo, x, y, k, "
        shape = [n, c, *out_sp, fil[1], fil[0], k]
    head += "flopCnt, bytesRead, bytesWritten, GFLOPs, GB/s, timeMs"
    line = (
        f"stats: {name}, {', '.join(map(str, shape))}, {flops}, {read}, {written}, "
        f"{gflops:.3f}, {gbs:.3f}, {ms:f}"
    )
    return head, line


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    dtype = DataType.parse(dtype_name)
    sub = SUBCOMMAND[dtype]
    values = begin(sub, argv, FLAGS, out)
    if values is None:
        return EXIT_OK
    dirs = directions(values)
    problems = [build_problem(values, dtype, d) for d in dirs]
    _check_supported(values)
    if values["printconv"]:
        print(_describe(problems[0]), file=out)
    from miopy.handle import Handle

    handle = Handle()
    inputs = _inputs(problems[0], values)
    ok = True
    for problem in problems:
        ok = harness.run_case(handle, case(problem), values, inputs, out) and ok
        out.flush()
    return EXIT_OK if ok else EXIT_VERIFY_FAILED


__all__ = ["FLAGS", "build_problem", "directions", "parse", "problem_from_args", "run", "tolerance"]
