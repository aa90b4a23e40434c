"""Cut a kernel source down to the one kernel a build is for.

Every build makes one kernel (the kernel cache is keyed by file, kernel name and options), but a
source file holds many: PoCL spends CPU seconds compiling each kernel of a program, so building
``softmax.h`` for one of its twelve kernels costs about twice as much as building that kernel
alone. ``one_kernel_source`` drops the definitions of the other kernels, and only those it can
delimit for certain: a ``KERNEL void name(...) {...}`` whose parentheses and braces balance
(comments and literals skipped) and whose text holds no preprocessor directive but balanced
``#if``/``#endif`` pairs and ``#pragma``s. Anything else is kept as it is, so the result always
compiles to the same kernel the whole source would.
"""

from __future__ import annotations

import re

_KERNEL = re.compile(r"^[ \t]*KERNEL[ \t]+void\b", re.M)
_NAME = re.compile(r"\s*(?:[A-Z][A-Z0-9_]*\s+)*([A-Za-z_]\w*)\s*\(")
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)", re.M)


# a comment, a string or character literal (skipped whole), or a bracket
_TOKEN = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|[(){}]", re.S)


def _close(source: str, i: int, open_: str, close: str) -> int | None:
    """The index past the bracket that closes the one at ``i``, or None."""
    depth = 0
    for token in _TOKEN.finditer(source, i):
        if token.group() == open_:
            depth += 1
        elif token.group() == close:
            depth -= 1
            if depth == 0:
                return token.end()
    return None


def _plain(text: str) -> bool:
    """Whether ``text`` holds no directive but balanced #if/#endif pairs and #pragmas."""
    depth = 0
    for word in _DIRECTIVE.findall(text):
        if word in ("if", "ifdef", "ifndef"):
            depth += 1
        elif word == "endif":
            depth -= 1
            if depth < 0:
                return False
        elif word != "pragma":
            return False
    return depth == 0


def _definition(source: str, start: int) -> tuple[str, int] | None:
    """(name, end) of the kernel definition whose ``KERNEL`` is at ``start``, when it can be
    delimited for certain."""
    head = _KERNEL.match(source, start)
    name = _NAME.match(source, head.end()) if head else None
    if name is None:
        return None
    params_end = _close(source, name.end() - 1, "(", ")")
    if params_end is None:
        return None
    brace = params_end
    while brace < len(source) and source[brace].isspace():
        brace += 1
    if brace >= len(source) or source[brace] != "{":
        return None  # a declaration, or something we do not read
    end = _close(source, brace, "{", "}")
    if end is None or not _plain(source[start:end]):
        return None
    return name.group(1), end


def one_kernel_source(source: str, kernel: str) -> str:
    """``source`` (includes expanded) without the definitions of kernels other than ``kernel``
    that can be delimited for certain (see the module's text)."""
    out: list[str] = []
    pos = 0
    for match in _KERNEL.finditer(source):
        if match.start() < pos:
            continue  # inside a definition already dropped
        found = _definition(source, match.start())
        if found is None or found[0] == kernel:
            continue
        out.append(source[pos : match.start()])
        out.append(f"/* kernel {found[0]}: not in this build */")
        pos = found[1]
    out.append(source[pos:])
    return "".join(out)
