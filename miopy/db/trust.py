"""Which folders and files miopy trusts with state it reuses (the kernel cache holds code it runs).

User state lives in folders that only the user can change: created 0700 (files 0600) whatever the
umask; an existing folder must be owned by the user and writable by nobody else. System DBs are
read from folders owned by the user or root that others cannot write. A state file is never
reached through a symbolic link. Since only the user can add entries to a trusted folder, these
checks cannot be raced by another user between the check and SQLite's own open."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

# Beside the DB file itself, SQLite opens these; a link planted at any of them would redirect writes.
SIDECARS = ("-wal", "-shm", "-journal")


class Untrusted(Exception):
    """``path`` must not be used; the message says why."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path


def _uid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents 0700, or check that the existing folder is the
    user's own and writable by nobody else. Raises Untrusted, or OSError when it cannot be made."""
    missing = []
    probe = Path(os.path.abspath(path))
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
            os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask
    _check_dir(path, owners={_uid()}, forbidden=0o022, who="group or others")


def system_dir(path: Path) -> None:
    """Check a folder of read-only system DBs: owned by the user or root, not writable by others."""
    _check_dir(path, owners={_uid(), 0}, forbidden=0o002, who="others")


def _check_dir(path: Path, owners: set[int | None], forbidden: int, who: str) -> None:
    st = os.stat(path)  # the folder itself may be a link (~/.cache elsewhere); its target is checked
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path))
    if _uid() is None:
        return
    if st.st_uid not in owners:
        raise Untrusted(path, f"owned by uid {st.st_uid}, not by this user (uid {_uid()})")
    if st.st_mode & forbidden:
        raise Untrusted(path, f"writable by {who} (mode {stat.S_IMODE(st.st_mode):o})")


def check_file(path: Path, system: bool = False) -> bool:
    """Whether ``path`` exists; raises Untrusted for a link, a non-file or a file of someone else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise Untrusted(path, "a symbolic link; state files are never followed through links")
    if not stat.S_ISREG(st.st_mode):
        raise Untrusted(path, "not a regular file")
    owners = {_uid(), 0} if system else {_uid()}
    if _uid() is not None and st.st_uid not in owners:
        raise Untrusted(path, f"owned by uid {st.st_uid}, not by this user (uid {_uid()})")
    return True


def check_user_file(path: Path) -> bool:
    """check_file() on the DB file and its SQLite sidecars, tightening their modes to 0600.
    Whether the DB file exists."""
    for sidecar in SIDECARS:
        if check_file(Path(f"{path}{sidecar}")):
            _tighten(Path(f"{path}{sidecar}"))
    exists = check_file(path)
    if exists:
        _tighten(path)
    return exists


def create_private_file(path: Path) -> None:
    """Create an empty ``path`` 0600 (never through a link); one that appeared meanwhile is kept."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        check_file(path)
        return
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _tighten(path: Path) -> None:
    # chmod, not open: closing a descriptor of a DB file would drop this process's SQLite locks.
    with contextlib.suppress(OSError):
        if os.lstat(path).st_mode & 0o077:
            os.chmod(path, 0o600)
