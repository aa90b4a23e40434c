"""Workloads: the problems of a file of driver command lines (any primitive), or of a built-in set
(the convolution, pooling, activation and batch-norm layers of ResNet-50 and VGG-16)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from miopy.errors import MiopyError
from miopy.problem.base import Problem
from miopy.tensor import DataType
from miopy.tool.common import ToolError

DEFAULT_BATCHES = (32, 64, 128, 256)

# (in channels, in size, out channels, filter, pad, stride) of every distinct ResNet-50 (v1.5) layer
RESNET50_CONVS = [
    (3, 224, 64, 7, 3, 2),
    (64, 56, 64, 1, 0, 1),
    (64, 56, 64, 3, 1, 1),
    (64, 56, 256, 1, 0, 1),
    (256, 56, 64, 1, 0, 1),
    (256, 56, 128, 1, 0, 1),
    (128, 56, 128, 3, 1, 2),
    (128, 28, 512, 1, 0, 1),
    (256, 56, 512, 1, 0, 2),
    (512, 28, 128, 1, 0, 1),
    (128, 28, 128, 3, 1, 1),
    (512, 28, 256, 1, 0, 1),
    (256, 28, 256, 3, 1, 2),
    (256, 14, 1024, 1, 0, 1),
    (512, 28, 1024, 1, 0, 2),
    (1024, 14, 256, 1, 0, 1),
    (256, 14, 256, 3, 1, 1),
    (1024, 14, 512, 1, 0, 1),
    (512, 14, 512, 3, 1, 2),
    (512, 7, 2048, 1, 0, 1),
    (1024, 14, 2048, 1, 0, 2),
    (2048, 7, 512, 1, 0, 1),
    (512, 7, 512, 3, 1, 1),
]
# (channels, size) of the tensors batch norm and ReLU see in ResNet-50
RESNET50_ACTS = [
    (64, 112),
    (64, 56),
    (256, 56),
    (128, 56),
    (128, 28),
    (512, 28),
    (256, 28),
    (256, 14),
    (1024, 14),
    (512, 14),
    (512, 7),
    (2048, 7),
]
VGG16_CONVS = [
    (3, 224, 64),
    (64, 224, 64),
    (64, 112, 128),
    (128, 112, 128),
    (128, 56, 256),
    (256, 56, 256),
    (256, 28, 512),
    (512, 28, 512),
    (512, 14, 512),
]
VGG16_ACTS = [(64, 224), (128, 112), (256, 56), (512, 28), (512, 14)]

_SUFFIX = {DataType.FP32: "", DataType.FP16: "fp16", DataType.BF16: "bfp16"}
_BNORM = {DataType.FP32: "bnorm", DataType.FP16: "bnormfp16fp32", DataType.BF16: "bnormbfp16fp32"}


def _conv(n: int, c: int, h: int, k: int, f: int, p: int, s: int, dt: DataType) -> str:
    return (
        f"conv{_SUFFIX[dt]} -n {n} -c {c} -H {h} -W {h} -k {k} -y {f} -x {f} -p {p} -q {p} "
        f"-u {s} -v {s} -l 1 -j 1 -g 1 -F 0"
    )


def _relu(n: int, c: int, h: int, dt: DataType) -> str:
    return f"activ{_SUFFIX[dt]} -n {n} -c {c} -H {h} -W {h} -m 3 -F 0"


def _bnorm(n: int, c: int, h: int, dt: DataType) -> list[str]:
    sub = _BNORM[dt]
    return [
        f"{sub} -n {n} -c {c} -H {h} -W {h} -m 1 -F 1 -s 1 -r 1",
        f"{sub} -n {n} -c {c} -H {h} -W {h} -m 1 -F 0 -b 1 -s 1",
    ]


def _pool(n: int, c: int, h: int, win: int, stride: int, pad: int, mode: str, dt: DataType) -> str:
    return (
        f"pool{_SUFFIX[dt]} -W {n}x{c}x{h}x{h},NCHW -y {win} -x {win} -v {stride} -u {stride} "
        f"-p {pad} -q {pad} -m {mode} -F 0"
    )


def resnet50_lines(n: int, dt: DataType = DataType.FP32) -> list[str]:
    """One forward+backward training iteration of ResNet-50 at batch ``n``, each shape once."""
    lines = [_conv(n, *layer, dt) for layer in RESNET50_CONVS]
    for c, h in RESNET50_ACTS:
        lines += [*_bnorm(n, c, h, dt), _relu(n, c, h, dt)]
    lines += [_pool(n, 64, 112, 3, 2, 1, "max", dt), _pool(n, 2048, 7, 7, 1, 0, "avg", dt)]
    return lines


def resnet50_small_lines(n: int = 1, dt: DataType = DataType.FP32) -> list[str]:
    """The stem and the first bottleneck block of ResNet-50: a set small enough for PoCL."""
    lines = [_conv(n, *layer, dt) for layer in RESNET50_CONVS[:5]]
    for c, h in RESNET50_ACTS[:3]:
        lines += [*_bnorm(n, c, h, dt), _relu(n, c, h, dt)]
    return lines + [_pool(n, 64, 112, 3, 2, 1, "max", dt)]


def vgg16_lines(n: int, dt: DataType = DataType.FP32) -> list[str]:
    lines = [_conv(n, c, h, k, 3, 1, 1, dt) for c, h, k in VGG16_CONVS]
    lines += [_relu(n, c, h, dt) for c, h in VGG16_ACTS]
    return lines + [_pool(n, c, h, 2, 2, 0, "max", dt) for c, h in VGG16_ACTS]


BUILTIN: dict[str, Callable[[int, DataType], list[str]]] = {
    "resnet50": resnet50_lines,
    "resnet50-small": resnet50_small_lines,
    "vgg16": vgg16_lines,
}


@dataclass
class Workload:
    description: str
    lines: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _problems(sub: str, argv: list[str]) -> list[Problem]:
    from miopy.driver.cli import SUBCOMMANDS, parse_flags

    entry = SUBCOMMANDS.get(sub)
    if entry is None:
        raise ToolError(f"subcommand={sub!r}: unknown (expected one of {', '.join(SUBCOMMANDS)})")
    module, _, arg = entry
    if module.endswith(".conv"):
        from miopy.driver import conv

        values = conv.parse(argv)
        return [conv.build_problem(values, DataType.parse(arg), d) for d in conv.directions(values)]
    if module.endswith(".pool"):
        from miopy.driver import pool

        return list(pool.build_problems(parse_flags(argv, pool.FLAGS), DataType.parse(arg)))
    if module.endswith(".activ"):
        from miopy.driver import activ

        values = parse_flags(argv, activ.FLAGS)
        return [activ.build_problem(values, DataType.parse(arg), p) for p in activ.passes(values)]
    if module.endswith(".bnorm"):
        from miopy.driver import bnorm

        values = parse_flags(argv, bnorm.FLAGS)
        return [bnorm.build_problem(values, arg, bnorm.plan(values))]
    raise ToolError(f"subcommand={sub!r}: the tool does not know how to read its problems")


def problems_from_line(line: str) -> list[Problem]:
    """The problems one driver command line describes (``miopy-driver``/``MIOpenDriver`` optional)."""
    words = shlex.split(line, comments=True)
    if words and Path(words[0]).name in ("miopy-driver", "MIOpenDriver", "miopy"):
        words = words[1:]
    if not words:
        return []
    return _problems(words[0], words[1:])


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        if (p.primitive, p.key()) not in seen:
            seen.add((p.primitive, p.key()))
            out.append(p)
    return out


def load(spec: str, batches: list[int] | None = None, dtype: str = "fp32") -> Workload:
    """A workload file (one driver line per line, # comments) or built-in names joined by commas
    (``resnet50``, ``resnet50-small``, ``vgg16``) at ``batches``."""
    names = [s.strip() for s in spec.split(",")]
    if all(name in BUILTIN for name in names):
        dt = DataType.parse(dtype)
        sizes = list(batches or ([1] if names == ["resnet50-small"] else DEFAULT_BATCHES))
        lines = [line for name in names for n in sizes for line in BUILTIN[name](n, dt)]
        description = f"{spec} (batch {','.join(map(str, sizes))}, {dt.value})"
    else:
        path = Path(spec)
        if not path.is_file():
            raise ToolError(f"workload={spec!r}: neither a file nor a built-in set ({', '.join(BUILTIN)})")
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"workload={spec!r}: cannot read it ({exc})") from None
        description = str(path)
    workload = Workload(description)
    for number, line in enumerate(lines, 1):
        try:
            found = problems_from_line(line)
        except (MiopyError, ValueError) as exc:
            raise ToolError(f"{spec}, line {number}: {exc}") from None
        if found:
            workload.lines.append(line.strip())
            workload.problems.extend(found)
    workload.problems = _dedupe(workload.problems)
    if not workload.problems:
        raise ToolError(f"workload={spec!r}: no driver command line in it")
    return workload
