"""one_kernel_source: an OpenCL build keeps the kernel it is for and drops only the other kernels
it can delimit for certain."""

from __future__ import annotations

import re

import pytest

from miopy.backends.base import KERNEL_ROOT, expand_includes
from miopy.backends.one_kernel import one_kernel_source

SOURCE = """
#define WIDTH 4
KERNEL void first(GLOBAL float* x /* ) { */, int n)
{
    // a brace in a comment: }
    const char* s = "}{";
#if WIDTH > 2
    x[0] = '}';
#endif
#pragma unroll
    for(int i = 0; i < n; ++i) { x[i] += 1; }
}

KERNEL void second(GLOBAL float* x)
{
#if WIDTH > 2
    x[0] = 1;
#else
    x[0] = 2;
#endif
}

KERNEL void SOME_BOUNDS third(GLOBAL float* x)
{
    x[0] = 3;
}
"""


def _kernels(source: str) -> list[str]:
    return re.findall(r"^[ \t]*KERNEL[ \t]+void\s+(?:[A-Z][A-Z0-9_]*\s+)*(\w+)\s*\(", source, re.M)


def _balance(source: str) -> int:
    opened = len(re.findall(r"^[ \t]*#[ \t]*if", source, re.M))
    return opened - len(re.findall(r"^[ \t]*#[ \t]*endif", source, re.M))


def test_drops_the_other_kernels_it_can_delimit():
    assert _kernels(one_kernel_source(SOURCE, "first")) == ["first", "second"]
    assert _kernels(one_kernel_source(SOURCE, "third")) == ["second", "third"]
    # "second" has an #else: it is kept in every build, never cut in the middle
    assert _kernels(one_kernel_source(SOURCE, "second")) == ["second"]
    out = one_kernel_source(SOURCE, "third")
    assert out.startswith("\n#define WIDTH 4\n") and "x[0] = 3;" in out and "'}'" not in out


def test_an_unbalanced_definition_is_kept_whole():
    broken = "KERNEL void a(GLOBAL float* x)\n{\n#if X\n{\n#endif\n}\nKERNEL void b(int n) { }\n"
    # a's text holds no #else, but its braces only balance with b's: nothing can be cut safely
    out = one_kernel_source(broken, "b")
    assert out == broken


@pytest.mark.parametrize("path", sorted((KERNEL_ROOT / "opencl").glob("*.cl")), ids=lambda p: p.name)
def test_every_kernel_of_our_sources_survives_its_own_build(path):
    source = expand_includes(path.read_text())
    names = set(_kernels(source))
    assert names
    for name in names:
        out = one_kernel_source(source, name)
        assert name in _kernels(out)
        # what was cut opened and closed as many conditionals as it held
        assert _balance(out) == _balance(source)
