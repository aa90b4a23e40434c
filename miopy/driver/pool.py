"""``pool``, ``poolfp16`` (and ``poolbfp16``): MIOpenDriver's pooling driver.

Tensors are given as strings, ``-W NxCxHxW`` (or ``NxCxDxHxW``) with an optional ``,LAYOUT`` or
``,strides`` (``x``- or ``,``-separated); ``-v`` is the stride in H and ``-u`` in W (the reverse
of conv). ``-F 0`` runs forward (keeping the max-pool index) then backward on that index, ``1``
forward only (no index kept), ``2`` backward only (the index from the CPU forward pass). Inputs:
x uniform in [0, 1), dy = 0.001 * uniform(-0.5, 0.5), or ``-j``/``-k`` files.

Verification is MIOpenDriver's: forward passes when every |error| <= 1e-5 (fp32) or 5e-3 (fp16;
1e-2 bf16) and the index equals the reference's; backward when the RMS of the errors is within
the same bound and no element is off by more than it and 4 ulps. Unlike MIOpenDriver, a bad flag
or a failed verification exits non-zero."""

from __future__ import annotations

import contextlib
import os
from typing import Any, TextIO

import numpy as np

from miopy.driver import harness
from miopy.driver.cli import (
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    Flag,
    begin,
)
from miopy.errors import BadParm
from miopy.problem.passes import Pass
from miopy.problem.pooling import IndexDesc, IndexMode, IndexType, PoolingDesc, PoolingMode, PoolingProblem
from miopy.reference.common import store_logical, view
from miopy.reference.pool import pool_forward, read_output, reference
from miopy.tensor import DataType, TensorDesc

SUBCOMMAND = {DataType.FP32: "pool", DataType.FP16: "poolfp16", DataType.BF16: "poolbfp16"}

FLAGS: list[Flag] = [
    Flag("W", "input", "100x3x32x32,NCHW", "x: NxCxHxW or NxCxDxHxW, then ,LAYOUT or ,strides", str),
    Flag("D", "dinput", "", "dx (default: as x)", str),
    Flag("O", "output", "", "y (default: computed, x's layout)", str),
    Flag("H", "doutput", "", "dy (default: as y)", str),
    Flag("F", "forw", 0, "0 forward and backward, 1 forward, 2 backward"),
    Flag("y", "win_h", 3, "window height"),
    Flag("x", "win_w", 3, "window width"),
    Flag("Z", "win_d", 3, "window depth (3-D)"),
    Flag("v", "pool_stride_h", 1, "stride in H"),
    Flag("u", "pool_stride_w", 1, "stride in W"),
    Flag("s", "pool_stride_d", 1, "stride in D (3-D)"),
    Flag("p", "pad_h", 0, "padding in H"),
    Flag("q", "pad_w", 0, "padding in W"),
    Flag("o", "pad_d", 0, "padding in D (3-D)"),
    Flag("m", "mode", "max", "max, avg (padding excluded), avg_in (padding included)", str),
    Flag("z", "pad_mode", "default", "default, same or valid", str),
    Flag("M", "index_position", 0, "max index: 0 inside the window, 1 in the image (3-D: always 1)"),
    Flag("I", "index_type", "miopenIndexUint8", "miopenIndexUint8, Uint16, Uint32 or Uint64", str),
    Flag("i", "iter", 10, "iterations"),
    Flag("V", "verify", 1, "verify against the CPU reference"),
    Flag("t", "time", 0, "print the kernel time of the last run (device events)"),
    Flag("w", "wall", 0, "1: wall-clock time too; 2: with a warm-up run first"),
    Flag("r", "pad_val", 0, "(unused, as in MIOpenDriver)"),
    Flag("P", "print", 1, "(unused, as in MIOpenDriver)"),
    Flag("j", "in_data", "", "x data file (raw stored dtype, or .npy)", str),
    Flag("k", "out_data", "", "dy data file", str),
    Flag("l", "dump_root", "", "directory to dump the outputs into", str),
    Flag("S", "solution", "-1", "<0 Find API; 0 immediate mode; N or a name: that solver", str),
    Flag("C", "verification_cache", "", "directory caching reference results", str),
]
_BY_LONG = {f.long: f for f in FLAGS}
_TOL = {DataType.FP32: 1e-5, DataType.FP16: 5e-3, DataType.BF16: 1e-2}
_BWD_TOL = {DataType.FP32: 1e-6, DataType.FP16: 5e-3, DataType.BF16: 1e-2}
_DUMP = {Pass.FORWARD: "dump_fwd_out_gpu.bin", Pass.BACKWARD: "dump_bwd_din_gpu.bin"}


def _label(long: str) -> str:
    return _BY_LONG[long].label


def _bad(long: str, value: Any, why: str) -> BadParm:
    return BadParm(f"{_label(long)}={value}: {why}")


def parse_tensor(text: str, long: str, dtype: DataType) -> TensorDesc:
    """``NxCxHxW[,LAYOUT|,strides]`` -> TensorDesc; BadParm names the flag."""
    lens_text, _, rest = str(text).strip().partition(",")
    try:
        lens = tuple(int(v) for v in lens_text.lower().split("x"))
    except ValueError:
        raise _bad(long, text, "expected NxCxHxW or NxCxDxHxW, then ,LAYOUT or ,strides") from None
    if len(lens) not in (4, 5) or min(lens) < 1:
        raise _bad(long, text, "expected 4 or 5 positive lengths (NxCxHxW or NxCxDxHxW)")
    rest = rest.strip()
    try:
        if not rest:
            return TensorDesc(dtype, lens)
        if rest[0].isalpha():
            return TensorDesc(dtype, lens, layout=rest.upper())
        strides = [int(v) for v in rest.replace("x", ",").split(",") if v.strip()]
        return TensorDesc(dtype, lens, strides=strides)
    except (BadParm, ValueError) as exc:
        raise _bad(long, text, str(exc).split(": ", 1)[-1]) from None


def passes(values: dict[str, Any]) -> list[Pass]:
    forw = values["forw"]
    if forw not in (0, 1, 2):
        raise _bad("forw", forw, "expected 0 (forward and backward), 1 (forward) or 2 (backward)")
    return {0: [Pass.FORWARD, Pass.BACKWARD], 1: [Pass.FORWARD], 2: [Pass.BACKWARD]}[forw]


def pooling_desc(values: dict[str, Any], dims: int, spatial: tuple[int, ...]) -> PoolingDesc:
    """The descriptor, each bad value named by its flag (zero stride, window larger than the padded
    input, pad not smaller than the window, unknown mode, index type too small...)."""
    axes = "dhw"[3 - dims :]
    pad_mode = str(values["pad_mode"]).strip().lower()
    if pad_mode not in ("default", "same", "valid"):
        raise _bad("pad_mode", values["pad_mode"], "expected default, same or valid")
    try:
        mode = PoolingMode.parse(str(values["mode"]).strip())
    except BadParm:
        raise _bad("mode", values["mode"], "expected max, avg or avg_in") from None
    try:
        index_type = IndexType.parse(values["index_type"])
    except BadParm:
        raise _bad(
            "index_type", values["index_type"], "expected miopenIndexUint8, Uint16, Uint32 or Uint64"
        ) from None
    if values["index_position"] not in (0, 1):
        raise _bad(
            "index_position", values["index_position"], "expected 0 (in the window) or 1 (in the image)"
        )
    window, strides, pads = [], [], []
    for axis, size in zip(axes, spatial):
        k, s, p = values[f"win_{axis}"], values[f"pool_stride_{axis}"], values[f"pad_{axis}"]
        if k < 1:
            raise _bad(f"win_{axis}", k, "must be positive")
        if s < 1:
            raise _bad(f"pool_stride_{axis}", s, "must be positive")
        if p < 0:
            raise _bad(f"pad_{axis}", p, "must be >= 0")
        if pad_mode == "default":
            if p >= k:
                raise _bad(f"pad_{axis}", p, f"must be smaller than the window ({k})")
            if size + 2 * p < k:
                raise _bad(f"win_{axis}", k, f"larger than the padded input ({size} + 2*{p})")
        elif pad_mode == "valid" and size < k:
            raise _bad(f"win_{axis}", k, f"larger than the input ({size})")
        window.append(k)
        strides.append(s)
        pads.append(p)
    index_mode = IndexMode.IMAGE if dims == 3 or values["index_position"] == 1 else IndexMode.MASK
    desc = PoolingDesc(mode, window, strides, pads, pad_mode, index_type, index_mode)
    if mode is PoolingMode.MAX:
        need = int(np.prod(window)) if index_mode is IndexMode.MASK else int(np.prod(spatial))
        if index_type.max < need:
            where = "window" if index_mode is IndexMode.MASK else "image"
            raise _bad("index_type", values["index_type"], f"too small for the {where} ({need} positions)")
    return desc


def build_problems(values: dict[str, Any], dtype: DataType | str) -> list[PoolingProblem]:
    """The forward and/or backward problems a command line describes."""
    dtype = DataType.parse(dtype)
    x = parse_tensor(values["input"], "input", dtype)
    dims = x.spatial_dims
    desc = pooling_desc(values, dims, x.lens[2:])
    ylens = (*x.lens[:2], *desc.output(x.lens[2:])[0])
    y = TensorDesc(dtype, ylens, layout=x.layout if x.packed else None)
    if values["output"]:
        y = parse_tensor(values["output"], "output", dtype)
        if y.lens != ylens:
            raise _bad("output", values["output"], f"expected lengths {'x'.join(map(str, ylens))}")
    dx = parse_tensor(values["dinput"], "dinput", dtype) if values["dinput"] else x
    if dx.lens != x.lens:
        raise _bad("dinput", values["dinput"], f"dx must have x's lengths {'x'.join(map(str, x.lens))}")
    dy = parse_tensor(values["doutput"], "doutput", dtype) if values["doutput"] else y
    if dy.lens != ylens:
        raise _bad("doutput", values["doutput"], f"dy must have y's lengths {'x'.join(map(str, ylens))}")
    todo = passes(values)
    out = []
    for p in todo:
        if p is Pass.FORWARD:
            out.append(PoolingProblem(desc, x, y, p, save_index=Pass.BACKWARD in todo))
        else:
            out.append(PoolingProblem(desc, dx, dy, p))
    return out


def inputs(
    problem: PoolingProblem, values: dict[str, Any], index: np.ndarray | None
) -> dict[str, np.ndarray]:
    """x (forward) or dy and the index (backward): from files when given, else random."""
    rng = np.random.default_rng(harness.SEED)
    x_values = rng.uniform(0, 1, problem.x.lens)
    if problem.direction is Pass.FORWARD:
        if values["in_data"]:
            return {"x": harness.load_buffer(values["in_data"], problem.x, _label("in_data"))}
        return {"x": store_logical(x_values, problem.x, fill=0.0)}
    if values["out_data"]:
        out = {"dy": harness.load_buffer(values["out_data"], problem.y, _label("out_data"))}
    else:
        out = {"dy": store_logical(0.001 * rng.uniform(-0.5, 0.5, problem.y.lens), problem.y, fill=0.0)}
    if problem.uses_index:
        if index is None:  # backward alone: the index of the CPU forward pass on x
            if values["in_data"]:
                x_values = read_output(
                    problem, "dx", harness.load_buffer(values["in_data"], problem.x, _label("in_data"))
                )
            fwd = PoolingProblem(problem.desc, problem.x, problem.y, Pass.FORWARD)
            _, logical = pool_forward(fwd, x_values)
            desc: IndexDesc = problem.index
            index = np.zeros(desc.element_space, desc.index_type.numpy)
            view(index, desc)[...] = logical
        out["index"] = index
    return out


def _where(i: tuple[int, ...]) -> str:
    return "{" + ", ".join(map(str, i)) + "}"


def check(
    problem: PoolingProblem, host: dict[str, np.ndarray], ref: dict[str, np.ndarray]
) -> tuple[bool, list[str]]:
    title = problem.direction.title
    lines: list[str] = []
    flops = problem.flops()
    if problem.direction is Pass.FORWARD:
        tol = _TOL[problem.dtype]
        got = read_output(problem, "y", host["y"])
        diff = np.abs(got - ref["y"])
        diff[~np.isfinite(got)] = np.inf
        ok = True
        if np.any(diff > tol):
            i = np.unravel_index(int(np.argmax(diff > tol)), diff.shape)
            lines.append(
                f"Difference {diff[i]:g} too large (> {tol:g}) at {_where(i)}, cpu_val = {ref['y'][i]:g} "
                f"vs gpu_val = {got[i]:g}"
            )
            ok = False
        if "index" in ref:
            gpu = read_output(problem, "index", host["index"])
            wrong = np.argwhere(gpu != ref["index"])
            if len(wrong):
                i = tuple(wrong[0])
                lines.append(f"Mask mismatch, gpu {gpu[i]} cpu {ref['index'][i]}({len(wrong)} differ)")
                ok = False
        max_err = float(diff.max()) if diff.size else 0.0
        lines.append(
            f"{title} Pooling Verifies on CPU and GPU ({max_err:g}, {flops})"
            if ok
            else f"{title} Pooling verification FAILED"
        )
        return ok, lines
    tol = _BWD_TOL[problem.dtype]
    got = read_output(problem, "dx", host["dx"])
    want = ref["dx"]
    diff = np.abs(got - want)
    rms = float(np.sqrt(np.mean(diff**2))) if diff.size else 0.0
    ulp = np.spacing(np.abs(want).astype({DataType.FP32: np.float32}.get(problem.dtype, np.float16)))
    if problem.dtype is DataType.BF16:
        ulp = np.abs(want) * 2.0**-7 + 2.0**-133
    ok = np.isfinite(rms) and rms <= tol and not np.any((diff > tol) & (diff > 4 * ulp))
    verdict = "Verifies on CPU and GPU" if ok else "verification FAILED"
    return bool(ok), [f"{title} Pooling {verdict} ({rms:g}, {flops})"]


def case(problem: PoolingProblem) -> harness.Case:
    title = problem.direction.title
    return harness.Case(
        problem,
        f"{title} Pooling",
        f"{title} Pooling",
        _DUMP[problem.direction],
        reference=reference,
        tolerance=lambda p, s: _TOL[p.dtype],
        solution_flag=_label("solution"),
        what=title,
        time_lines=lambda times, iters: [f"GPU Kernel Time {title} Pooling Elapsed: {times[-1]:f} ms"],
        wall_line=lambda ms, iters: f"Wall-clock Time {title} Pooling Elapsed: {ms:f} ms",
        check=check,
    )


@contextlib.contextmanager
def _in_folder(path: str):
    if not path:
        yield
        return
    os.makedirs(path, exist_ok=True)
    here = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(here)


def run(dtype_name: str, argv: list[str], out: TextIO) -> int:
    dtype = DataType.parse(dtype_name)
    sub = SUBCOMMAND[dtype]
    values = begin(sub, argv, FLAGS, out)
    if values is None:
        return EXIT_OK
    harness.check_common(values, _label)
    problems = build_problems(values, dtype)
    values["dump_output"] = 1 if values["dump_root"] else 0
    from miopy.handle import Handle

    handle = Handle()
    ok = True
    kept: dict[str, np.ndarray] = {}
    for problem in problems:
        given = inputs(problem, values, kept.get("index"))
        with _in_folder(values["dump_root"]):
            ok = harness.run_case(handle, case(problem), values, given, out, keep=kept) and ok
        out.flush()
    return EXIT_OK if ok else EXIT_VERIFY_FAILED


__all__ = ["FLAGS", "build_problems", "check", "parse_tensor", "run"]
