"""Handle: backend choice, device info, kernel cache use, zero-copy buffers (OpenCL)."""

from __future__ import annotations

import numpy as np
import pytest
from support import check, output_of, random_buffers

from miopy import backends, errors
from miopy.engine.find import get_solutions
from miopy.handle import Handle
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.reference.conv import conv_reference_buffers, rms_range
from miopy.solution import KernelSpec
from miopy.tensor import TensorDesc

pytestmark = pytest.mark.skipif(backends.unavailable_reason("opencl") is not None, reason="no OpenCL")


def _problem():
    return ConvProblem.create(
        TensorDesc("fp32", (1, 3, 7, 7)), TensorDesc("fp32", (2, 3, 3, 3)), ConvDesc((1, 1)), "F"
    )


def test_device_info_and_db_basename(isolated):
    h = Handle("opencl")
    assert h.backend_name == "opencl" and h.info.compute_units > 0
    assert h.db_basename.endswith(f"_{h.info.compute_units}") or h.info.compute_units > 64
    assert h.info.fingerprint


def test_backend_env_and_bad_names(isolated, monkeypatch):
    monkeypatch.setenv("MIOPY_BACKEND", "opencl")
    assert Handle().backend_name == "opencl"
    with pytest.raises(errors.BadParm, match="backend='metal'"):
        Handle("metal")
    if backends.unavailable_reason("cuda") is not None:
        with pytest.raises(errors.BackendUnavailable, match="backend='cuda'"):
            Handle("cuda")


def test_second_process_loads_kernels_from_our_cache(isolated, monkeypatch):
    spec = KernelSpec("conv_naive", "conv_naive_fwd", {"MIOPY_DTYPE": 0}, (256,), (256,))
    first = Handle("opencl")
    first.compile(spec)
    assert first.kernel_cache.misses >= 1
    second = Handle("opencl")  # a new handle has an empty in-process program cache

    def no_compiler(*args, **kwargs):
        raise AssertionError("compiled again although the kernel cache holds the binary")

    # undo only this patch: a plain monkeypatch.undo() would also drop the isolated cache folder,
    # and the third handle would then read the session's shared cache
    with monkeypatch.context() as patch:
        patch.setattr(second.backend, "build", no_compiler)
        second.compile(spec)
    assert second.kernel_cache.hits == 1
    # a different define is a different cache key: a miss that compiles
    third = Handle("opencl")
    third.compile(KernelSpec("conv_naive", "conv_naive_fwd", {"MIOPY_DTYPE": 1}, (256,), (256,)))
    assert third.kernel_cache.hits == 0


def test_disabled_cache_still_runs(isolated, monkeypatch):
    monkeypatch.setenv("MIOPY_DISABLE_CACHE", "1")
    h = Handle("opencl")
    check(h, get_solutions(h, _problem())[0])
    assert not list((isolated / "cache").iterdir())


def test_zero_copy_device_buffers(isolated):
    import pyopencl.array as cla

    h = Handle("opencl")
    problem = _problem()
    host = random_buffers(problem, np.random.default_rng(0))
    expected = conv_reference_buffers(problem, host)
    dev = {role: cla.to_device(h.backend.queue, arr) for role, arr in host.items()}
    get_solutions(h, problem)[0].run(h, dev)  # pyopencl arrays: used in place
    host["y"] = dev["y"].get()
    assert rms_range(output_of(problem, host), expected) < 1.5e-6


def test_nvidia_opencl_refuses_to_compile_beside_nvrtc(isolated, monkeypatch):
    from miopy.backends import opencl

    h = Handle("opencl")
    monkeypatch.setattr(h.backend, "_nvidia", True)
    monkeypatch.setattr(opencl, "_nvrtc_used", lambda: True)
    spec = KernelSpec("conv_naive", "conv_naive_wrw", {"MIOPY_DTYPE": 2, "UNCACHED": 1}, (256,), (256,))
    with pytest.raises(errors.CompileError, match="NVRTC"):
        h.compile(spec)


def test_misaligned_device_buffers_run_on_aligned_copies(isolated, monkeypatch, caplog):
    """A device buffer that starts off the kernels' alignment (on CUDA: a view one element into a
    tensor) runs on an aligned copy, and an output is copied back into the user's buffer. PoCL's
    buffers always start aligned, so the backend is told here that x and y do not."""
    import pyopencl.array as cla

    h = Handle("opencl")
    problem = _problem()
    host = random_buffers(problem, np.random.default_rng(3))
    expected = conv_reference_buffers(problem, host)
    dev = {role: cla.to_device(h.backend.queue, arr) for role, arr in host.items()}
    flagged = {id(h.backend.wrap(dev[r])) for r in ("x", "y")}  # wrap returns the native buffer
    monkeypatch.setattr(h.backend, "misaligned", lambda buf: id(buf) in flagged)
    x_before = dev["x"].get()
    with caplog.at_level("INFO", logger="miopy.handle"):
        for solution in get_solutions(h, problem)[:3]:
            dev["y"].fill(np.float32(np.nan))
            solution.run(h, dev)
            got = dict(host, y=dev["y"].get())
            assert rms_range(output_of(problem, got), expected) < 1.5e-6, solution.solver
    assert np.array_equal(dev["x"].get(), x_before)  # an input's copy is never written back
    assert sum("aligned" in r.getMessage() for r in caplog.records) >= 2
