"""LRN: keys, errors naming the field, the vectorised reference against plain loops over MIOpen's
windows, and every solver on PoCL on random shapes, layouts, modes and dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from misc_support import run_all

from miopy.errors import BadParm
from miopy.problem.lrn import LRNMode, LRNProblem
from miopy.reference import lrn as ref
from miopy.reference.tolerance import BASE
from miopy.tensor import TensorDesc


def test_keys_round_trip():
    for p in ref.samples():
        assert LRNProblem.parse(p.key()) == p


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(mode="sideways"), "mode"),
        (dict(n=0), "n"),
        (dict(beta=float("inf")), "beta"),
        (dict(x=TensorDesc("fp32", (1, 2, 3, 4, 5))), r"x\.lens"),
    ],
)
def test_errors_name_the_field(kwargs, field):
    args = dict(x=TensorDesc("fp32", (2, 3, 4, 5)), mode="cross", n=5, alpha=1e-3, beta=0.75, k=1.0)
    args.update(kwargs)
    x = args.pop("x")
    with pytest.raises(BadParm, match=field):
        LRNProblem.create(x, **args)


def _loops(p: LRNProblem, x, y=None, dy=None, scale=None, backward=False):
    """MIOpen's host formulas, element by element."""
    n_, c_, h_, w_ = x.shape
    pad, size = p.pad, p.n
    out = np.zeros_like(x)
    sc = np.zeros_like(x)
    for n, c, h, w in np.ndindex(x.shape):
        if p.mode is LRNMode.CROSS_CHANNEL:
            lo, hi = (c - (size - 1 - pad), c + pad) if backward else (c - pad, c - pad + size - 1)
            chans = [j for j in range(lo, hi + 1) if 0 <= j < c_]
            cells = [(n, j, h, w) for j in chans]
            area = size
        else:
            hs, ws = h - pad, w - pad
            he, we = min(hs + size, h_ + pad), min(ws + size, w_ + pad)
            area = (he - hs) * (we - ws)
            cells = [
                (n, c, a, b) for a in range(max(hs, 0), min(he, h_)) for b in range(max(ws, 0), min(we, w_))
            ]
        if not backward:
            sc[n, c, h, w] = p.k + p.alpha / area * sum(x[i] ** 2 for i in cells)
            out[n, c, h, w] = x[n, c, h, w] * sc[n, c, h, w] ** -p.beta
        else:
            acc = sum(dy[i] * y[i] / scale[i] for i in cells)
            g = dy[n, c, h, w] * scale[n, c, h, w] ** -p.beta
            out[n, c, h, w] = g - 2 * p.alpha * p.beta / area * x[n, c, h, w] * acc
    return out, sc


@pytest.mark.parametrize("mode", ["cross", "within"])
@pytest.mark.parametrize("size", [1, 3, 4, 5])
def test_reference_matches_loops(mode, size):
    rng = np.random.default_rng(size)
    x = rng.uniform(-1, 1, (2, 6, 5, 4))
    p = LRNProblem.create(TensorDesc("fp32", x.shape), mode, size, 0.7, 0.75, 1.2, "F", True)
    y, scale = ref.lrn_forward(p, x)
    want_y, want_s = _loops(p, x)
    np.testing.assert_allclose(y, want_y, rtol=1e-12)
    np.testing.assert_allclose(scale, want_s, rtol=1e-12)
    dy = rng.uniform(-1, 1, x.shape)
    b = LRNProblem.create(TensorDesc("fp32", x.shape), mode, size, 0.7, 0.75, 1.2, "B")
    dx = ref.lrn_backward(b, {"x": x, "y": y, "dy": dy, "scale": scale})
    want_dx, _ = _loops(b, x, y, dy, scale, backward=True)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-10, atol=1e-12)


def test_cross_backward_is_the_gradient():
    """For odd windows MIOpen's cross-channel backward is the exact gradient of the forward pass."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (1, 7, 2, 3))
    d = TensorDesc("fp32", x.shape)
    fwd = LRNProblem.create(d, "cross", 5, 0.9, 0.75, 1.0, "F")
    dy = rng.uniform(-1, 1, x.shape)
    y, scale = ref.lrn_forward(fwd, x)
    dx = ref.lrn_backward(
        LRNProblem.create(d, "cross", 5, 0.9, 0.75, 1.0, "B"), dict(x=x, y=y, dy=dy, scale=scale)
    )
    eps = 1e-6
    for idx in [(0, 0, 0, 0), (0, 3, 1, 2), (0, 6, 1, 1)]:
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        num = ((ref.lrn_forward(fwd, xp)[0] - ref.lrn_forward(fwd, xm)[0]) * dy).sum() / (2 * eps)
        assert dx[idx] == pytest.approx(num, rel=1e-6, abs=1e-9)


def test_random_problems_every_solver(ocl):
    rng = np.random.default_rng(17)
    for _ in range(6):
        dtype = str(rng.choice(["fp32", "fp16", "bf16"]))
        lens = tuple(int(v) for v in rng.integers(1, 8, 4))
        x = TensorDesc(dtype, lens, layout=str(rng.choice(["NCHW", "NHWC"])))
        p = LRNProblem.create(
            x,
            str(rng.choice(["cross", "within"])),
            int(rng.integers(1, 6)),
            float(rng.uniform(0.1, 1)),
            float(rng.uniform(0.5, 1)),
            float(rng.uniform(1, 2)),
            str(rng.choice(["F", "B"])),
            bool(rng.integers(0, 2)),
        )
        run_all(ocl, p, ref, BASE[p.dtype] * 4, buffers=ref.random_buffers(p, rng))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_cross_channel_cpu_kernels(ocl, dtype):
    """PoCL's float8 cross-channel kernels: lrn_*_planes_cpu (NCHW; pixel runs of 64 (forward), 32
    (backward, walking the channels with a ring of terms) and of 8, the last run overlapping) and
    lrn_*_channels_cpu (NHWC; blocks of 8 channels, their window sums from a buffer of the terms
    or, past its size, directly; partial last blocks), windows of 1 to 11; beta 0.75 (a power by
    square roots) and 0.6 (the general power); a window wider than the backward's ring refused."""
    from miopy.solvers.lrn.direct import cpu_program

    rng = np.random.default_rng(23)
    shapes = [("NCHW", (2, 21, 9, 9)), ("NCHW", (1, 13, 3, 3)), ("NHWC", (2, 21, 3, 4))]
    shapes += [("NHWC", (1, 5, 2, 3)), ("NHWC", (1, 40, 2, 3))]  # C < 8; blocks of 8 with windows of 11
    shapes += [("NHWC", (1, 1050, 1, 2))]  # more channels than the kernels' buffer: the direct path
    for layout, lens in shapes:
        x = TensorDesc(dtype, lens, layout=layout)
        for size in (1, 4, 5, 11):
            for direction, save in (("F", True), ("F", False), ("B", False)):
                beta = 0.75 if size in (1, 5) else 0.6
                p = LRNProblem.create(x, "cross", size, 0.8, beta, 1.3, direction, save)
                program = cpu_program(ocl, p)
                assert program is not None and program.steps[0].spec.name.endswith("_cpu")
                bufs = ref.random_buffers(p, rng)
                ran = run_all(ocl, p, ref, BASE[p.dtype] * 4, buffers=bufs, only=CPU_PROGRAM_SOLVERS)
                assert ran
    wide = LRNProblem.create(TensorDesc(dtype, (1, 20, 3, 3)), "cross", 17, 0.8, 0.75, 1.3, "B")
    assert cpu_program(ocl, wide) is None  # wider than lrn_bwd_planes_cpu's ring of terms


CPU_PROGRAM_SOLVERS = ("LrnDirect", "LrnCrossSlide")  # the solvers that choose cpu_program


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_within_channel_cpu_kernels(ocl, dtype, monkeypatch):
    """PoCL's float8 within-channel kernels: lrn_*_within_rows_cpu (NCHW rows: blocks of 8 columns,
    the last one moved back to end at the row's end; rows under 8, lane by lane; windows past both
    edges of the image) and lrn_*_within_channels_cpu (NHWC:
    blocks of 8 channels, a partial last one), windows of 1 to 5 wider than the image; beta 0.75
    and 0.6; bands of 2 output rows (a work item's ring of window rows starts inside the image)."""
    from miopy.solvers.lrn import direct
    from miopy.solvers.lrn.direct import cpu_program

    monkeypatch.setattr(direct, "BAND_ROWS", 2)
    rng = np.random.default_rng(29)
    for layout, lens in (("NCHW", (2, 3, 5, 19)), ("NCHW", (1, 2, 3, 6)), ("NHWC", (2, 11, 4, 3))):
        x = TensorDesc(dtype, lens, layout=layout)
        for size, beta in ((1, 0.75), (4, 0.6), (5, 0.75)):
            for direction, save in (("F", True), ("F", False), ("B", False)):
                p = LRNProblem.create(x, "within", size, 0.8, beta, 1.3, direction, save)
                program = cpu_program(ocl, p)
                assert program is not None and "_within_" in program.steps[0].spec.name
                bufs = ref.random_buffers(p, rng)
                assert run_all(ocl, p, ref, BASE[p.dtype] * 4, buffers=bufs, only=("LrnDirect",))


@pytest.mark.parametrize("size", [1, 2, 5, 7])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cross_ring_matches_the_reference(ocl, size, layout):
    """The register-window kernels, forward (with and without the scale) and backward, with
    windows wider than the channels and even sizes (MIOpen's window one channel later)."""
    rng = np.random.default_rng(size)
    for c in (3, 11):
        x = TensorDesc("fp32", (2, c, 3, 4), layout=layout)
        for direction, save in (("F", True), ("F", False), ("B", False)):
            p = LRNProblem.create(x, "cross", size, 0.7, 0.75, 1.5, direction, save)
            ran = run_all(ocl, p, ref, BASE[p.dtype] * 4, buffers=ref.random_buffers(p, rng))
            assert "LrnCrossRing" in ran


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("size", [1, 4, 5, 9])
def test_channels_chunk_gpu_kernel_on_opencl(ocl, monkeypatch, dtype, size):
    """LrnChannelsChunk's kernels (GPU devices only) on PoCL, NHWC: windows wider than the channels,
    even sizes, channel counts that do not divide the vector (windows cut at each pixel's edge, also
    across work items and work-groups), runs longer than one work-group and a partial last one."""
    import miopy.solvers.lrn.direct as direct

    monkeypatch.setattr(direct, "cpu_kernels", lambda ctx: False)
    rng = np.random.default_rng(size)
    for lens in ((2, 3, 4, 4), (3, 12, 9, 10), (1, 96, 5, 7)):
        x = TensorDesc(dtype, lens, layout="NHWC")
        for direction, save in (("F", True), ("F", False), ("B", False)):
            p = LRNProblem.create(x, "cross", size, 0.7, 0.75, 1.5, direction, save)
            if x.element_count % (16 // p.dtype.itemsize):
                continue
            # only the chunk kernels: the other solvers build for seconds each on a cold PoCL cache
            ran = run_all(
                ocl, p, ref, BASE[p.dtype] * 4, buffers=ref.random_buffers(p, rng), only=("LrnChannelsChunk",)
            )
            assert ran == ["LrnChannelsChunk"]
