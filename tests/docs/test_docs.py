"""The documentation: the MkDocs site builds with warnings as errors (the API reference is
generated from the docstrings), every Python example in the README and the docs runs, and no
page points outside the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(<!-- not run -->\s*)?```python\n(.*?)```", re.S)


def _examples() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for i, m in enumerate(_BLOCK.finditer(page.read_text())):
            if not m.group(1):
                out.append((f"{page.name}#{i}", m.group(2)))
    return out


def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in (
        "conv_transpose2d",
        "batch_norm_grad",
        "log_softmax",
        "group_norm",
        "BatchNorm2d",
        "lrn_grad",
    ):
        assert name in api, name


@pytest.mark.parametrize("name,code", _examples(), ids=[n for n, _ in _examples()])
def test_example_runs(name, code, ocl, monkeypatch, capsys):
    if re.search(r"^\s*import torch|^\s*import miopy\.torch", code, re.M):
        pytest.importorskip("torch")
    monkeypatch.setenv("MIOPY_BACKEND", "opencl")
    exec(compile(code, name, "exec"), {"__name__": "__doc_example__"})


def test_examples_found():
    names = [n for n, _ in _examples()]
    assert any(n.startswith("README.md") for n in names)
    assert any(n.startswith("functional.md") for n in names)
    assert any(n.startswith("torch.md") for n in names)


def test_no_page_points_outside_the_repository():
    for page in PAGES:
        text = page.read_text()
        assert "../shared" not in text and "/work/" not in text, page.name


def test_driver_page_covers_every_subcommand():
    from miopy.driver.cli import SUBCOMMANDS

    text = (ROOT / "docs" / "driver.md").read_text()
    missing = [name for name in SUBCOMMANDS if f"`{name}`" not in text]
    assert not missing, f"docs/driver.md lacks {missing}"
