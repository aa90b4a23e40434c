"""The kernel cache key's source hash covers every header a kernel includes, nested ones too:
editing a shared header (the implicit-GEMM kernels' common/igemm_defines.h, igemm_core.h,
mma_sm80.h) must give their kernels a new key, and leave kernels that do not include it alone."""

from __future__ import annotations

import shutil
import types

import pytest

from miopy.backends import base
from miopy.backends.base import KERNEL_ROOT, Backend

IGEMM = ("igemm_fwd", "igemm_bwd", "igemm_wrw")
SHARED = ("common/igemm_defines.h", "common/igemm_core.h", "common/mma_sm80.h", "common/miopy_types.h")


def source_hash(root, file: str) -> str:
    """What the CUDA backend's read_source gives for ``file`` with the kernels under ``root``."""
    reader = types.SimpleNamespace(kernel_path=lambda f: root / "cuda" / f"{f}.cu")
    return Backend.read_source(reader, file)[1]


@pytest.mark.parametrize("file", IGEMM)
def test_igemm_kernels_paste_every_shared_header_once(file):
    text = base.expand_includes((KERNEL_ROOT / "cuda" / f"{file}.cu").read_text())
    for header in SHARED:
        assert text.count(f"/* begin {header} */") == 1, header
    assert '#include "common/' not in text


@pytest.mark.parametrize("header", SHARED[:3])
def test_editing_a_shared_header_changes_the_key(tmp_path, monkeypatch, header):
    root = tmp_path / "kernels"
    shutil.copytree(KERNEL_ROOT, root)
    monkeypatch.setattr(base, "KERNEL_ROOT", root)
    before = {f: source_hash(root, f) for f in (*IGEMM, "activ")}
    with open(root / header, "a") as f:
        f.write("\n/* edited */\n")
    after = {f: source_hash(root, f) for f in before}
    assert all(after[f] != before[f] for f in IGEMM)
    assert after["activ"] == before["activ"]  # includes none of them


def test_a_source_is_read_once_until_it_or_a_header_changes(tmp_path, monkeypatch):
    root = tmp_path / "kernels"
    shutil.copytree(KERNEL_ROOT, root)
    monkeypatch.setattr(base, "KERNEL_ROOT", root)
    expanded = []
    real = base.expand_includes
    # top-level expansions only (a nested one gets the headers seen so far)
    monkeypatch.setattr(
        base, "expand_includes", lambda text, seen: expanded.append(not seen) or real(text, seen)
    )
    first = source_hash(root, "igemm_fwd")
    assert source_hash(root, "igemm_fwd") == first and expanded.count(True) == 1
    with open(root / SHARED[1], "a") as f:
        f.write("\n/* edited */\n")
    assert source_hash(root, "igemm_fwd") != first and expanded.count(True) == 2
