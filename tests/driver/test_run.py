"""Running the driver on the OpenCL backend: directions, output lines, verification, data files."""

from __future__ import annotations

import re

import numpy as np
import pytest

from miopy.driver import conv
from miopy.reference.conv import conv_reference_buffers, rms_range, view
from miopy.tensor import from_storage

SMALL = ["-n", "2", "-c", "4", "-H", "8", "-W", "8", "-k", "4"]
RUN = {"F": "Forward Conv.", "B": "Backward Data Conv.", "W": "Backward Weights Conv."}
VERIFY = {"F": "Forward Convolution", "B": "Backward Convolution Data", "W": "Backward Convolution Weights"}

pytestmark = pytest.mark.usefixtures("opencl")


def _algorithm_lines(out):
    return [line for line in out if re.match(r"MIOpen .* Conv\. Algorithm: \d+, Solution: \d+/\w+$", line)]


@pytest.mark.parametrize(
    "forw, expected", [(0, "FBW"), (1, "F"), (2, "B"), (3, "FB"), (4, "W"), (5, "FW"), (6, "BW")]
)
def test_each_forw_runs_and_verifies_its_directions(drive, forw, expected):
    rc, out, err = drive("conv", *SMALL, "-F", forw, "-i", "1")
    assert rc == 0, err
    assert out[0] == f"miopy-driver conv {' '.join(SMALL)} -F {forw} -i 1"
    algos = _algorithm_lines(out)
    assert [next(d for d, name in RUN.items() if f" {name} " in line) for line in algos] == list(expected)
    ok = [line for line in out if "Verifies OK on CPU reference" in line]
    assert [
        next(d for d, name in VERIFY.items() if line.startswith(name + " Verifies")) for line in ok
    ] == list(expected)
    for line in ok:
        err_v, tol = map(float, re.search(r"\((\S+) < (\S+)\)$", line).groups())
        assert err_v < tol


def test_time_prints_kernel_time_and_stats(drive):
    rc, out, _ = drive("conv", *SMALL, "-p", "1", "-q", "1", "-F", "1", "-t", "1", "-i", "3")
    assert rc == 0
    i = next(i for i, line in enumerate(out) if line.startswith("GPU Kernel Time Forward Conv. Elapsed: "))
    assert re.fullmatch(r"GPU Kernel Time Forward Conv\. Elapsed: \d+\.\d{6} ms \(average\)", out[i])
    assert out[i + 1] == (
        "stats: name, n, c, ho, wo, x, y, k, flopCnt, bytesRead, bytesWritten, GFLOPs, GB/s, timeMs"
    )
    fields = [f.strip() for f in out[i + 2].removeprefix("stats: ").split(",")]
    p = conv.problem_from_args(["conv", *SMALL, "-p", "1", "-q", "1", "-F", "1"])
    assert fields[:8] == ["fwd-conv3x3u1", "2", "4", "8", "8", "3", "3", "4"]
    assert list(map(int, fields[8:11])) == [p.flops(), p.bytes_read(), p.bytes_written()]
    assert p.flops() == 2 * 2 * 4 * 8 * 8 * 4 * 3 * 3
    ms = float(fields[13])
    assert ms > 0 and float(fields[11]) == pytest.approx(p.flops() / ms / 1e6, rel=1e-2, abs=1e-3)


def test_backward_stats_names_and_wall_clock(drive):
    rc, out, _ = drive(
        "conv", *SMALL, "-u", "2", "-v", "2", "-F", "6", "-t", "1", "-w", "2", "-i", "2", "-V", "0"
    )
    assert rc == 0
    assert any(line.startswith("stats: bwdd-conv3x3u2, ") for line in out)
    assert any(line.startswith("stats: bwdw-conv3x3u2, ") for line in out)
    wall = r"Wall-clock Time Backward (Data|Weights) Conv\. Elapsed: \d+\.\d+ ms"
    assert sum(bool(re.fullmatch(wall, line)) for line in out) == 2
    assert not any("Verifies" in line for line in out)


@pytest.mark.parametrize("sub", ["convfp16", "convbfp16"])
def test_half_types(drive, sub):
    rc, out, err = drive(sub, *SMALL, "-g", "2", "-i", "1")
    assert rc == 0, err
    assert out[0].startswith(f"miopy-driver {sub} ")
    assert sum("Verifies OK" in line for line in out) == 3
    base = 8.2e-3 * (8 if sub == "convbfp16" else 1)
    assert f"< {base:g})" in next(line for line in out if line.startswith("Forward Convolution"))
    assert f"< {2 * base:g})" in next(line for line in out if line.startswith("Backward Convolution Weights"))


@pytest.mark.parametrize(
    "extra",
    [
        ["-m", "trans", "-u", "2", "-v", "2", "-Y", "1", "-X", "1"],
        ["-m", "trans", "-g", "2", "-p", "1", "-q", "1", "-l", "2"],
        ["-g", "4", "-p", "1", "-q", "1"],  # depthwise
        ["-I", "NHWC", "-O", "NHWC", "-f", "NHWC", "-u", "2", "-j", "2"],
        ["-I", "NHWC", "-f", "NCHW", "-O", "NHWC", "-z", "same", "-u", "2", "-v", "2", "-y", "2"],
        ["-z", "valid", "-x", "1"],
        ["-_", "3", "-!", "5", "-@", "2", "-$", "1", "-#", "2", "-^", "1"],
        ["--spatial_dim", "3", "--in_d", "4", "-I", "NDHWC", "-O", "NDHWC", "-f", "NDHWC", "-g", "2"],
        ["-_", "3", "-!", "4", "-m", "trans", "-#", "2", "-%", "1", "-u", "2", "-Y", "1"],
    ],
    ids=[
        "trans-opad",
        "trans-groups-dil",
        "depthwise",
        "nhwc",
        "mixed-layouts-same",
        "valid",
        "3d",
        "3d-ndhwc",
        "3d-trans",
    ],
)
def test_problem_variants_verify(drive, extra):
    rc, out, err = drive("conv", *SMALL, *extra, "-i", "1")
    assert rc == 0, (out, err)
    assert sum("Verifies OK on CPU reference" in line for line in out) == 3, out


def test_solution_selection(drive):
    rc, out, _ = drive("conv", *SMALL, "-F", "1", "-S", "0", "-i", "1")
    assert rc == 0 and len(_algorithm_lines(out)) == 1 and "Forward Conv." in _algorithm_lines(out)[0]
    rc, out, _ = drive("conv", *SMALL, "-F", "2", "-S", "ConvDirectNaiveBwd", "-i", "1")
    assert rc == 0 and "Algorithm: 1, Solution: 86/ConvDirectNaiveBwd" in _algorithm_lines(out)[0]
    rc, out, _ = drive("conv", *SMALL, "-F", "4", "--solution", "87", "-s", "1", "-i", "1")
    assert rc == 0 and _algorithm_lines(out)[0].endswith("87/ConvDirectNaiveWrw")


def test_inapplicable_or_unknown_solver_is_one_line(drive):
    rc, _, err = drive("conv", *SMALL, "-F", "1", "-S", "86")
    assert rc == 1 and len(err) == 1 and "-S/--solution=86" in err[0] and "not applicable" in err[0]
    rc, _, err = drive("conv", *SMALL, "-F", "1", "-S", "NoSuchSolver")
    assert rc == 1 and len(err) == 1 and "NoSuchSolver" in err[0] and "Traceback" not in err[0]


def test_failed_verification_exits_non_zero(drive, monkeypatch):
    monkeypatch.setattr(conv, "tolerance", lambda problem, solution=None: 0.0)
    rc, out, _ = drive("conv", *SMALL, "-F", "5", "-i", "1")
    assert rc != 0
    failed = [line for line in out if " FAILED: " in line]
    assert len(failed) == 2 and failed[0].startswith("Forward Convolution FAILED: ")
    assert re.fullmatch(r"Backward Convolution Weights FAILED: \S+ > 0", failed[1])


def test_data_files_and_dump(drive, tmp_path):
    p = conv.problem_from_args(["conv", *SMALL, "-I", "NHWC", "-F", "1"])
    rng = np.random.default_rng(7)
    x = rng.standard_normal(p.x.lens).astype(np.float32)
    np.save(tmp_path / "x.npy", x)  # logical shape
    wflat = rng.standard_normal(p.w.element_space).astype(np.float32)
    wflat.tofile(tmp_path / "w.bin")  # raw, stored order
    rc, out, _ = drive(
        "conv",
        *SMALL,
        "-I",
        "NHWC",
        "-F",
        "1",
        "-d",
        tmp_path / "x.npy",
        "-e",
        tmp_path / "w.bin",
        "-o",
        "1",
        "-i",
        "1",
    )
    assert rc == 0
    assert any("dump_fwd_out_gpu.bin" in line for line in out)
    dumped = np.fromfile(tmp_path / "dump_fwd_out_gpu.bin", dtype=np.float32)
    xflat = np.zeros(p.x.element_space, np.float32)
    view(xflat, p.x)[...] = x
    ref = conv_reference_buffers(p, {"x": xflat, "w": wflat})
    assert rms_range(from_storage(view(dumped, p.y), p.dtype), ref) < 1e-6


def test_bad_data_file_is_one_line(drive, tmp_path):
    np.zeros(5, np.float32).tofile(tmp_path / "short.bin")
    rc, _, err = drive("conv", *SMALL, "-F", "1", "-e", tmp_path / "short.bin")
    assert rc == 1 and len(err) == 1 and "-e/--weights" in err[0]
    rc, _, err = drive("conv", *SMALL, "-F", "1", "-d", tmp_path / "missing.bin")
    assert rc == 1 and len(err) == 1 and "-d/--in_data" in err[0]


def test_verification_cache_is_reused(drive, tmp_path, monkeypatch):
    cache = tmp_path / "vcache"
    rc, _, _ = drive("conv", *SMALL, "-F", "3", "-i", "1", "-C", cache)
    assert rc == 0 and len(list(cache.glob("*.npy"))) == 2

    def boom(*args, **kwargs):
        raise AssertionError("reference recomputed despite the cache")

    monkeypatch.setattr(conv, "conv_reference_buffers", boom)
    rc, out, _ = drive("conv", *SMALL, "-F", "3", "-i", "1", "-C", cache)
    assert rc == 0 and sum("Verifies OK" in line for line in out) == 2


def test_printconv_toggle(drive):
    _, out, _ = drive("conv", *SMALL, "-F", "1", "-i", "1", "-V", "0")
    assert any("input NCHW 2x4x8x8" in line for line in out)
    _, out, _ = drive("conv", *SMALL, "-F", "1", "-i", "1", "-V", "0", "-P", "0")
    assert not any("input NCHW" in line for line in out)
