"""Helpers for tests: random problems and checking a solution against the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.reference.conv import conv_reference_buffers, rms_range, store_logical, view
from miopy.reference.tolerance import tolerance  # noqa: F401  (the one rule, shared with the driver)
from miopy.tensor import TensorDesc, from_storage


def conv_problem(dtype: str, xlens, wlens, direction="F", layouts=("NHWC",) * 3, **conv) -> ConvProblem:
    """A 2-D problem of packed tensors in ``layouts`` (x, w, y) and ``conv``'s ConvDesc fields."""
    x = TensorDesc(dtype, xlens, layout=layouts[0])
    w = TensorDesc(dtype, wlens, layout=layouts[1])
    return ConvProblem.create(x, w, ConvDesc(**conv), direction, y_layout=layouts[2])


def fake_cuda_ctx(backend="cuda", compute_units=132, max_work_group_size=1024, smem=232448, arch="sm_90"):
    """A context as the solvers see one, without a device: an H200 by default (227 KB of dynamic
    shared memory per block)."""
    from types import SimpleNamespace

    from miopy.backends.base import DeviceInfo

    info = DeviceInfo(
        "fake",
        arch,
        compute_units,
        "",
        max_work_group_size=max_work_group_size,
        local_mem_size=min(smem, 49152),
        max_dynamic_shared=smem,
    )
    return SimpleNamespace(info=info, backend_name=backend)


def random_buffers(problem: ConvProblem, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Stored buffers for x, w, y; the output starts as NaN so unwritten elements show."""
    out = {}
    for role, desc in (("x", problem.x), ("w", problem.w), ("y", problem.y)):
        values = rng.uniform(-1, 1, desc.lens).astype(np.float32)
        if role == problem.output_role:
            values[...] = np.nan
        out[role] = store_logical(values, desc)
    return out


def output_of(problem: ConvProblem, buffers: dict[str, np.ndarray]) -> np.ndarray:
    role = problem.output_role
    desc = {"x": problem.x, "w": problem.w, "y": problem.y}[role]
    return from_storage(view(buffers[role], desc), problem.dtype)


def fused_ran(handle, solution, epilogue: str = "scale") -> bool:
    """The handle built ``solution``'s invoker with the fused epilogue ``epilogue``
    (miopy.solvers.conv.epilogue; the invoker cache key ends in its name): a call took the fused
    path."""
    return any(
        len(key) == 5 and key[2] == solution.solver and key[3] == solution.config_key() and key[4] == epilogue
        for key in handle._invokers
    )


def path_configs(solver, ctx, problem: ConvProblem, most: int = 4) -> list[dict]:
    """The default config of ``solver`` and, from its search space, the first config of each other
    way of writing the output (a cluster split, a split through the workspace, warp
    specialization, stream-K, the fix-up of split partials), ``most`` in all."""
    view = problem.solver_view()
    out = [solver.default_config(ctx, view)]

    def path(cfg: dict) -> tuple:
        split = cfg.get("split_k", 1)
        parts = cfg.get("parts", 1)
        return (
            split > 8,
            1 < split <= 8,
            cfg.get("ws", 0),
            bool(cfg.get("sk", 0)),
            cfg.get("fix", 0),
            parts > 1,
        )

    seen = {path(out[0])}
    for cfg in solver.search_space(ctx, view):
        if len(out) >= most:
            break
        if path(cfg) not in seen:
            seen.add(path(cfg))
            out.append(cfg)
    return out


def check(handle, solution, rng: np.random.Generator | None = None) -> float:
    """Run ``solution`` on random data; return the error, asserting it is within tolerance."""
    rng = rng or np.random.default_rng(0)
    problem = solution.problem
    bufs = random_buffers(problem, rng)
    expected = conv_reference_buffers(problem, bufs)
    solution.run(handle, bufs)
    got = output_of(problem, bufs)
    err = rms_range(got, expected)
    assert err < tolerance(problem), f"{solution.solver} on {problem.key()}: error {err}"
    return err


def config_spread(solver, ctx, problem: ConvProblem, rng: np.random.Generator) -> list[dict]:
    """The default config of ``problem``, the first and last of its search space and two more
    from it at random: the configs a build test compiles."""
    space = list(solver.search_space(ctx, problem))
    picks = [solver.default_config(ctx, problem), space[0], space[-1]]
    return picks + [space[i] for i in rng.choice(len(space), 2, replace=False)]


def assert_builds_for_sm90(
    solver, ctx, problem: ConvProblem, configs, file: str, kernel: str | None = None
) -> None:
    """NVRTC builds for sm_90 the ``kernel`` launch (default: named as ``file``) of
    kernels/cuda/``file``.cu in ``solver``'s program of ``problem`` for each of ``configs``."""
    from miopy.backends.base import KERNEL_ROOT
    from miopy.backends.cuda import compile_cubin

    kernel = kernel or file
    source = (KERNEL_ROOT / "cuda" / f"{file}.cu").read_text()
    for config in configs:
        spec = next(s for s in solver.get_program(ctx, problem, config).kernels if s.name == kernel)
        cubin = compile_cubin(source, f"{file}.cu", spec.options(), arch="sm_90")
        assert cubin[:4] == b"\x7fELF" and kernel.encode() in cubin, config


def random_nhwc_problem(
    rng: np.random.Generator,
    dtype: str,
    direction: str,
    channels,
    batch: int = 5,
    filter_size: int = 6,
    pad: int = 3,
    side: int = 20,
) -> ConvProblem:
    """A random 2-D packed NHWC problem for the tensor-core solvers: C and K from
    ``channels(rng)`` (drawn again where it gives None), batch 1 to ``batch`` - 1, image sides
    1 to ``side`` - 1, filter sides 1 to ``filter_size`` - 1, padding 0 to ``pad`` - 1, strides 1 to 3,
    dilations 1 to 2; drawn again where the filter does not fit."""
    while True:
        drawn = channels(rng)
        if drawn is None:
            continue
        c, k = drawn
        try:
            x = TensorDesc(dtype, (int(rng.integers(1, batch)), c, *rng.integers(1, side, 2)), layout="NHWC")
            w = TensorDesc(dtype, (k, c, *rng.integers(1, filter_size, 2)), layout="NHWC")
            conv = ConvDesc(
                pads=tuple(rng.integers(0, pad, 2)),
                strides=tuple(rng.integers(1, 4, 2)),
                dilations=tuple(rng.integers(1, 3, 2)),
            )
            return ConvProblem.create(x, w, conv, direction, y_layout="NHWC")
        except ValueError:
            continue


def check_solver(handle, solver, problem: ConvProblem, rng: np.random.Generator, config=None) -> float:
    """``check`` of ``solver`` (applicable to the problem's conv view) with ``config`` (default:
    the solver's default config for that view)."""
    from miopy.engine.candidates import make_solution

    view_ = problem.conv_view()
    assert solver.is_applicable(handle, view_) is None, solver.is_applicable(handle, view_)
    config = config or solver.default_config(handle, view_)
    solution = make_solution(handle, problem, solver, config)
    assert solution.config == config
    return check(handle, solution, rng)


def nvrtc_reason() -> str | None:
    """Why NVRTC cannot compile kernels here (cuda-bindings or libnvrtc missing), or None."""
    try:
        from miopy.backends import cuda

        cuda.nvrtc_version()
    except Exception as exc:  # cuda-bindings or libnvrtc missing
        return f"NVRTC unavailable: {exc}"
    return None


needs_nvrtc = pytest.mark.skipif(nvrtc_reason() is not None, reason=str(nvrtc_reason()))


def random_problem(
    rng: np.random.Generator,
    dims: int = 2,
    dtype: str = "fp32",
    direction: str | None = None,
    max_size: int = 9,
) -> ConvProblem:
    """A small random problem: layouts, strides, padding, dilation, groups, transposed."""
    while True:
        g = int(rng.choice([1, 1, 2, 3]))
        c = g * int(rng.integers(1, 4))
        k = g * int(rng.integers(1, 4))
        if rng.random() < 0.15:
            c = k = g = int(rng.integers(2, 5))  # depthwise
        n = int(rng.integers(1, 3))
        sp = [int(rng.integers(3, max_size)) for _ in range(dims)]
        if dims == 3:
            sp[0] = int(rng.integers(2, 5))
        fil = [int(rng.integers(1, 4)) for _ in range(dims)]
        pads = [int(rng.integers(0, 2)) for _ in range(dims)]
        strides = [int(rng.integers(1, 3)) for _ in range(dims)]
        dils = [int(rng.integers(1, 3)) for _ in range(dims)]
        mode = "trans" if rng.random() < 0.25 else "conv"
        opads = [int(rng.integers(0, s)) for s in strides] if mode == "trans" else None
        layouts = ("NCHW", "NHWC") if dims == 2 else ("NCDHW", "NDHWC")
        xl, wl, yl = (str(rng.choice(layouts)) for _ in range(3))
        x = TensorDesc(dtype, (n, c, *sp), layout=xl)
        wlens = (k, c // g, *fil) if mode == "conv" else (c, k // g, *fil)
        w = TensorDesc(dtype, wlens, layout=wl)
        direction_ = direction or str(rng.choice(["F", "B", "W"]))
        try:
            conv = ConvDesc(pads, strides, dils, g, mode, opads)
            return ConvProblem.create(x, w, conv, direction_, y_layout=yl)
        except ValueError:
            continue  # e.g. filter larger than the padded input: draw again
