"""Every test gets its own cache, user and system directories and a fresh set of once-only warnings."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from miopy import log
from miopy.db import sqlite


@pytest.fixture(autouse=True)
def db_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    dirs = {
        "cache": tmp_path / "cache",
        "user": tmp_path / "user",
        "system": tmp_path / "system",
        "kdb": tmp_path / "kdb",
    }
    monkeypatch.setenv("MIOPY_CUSTOM_CACHE_DIR", str(dirs["cache"]))
    monkeypatch.setenv("MIOPY_USER_DB_PATH", str(dirs["user"]))
    monkeypatch.setenv("MIOPY_SYSTEM_DB_PATH", str(dirs["system"]))
    monkeypatch.setenv("MIOPY_KDB_PATH", str(dirs["kdb"]))
    for name in ("MIOPY_DISABLE_CACHE", "MIOPY_DEBUG_DISABLE_FIND_DB", "MIOPY_LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(log, "_warned", set())
    monkeypatch.setattr(sqlite, "_warned", set())
    # log.setup() stops "miopy" records at its own handler; caplog listens on the root logger.
    monkeypatch.setattr(logging.getLogger("miopy"), "propagate", True)
    return dirs


@pytest.fixture
def warned(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The warnings logged so far in the test."""
    return lambda: [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
