"""OpenCL kernel packages that also hold the code PoCL generates at a kernel's first launch.

PoCL (OpenCL on the CPU) compiles a program to LLVM bitcode when it is built, and a work-group
function for each local size (and grid class) a kernel is first launched with: for a ResNet-50
iteration that second step is most of the first iteration. A PoCL program binary
(CL_PROGRAM_BINARIES) bundles the files of the program's folder in PoCL's cache, so it carries
the work-group functions generated before it was taken: `miopy kernels build --backend opencl`
launches every solution of the workload once, on zero-filled scratch buffers, then takes each
program's binary again (a build from the same source and options, which PoCL answers from its
cache). A process that loads the package then generates no code at those launches.

The binaries hold only code PoCL generated from our kernels, on the build machine, like the
plain binaries did; they are stored, checked and loaded exactly as those."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from miopy import log
from miopy.errors import MiopyError
from miopy.solution import KernelSpec, Solution
from miopy.tool.common import progress

_log = log.get("miopy.tool.kernels")

PoclSpecKey = tuple[str, str, tuple[str, ...]]


def applies(ctx: Any) -> bool:
    """Only PoCL keeps work-group functions in its binaries; elsewhere a second build would only
    cost time."""
    return ctx.backend_name == "opencl" and ctx.info.fingerprint.startswith("Portable Computing Language")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def spec_key(spec: KernelSpec) -> PoclSpecKey:
    return (spec.file, spec.name, tuple(spec.options()))


def launch_all(
    handle: Any, found: list[Solution], binaries: dict[PoclSpecKey, bytes], err: TextIO
) -> tuple[int, list[str]]:
    """Run each solution whose kernels were all built once, on zero-filled buffers of its problem,
    with the built binaries (nothing is looked up in or written to a cache). Returns how many ran
    and what failed (a failure only leaves that kernel's binary without its launch code)."""
    failed: list[str] = []
    loaded = set()
    for key, binary in binaries.items():
        try:
            handle.use_binary(key[0], key[1], key[2], binary)
            loaded.add(key)
        except Exception as exc:  # best effort: that kernel keeps its binary without launch code
            failed.append(f"{key[0]} {key[1]}: does not load ({_first_line(exc)})")
    runnable = [s for s in found if all(spec_key(k) in loaded for k in s.kernels)]
    backend = handle.backend
    buffers: dict[int, dict[str, Any]] = {}
    workspaces: dict[int, Any] = {}
    ran = 0
    for solution in progress(runnable, len(runnable), "miopy kernels build: first launches", "solution"):
        problem = solution.problem
        try:
            if id(problem) not in buffers:
                buffers.clear()  # one problem's buffers at a time: solutions come grouped by problem
                workspaces.clear()
                buffers[id(problem)] = {
                    role: backend.upload(np.zeros(desc.nbytes, np.uint8))
                    for role, desc in problem.tensors().items()
                }
            ws = None
            if solution.workspace:
                ws = workspaces.get(solution.workspace)
                if ws is None:
                    ws = workspaces[solution.workspace] = backend.upload(
                        np.zeros(solution.workspace, np.uint8)
                    )
            handle.run_solution(solution, dict(buffers[id(problem)]), ws)
            backend.synchronize()
            ran += 1
        except Exception as exc:  # an OpenCL error too: best effort, the build goes on
            failed.append(f"{solution.solver} on {problem.key()}: {_first_line(exc)}")
    for line in failed:
        print(f"first launch failed (its kernels keep binaries without launch code): {line}", file=err)
    return ran, failed


def retake(
    specs: list[KernelSpec],
    binaries: dict[PoclSpecKey, bytes],
    rebuild: Callable[[KernelSpec], bytes],
    map_: Callable,
) -> tuple[dict[PoclSpecKey, bytes], int]:
    """Each program's binary taken again after the launches (``rebuild``: a build from the same
    source and options). PoCL's cache only gains files, so the new binary holds at least what the
    first did; one that is smaller (another driver, a cache cleaned meanwhile) is not used.
    Returns the binaries and how many were retaken (when PoCL's cache already held the launch
    code before the build, the first binaries held it too and the new ones are the same)."""

    def one(spec: KernelSpec) -> tuple[PoclSpecKey, bytes | None]:
        try:
            return spec_key(spec), rebuild(spec)
        except MiopyError as exc:
            _log.warning("%s %s: binary not retaken after the launches (%s)", spec.file, spec.name, exc)
            return spec_key(spec), None

    out, retaken = dict(binaries), 0
    wanted = [s for s in specs if spec_key(s) in binaries]
    for key, binary in map_(one, wanted):
        if binary is not None and len(binary) >= len(binaries[key]):
            out[key] = binary
            retaken += 1
    return out, retaken


def add_launch_code(
    ctx: Any,
    found: list[Solution],
    specs: list[KernelSpec],
    binaries: dict[PoclSpecKey, bytes],
    device: int,
    map_: Callable,
    err: TextIO,
) -> tuple[dict[PoclSpecKey, bytes], dict[str, Any]]:
    """``binaries`` with PoCL's launch code added where the launches made some; and the figures
    for the manifest."""
    from miopy.handle import Handle

    started = time.time()
    handle = Handle(ctx.backend_name, device)
    ran, failed = launch_all(handle, found, binaries, err)

    def rebuild(spec: KernelSpec) -> bytes:
        key, source = ctx.kernel_key(spec)
        return ctx.backend.build(source, key.file, list(spec.options()), spec.name)

    out, retaken = retake(specs, binaries, rebuild, map_)
    print(
        f"first launches: {ran} solutions run, {len(failed)} failed; {retaken} of {len(binaries)} "
        "kernel binaries taken again after them, with the code PoCL generated at those launches",
        file=err,
    )
    return out, {
        "launched_solutions": ran,
        "launch_failed": len(failed),
        "binaries_after_launches": retaken,
        "launch_seconds": round(time.time() - started, 1),
    }
