"""Packaging: the wheel built from the tree installs into a fresh venv (not editable) and its
``miopy-driver`` runs a convolution, which needs the kernel sources shipped as package data.
The fresh venv sees the test environment's site-packages for the dependencies (NumPy,
pyopencl) through a .pth line, so nothing is downloaded."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert done.returncode == 0, f"{cmd}\n{done.stdout}\n{done.stderr}"
    return done


def _build(wheels: Path) -> None:
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    _run([*pip, "-w", str(wheels), "."], cwd=ROOT)


def test_wheel_installs_and_driver_runs(tmp_path, ocl):
    wheels = tmp_path / "wheels"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            ".",
        ],
        cwd=ROOT,
    )
    (wheel,) = wheels.glob("miopy-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    purelib = Path(
        _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the tree must not be seen
    env["MIOPY_BACKEND"] = "opencl"
    install = [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q"]
    _run([*install, str(wheel)], env=env)
    # after the install: pip would otherwise take the test environment's miopy for this one
    deps = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (purelib / "zz_test_deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    where = _run([py, "-c", "import miopy; print(miopy.__file__)"], cwd=tmp_path, env=env).stdout
    assert str(purelib) in where, where  # the installed copy, not the source tree
    driver = env_dir / "bin" / "miopy-driver"
    out = _run(
        [driver, "conv", "-n", "1", "-c", "4", "-H", "6", "-W", "6", "-k", "4", "-y", "3", "-x", "3"]
        + ["-p", "1", "-q", "1", "-F", "1", "-V", "1", "-t", "1"],
        cwd=tmp_path,
        env=env,
    ).stdout
    assert "Verifies OK on CPU reference" in out and "FAILED" not in out, out


def test_wheel_has_kernels_and_data(tmp_path):
    pytest.importorskip("setuptools")
    wheels = tmp_path / "wheels"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            ".",
        ],
        cwd=ROOT,
    )
    import zipfile

    (wheel,) = wheels.glob("miopy-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for folder in ("miopy/kernels/opencl/", "miopy/kernels/cuda/", "miopy/kernels/common/"):
        shipped = {n for n in names if n.startswith(folder)}
        source = {f"{folder}{p.name}" for p in (ROOT / folder).iterdir() if p.suffix in (".cl", ".cu", ".h")}
        assert source and source <= shipped, source - shipped
