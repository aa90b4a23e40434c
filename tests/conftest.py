"""Shared fixtures: every test run writes its caches and DBs under a temporary folder."""

from __future__ import annotations

import os
import tempfile

import pytest

_root = tempfile.mkdtemp(prefix="miopy-tests-")
for name, sub in (
    ("MIOPY_CUSTOM_CACHE_DIR", "cache"),
    ("MIOPY_USER_DB_PATH", "db"),
    ("MIOPY_SYSTEM_DB_PATH", "system"),
    ("MIOPY_KDB_PATH", "kdb"),
):
    os.environ[name] = os.path.join(_root, sub)
    os.makedirs(os.environ[name], exist_ok=True)


@pytest.fixture(scope="session")
def ocl():
    """A Handle on OpenCL (PoCL on the CPU in CI)."""
    from miopy import backends
    from miopy.handle import Handle

    why = backends.unavailable_reason("opencl")
    if why is not None:
        pytest.skip(f"opencl unavailable: {why}")
    return Handle("opencl")


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Fresh, empty cache and DB folders for this test."""
    for name, sub in (
        ("MIOPY_CUSTOM_CACHE_DIR", "cache"),
        ("MIOPY_USER_DB_PATH", "db"),
        ("MIOPY_SYSTEM_DB_PATH", "system"),
        ("MIOPY_KDB_PATH", "kdb"),
    ):
        (tmp_path / sub).mkdir(mode=0o700)
        monkeypatch.setenv(name, str(tmp_path / sub))
    return tmp_path


# Long single tests (fresh processes that build and run kernel packages, tuning runs, the import
# of every module alone, eight processes on one DB) run first: pytest-xdist hands out the rest in
# collection order, and these used to come last, where one of them could keep a worker busy for
# minutes while the other had nothing left to do.
RUN_FIRST = (
    "tests/tool/",
    "tests/unit/test_imports.py",
    "tests/engine/test_concurrency.py",
    "tests/docs/test_wheel.py",
)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not item.nodeid.startswith(RUN_FIRST))
