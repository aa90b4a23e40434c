"""Driver tests run on the OpenCL backend (PoCL on a CPU-only machine) with private caches."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def kernel_cache_dir(tmp_path_factory):
    # shared by the session so each kernel is compiled once; still never the user's cache
    return tmp_path_factory.mktemp("kernel-cache")


@pytest.fixture(autouse=True)
def driver_env(monkeypatch, tmp_path, kernel_cache_dir):
    monkeypatch.setenv("MIOPY_BACKEND", "opencl")
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(kernel_cache_dir))
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(tmp_path / "db"))
    monkeypatch.delenv("MIOPY_ENABLE_LOGGING_CMD", raising=False)
    monkeypatch.delenv("MIOPY_FIND_MODE", raising=False)
    monkeypatch.delenv("MIOPY_FIND_ENFORCE", raising=False)
    monkeypatch.delenv("MIOPY_DEBUG_FIND_ONLY_SOLVER", raising=False)
    monkeypatch.chdir(tmp_path)  # -o 1 writes into the current directory
    return tmp_path


@pytest.fixture
def drive(capsys):
    """``drive(*argv) -> (exit status, stdout lines, stderr lines other than library warnings)``,
    running ``main`` in-process."""
    from miopy.driver.cli import main

    def run(*argv: str) -> tuple[int, list[str], list[str]]:
        rc = main([str(a) for a in argv])
        captured = capsys.readouterr()
        err = [
            line
            for line in captured.err.splitlines()
            if line.strip() and not line.startswith("miopy WARNING")
        ]
        return rc, captured.out.splitlines(), err

    return run


@pytest.fixture
def opencl():
    """Skips when no OpenCL device can run here."""
    from miopy import backends

    why = backends.unavailable_reason("opencl")
    if why is not None:
        pytest.skip(f"opencl: {why}")
