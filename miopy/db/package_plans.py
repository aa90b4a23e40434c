"""A chosen solution's program as data, shipped in a kernel package (``kdb_plan``): the steps
``Solver.get_program`` made for one problem on the build target (kernel specs, launch geometry,
plain arguments, tensor roles), so that a fresh process with a trusted package runs that problem's
first call without asking the solver again.

A plan is JSON of plain values, never code: numbers, strings, the roles of tensors, the names of
NumPy scalar types from a fixed list. Kernel launches, vendor GEMMs and cuBLASLt products
(``Call("lt_matmul", ...)``) can be written. A cuBLASLt product is written as what rebuilds it:
its descriptor and layouts (the 14 arguments of cuda_libs.LtGemm: types, transposes, sizes,
leading dimensions, batch and strides, storage order) and its algorithm (the nine configuration
attributes a perf DB record holds, cuda_libs.ALGO_FIELDS, and the workspace it needed); decoded,
the step holds placeholders (``LtProduct``, ``LtChoice``) that the backend binds to the process's
product and a checked algorithm (``Backend.bind_library``: cublasLtMatmulAlgoCheck, no heuristics
query) before the program is used; a refused algorithm makes the row a miss. ``decode`` accepts
exactly what ``encode`` writes and answers None for anything else.

A row's ``find`` is NULL when the program is that of the problem's immediate-mode choice
(``kdb_choice``), else the shipped find records the row was made from and the ranked list they
gave on the build target (``encode_find``): it holds for a process whose find DB answers exactly
those records.
Which plans are trusted, and when, is ``miopy.db.package_choices``' business."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from miopy.solution import Call, Gemm, KernelSpec, Launch, Program, Scalar, Tensor, Workspace
from miopy.tensor import DataType

FORMAT = 2  # 2: cuBLASLt products (``call`` steps)
TABLE = """
CREATE TABLE IF NOT EXISTS kdb_plan (
    primitive TEXT NOT NULL,
    problem_key TEXT NOT NULL,
    invoker_key TEXT NOT NULL,
    plan TEXT NOT NULL,
    find TEXT,
    PRIMARY KEY (primitive, problem_key, invoker_key)
);
"""
# NumPy scalar types a kernel argument or a define may have.
_NUMPY = {
    name: np.dtype(name).type
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
}
_GEMM_INTS = ("m", "n", "k", "a_offset", "lda", "b_offset", "ldb", "c_offset", "ldc", "batch")
_GEMM_INTS += ("stride_a", "stride_b", "stride_c")
MAX_STEPS = 64
MAX_ARGS = 256
LT_KEY_LEN = 14  # cuda_libs.LtGemm's arguments
LT_ALGO_LEN = 9  # cuda_libs.ALGO_FIELDS
LT_TYPES = frozenset({0, 2, 14})  # cudaDataType_t: fp32, fp16, bf16
LT_MAX_WORKSPACE = 1 << 30
_INT31 = 1 << 31
_INT63 = 1 << 63


@dataclass(frozen=True)
class LtProduct:
    """A decoded plan's cuBLASLt product: the arguments of cuda_libs.LtGemm (``key``), to be bound
    to the process's product (``Backend.bind_library``)."""

    key: tuple[int, ...]


@dataclass(frozen=True)
class LtChoice:
    """A decoded plan's cuBLASLt algorithm: its ALGO_FIELDS values and the workspace bytes it
    needed on the build target (the bound algorithm may need no more)."""

    config: tuple[int, ...]
    workspace: int


def library_steps(program: Program) -> bool:
    """Whether a decoded program holds cuBLASLt placeholders that must be bound before use."""
    return any(
        isinstance(step, Call) and step.args and isinstance(step.args[0], LtProduct) for step in program.steps
    )


_CODE_ROOT = Path(__file__).resolve().parents[1]  # the miopy package
_CODE_SUFFIXES = frozenset({".py", ".cu", ".cuh", ".cl", ".h", ".hpp"})
_code: list[str] = []
_code_lock = threading.Lock()


def code_digest() -> str:
    """sha256 of miopy's own sources (its Python modules and kernel files, by path and content),
    computed once per process: a package's programs are only trusted where the code that made
    them (the solvers) and the kernels they launch are the same, byte for byte."""
    with _code_lock:
        if not _code:
            digest = hashlib.sha256()
            for path in sorted(_CODE_ROOT.rglob("*")):
                if path.suffix in _CODE_SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                    digest.update(path.relative_to(_CODE_ROOT).as_posix().encode() + b"\0")
                    digest.update(hashlib.sha256(path.read_bytes()).digest())
            _code.append(digest.hexdigest())
        return _code[0]


class Unplannable(Exception):
    """The program holds something a plan cannot carry (a library call, an object)."""


# A value is written as (code, payload): the code names its type, the payload is plain JSON.
_PLAIN = {type(None): "n", bool: "b", int: "i", str: "s", float: "f"}


def _value(v: Any) -> tuple[str, Any]:
    code = _PLAIN.get(type(v))
    if code is not None:
        return code, v  # JSON keeps floats (NaN, infinities too) and ints apart, exactly
    if isinstance(v, np.generic):
        name = v.dtype.name
        if name not in _NUMPY:
            raise Unplannable(f"NumPy scalar of type {name}")
        return name, v.item()
    if isinstance(v, Tensor):
        return "T", v.role
    if isinstance(v, Workspace):
        return "W", v.offset
    if isinstance(v, Scalar):
        return "S", [v.name, v.dtype, float(v.default)]
    raise Unplannable(f"argument of type {type(v).__name__}")


def _values(values: Any) -> tuple[list[str], list[Any]]:
    pairs = [_value(v) for v in values]
    return [c for c, _ in pairs], [x for _, x in pairs]


def _note(v: Any, depth: int = 0) -> Any:
    """A program's notes (facts for callers: the regions its kernels touch...): plain JSON values
    in lists, tuples ({"t": [...]}) and objects with string keys ({"d": {...}})."""
    if depth > 8:
        raise Unplannable("notes nested too deep")
    if isinstance(v, list):
        return [_note(x, depth + 1) for x in v]
    if isinstance(v, tuple):
        return {"t": [_note(x, depth + 1) for x in v]}
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise Unplannable("notes with keys that are not strings")
        return {"d": {k: _note(x, depth + 1) for k, x in v.items()}}
    if type(v) not in _PLAIN:
        raise Unplannable(f"a note of type {type(v).__name__}")
    return v


def _ints(values: Any) -> list[int]:
    return [int(x) for x in values]


def _operand(v: Any) -> Any:
    if not isinstance(v, (Tensor, Workspace)):
        raise Unplannable(f"GEMM operand of type {type(v).__name__}")
    return list(_value(v))


def encode(program: Program) -> str:
    """The program as JSON text; Unplannable when a step or a value cannot be written."""
    specs: list[KernelSpec] = []
    steps = []
    for step in program.steps:
        if isinstance(step, Launch):
            if step.spec not in specs:
                specs.append(step.spec)
            codes, values = _values(step.args)
            steps.append(
                {
                    "launch": specs.index(step.spec),
                    "codes": codes,
                    "args": values,
                    "global": None if step.global_size is None else _ints(step.global_size),
                    "local": None if step.local_size is None else _ints(step.local_size),
                    "shm": int(step.shared_mem),
                    "coop": bool(step.cooperative),
                }
            )
        elif isinstance(step, Gemm):
            if not isinstance(step.dtype, DataType):
                raise Unplannable(f"GEMM dtype {step.dtype!r}")
            fields = {f: int(getattr(step, f)) for f in _GEMM_INTS}
            steps.append(
                {
                    "gemm": fields
                    | {
                        "dtype": step.dtype.value,
                        "trans_a": bool(step.trans_a),
                        "trans_b": bool(step.trans_b),
                        "a": _operand(step.a),
                        "b": _operand(step.b),
                        "c": _operand(step.c),
                    }
                }
            )
        elif isinstance(step, Call):
            steps.append({"call": _lt_call(step)})
        else:
            raise Unplannable(f"step {type(step).__name__}")
    kernels = []
    for spec in specs:
        codes, values = _values(v for _, v in spec.defines)
        kernels.append(
            {
                "file": spec.file,
                "name": spec.name,
                "names": [k for k, _ in spec.defines],
                "codes": codes,
                "values": values,
                "global": _ints(spec.global_size),
                "local": _ints(spec.local_size),
            }
        )
    text = json.dumps(
        {
            "format": FORMAT,
            "kernels": kernels,
            "steps": steps,
            "workspace": int(program.workspace),
            "notes": _note(dict(program.notes)),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    again = decode(text)
    # what a process would run must be exactly what the solver made, types included (a cuBLASLt
    # product and algorithm compared as the placeholders that rebuild them)
    program = _placeheld(program)
    if again != program or _types(again) != _types(program):
        raise Unplannable("the program does not read back the same")
    return text


def _lt_parts(step: Call) -> tuple[LtProduct, LtChoice]:
    """The placeholders of a cuBLASLt step's product and algorithm (from cuda_libs.LtGemm and
    LtAlgo, or placeholders already); Unplannable for anything else (a heuristics index)."""
    if step.method != "lt_matmul" or len(step.args) < 2:
        raise Unplannable(f"library call {step.method!r}")
    gemm, algo = step.args[0], step.args[1]
    if isinstance(gemm, LtProduct) and isinstance(algo, LtChoice):
        return gemm, algo
    key, config = getattr(gemm, "key", None), getattr(algo, "config", None)
    need = getattr(algo, "workspace", None)
    if not isinstance(key, tuple) or not isinstance(config, tuple) or type(need) is not int:
        raise Unplannable("a cuBLASLt call without a product key and a configured algorithm")
    if not all(type(v) is int for v in (*key, *config)):
        raise Unplannable("a cuBLASLt key or configuration that is not integers")
    return LtProduct(key), LtChoice(config, need)


def _lt_call(step: Call) -> dict[str, Any]:
    product, choice = _lt_parts(step)
    codes, values = _values(step.args[2:])
    return {
        "method": step.method,
        "key": list(product.key),
        "algo": list(choice.config),
        "need": choice.workspace,
        "codes": codes,
        "args": values,
    }


def _placeheld(program: Program) -> Program:
    """The program with each cuBLASLt product and algorithm as its placeholders."""
    steps = []
    for step in program.steps:
        if isinstance(step, Call):
            step = Call(step.method, (*_lt_parts(step), *step.args[2:]))
        steps.append(step)
    return dataclasses.replace(program, steps=tuple(steps))


def _types(program: Program) -> list[Any]:
    out: list[Any] = [
        type(v) for step in program.steps if isinstance(step, (Launch, Call)) for v in step.args
    ]
    out += [type(v) for spec in program.kernels for _, v in spec.defines]
    return out


def encode_find(records: list[Any], listed: list[tuple[str, dict | None, float]]) -> str:
    """A find row's ``find``: the find records (FindRecord) it was made from and the solutions
    they gave, in order: (solver, configuration, time in ms)."""
    return json.dumps(
        {
            "records": [[r.solver, r.time_ms, r.workspace, r.algorithm, r.config] for r in records],
            "list": [[name, cfg, time_ms] for name, cfg, time_ms in listed],
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def find_matches(text: str, records: list[Any]) -> list[tuple[str, dict | None, float]] | None:
    """The ranked (solver, configuration, time) list of a find row when ``records`` (the find DB's
    answer here) are the ones it was made from, else None (also for a damaged row)."""
    try:
        item = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(item, dict) or set(item) != {"records", "list"} or not isinstance(item["list"], list):
        return None
    here = [[r.solver, r.time_ms, r.workspace, r.algorithm, r.config] for r in records]
    if item["records"] != here or not 0 < len(item["list"]) <= len(here):
        return None
    out = []
    for entry in item["list"]:
        if not isinstance(entry, list) or len(entry) != 3:
            return None
        name, cfg, time_ms = entry
        if not isinstance(name, str) or not (cfg is None or isinstance(cfg, dict)):
            return None
        if isinstance(time_ms, bool) or not isinstance(time_ms, (int, float)):
            return None
        out.append((name, cfg, float(time_ms)))
    return out


# ---- reading: anything but what encode writes is None ------------------------------------------------
class _Bad(Exception):
    pass


def _workspace(offset: int) -> Workspace:
    if offset < 0:
        raise _Bad
    return Workspace(offset)


def _scalar(item: list) -> Scalar:
    if (
        len(item) != 3
        or type(item[0]) is not str
        or item[1] not in _NUMPY
        or type(item[2]) not in (float, int)
    ):
        raise _Bad
    return Scalar(item[0], item[1], float(item[2]))


def _same(v: Any) -> Any:
    return v


# code -> (payload types, maker): the payload's type is checked exactly (a bool is no int)
_READ: dict[str, tuple[tuple[type, ...], Any]] = {
    "n": ((type(None),), _same),
    "b": ((bool,), _same),
    "i": ((int,), _same),
    "s": ((str,), _same),
    "f": ((float,), _same),
    "T": ((str,), Tensor),
    "W": ((int,), _workspace),
    "S": ((list,), _scalar),
}
for _name, _kind in _NUMPY.items():
    _READ[_name] = ((bool,) if _name == "bool" else (int,) if "int" in _name else (float,), _kind)
_REFS = frozenset("TWS")  # not a define's value


def _read_values(codes: Any, values: Any, plain: bool = False) -> tuple[Any, ...]:
    if type(codes) is not list or type(values) is not list or len(codes) != len(values):
        raise _Bad
    if len(codes) > MAX_ARGS:
        raise _Bad
    out = []
    for code, x in zip(codes, values):
        found = _READ.get(code) if type(code) is str else None
        if found is None or type(x) not in found[0] or (plain and code in _REFS):
            raise _Bad
        out.append(found[1](x))
    return tuple(out)


def _read_note(v: Any, depth: int = 0) -> Any:
    if depth > 8:
        raise _Bad
    kind = type(v)
    if kind is list:
        return [_read_note(x, depth + 1) for x in v]
    if kind is dict:
        if len(v) != 1:
            raise _Bad
        ((tag, inner),) = v.items()
        if tag == "t" and type(inner) is list:
            return tuple(_read_note(x, depth + 1) for x in inner)
        if tag == "d" and type(inner) is dict:
            return {k: _read_note(x, depth + 1) for k, x in inner.items()}
        raise _Bad
    if kind not in _PLAIN:
        raise _Bad
    return v


def _sizes(v: Any, allow_none: bool = False) -> tuple[int, ...] | None:
    if v is None and allow_none:
        return None
    if type(v) is not list or not 1 <= len(v) <= 3:
        raise _Bad
    for x in v:
        if type(x) is not int or x <= 0:
            raise _Bad
    return tuple(v)


_SPEC_KEYS = frozenset({"file", "name", "names", "codes", "values", "global", "local"})
_LAUNCH_KEYS = frozenset({"launch", "codes", "args", "global", "local", "shm", "coop"})
_GEMM_KEYS = frozenset({*_GEMM_INTS, "dtype", "trans_a", "trans_b", "a", "b", "c"})
_PROGRAM_KEYS = frozenset({"format", "kernels", "steps", "workspace", "notes"})


def _spec(item: Any) -> KernelSpec:
    if type(item) is not dict or item.keys() != _SPEC_KEYS:
        raise _Bad
    file, name, names = item["file"], item["name"], item["names"]
    if type(file) is not str or type(name) is not str or type(names) is not list:
        raise _Bad
    if "/" in file or "\\" in file or ".." in file or not file or not name:
        raise _Bad
    values = _read_values(item["codes"], item["values"], plain=True)
    if len(names) != len(values) or not all(type(k) is str for k in names) or len(set(names)) != len(names):
        raise _Bad
    return KernelSpec(file, name, dict(zip(names, values)), _sizes(item["global"]), _sizes(item["local"]))


def _operand_of(v: Any) -> Tensor | Workspace:
    if type(v) is not list or len(v) != 2:
        raise _Bad
    (found,) = _read_values([v[0]], [v[1]])
    if not isinstance(found, (Tensor, Workspace)):
        raise _Bad
    return found


_CALL_KEYS = frozenset({"method", "key", "algo", "need", "codes", "args"})
# after the product and the algorithm: A, its byte offset, B, its offset, D, its offset, the
# workspace and optionally where cuBLASLt's scratch starts in it
_CALL_SHAPES = (("TW", "i", "TW", "i", "TW", "i", "W"), ("TW", "i", "TW", "i", "TW", "i", "W", "i"))


def _ints_in(v: Any, length: int, low: int, high: int) -> tuple[int, ...]:
    if type(v) is not list or len(v) != length or not all(type(x) is int and low <= x < high for x in v):
        raise _Bad
    return tuple(v)


def _call_of(item: dict) -> Call:
    """A cuBLASLt step: every field checked (types, transposes, positive sizes, strides, the
    algorithm's attribute values), its operands by role."""
    if item.keys() != _CALL_KEYS or item["method"] != "lt_matmul":
        raise _Bad
    key = _ints_in(item["key"], LT_KEY_LEN, 0, _INT63)
    if key[0] not in LT_TYPES or key[1] not in (0, 1) or key[2] not in (0, 1) or key[13] not in (0, 1):
        raise _Bad
    if min(key[3:10]) < 1 or max(key[3:10]) >= _INT31:
        raise _Bad
    config = _ints_in(item["algo"], LT_ALGO_LEN, 0, _INT31)
    need = item["need"]
    if type(need) is not int or not 0 <= need <= LT_MAX_WORKSPACE:
        raise _Bad
    codes = item["codes"]
    if type(codes) is not list or not any(len(codes) == len(shape) for shape in _CALL_SHAPES):
        raise _Bad
    shape = next(shape for shape in _CALL_SHAPES if len(shape) == len(codes))
    if not all(type(c) is str and c in allowed for c, allowed in zip(codes, shape)):
        raise _Bad
    args = _read_values(codes, item["args"])
    if any(type(v) is int and not 0 <= v < _INT63 for v in args):
        raise _Bad
    return Call("lt_matmul", (LtProduct(key), LtChoice(config, need), *args))


def _step(item: Any, specs: list[KernelSpec]) -> Launch | Gemm | Call:
    if type(item) is not dict:
        raise _Bad
    keys = item.keys()
    if keys == _LAUNCH_KEYS:
        index, shm = item["launch"], item["shm"]
        if type(index) is not int or not 0 <= index < len(specs) or type(shm) is not int or shm < 0:
            raise _Bad
        if type(item["coop"]) is not bool:
            raise _Bad
        return Launch(
            specs[index],
            _read_values(item["codes"], item["args"]),
            _sizes(item["global"], True),
            _sizes(item["local"], True),
            shm,
            item["coop"],
        )
    if keys == {"call"} and type(item["call"]) is dict:
        return _call_of(item["call"])
    if keys == {"gemm"} and type(item["gemm"]) is dict:
        g = item["gemm"]
        if g.keys() != _GEMM_KEYS or not all(type(g[f]) is int for f in _GEMM_INTS):
            raise _Bad
        if type(g["trans_a"]) is not bool or type(g["trans_b"]) is not bool:
            raise _Bad
        if type(g["dtype"]) is not str or g["dtype"] not in DataType._value2member_map_:
            raise _Bad
        a, b, c = (_operand_of(g[r]) for r in ("a", "b", "c"))
        ints = {f: g[f] for f in _GEMM_INTS}
        return Gemm(DataType(g["dtype"]), g["trans_a"], g["trans_b"], a=a, b=b, c=c, **ints)
    raise _Bad


def decode(text: Any) -> Program | None:
    """The program of a stored plan, or None when the text is not what ``encode`` writes."""
    if type(text) is not str:
        return None
    try:
        item = json.loads(text)
        if type(item) is not dict or item.keys() != _PROGRAM_KEYS or item["format"] != FORMAT:
            raise _Bad
        kernels, steps, workspace = item["kernels"], item["steps"], item["workspace"]
        if type(kernels) is not list or type(steps) is not list or type(workspace) is not int:
            raise _Bad
        if not 0 < len(steps) <= MAX_STEPS or len(kernels) > MAX_STEPS or workspace < 0:
            raise _Bad
        notes = _read_note(item["notes"])
        if type(notes) is not dict:
            raise _Bad
        specs = [_spec(k) for k in kernels]
        return Program(tuple(_step(s, specs) for s in steps), workspace, notes)
    except (_Bad, ValueError, TypeError, OverflowError, RecursionError):
        return None


__all__ = [
    "FORMAT",
    "TABLE",
    "LtChoice",
    "LtProduct",
    "Unplannable",
    "code_digest",
    "decode",
    "encode",
    "encode_find",
    "find_matches",
    "library_steps",
]
