"""The tool's tests: fresh cache, DB and package folders each, and a way to run ``miopy``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from miopy import log
from miopy.db import sqlite
from miopy.tool.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def dirs(isolated, monkeypatch):
    monkeypatch.setattr(log, "_warned", set())
    monkeypatch.setattr(sqlite, "_warned", set())
    for name in ("MIOPY_DISABLE_CACHE", "MIOPY_DEBUG_DISABLE_FIND_DB", "MIOPY_LOG_LEVEL", "MIOPY_FIND_MODE"):
        monkeypatch.delenv(name, raising=False)
    return {name: isolated / name for name in ("cache", "db", "system", "kdb")}


@pytest.fixture
def tool(capsys):
    """Run ``miopy ARGS`` in this process: (exit status, stdout, stderr)."""

    def run(*args: str):
        capsys.readouterr()
        code = main([str(a) for a in args])
        done = capsys.readouterr()
        assert "Traceback" not in done.err
        return code, done.out, done.err

    return run


@pytest.fixture
def tool_json(tool):
    def run(*args: str):
        code, out, err = tool(*args, "--json")
        assert code == 0, err
        return json.loads(out)

    return run


def _run_module(*args: str, timeout: float = 600, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    return subprocess.run(
        [sys.executable, "-m", "miopy", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture
def run_module():
    """``python -m miopy ARGS`` in a fresh process (the environment of this test)."""
    return _run_module


@pytest.fixture
def warned_messages(caplog, monkeypatch):
    import logging

    monkeypatch.setattr(logging.getLogger("miopy"), "propagate", True)
    return lambda: [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
