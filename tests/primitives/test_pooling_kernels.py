"""Pooling solvers against the NumPy reference on OpenCL (PoCL in CI): max (index inside the
window or in the image, every index type), average with and without padding, 2-D and 3-D, every
layout, pad modes, forward and backward, every data type. The index must match exactly."""

from __future__ import annotations

import numpy as np
import pytest
from primitive_support import check_pool

from miopy.engine.candidates import make_solution
from miopy.problem.pooling import PoolingDesc, PoolingProblem
from miopy.solvers.pool import PoolingBwdDirect, PoolingBwdVec, PoolingFwdDirect, PoolingFwdVec
from miopy.tensor import TensorDesc

FWD = {"vec": PoolingFwdVec(), "direct": PoolingFwdDirect()}
BWD = {"vec": PoolingBwdVec(), "direct": PoolingBwdDirect()}


def _solvers(direction: str) -> dict:
    return FWD if direction == "F" else BWD


@pytest.mark.parametrize("direction", ["F", "B"])
@pytest.mark.parametrize("mode", ["max", "avg", "avg_in"])
def test_modes_layouts_fp32(ocl, mode, direction):
    rng = np.random.default_rng(hash((mode, direction)) % 2**32)
    cases = [
        ((2, 3, 9, 11), "NCHW", PoolingDesc(mode, (3, 3), (2, 2), (1, 1))),
        (
            (2, 8, 9, 11),
            "NHWC",
            PoolingDesc(mode, (3, 2), (2, 1), (1, 0), index_mode="image", index_type="u16"),
        ),
        ((1, 5, 7, 8), "NHWC", PoolingDesc(mode, (2, 3), (1, 3), (0, 2), index_type="u32")),
    ]
    for lens, layout, desc in cases:
        problem = PoolingProblem.create(desc, TensorDesc("fp32", lens, layout=layout), direction)
        solver = _solvers(direction)["direct"]
        assert solver.is_applicable(ocl, problem) is None
        check_pool(ocl, make_solution(ocl, problem, solver), rng)


@pytest.mark.parametrize("direction", ["F", "B"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_vectorised_channels_last(ocl, dtype, direction):
    """C a multiple of the vector width, channels-last: the Vec solver applies and agrees."""
    rng = np.random.default_rng(4)
    c = 16 if dtype != "fp32" else 12
    for mode, index_mode in (("max", "mask"), ("max", "image"), ("avg", "mask")):
        desc = PoolingDesc(mode, (3, 3), (2, 2), (1, 1), index_mode=index_mode, index_type="u16")
        problem = PoolingProblem.create(desc, TensorDesc(dtype, (2, c, 10, 9), layout="NHWC"), direction)
        solver = _solvers(direction)["vec"]
        assert solver.is_applicable(ocl, problem) is None
        check_pool(ocl, make_solution(ocl, problem, solver), rng)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_cpu_forward_kernels(ocl, dtype):
    """PoCL's forward kernels: pool_fwd_rows_cpu (NCHW rows, 8 outputs a load for strides 1 and 2,
    gathered for 3; blocks past the row's end; padding at both edges) and pool_fwd_channels_cpu
    (NHWC, a partial block of 8 channels), max with the index in the window (u8) and in the image
    (u32), average with and without the padding."""
    from miopy.solvers.pool.direct import cpu_fwd_program

    rng = np.random.default_rng(41)
    for mode, index_mode, index_type in (
        ("max", "mask", "u8"),
        ("max", "image", "u32"),
        ("avg", "mask", "u8"),
    ):
        for layout, lens, window, stride, pad in (
            ("NCHW", (1, 2, 5, 37), (3, 3), (1, 1), (1, 1)),
            ("NCHW", (1, 2, 6, 21), (3, 2), (2, 2), (1, 1)),
            ("NCHW", (1, 1, 4, 25), (2, 4), (1, 3), (0, 2)),
            ("NCHW", (1, 2, 19, 13), (3, 3), (1, 1), (1, 1)),  # 19 output rows: 3 work items a plane
            ("NHWC", (1, 11, 5, 6), (3, 3), (2, 2), (1, 1)),
        ):
            kind = "avg_in" if mode == "avg" and stride == (1, 3) else mode  # padding counted
            desc = PoolingDesc(kind, window, stride, pad, index_mode=index_mode, index_type=index_type)
            problem = PoolingProblem.create(desc, TensorDesc(dtype, lens, layout=layout), "F")
            program = cpu_fwd_program(ocl, problem)
            assert program is not None and program.steps[0].spec.name.endswith("_cpu")
            solution = make_solution(ocl, problem, FWD["direct"])
            check_pool(ocl, solution, rng)
            if mode == "max":  # ties everywhere: the index must still be the first in window order
                check_pool(ocl, solution, FewValues(rng))


class FewValues:
    """A generator whose uniform draws take 3 values only (max pooling windows full of ties)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def uniform(self, low: float, high: float, size) -> np.ndarray:
        return low + (high - low) * self._rng.integers(0, 3, size) / 3


def _check_backward_cases(ocl, solver, dtype, cases, kinds, rng):
    """Every (mode, index mode, index type) of ``kinds`` on every (layout, lens, window, stride,
    pad) of ``cases``, backward, against the reference; the solver refuses a CUDA-like context.
    Returns the last (desc, lens, layout)."""
    for mode, index_mode, index_type in kinds:
        for layout, lens, window, stride, pad in cases:
            kind = "avg_in" if mode == "avg" and stride[-1] == 3 else mode  # padding counted
            desc = PoolingDesc(kind, window, stride, pad, index_mode=index_mode, index_type=index_type)
            problem = PoolingProblem.create(desc, TensorDesc(dtype, lens, layout=layout), "B")
            assert solver.is_applicable(ocl, problem) is None
            check_pool(ocl, make_solution(ocl, problem, solver), rng)
    assert solver.is_applicable(CudaLike(), problem).startswith("backend ")
    return desc, lens, layout


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_cpu_backward_kernels(ocl, dtype):
    """PoolingBwdCpu: pool_bwd_rows_cpu (NCHW rows: stride 1, stride 2 with an odd and an even
    window, stride 3 by lanes; rows past the last output; padding at both edges; 3-D) and
    pool_bwd_channels_cpu (NHWC cells of 2 x 2 and 1 x 3 positions, a partial block of 8
    channels), max with the index in the window (u8) and in the image (u32), average with and
    without the padding; the same programs as test_cpu_forward_kernels (compiled once)."""
    from miopy.solvers.pool import PoolingBwdCpu

    rng = np.random.default_rng(43)
    solver = PoolingBwdCpu()
    cases = [
        ("NCHW", (1, 2, 5, 37), (3, 3), (1, 1), (1, 1)),
        ("NCHW", (1, 2, 6, 21), (3, 2), (2, 2), (1, 1)),
        ("NCHW", (1, 1, 4, 25), (2, 4), (1, 3), (0, 2)),
        ("NHWC", (1, 11, 5, 6), (3, 3), (2, 2), (1, 1)),
        ("NHWC", (1, 9, 3, 8), (2, 4), (1, 3), (0, 2)),
        ("NCDHW", (1, 2, 3, 4, 10), (2, 2, 3), (1, 2, 2), (1, 0, 1)),
    ]
    kinds = (("max", "mask", "u8"), ("max", "image", "u32"), ("avg", "mask", "u8"))
    _check_backward_cases(ocl, solver, dtype, cases, kinds, rng)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_cpu_scatter_backward(ocl, dtype, monkeypatch):
    """PoolingBwdScatterCpu (pool_bwd_scatter_channels_cpu: NHWC / NDHWC, a partial block of 8
    channels) in bands of 2 dx rows (the outputs covering two bands added by both, each only inside
    its band): overlapping and non-overlapping windows, padding at both edges, strides 1-3; max
    with the index in the window (u8, u16) and in the image (u32), average with and without the
    padding (bf16: max only). NCHW is not its layout."""
    from miopy.solvers.pool import PoolingBwdScatterCpu, cpu_scatter

    monkeypatch.setattr(cpu_scatter, "BAND_MOST", 2)
    rng = np.random.default_rng(47)
    solver = PoolingBwdScatterCpu()
    cases = [
        ("NHWC", (1, 11, 5, 6), (3, 3), (2, 2), (1, 1)),
        ("NHWC", (2, 16, 7, 8), (2, 4), (2, 3), (0, 2)),
        ("NDHWC", (1, 9, 3, 4, 5), (2, 2, 3), (1, 2, 2), (1, 0, 1)),
    ]
    kinds = (("max", "mask", "u8"), ("max", "image", "u32"), ("max", "mask", "u16"), ("avg", "mask", "u8"))
    desc, lens, layout = _check_backward_cases(
        ocl, solver, dtype, cases, kinds[:1] if dtype == "bf16" else kinds, rng
    )
    forward = PoolingProblem.create(desc, TensorDesc(dtype, lens, layout=layout), "F")
    assert solver.is_applicable(ocl, forward) == "direction is FORWARD"
    nchw = PoolingProblem.create(PoolingDesc("max", (2, 2), (2, 2)), TensorDesc(dtype, (1, 3, 4, 5)), "B")
    assert solver.is_applicable(ocl, nchw).startswith("dx and dy not channels-contiguous")


def test_vec_not_applicable():
    nchw = PoolingProblem.create(PoolingDesc(), TensorDesc("fp16", (1, 16, 8, 8)))
    assert FWD["vec"].is_applicable(None, nchw) == "x is not channels-last"
    odd = PoolingProblem.create(PoolingDesc(), TensorDesc("fp16", (1, 12, 8, 8), layout="NHWC"))
    assert FWD["vec"].is_applicable(None, odd) == "C=12 is not a multiple of 8"
    assert BWD["direct"].is_applicable(None, odd) == "direction is FORWARD"


@pytest.mark.parametrize("direction", ["F", "B"])
def test_3d(ocl, direction):
    rng = np.random.default_rng(9)
    for layout, mode, index_mode in (
        ("NCDHW", "max", "image"),
        ("NDHWC", "max", "mask"),
        ("NCDHW", "avg_in", "mask"),
    ):
        desc = PoolingDesc(mode, (2, 3, 3), (2, 2, 1), (1, 1, 0), index_mode=index_mode, index_type="u32")
        problem = PoolingProblem.create(desc, TensorDesc("fp32", (2, 3, 5, 6, 7), layout=layout), direction)
        check_pool(ocl, make_solution(ocl, problem, _solvers(direction)["direct"]), rng)


@pytest.mark.parametrize("pad_mode", ["same", "valid"])
def test_pad_modes_and_index_types(ocl, pad_mode):
    rng = np.random.default_rng(2)
    for index_type in ("u8", "u64"):
        desc = PoolingDesc("max", (3, 2), (2, 3), pad_mode=pad_mode, index_type=index_type)
        for direction in "FB":
            problem = PoolingProblem.create(desc, TensorDesc("fp16", (2, 3, 11, 10)), direction)
            check_pool(ocl, make_solution(ocl, problem, _solvers(direction)["direct"]), rng)


def test_strided_tensors_and_no_index(ocl):
    rng = np.random.default_rng(6)
    x = TensorDesc("bf16", (2, 3, 7, 9), strides=(300, 90, 12, 1))
    desc = PoolingDesc("max", (3, 3), (2, 2), (1, 1), index_type="u8")
    forward = PoolingProblem.create(desc, x, "F", y_strides=(100, 1, 20, 3), save_index=False)
    assert "index" not in forward.tensors()
    check_pool(ocl, make_solution(ocl, forward, FWD["direct"]), rng)
    backward = PoolingProblem.create(desc, x, "B", y_strides=(100, 1, 20, 3))
    check_pool(ocl, make_solution(ocl, backward, BWD["direct"]), rng)


def test_backward_uses_the_kernels_own_index(ocl):
    """Forward on the device, then backward from the index it wrote: dx equals the reference."""
    from primitive_support import assert_close, logical, run

    from miopy.reference.common import store_logical
    from miopy.reference.pool import pool_backward

    rng = np.random.default_rng(12)
    x = TensorDesc("fp32", (2, 8, 9, 9), layout="NHWC")
    desc = PoolingDesc("max", (3, 3), (2, 2), (1, 1))
    fwd = PoolingProblem.create(desc, x, "F")
    host = {
        "x": store_logical(rng.uniform(0, 1, x.lens), x),
        "y": store_logical(np.zeros(fwd.y.lens), fwd.y),
        "index": np.zeros(fwd.index.element_space, np.uint8),
    }
    run(ocl, make_solution(ocl, fwd, FWD["vec"]), host)
    bwd = PoolingProblem.create(desc, x, "B")
    dy = rng.uniform(-1, 1, fwd.y.lens)
    host_b = {
        "dy": store_logical(dy, bwd.y),
        "dx": store_logical(np.full(x.lens, np.nan), x),
        "index": host["index"],
    }
    run(ocl, make_solution(ocl, bwd, BWD["direct"]), host_b)
    want = pool_backward(bwd, dy, logical(fwd, "index", host["index"]))
    assert_close(logical(bwd, "dx", host_b["dx"]), want, "FP32", "backward from the device's index")
    assert np.count_nonzero(want) > 0


class CudaLike:
    """A context that makes solvers compile the whole shape in, as they do on CUDA."""

    backend_name = "cuda"


@pytest.mark.parametrize(
    "direction, solver, dtype, lens, layout, desc",
    [
        ("F", "vec", "fp16", (2, 16, 9, 9), "NHWC", PoolingDesc("max", (3, 3), (2, 2), (1, 1))),
        ("B", "vec", "fp16", (2, 16, 9, 9), "NHWC", PoolingDesc("max", (3, 3), (2, 2), (1, 1))),
        ("F", "direct", "fp32", (2, 3, 9, 8), "NCHW", PoolingDesc("avg", (3, 2), (2, 2), (1, 1))),
        (
            "B",
            "direct",
            "fp32",
            (1, 2, 4, 5, 6),
            "NCDHW",
            PoolingDesc("avg_in", (2, 3, 3), (2, 1, 2), (1, 1, 0)),
        ),
        (
            "B",
            "direct",
            "bf16",
            (1, 2, 4, 5, 6),
            "NCDHW",
            PoolingDesc("max", (2, 3, 3), (1, 2, 2), (0, 1, 1), index_type="u32", index_mode="image"),
        ),
        (
            "F",
            "direct",
            "fp32",
            (2, 5, 7, 8),
            "NHWC",
            PoolingDesc("max", (2, 3), (1, 2), (1, 1), index_type="u16", index_mode="image"),
        ),
    ],
)
def test_compiled_in_shape(ocl, direction, solver, dtype, lens, layout, desc):
    """The kernels GPUs get (every size, window, stride and pad compiled in) agree too, in the
    default work-item tile and the largest (outputs or input cells that end past the tensor)."""
    problem = PoolingProblem.create(desc, TensorDesc(dtype, lens, layout=layout), direction)
    sv = _solvers(direction)[solver]
    view = problem.solver_view()
    space = list(sv.search_space(CudaLike(), view))
    for cfg in {repr(c): c for c in (sv.default_config(CudaLike(), view), space[-1])}.values():
        solution = make_solution(CudaLike(), problem, sv, cfg)
        defines = dict(solution.kernels[0].defines)
        assert defines["POOL_FIXED"] == 1 and defines["POOL_KW"] == desc.window[-1]
        assert defines["POOL_IDX32"] == 1
        check_pool(ocl, solution, np.random.default_rng(1))


@pytest.mark.parametrize(
    "direction, solver, dtype, lens, layout, desc",
    [
        ("F", "direct", "fp32", (1, 2, 11, 9), "NCHW", PoolingDesc("max", (3, 3), (2, 2), (1, 1))),
        ("B", "vec", "fp16", (1, 8, 9, 7), "NHWC", PoolingDesc("avg", (3, 2), (2, 2), (1, 1))),
    ],
)
def test_every_tile(ocl, monkeypatch, direction, solver, dtype, lens, layout, desc):
    """Every forward tile and backward cell of the search space, on odd sizes (partial tiles), shape
    as run-time arguments (the compiled-in shape: test_static_cells, test_row_vectors); forward
    without the CPU kernels that PoCL otherwise gets."""
    import miopy.solvers.pool.direct as direct

    monkeypatch.setattr(direct, "cpu_kernels", lambda ctx: False)
    rng = np.random.default_rng(21)
    problem = PoolingProblem.create(desc, TensorDesc(dtype, lens, layout=layout), direction)
    sv = _solvers(direction)[solver]
    space = list(sv.search_space(ocl, problem.solver_view()))
    assert len(space) >= 3
    for cfg in space:
        check_pool(ocl, make_solution(ocl, problem, sv, cfg), rng)


def test_vec_defers_when_too_few_work_items(ocl, monkeypatch):
    """On a GPU, channel vectors of a global pooling leave too few work items: immediate mode then
    lists Direct first; large feature maps keep Vec first; a CPU device never defers."""
    from types import SimpleNamespace

    from miopy.engine.find import get_solutions

    gpu = SimpleNamespace(backend_name="cuda", info=SimpleNamespace(compute_units=132))
    glob = PoolingProblem.create(
        PoolingDesc("avg", (7, 7), (1, 1)), TensorDesc("fp16", (32, 2048, 7, 7), layout="NHWC"), "F"
    )
    big = PoolingProblem.create(
        PoolingDesc("max", (3, 3), (2, 2), (1, 1)), TensorDesc("fp16", (32, 64, 112, 112), layout="NHWC"), "F"
    )
    vec = PoolingFwdVec()
    assert vec.is_applicable(gpu, glob) is None
    assert vec.defers(gpu, glob) and not vec.defers(gpu, big)
    assert not vec.defers(ocl, glob) and not PoolingFwdDirect().defers(gpu, glob)
    small = PoolingProblem.create(
        PoolingDesc("avg", (3, 3), (1, 1)), TensorDesc("fp32", (1, 8, 5, 5), layout="NHWC"), "F"
    )
    assert [s.solver for s in get_solutions(ocl, small)] == ["PoolingFwdVec", "PoolingFwdDirect"]
    monkeypatch.setattr(PoolingFwdVec, "defers", lambda self, ctx, problem: True)
    ocl.immediate_choices.clear()  # the handle keeps its answers; a patched solver is no knob
    assert [s.solver for s in get_solutions(ocl, small)] == ["PoolingFwdDirect", "PoolingFwdVec"]
    ocl.immediate_choices.clear()  # nor is the patch undone: the next test asks afresh


@pytest.mark.parametrize("dtype, width", [("fp32", 16), ("fp32", 13)])
def test_row_vectors(ocl, dtype, width):
    """Forward tiles whose input rows load as 16-byte vectors (what CUDA gets for channels-first
    tensors, compiled in): every tile, aligned rows (even W) and rows that fall back to scalars
    (odd W), the last tile of a row past the image."""
    rng = np.random.default_rng(5)
    desc = PoolingDesc("max", (3, 3), (2, 2), (1, 1))
    problem = PoolingProblem.create(desc, TensorDesc(dtype, (2, 3, 7, width)), "F")
    sv = FWD["direct"]
    vectors = 0
    for cfg in sv.search_space(CudaLike(), problem.solver_view()):
        solution = make_solution(CudaLike(), problem, sv, cfg)
        vectors += dict(solution.kernels[0].defines).get("POOL_ROWVEC", 0)
        check_pool(ocl, solution, rng)
    assert vectors == 3  # tw 2 and 4 (fp32: 2 x 2 columns make one 16-byte vector)


def test_static_cells(ocl):
    """Backward cells a whole number of strides with the shape compiled in (what CUDA gets): which
    outputs cover a cell is then compile-time; pads below, equal to and above K - S, strides 1-3,
    sizes that leave partial cells."""
    rng = np.random.default_rng(17)
    cases = [
        ("fp32", (1, 2, 11, 13), "NCHW", PoolingDesc("max", (3, 3), (2, 2), (1, 1))),
        ("fp32", (1, 2, 10, 9), "NCHW", PoolingDesc("max", (3, 3), (2, 2), (0, 0))),
        ("fp32", (1, 2, 9, 11), "NCHW", PoolingDesc("avg", (2, 2), (2, 2), (1, 0))),
        ("fp16", (1, 8, 7, 6), "NHWC", PoolingDesc("avg_in", (3, 3), (1, 1), (1, 1))),
        (
            "fp32",
            (1, 2, 13, 14),
            "NCHW",
            PoolingDesc("max", (5, 4), (3, 3), (2, 1), index_mode="image", index_type="u16"),
        ),
    ]
    static = 0
    for dtype, lens, layout, desc in cases:
        problem = PoolingProblem.create(desc, TensorDesc(dtype, lens, layout=layout), "B")
        sv = BWD["vec" if layout == "NHWC" else "direct"]
        for cfg in sv.search_space(CudaLike(), problem.solver_view()):
            # only the static cells: the other configs are the search-space tests' (each config
            # is a PoCL build of seconds)
            if all(c % s == 0 for c, s in zip((cfg["ch"], cfg["cw"]), desc.strides[-2:])):
                static += 1
                check_pool(ocl, make_solution(CudaLike(), problem, sv, cfg), rng)
    assert static >= 8


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_cpu_scatter_rows_backward(ocl, dtype, monkeypatch):
    """PoolingBwdScatterRowsCpu (pool_bwd_scatter_rows_cpu: max, NCHW / NCDHW with 2-D windows) in
    bands of 2 dx rows (outputs whose windows reach past the band added by both bands, each stored
    only inside its own): overlapping and non-overlapping windows, padding at both edges, strides
    1-3, a partial block of 8 outputs, depth stride 2 (dx planes no output covers: zeros); the index
    in the window (u8, u16) and in the image (u32), four programs. Average pooling and 3-D windows are
    refused."""
    from miopy.solvers.pool import PoolingBwdScatterRowsCpu, cpu_scatter_rows

    monkeypatch.setattr(cpu_scatter_rows, "BAND_MOST", 2)
    rng = np.random.default_rng(53)
    solver = PoolingBwdScatterRowsCpu()
    cases = [
        ("NCHW", (1, 2, 5, 37), (3, 3), (2, 2), (1, 1)),
        ("NCHW", (2, 3, 7, 9), (2, 4), (2, 3), (0, 2)),
        ("NCHW", (1, 1, 6, 12), (3, 2), (1, 1), (1, 1)),
        ("NCDHW", (1, 2, 3, 4, 10), (1, 3, 3), (2, 1, 2), (0, 1, 1)),
    ]
    kinds = {
        "fp32": (("max", "mask", "u8"), ("max", "image", "u32")),
        "fp16": (("max", "mask", "u16"),),
        "bf16": (("max", "mask", "u8"),),
    }
    _check_backward_cases(ocl, solver, dtype, cases, kinds[dtype], rng)
    avg = PoolingProblem.create(PoolingDesc("avg", (2, 2), (2, 2)), TensorDesc(dtype, (1, 3, 4, 5)), "B")
    assert solver.is_applicable(ocl, avg).startswith("not max pooling")
    deep = PoolingDesc("max", (2, 3, 3), (2, 2, 1), (1, 1, 0))
    three = PoolingProblem.create(deep, TensorDesc(dtype, (1, 3, 4, 5, 6), layout="NCDHW"), "B")
    assert solver.is_applicable(ocl, three).startswith("window depth 2")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_cpu_tiles_backward(ocl, dtype):
    """PoolingBwdTilesCpu (windows that do not overlap): pool_bwd_tiles_rows_cpu (NCHW: 2 columns
    a stride of 2 by pairs, an odd last column; other shapes through its column table; rows in
    the gaps between windows and past the last output; padding) and pool_bwd_tiles_channels_cpu
    (NHWC, a partial block of 8 channels; NDHWC with dx planes no window covers), max with the
    index in the window (u8, u16) and in the image (u32), average with and without the padding.
    Overlapping windows are refused."""
    from miopy.solvers.pool import PoolingBwdTilesCpu

    rng = np.random.default_rng(59)
    solver = PoolingBwdTilesCpu()
    cases = [
        ("NCHW", (1, 2, 6, 37), (2, 2), (2, 2), (0, 0)),
        ("NCHW", (2, 3, 7, 11), (2, 2), (3, 3), (1, 1)),
        ("NCHW", (1, 2, 5, 9), (1, 2), (2, 2), (0, 0)),
        ("NHWC", (1, 11, 5, 7), (2, 2), (2, 2), (0, 0)),
        ("NHWC", (2, 8, 7, 8), (2, 3), (3, 3), (1, 1)),
        ("NDHWC", (1, 9, 3, 4, 5), (1, 2, 2), (2, 2, 2), (0, 0, 1)),
    ]
    kinds = {
        "fp32": (("max", "mask", "u8"), ("max", "image", "u32"), ("avg", "mask", "u8")),
        "fp16": (("avg", "mask", "u8"),),
        "bf16": (("max", "mask", "u16"),),
    }
    _check_backward_cases(ocl, solver, dtype, cases, kinds[dtype], rng)
    overlap = PoolingProblem.create(
        PoolingDesc("max", (3, 3), (2, 2), (1, 1)), TensorDesc(dtype, (1, 3, 6, 6)), "B"
    )
    assert solver.is_applicable(ocl, overlap).startswith("windows (3, 3) overlap")
