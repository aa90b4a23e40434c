"""``miopy kernels build | install | show``: a package built for PoCL, installed, then used by a
fresh process that compiles nothing (counted, not timed); the nearest-CU fallback; CUDA packages
built by NVRTC without a GPU; mismatched and damaged packages refused with a message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from miopy import config
from miopy.db import system_files
from miopy.db.kernel_cache import KernelCache, KernelKey
from miopy.tool import kernels

ROOT = Path(__file__).resolve().parents[2]

WORKLOAD = """# a small workload: two primitives
miopy-driver conv -n 1 -c 4 -H 8 -W 8 -k 4 -y 3 -x 3 -p 1 -q 1 -F 1
activ -n 1 -c 4 -H 8 -W 8 -m 3 -F 1
"""

FRESH = """
import json, sys
import miopy
from miopy.engine.find import find_solutions
from miopy.tool import workload
h = miopy.Handle("opencl")
if h._prefetch_thread is not None:  # the package's binaries read ahead: wait for them
    h._prefetch_thread.join()
ahead = len(h.kernel_cache._ahead)
for p in workload.load(sys.argv[1]).problems:
    find_solutions(h, p)
print(json.dumps({"hits": h.kernel_cache.hits, "misses": h.kernel_cache.misses,
                  "prefetched": h.kernel_cache.prefetched, "used": ahead - len(h.kernel_cache._ahead)}))
"""


@pytest.fixture
def built(ocl, tool, tmp_path):
    (tmp_path / "w.txt").write_text(WORKLOAD)
    code, out, err = tool(
        "kernels", "build", tmp_path / "w.txt", "--backend", "opencl", "-o", tmp_path / "out"
    )
    assert code == 0, err
    path = tmp_path / "out" / f"{ocl.db_basename}.kdb"
    return path, tmp_path / "w.txt"


def test_build_install_then_a_fresh_process_compiles_nothing(ocl, built, tool, tool_json, run_module, dirs):
    path, work = built
    manifest = json.loads(path.with_name(path.name + ".json").read_text())
    assert manifest["kernels"] >= 3 and manifest["failed"] == 0 and manifest["problems"] == 2
    assert manifest["fingerprint"] == ocl.info.fingerprint and manifest["miopy_version"] == config.VERSION
    assert manifest["size"] == path.stat().st_size
    shown = tool_json("kernels", "show", path)
    assert shown["entries"] == manifest["kernels"] and shown["db_basename"] == ocl.db_basename
    code, out, err = tool("kernels", "install", path)
    assert code == 0, err
    installed = dirs["kdb"] / path.name
    assert installed.is_file() and (installed.stat().st_mode & 0o077) == 0
    assert tool_json("info")["devices"][0]["kernel_package"] == str(installed)
    ahead = {**os.environ, "MIOPY_KERNEL_PREFETCH": "1"}  # off on OpenCL by default
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(work)], capture_output=True, text=True, timeout=600, env=ahead
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout.splitlines()[-1])
    assert counts["misses"] == 0 and counts["hits"] >= 3
    # every binary the package holds was read ahead, and every hit came from that read
    assert counts["prefetched"] == manifest["kernels"] and counts["used"] == counts["hits"]
    assert "compiling" not in done.stderr and "Missing system database" not in done.stderr
    assert not list(dirs["cache"].glob("*.ukdb")) or tool_json("cache", "list") == []


def test_install_refuses_a_package_for_another_device(built, tool, tmp_path, ocl):
    path, _ = built
    other = tmp_path / "other.kdb"
    import shutil
    import sqlite3

    shutil.copy(path, other)
    conn = sqlite3.connect(other)
    (text,) = conn.execute("SELECT value FROM kdb_manifest").fetchone()
    conn.execute(
        "UPDATE kdb_manifest SET value = ?", (json.dumps(json.loads(text) | {"compute_units": 999}),)
    )
    conn.commit()
    conn.close()
    code, out, err = tool("kernels", "install", other)
    assert code == 1 and "compute_units: package 999" in err
    code, out, err = tool("kernels", "install", other, "--force", "--dest", tmp_path / "forced")
    assert code == 0 and (tmp_path / "forced" / path.name).is_file()
    # a wheel holding the package
    wheel = tmp_path / "miopy_kernels_cpu-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(path, f"miopy_kernels/{path.name}")
    code, out, err = tool("kernels", "install", wheel, "--dest", tmp_path / "from-wheel")
    assert code == 0, err
    assert (tmp_path / "from-wheel" / path.name).read_bytes() == path.read_bytes()


def test_wheel_pip_installed_where_a_fresh_process_finds_it(ocl, built, tool, tool_json, tmp_path):
    """``miopy kernels package`` makes a data-only wheel; pip installs it offline into a target
    folder; a fresh process with that folder on its path (and empty package folders) compiles
    nothing; ``miopy kernels install`` takes the same wheel and refuses a damaged one."""
    path, work = built
    made = tool_json("kernels", "package", path, "--out", tmp_path / "wheels")
    whl = tmp_path / "wheels" / f"{made['project'].replace('-', '_')}-{config.VERSION}-py3-none-any.whl"
    assert made["wheel"] == str(whl) and made["project"].startswith("miopy-kernels-")
    with zipfile.ZipFile(whl) as archive:
        names = sorted(archive.namelist())
        assert archive.read(f"miopy_kernels/{path.name}") == path.read_bytes()
    assert not [n for n in names if n.endswith((".py", ".pth", ".so"))], names  # data only
    assert f"miopy_kernels/{path.name}.json" in names and any(n.endswith(".dist-info/RECORD") for n in names)
    shown = tool_json("kernels", "show", whl)
    assert [m["db_basename"] for m in shown["packages"]] == [ocl.db_basename]

    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    done = subprocess.run([*pip, "--target", site, whl], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (site / "miopy_kernels" / path.name).read_bytes() == path.read_bytes()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(work)], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout.splitlines()[-1])
    assert counts["misses"] == 0 and counts["hits"] >= 3, counts
    assert "Missing system database" not in done.stderr

    code, out, err = tool("kernels", "install", whl, "--dest", tmp_path / "from-wheel")
    assert code == 0, err
    assert (tmp_path / "from-wheel" / path.name).read_bytes() == path.read_bytes()
    damaged = tmp_path / "damaged.whl"
    with zipfile.ZipFile(whl) as src, zipfile.ZipFile(damaged, "w") as dst:
        for name in src.namelist():
            blob = src.read(name)
            dst.writestr(name, blob[:-1] + bytes([blob[-1] ^ 1]) if name.endswith(".kdb") else blob)
    code, _, err = tool("kernels", "install", damaged, "--dest", tmp_path / "nope")
    assert code == 1 and "does not match the wheel's RECORD" in err
    assert not (tmp_path / "nope" / path.name).exists()


def test_check_says_which_kernels_a_package_lacks(built, tool, tool_json, tmp_path):
    path, work = built
    report = tool_json("kernels", "check", path, work, "--backend", "opencl")
    assert report["needed"] >= 3 and report["missing"] == []
    more = tmp_path / "more.txt"
    more.write_text(work.read_text() + "pool -W 1x4x8x8 -y 2 -x 2 -v 2 -u 2 -F 1\n")
    code, out, err = tool("kernels", "check", path, more, "--backend", "opencl")
    assert code == 2, err
    missing = [line for line in out.splitlines() if line.startswith("missing: ")]
    assert missing and all("pool" in line for line in missing)
    assert f"{report['needed']} of {report['needed'] + len(missing)} kernels" in out


def test_damaged_or_foreign_packages(tool, tmp_path):
    bad = tmp_path / "bad.kdb"
    bad.write_bytes(b"\0" * 4096)
    code, _, err = tool("kernels", "install", bad)
    assert code == 1 and err.startswith("miopy: ") and "Traceback" not in err
    code, _, err = tool("kernels", "install", tmp_path / "missing.kdb")
    assert code == 1 and "no such file" in err
    code, _, err = tool("kernels", "build", "no-such-workload", "--backend", "opencl")
    assert code == 1 and "neither a file nor a built-in set" in err


def _package(folder, base: str, key: KernelKey, binary: bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    kernels._write_kdb(folder / f"{base}.kdb", [(key, binary)], {"format": kernels.FORMAT})


def test_nearest_cu_package_is_used_with_a_warning(dirs, warned_messages):
    key = KernelKey("activ.cl", "k", "", "h" * 64, "fp")
    _package(dirs["system"], system_files.basename("gfx90a", 104), key, b"from 104")
    _package(dirs["kdb"], system_files.basename("gfx90a", 60), key, b"from 60")
    _package(dirs["kdb"], system_files.basename("gfx908", 110), key, b"other arch")
    cache = KernelCache(system_files.basename("gfx90a", 110), "opencl", "gfx90a", 110)
    assert cache.get(key) == b"from 104" and cache.misses == 0
    (message,) = [m for m in warned_messages() if "Missing system database file" in m]
    assert "gfx90a6e.kdb" in message and "gfx90a68.kdb" in message and str(dirs["system"]) in message
    exact = KernelCache(system_files.basename("gfx90a", 60), "opencl", "gfx90a", 60)
    assert exact.get(key) == b"from 60"


def test_basename_parsing():
    for arch, cus in (("sm_90", 132), ("sm_90", 40), ("gfx90a", 110), ("cpu_skylake", 2)):
        assert system_files.compute_units_of(system_files.basename(arch, cus), arch) == cus
    assert system_files.compute_units_of("sm_90a_40", "sm_90") is None
    assert system_files.compute_units_of("sm_100_40", "sm_90") is None


def test_cuda_package_builds_without_a_gpu(tmp_path, tool):
    pytest.importorskip("cuda.bindings")
    from miopy.backends import cuda

    if cuda.cuda_include_dir() is None:
        pytest.skip("no CUDA headers for NVRTC")
    (tmp_path / "w.txt").write_text("activ -n 2 -c 8 -H 8 -W 8 -m 3 -F 1\n")
    code, out, err = tool(
        "kernels", "build", tmp_path / "w.txt", "--arch", "sm_90", "--cu", "132", "-o", tmp_path, "--json"
    )
    assert code == 0, err
    manifest = json.loads(out)
    assert manifest["db_basename"] == "sm_9084" and manifest["kernels"] >= 1
    assert manifest["fingerprint"] == cuda.compiler_fingerprint("sm_90")
    code, _, err = tool("kernels", "build", tmp_path / "w.txt", "--arch", "sm_1", "--cu", "1")
    assert code == 1 and "unknown CUDA architecture" in err


def test_builtin_workloads_at_a_smaller_image():
    """``resnet50@64``: the same 121 problems of a training iteration, every spatial size scaled
    (the first benchmark's PoCL figures use it); a size that is no multiple of 32 is refused."""
    from miopy.tool import workload
    from miopy.tool.common import ToolError

    full = workload.load("resnet50", [2]).problems
    small = workload.load("resnet50@64", [2]).problems
    assert len(full) == len(small) == 121
    assert sorted(p.primitive for p in full) == sorted(p.primitive for p in small)
    assert small[0].x.lens == (2, 3, 64, 64) and full[0].x.lens == (2, 3, 224, 224)
    assert {p.x.lens[2:] for p in small if p.primitive == "conv"} == {
        tuple(s * 64 // 224 for s in p.x.lens[2:]) for p in full if p.primitive == "conv"
    }
    last_pool = workload.resnet50_lines(1, image=64)[-1]
    assert "-W 1x2048x2x2" in last_pool and "-y 2 -x 2" in last_pool
    with pytest.raises(ToolError, match="multiple of 32"):
        workload.load("resnet50@48")


LAUNCH = """
import json, sys
import numpy as np
import miopy
from miopy.engine.find import get_solutions
from miopy.reference import activ, conv
from miopy.tool import workload
h = miopy.Handle("opencl")
rng = np.random.default_rng(0)
errors = []
for p in workload.load(sys.argv[1]).problems:
    s = get_solutions(h, p)[0]
    host = {r: rng.standard_normal(d.nbytes // 4).astype(np.float32) for r, d in p.tensors().items()}
    bufs = {r: h.backend.upload(a) for r, a in host.items()}
    h.run_solution(s, bufs)
    (role, want), = (conv if p.primitive == "conv" else activ).reference(p, host).items()
    got = np.empty_like(host[role])
    h.backend.download(bufs[role], got)
    errors.append(float(np.max(np.abs(got.reshape(want.shape) - want))))
print(json.dumps({"misses": h.kernel_cache.misses, "errors": errors}))
"""


def _binaries(kdb: Path) -> list[bytes]:
    import sqlite3

    from miopy.db.kernel_cache import unpack

    conn = sqlite3.connect(kdb)
    try:
        rows = conn.execute("SELECT kernel_blob, kernel_hash, uncompressed_size FROM kern_db").fetchall()
    finally:
        conn.close()
    return [unpack(*row) for row in rows]


def _generated_by_pocl(pocl_cache: Path, binaries: list[bytes]) -> list[str]:
    """Work-group functions in PoCL's cache (``<kernel>/<local size...>/<kernel>.so``) that no
    package binary carries: PoCL generated them at a launch."""
    found = []
    for so in pocl_cache.rglob("*.so"):
        tail = "/" + "/".join(so.parts[-3:])  # how a PoCL binary names the file
        if so.parent.name != "0-0-0" and not any(tail.encode() in b for b in binaries):
            found.append(tail)
    return found


def test_pocl_package_carries_the_code_of_first_launches(ocl, run_module, tmp_path):
    """PoCL generates a work-group function at a kernel's first launch with a local size; the
    package built with launches carries them, so a fresh process with an empty PoCL cache
    generates none (and computes the reference results); one built with --no-launch does not.
    Each build and run is a process of its own with an empty PoCL cache (a warm one would lend
    its work-group functions to any binary taken from it)."""
    if not kernels.launch_state.applies(ocl):
        pytest.skip("not PoCL")
    work = tmp_path / "w.txt"
    work.write_text(WORKLOAD)
    name = f"{ocl.db_basename}.kdb"
    for folder, flags in (("launched", ()), ("plain", ("--no-launch",))):
        done = run_module(
            "kernels",
            "build",
            work,
            "--backend",
            "opencl",
            "-o",
            tmp_path / folder,
            "--json",
            *flags,
            POCL_CACHE_DIR=str(tmp_path / f"pocl-build-{folder}"),
        )
        assert done.returncode == 0, done.stderr
        manifest = json.loads(done.stdout)
        if flags:
            assert "launched_solutions" not in manifest
        else:
            assert manifest["launch_failed"] == 0 and manifest["launched_solutions"] >= 2
            assert manifest["binaries_after_launches"] == manifest["kernels"]
    for folder, generated in (("launched", False), ("plain", True)):
        pocl = tmp_path / f"pocl-run-{folder}"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "MIOPY_KDB_PATH": str(tmp_path / folder),
            "POCL_CACHE_DIR": str(pocl),
        }
        done = subprocess.run(
            [sys.executable, "-c", LAUNCH, str(work)], capture_output=True, text=True, timeout=600, env=env
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.splitlines()[-1])
        assert result["misses"] == 0 and max(result["errors"]) < 1e-3
        made = _generated_by_pocl(pocl, _binaries(tmp_path / folder / name))
        assert bool(made) == generated, (folder, made)
