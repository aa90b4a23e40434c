"""Every CUDA kernel file compiles with NVRTC for sm_90, in every data type: no GPU needed.

Each file compiles with its defaults, and once more with every 0/1 switch it defaults to 0 turned
on (``#ifndef GEMM_A_F32`` / ``#define GEMM_A_F32 0`` / ``#if GEMM_A_F32``). A file that needs
other defines names them in comments, one variant per line, each compiled in every data type (or
only in the one it pins with MIOPY_DTYPE):

    // miopy-compile-test: -DTILE=16 -DVEC=4
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import support

from miopy.backends.base import KERNEL_ROOT

CUDA_DIR = KERNEL_ROOT / "cuda"
KERNEL_FILES = sorted(CUDA_DIR.glob("*.cu"))
DTYPES = (0, 1, 2)
_VARIANT = re.compile(r"miopy-compile-test:\s*(.*?)\s*(?:\*/)?\s*$", re.M)
# the name after KERNEL void, __launch_bounds__(...) and a macro of attributes (e.g. cluster dims)
_KERNEL_NAME = re.compile(
    r"\bKERNEL\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(?:[A-Z][A-Z0-9_]*\s+)?(\w+)\s*\("
)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_OFF_SWITCH = re.compile(r"^\s*#\s*ifndef\s+(\w+)\s*\n\s*#\s*define\s+\1\s+0\s*\n\s*#\s*endif", re.M)


pytestmark = support.needs_nvrtc


def _with_includes(path: Path, seen: set[Path] | None = None) -> str:
    """The file's text followed by the text of every header it includes (ours, recursively)."""
    seen = set() if seen is None else seen
    if path in seen:
        return ""
    seen.add(path)
    text = path.read_text()
    for inc in _INCLUDE.findall(text):
        for candidate in (path.parent / inc, KERNEL_ROOT / inc):
            if candidate.is_file():
                text += "\n" + _with_includes(candidate, seen)
                break
    return text


def switches(text: str) -> list[str]:
    """Macros that default to 0 and select code with ``#if NAME``."""
    names = set(_OFF_SWITCH.findall(text)) - {"MIOPY_DTYPE"}
    return sorted(n for n in names if re.search(rf"^\s*#\s*if\s+{n}\s*$", text, re.M))


def variants(path: Path, dtype: int) -> list[list[str]]:
    found = [m.split() for m in _VARIANT.findall(path.read_text())] or [[]]
    on = switches(_with_includes(path))
    if on:
        found.append([f"-D{n}=1" for n in on])
    out = []
    for extra in found:
        pinned = [o for o in extra if o.startswith("-DMIOPY_DTYPE=")]
        if pinned:
            if pinned[-1] == f"-DMIOPY_DTYPE={dtype}":
                out.append(extra)
        else:
            out.append([f"-DMIOPY_DTYPE={dtype}", *extra])
    return out


def test_switches_found():
    text = "#ifndef A_F32\n#define A_F32 0\n#endif\n#ifndef B\n#define B 0\n#endif\n#if A_F32\n#endif\n"
    assert switches(text) == ["A_F32"]


def test_kernel_files_found():
    assert any(p.name == "conv_naive.cu" for p in KERNEL_FILES), f"no conv_naive.cu in {CUDA_DIR}"


def test_cuda_headers_found():
    from miopy.backends import cuda

    assert cuda.cuda_include_dir() is not None, "CUDA headers not found: pip install nvidia-cuda-runtime"


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("path", KERNEL_FILES, ids=[p.name for p in KERNEL_FILES])
def test_compiles_for_sm90(path: Path, dtype: int):
    from miopy.backends.cuda import compile_cubin

    names = set(_KERNEL_NAME.findall(_with_includes(path)))
    for options in variants(path, dtype):
        cubin = compile_cubin(path.read_text(), path.name, options, arch="sm_90")
        assert cubin[:4] == b"\x7fELF", f"{path.name} {options}: not an ELF cubin"
        assert len(cubin) > 1000
        if names:  # extern "C" kernels keep their names in the ELF symbol table
            assert any(name.encode() in cubin for name in names), (
                f"{path.name} {options}: none of the kernels {names}"
            )


def test_compile_error_carries_log():
    from miopy.backends.cuda import compile_cubin
    from miopy.errors import CompileError

    with pytest.raises(CompileError, match="undefined_thing"):
        compile_cubin('extern "C" __global__ void f(float* p) { p[0] = undefined_thing; }', "bad.cu", [])


def test_defines_and_includes_reach_the_compiler():
    from miopy.backends.cuda import compile_cubin

    src = (
        '#include "common/miopy_types.h"\n#if MIOPY_DTYPE != 2 || FOO != 7\n#error defines lost\n#endif\n'
        "KERNEL void k(GLOBAL data_t* p) { STORE(p, GLOBAL_ID0, LOAD(p, 0) + 1.0f); }\n"
    )
    assert compile_cubin(src, "t.cu", ["-DMIOPY_DTYPE=2", "-DFOO=7"])[:4] == b"\x7fELF"


def test_bad_arch_rejected():
    from miopy.backends.cuda import compile_cubin
    from miopy.errors import BadParm

    with pytest.raises(BadParm):
        compile_cubin("", "x.cu", [], arch="compute_90")


def test_module_import_is_cheap_and_safe():
    """Importing the backend loads neither CuPy nor NVRTC; without a GPU it says why."""
    import subprocess
    import sys

    code = (
        "import sys, miopy.backends.cuda as c\n"
        "assert 'cupy' not in sys.modules\n"
        "r = c.Backend.unavailable_reason()\n"
        "print('REASON', r)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=KERNEL_ROOT.parent.parent,
    )
    assert out.returncode == 0, out.stderr
    assert "REASON" in out.stdout


def test_compile_leaves_shared_bytes_objects_alone():
    """NVRTC writes its log and binary into buffers we hand it: never CPython's shared one-byte
    objects (an empty log has size 1, and ``b" " * 1`` is the interned ``b" "``)."""
    import subprocess
    import sys

    code = (
        "from miopy.backends.cuda import compile_cubin\n"
        "compile_cubin('extern \"C\" __global__ void k() {}', 'k.cu', [])\n"
        "assert b' ' == bytes([32]) and bytes(1) == bytes([0]), (b' ', bytes(1))\n"
        "print('a', 'b')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert out.stdout == b"a b\n", out.stdout
