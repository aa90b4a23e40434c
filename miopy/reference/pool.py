"""Reference pooling, forward (values and the max index) and backward, in float64: one vectorised
step per window tap."""

from __future__ import annotations

import itertools

import numpy as np

from miopy.problem.passes import Pass
from miopy.problem.pooling import IndexDesc, IndexMode, PoolingMode, PoolingProblem
from miopy.reference.common import store_logical, view
from miopy.tensor import from_storage


def _as5(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a if a.ndim == 5 else a[:, :, None]


def _geometry(p: PoolingProblem):
    """(window, strides, pads, input spatial, output spatial), 3 values each (D first)."""
    d = p.desc
    if p.spatial_dims == 2:
        return (1, *d.window), (1, *d.strides), (0, *p.pads), p.x.lens5()[2:], p.y.lens5()[2:]
    return d.window, d.strides, p.pads, p.x.lens5()[2:], p.y.lens5()[2:]


def _taps(p: PoolingProblem):
    """(linear tap index inside the window, (fz, fy, fx), slices of the padded input)."""
    k, s, _, _, o = _geometry(p)
    for t, tap in enumerate(itertools.product(range(k[0]), range(k[1]), range(k[2]))):
        yield t, tap, tuple(slice(f, f + (n - 1) * st + 1, st) for f, n, st in zip(tap, o, s))


def _padded_shape(p: PoolingProblem) -> tuple[int, int, int]:
    k, s, pads, i, o = _geometry(p)
    return tuple(max(n + q, (m - 1) * st + kk) for n, q, m, st, kk in zip(i, pads, o, s, k))


def _pad(p: PoolingProblem, x5: np.ndarray, fill: float) -> np.ndarray:
    _, _, pads, i, _ = _geometry(p)
    out = np.full((*x5.shape[:2], *_padded_shape(p)), fill, dtype=np.float64)
    out[:, :, pads[0] : pads[0] + i[0], pads[1] : pads[1] + i[1], pads[2] : pads[2] + i[2]] = x5
    return out


def _image_positions(p: PoolingProblem, tap) -> np.ndarray:
    """d*H*W + h*W + w of the input element each output reads at ``tap`` (broadcast shape)."""
    _, s, pads, i, o = _geometry(p)
    pos = [np.arange(n) * st - q + f for n, st, q, f in zip(o, s, pads, tap)]
    return (pos[0][:, None, None] * i[1] + pos[1][None, :, None]) * i[2] + pos[2][None, None, :]


def _unsqueeze(p: PoolingProblem, a: np.ndarray) -> np.ndarray:
    return a if p.spatial_dims == 3 else a[:, :, 0]


def pool_forward(p: PoolingProblem, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(y, index) in logical shape from logical-shape x; index is None unless max pooling keeps
    one. The first maximum in window order wins (strictly greater replaces)."""
    x5 = _as5(np.asarray(x, dtype=np.float64))
    mode = p.desc.mode
    k = _geometry(p)[0]
    if mode is PoolingMode.MAX:
        xp = _pad(p, x5, -np.inf)
        best = np.full((*x5.shape[:2], *_geometry(p)[4]), -np.inf)
        which = np.zeros(best.shape, dtype=np.int64)
        image = np.zeros(best.shape, dtype=np.int64)
        for t, tap, sl in _taps(p):
            v = xp[(slice(None), slice(None), *sl)]
            better = v > best
            best = np.where(better, v, best)
            which = np.where(better, t, which)
            image = np.where(better, _image_positions(p, tap), image)
        index = None
        if p.uses_index:
            index = which if p.desc.index_mode is IndexMode.MASK else image
            index = _unsqueeze(p, index)
        return _unsqueeze(p, best), index
    xp = _pad(p, x5, 0.0)
    ones = _pad(p, np.ones((1, 1, *x5.shape[2:])), 0.0)
    total = 0.0
    count = 0.0
    for _, _, sl in _taps(p):
        total = total + xp[(slice(None), slice(None), *sl)]
        count = count + ones[(slice(None), slice(None), *sl)]
    divisor = count if mode is PoolingMode.AVG else float(np.prod(k))
    return _unsqueeze(p, total / divisor), None


def _tap_of_index(p: PoolingProblem, index5: np.ndarray) -> np.ndarray:
    """The linear window tap each stored index names (-1 when it names no tap of its window)."""
    k, s, pads, i, o = _geometry(p)
    index5 = index5.astype(np.int64)
    if p.desc.index_mode is IndexMode.MASK:
        return np.where((index5 >= 0) & (index5 < int(np.prod(k))), index5, -1)
    d, r = np.divmod(index5, i[1] * i[2])
    h, w = np.divmod(r, i[2])
    starts = [np.arange(n) * st - q for n, st, q in zip(o, s, pads)]
    fz = d - starts[0][:, None, None]
    fy = h - starts[1][None, :, None]
    fx = w - starts[2][None, None, :]
    ok = (fz >= 0) & (fz < k[0]) & (fy >= 0) & (fy < k[1]) & (fx >= 0) & (fx < k[2])
    return np.where(ok, (fz * k[1] + fy) * k[2] + fx, -1)


def pool_backward(p: PoolingProblem, dy: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
    """dx (logical shape) from dy and, for max pooling, the index the forward pass stored: max adds
    dy where the index points, average spreads dy / pool size over the window."""
    dy5 = _as5(np.asarray(dy, dtype=np.float64))
    k, _, pads, i, _ = _geometry(p)
    mode = p.desc.mode
    dxp = np.zeros((*dy5.shape[:2], *_padded_shape(p)))
    if mode is PoolingMode.MAX:
        if index is None:
            raise ValueError("max pooling backward needs the forward index")
        taps = _tap_of_index(p, _as5(np.asarray(index)))
        for t, _, sl in _taps(p):
            dxp[(slice(None), slice(None), *sl)] += np.where(taps == t, dy5, 0.0)
    else:
        ones = _pad(p, np.ones((1, 1, *i)), 0.0)
        if mode is PoolingMode.AVG:
            count = 0.0
            for _, _, sl in _taps(p):
                count = count + ones[(slice(None), slice(None), *sl)]
        else:
            count = float(np.prod(k))
        share = dy5 / count
        for _, _, sl in _taps(p):
            dxp[(slice(None), slice(None), *sl)] += share
    dx = dxp[:, :, pads[0] : pads[0] + i[0], pads[1] : pads[1] + i[1], pads[2] : pads[2] + i[2]]
    return _unsqueeze(p, dx)


def pool_reference(p: PoolingProblem, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs by role ({"y", "index"} forward, {"dx"} backward) from logical-shape inputs."""
    if p.direction is Pass.FORWARD:
        y, index = pool_forward(p, tensors["x"])
        return {"y": y} if index is None else {"y": y, "index": index}
    return {"dx": pool_backward(p, tensors["dy"], tensors.get("index"))}


__all__ = ["pool_backward", "pool_forward", "pool_reference"]


# ---- the pipeline's reference contract (tests/backend/test_registry.py) ----------------------------
def read_output(p: PoolingProblem, role: str, buffer: np.ndarray) -> np.ndarray:
    """A flat stored buffer in logical shape: float64 values, or the index as int64."""
    desc = p.tensors()[role]
    if isinstance(desc, IndexDesc):
        return view(buffer, desc).astype(np.int64)
    return from_storage(view(buffer, desc), desc.dtype).astype(np.float64)


def reference(p: PoolingProblem, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Expected outputs by role (float64, the index as int64; logical shape) from flat buffers."""
    return pool_reference(p, {r: read_output(p, r, buffers[r]) for r in p.inputs})


def random_buffers(p: PoolingProblem, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Stored buffers: random inputs (backward's index is the one a forward pass leaves on random
    data), outputs NaN (the index 0xff..)."""
    out = {}
    for role, desc in p.tensors().items():
        if isinstance(desc, IndexDesc):
            flat = np.full(desc.element_space, desc.index_type.max, desc.index_type.numpy)
            if role in p.inputs:
                _, index = pool_forward(
                    PoolingProblem(p.desc, p.x, p.y, Pass.FORWARD), rng.uniform(-1, 1, p.x.lens)
                )
                view(flat, desc)[...] = index
            out[role] = flat
        else:
            values = rng.uniform(-1, 1, desc.lens) if role in p.inputs else np.full(desc.lens, np.nan)
            out[role] = store_logical(values, desc)
    return out


def samples() -> list[PoolingProblem]:
    """Small problems on which every pooling solver runs: channels-last with vector channels, NCHW,
    3-D, each mode and index kind, NCHW max (PoolingBwdScatterRowsCpu)."""
    from miopy.problem.pooling import PoolingDesc
    from miopy.tensor import TensorDesc

    out = []
    for direction in "FB":
        for dtype, desc, lens, layout in (
            ("fp16", PoolingDesc("max", (3, 3), (2, 2), (1, 1)), (2, 16, 7, 6), "NHWC"),
            ("fp32", PoolingDesc("avg", (3, 2), (2, 1), (1, 0)), (2, 3, 7, 6), "NCHW"),
            ("bf16", PoolingDesc("avg_in", (2, 2), (2, 2)), (1, 8, 6, 6), "NHWC"),
            (
                "fp32",
                PoolingDesc("max", (2, 3, 3), (2, 2, 1), (1, 1, 0), index_type="u32", index_mode="image"),
                (1, 3, 4, 5, 6),
                "NCDHW",
            ),
            ("bf16", PoolingDesc("max", (3, 3), (2, 2), (1, 1)), (1, 3, 7, 9), "NCHW"),
        ):
            out.append(PoolingProblem.create(desc, TensorDesc(dtype, lens, layout=layout), direction))
    return out
