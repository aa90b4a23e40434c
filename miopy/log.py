"""The ``miopy`` logger, its level taken from MIOPY_LOG_LEVEL (MIOpen's 0..7 scale)."""

from __future__ import annotations

import logging

from miopy import config

logger = logging.getLogger("miopy")

INFO2 = 15
logging.addLevelName(INFO2, "INFO2")
# MIOpen level -> logging level. 0 means "default", which is Warning as in MIOpen release builds.
_LEVELS = {
    0: logging.WARNING,
    1: logging.CRITICAL + 10,
    2: logging.CRITICAL,
    3: logging.ERROR,
    4: logging.WARNING,
    5: logging.INFO,
    6: INFO2,
    7: logging.DEBUG,
}
_configured = False


def setup() -> None:
    """Attach a stderr handler once, unless the application configured ``miopy`` itself."""
    global _configured
    if _configured:
        return
    _configured = True
    try:
        level = config.log_level()
    except Exception:
        level = 0  # refused where a command starts (Handle(), the driver), not at import
    logger.setLevel(_LEVELS[level])
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("miopy %(levelname)s [%(name)s] %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


def get(name: str) -> logging.Logger:
    setup()
    return logging.getLogger(name)


_warned: set[str] = set()


def warn_once(log: logging.Logger, message: str) -> None:
    """Warn at most once per process for the same text."""
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def warn_once_per_user(log: logging.Logger, topic: str, message: str) -> None:
    """Warn once per user (and ``topic``, e.g. a device's DB name) across processes: a marker
    file under the user DB folder remembers it. Without a writable folder, once per process."""
    import hashlib

    if message in _warned:
        return
    _warned.add(message)
    marker = config.user_db_dir() / ".warned" / hashlib.sha256(topic.encode()).hexdigest()[:24]
    try:
        if marker.exists():
            log.info(message)
            return
        from miopy.db.trust import private_dir

        private_dir(marker.parent)  # 0700 like the DB folders (a world-writable one is not trusted)
        marker.write_text(topic + "\n")
    except Exception:  # OSError, or a folder that is not the user's: warn, remember in-process
        pass
    log.warning(message)
