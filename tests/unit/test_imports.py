"""The package has no import circle, and the generic layers name no primitive."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import miopy

ROOT = Path(miopy.__file__).resolve().parent
MODULES = sorted(
    ".".join(("miopy", *p.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__")
    for p in ROOT.rglob("*.py")
)
# Layers every primitive goes through: they import neither a primitive's modules nor (except the
# engine) the solver registry, and the handle and solutions never reach up into the engine.
GENERIC = ("miopy.handle", "miopy.solution", "miopy.invoker", "miopy.logging_cmd", "miopy.bounds")
ENGINE = ("miopy.engine",)


def _path(module: str) -> Path:
    rel = Path(*module.split(".")[1:])
    return ROOT / rel / "__init__.py" if (ROOT / rel).is_dir() else (ROOT / rel).with_suffix(".py")


def _imports(module: str, top_level_only: bool) -> set[str]:
    """miopy modules ``module`` imports (at import time only, when ``top_level_only``)."""
    tree = ast.parse(_path(module).read_text())
    out: set[str] = set()

    def visit(nodes, nested: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not top_level_only:
                    visit(node.body, True)
                continue
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.startswith("miopy"))
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("miopy"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    out.add(sub if sub in MODULES else node.module)
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit(getattr(node, field, []) or [], nested)

    visit(tree.body, False)
    out.discard(module)
    return out


def test_no_import_cycle():
    """Not even through imports inside functions (the old engine -> handle -> solution -> engine
    circle was made of those)."""
    graph = {m: _imports(m, top_level_only=False) & set(MODULES) for m in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                walk(n)
        stack.pop()
        state[m] = 2

    for m in MODULES:
        if m not in state:
            walk(m)


def test_generic_layers_name_no_primitive():
    for module in MODULES:
        if not module.startswith(GENERIC + ENGINE):
            continue
        for imported in _imports(module, top_level_only=False):
            assert not imported.startswith(("miopy.problem.", "miopy.solvers.", "miopy.reference.")) or (
                imported in ("miopy.problem.base", "miopy.solvers.base")
            ), f"{module} imports {imported}"
            if module.startswith(GENERIC):
                assert not imported.startswith(("miopy.engine", "miopy.solvers", "miopy.driver")), (
                    f"{module} reaches up into {imported}"
                )


def test_every_module_imports_alone(tmp_path):
    """Each module imports in a fresh interpreter state (no hidden order dependence). Bytecode is
    cached under tmp_path even where PYTHONDONTWRITEBYTECODE is set: without it every re-import
    compiles its sources again (30 s instead of 4)."""
    code = (
        "import importlib, sys\n"
        f"for name in {MODULES!r}:\n"
        "    for loaded in [k for k in sys.modules if k == 'miopy' or k.startswith('miopy.')]:\n"
        "        del sys.modules[loaded]\n"
        "    if name.endswith('__main__'):\n"
        "        continue\n"
        "    importlib.import_module(name)\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")]),
        PYTHONPYCACHEPREFIX=str(tmp_path),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
