"""Finding a kernel package (``<arch>_<cu>.kdb``) for a device: the exact file in the system DB
folder, the user's installed-packages folder or a kernel wheel's data folder, else (as MIOpen
does) the file of the same architecture with the nearest compute-unit count."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from miopy import config
from miopy.db.sqlite import system_file_present

MAX_CUS = 1024  # a hex suffix above this is taken for part of another architecture's name


def arch_token(arch: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", arch).strip("_") or "device"


def basename(arch: str, compute_units: int) -> str:
    """MIOpen's ``<arch>_<cu>`` (decimal up to 64 CUs, bare hex above); DeviceInfo.db_basename."""
    arch = arch_token(arch)
    return f"{arch}_{compute_units}" if compute_units <= 64 else f"{arch}{compute_units:x}"


def compute_units_of(stem: str, arch: str) -> int | None:
    """The CU count a file stem names for ``arch``, or None when it names another architecture."""
    token = arch_token(arch)
    if not stem.startswith(token):
        return None
    rest = stem[len(token) :]
    if rest.startswith("_") and rest[1:].isdigit() and 0 < int(rest[1:]) <= 64:
        return int(rest[1:])
    if re.fullmatch(r"[0-9a-f]+", rest) and 64 < int(rest, 16) <= MAX_CUS:
        return int(rest, 16)
    return None


# The folder a kernel wheel (``miopy kernels package``) installs its ``.kdb`` into, in whatever
# folder pip installs into (site-packages, ``--target``, ``--user``). It holds no code: miopy lists
# it on the import path and never imports it.
WHEEL_FOLDER = "miopy_kernels"


def wheel_folders() -> list[Path]:
    """Each ``miopy_kernels`` folder on the import path (``sys.path``), in its order; relative
    entries (the current folder) are skipped."""
    out: list[Path] = []
    for entry in sys.path:
        if not entry or not os.path.isabs(entry):
            continue
        folder = Path(entry) / WHEEL_FOLDER
        try:
            if folder.is_dir() and folder not in out:
                out.append(folder)
        except OSError:
            continue
    return out


def package_folders() -> list[Path]:
    """Where kernel packages are read from, in order: MIOPY_SYSTEM_DB_PATH, MIOPY_KDB_PATH, then
    the folders of installed kernel wheels."""
    return [config.system_db_dir(), config.kdb_dir(), *wheel_folders()]


def exact_kdbs(base: str, folders: list[Path]) -> list[Path]:
    return [folder / f"{base}.kdb" for folder in folders if system_file_present(folder / f"{base}.kdb")]


def nearest_kdb(arch: str, compute_units: int, folders: list[Path]) -> Path | None:
    """The package of ``arch`` whose CU count is nearest (ties: the larger), first folder first."""
    best: tuple[int, int, int, Path] | None = None
    for rank, folder in enumerate(folders):
        try:
            files = sorted(folder.glob("*.kdb"))
        except OSError:
            continue
        for path in files:
            cus = compute_units_of(path.stem, arch)
            if cus is None or not system_file_present(path):
                continue
            score = (abs(cus - compute_units), -cus, rank, path)
            if best is None or score < best:
                best = score
    return None if best is None else best[3]
