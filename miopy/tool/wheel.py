"""``miopy kernels package``: a kernel package as a small wheel that pip installs where miopy looks.

The wheel holds data only: ``miopy_kernels/<base>.kdb`` and its manifest ``<base>.kdb.json``,
plus the ``.dist-info`` files every wheel has. pip puts ``miopy_kernels/`` into the folder it
installs into (site-packages, ``--target``, ``--user``); miopy reads ``.kdb`` files from each
``miopy_kernels`` folder on the import path and never imports anything from it (no
``__init__.py``, no entry point, nothing of the wheel runs). ``pip uninstall`` removes it.
Several kernel wheels (one per architecture) share that folder.

Reading one back (``miopy kernels install``/``show``) checks each member against the wheel's
``RECORD`` (SHA-256 and size), so a damaged download is refused before anything is copied."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any

from miopy.db.system_files import WHEEL_FOLDER
from miopy.tool.common import ToolError

# Fixed member dates: the same package gives the same wheel, byte for byte.
_DATE = (1980, 1, 1, 0, 0, 0)


def project_name(manifest: dict[str, Any]) -> str:
    """``miopy-kernels-<arch>-<cu>``: the architecture with only its letters and digits (``sm90``,
    ``gfx90a``, ``cpuskylakeavx512``) and the CU count in decimal."""
    arch = re.sub(r"[^a-z0-9]", "", str(manifest.get("arch", "")).lower()) or "device"
    return f"miopy-kernels-{arch}-{int(manifest.get('compute_units', 0))}"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _metadata(name: str, version: str, manifest: dict[str, Any]) -> str:
    summary = (
        f"miopy kernel package for {manifest.get('arch')} with {manifest.get('compute_units')} CUs "
        f"({manifest.get('backend')}): {manifest.get('kernels')} precompiled kernels"
    )
    details = "\n".join(
        f"- {key}: {manifest.get(key)}"
        for key in ("workload", "fingerprint", "miopy_version", "kernels", "db_basename", "sha256")
    )
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {name}\n"
        f"Version: {version}\n"
        f"Summary: {summary}\n"
        "Description-Content-Type: text/markdown\n"
        "\n"
        f"Data only: `{WHEEL_FOLDER}/{manifest.get('db_basename')}.kdb`, which miopy {version} finds on "
        "the import path (no code of this wheel is imported or run). Made by "
        "`miopy kernels package`.\n\n"
        f"{details}\n"
    )


def build_wheel(kdb: Path, manifest: dict[str, Any], out_dir: Path) -> Path:
    """Write ``<project>-<version>-py3-none-any.whl`` for the checked package ``kdb`` (its manifest
    as read back by ``read_manifest``) into ``out_dir``; returns its path."""
    name = project_name(manifest)
    version = str(manifest.get("miopy_version", ""))
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.dev[0-9]+)?", version):
        raise ToolError(f"{kdb}: miopy_version {version!r} in its manifest is not a wheel version")
    base = str(manifest["db_basename"])
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    data = kdb.read_bytes()
    sidecar = {k: v for k, v in manifest.items() if k not in ("entries", "path")} | {
        "file": f"{base}.kdb",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    members = [
        (f"{WHEEL_FOLDER}/{base}.kdb", data),
        (f"{WHEEL_FOLDER}/{base}.kdb.json", (json.dumps(sidecar, indent=2, sort_keys=True) + "\n").encode()),
        (f"{info}/METADATA", _metadata(name, version, sidecar).encode()),
        (
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: miopy kernels package\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
        ),
    ]
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for member, blob in members:
        writer.writerow([member, _record_hash(blob), len(blob)])
    writer.writerow([f"{info}/RECORD", "", ""])
    members.append((f"{info}/RECORD", record.getvalue().encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dist}-{version}-py3-none-any.whl"
    tmp = path.with_name(f".{path.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, blob in members:
            entry = zipfile.ZipInfo(member, _DATE)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, blob)
    tmp.replace(path)
    return path


def _record(archive: zipfile.ZipFile, path: Path) -> dict[str, tuple[str, int]] | None:
    """``{member: (hash, size)}`` from the wheel's RECORD, or None for a zip without one."""
    records = [m for m in archive.namelist() if m.endswith(".dist-info/RECORD")]
    if not records:
        return None
    out = {}
    text = archive.read(records[0]).decode("utf-8", errors="replace")
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 3 and row[1]:
            try:
                out[row[0]] = (row[1], int(row[2]))
            except ValueError:
                raise ToolError(f"{path}: RECORD line {row!r} has no size") from None
    return out


def extract_kdbs(path: Path, workdir: Path) -> list[Path]:
    """Copy every ``.kdb`` of a wheel (or any zip) into ``workdir``; a wheel's members are checked
    against its RECORD first. Raises ToolError for a damaged or foreign file."""
    out = []
    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.namelist() if m.endswith(".kdb")]
            if not members:
                raise ToolError(f"{path}: no .kdb inside")
            record = _record(archive, path)
            for member in members:
                blob = archive.read(member)
                if record is not None:
                    if member not in record:
                        raise ToolError(f"{path}: {member} is not in the wheel's RECORD")
                    digest, size = record[member]
                    if _record_hash(blob) != digest or len(blob) != size:
                        raise ToolError(f"{path}: {member} does not match the wheel's RECORD (damaged)")
                target = workdir / Path(member).name
                target.write_bytes(blob)
                out.append(target)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError) as exc:
        raise ToolError(f"{path}: cannot read it as a wheel ({exc})") from None
    return out
