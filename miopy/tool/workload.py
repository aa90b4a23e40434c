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


def _scaled(h: int, image: int) -> int:
    """A spatial size of the 224-pixel network at input size ``image`` (a multiple of 32)."""
    return h * image // 224


def resnet50_lines(n: int, dt: DataType = DataType.FP32, image: int = 224) -> list[str]:
    """One forward+backward training iteration of ResNet-50 at batch ``n`` and input size
    ``image`` (224: the real network), each shape once."""
    lines = [_conv(n, c, _scaled(h, image), k, f, p, s, dt) for c, h, k, f, p, s in RESNET50_CONVS]
    for c, h in RESNET50_ACTS:
        lines += [*_bnorm(n, c, _scaled(h, image), dt), _relu(n, c, _scaled(h, image), dt)]
    last = _scaled(7, image)
    lines += [
        _pool(n, 64, _scaled(112, image), 3, 2, 1, "max", dt),
        _pool(n, 2048, last, last, 1, 0, "avg", dt),
    ]
    return lines


def resnet50_small_lines(n: int = 1, dt: DataType = DataType.FP32, image: int = 224) -> list[str]:
    """The stem and the first bottleneck block of ResNet-50: a set small enough for PoCL."""
    lines = [_conv(n, c, _scaled(h, image), k, f, p, s, dt) for c, h, k, f, p, s in RESNET50_CONVS[:5]]
    for c, h in RESNET50_ACTS[:3]:
        lines += [*_bnorm(n, c, _scaled(h, image), dt), _relu(n, c, _scaled(h, image), dt)]
    return lines + [_pool(n, 64, _scaled(112, image), 3, 2, 1, "max", dt)]


def vgg16_lines(n: int, dt: DataType = DataType.FP32, image: int = 224) -> list[str]:
    lines = [_conv(n, c, _scaled(h, image), k, 3, 1, 1, dt) for c, h, k in VGG16_CONVS]
    lines += [_relu(n, c, _scaled(h, image), dt) for c, h in VGG16_ACTS]
    return lines + [_pool(n, c, _scaled(h, image), 2, 2, 0, "max", dt) for c, h in VGG16_ACTS]


BUILTIN: dict[str, Callable[[int, DataType, int], list[str]]] = {
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
    return _other_problems(module, argv, DataType.parse(arg))


def _other_problems(module: str, argv: list[str], dtype: DataType) -> list[Problem]:
    """The problems of a tensorop, softmax, reduce, lrn, layernorm or groupnorm line, as the
    driver builds them (every pass the line's -F asks for)."""
    import importlib

    from miopy.driver import norm_family
    from miopy.driver.cli import parse_flags

    family = importlib.import_module(module)
    values = parse_flags(argv, family.FLAGS)
    if hasattr(family, "build_problems"):  # softmax, lrn: a problem per pass
        return list(family.build_problems(values, dtype))
    if module.endswith((".layernorm", ".groupnorm")):
        label = norm_family.labeller(family.FLAGS)
        return [family.build_problem(values, dtype, p) for p in norm_family.passes(values, label)]
    return [family.build_problem(values, dtype)]  # tensorop, reduce


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


def _builtin(name: str) -> tuple[str, int] | None:
    """``(set, image size)`` for a built-in name, ``resnet50`` or ``resnet50@64`` (a smaller
    input image: every spatial size scaled, a multiple of 32); None for anything else."""
    base, at, size = name.partition("@")
    if base not in BUILTIN:
        return None
    if not at:
        return base, 224
    if not size.isdigit() or int(size) < 32 or int(size) % 32:
        raise ToolError(f"workload={name!r}: the image size after @ must be a multiple of 32 (32, 64...)")
    return base, int(size)


def load(spec: str, batches: list[int] | None = None, dtype: str = "fp32") -> Workload:
    """A workload file (one driver line per line, # comments) or built-in names joined by commas
    (``resnet50``, ``resnet50-small``, ``vgg16``, each optionally ``@<image size>``) at
    ``batches``."""
    names = [s.strip() for s in spec.split(",")]
    sets = [_builtin(name) for name in names]
    if all(sets):
        dt = DataType.parse(dtype)
        small = all(base == "resnet50-small" for base, _ in sets)
        sizes = list(batches or ([1] if small else DEFAULT_BATCHES))
        lines = [line for base, image in sets for n in sizes for line in BUILTIN[base](n, dt, image)]
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
