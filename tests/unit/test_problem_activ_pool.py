"""Activation and pooling descriptors: keys, output shapes, pad modes and bad parameters; the
pooling reference against plain loops (no device needed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from miopy import errors
from miopy.problem.activation import ActivationDesc, ActivationMode, ActivationProblem
from miopy.problem.pooling import IndexMode, IndexType, PoolingDesc, PoolingMode, PoolingProblem
from miopy.reference.activ import activ_backward, activ_forward
from miopy.reference.pool import pool_backward, pool_forward
from miopy.tensor import TensorDesc


def _field(exc: pytest.ExceptionInfo) -> str:
    return str(exc.value).split("=", 1)[0]


# ---- activation ---------------------------------------------------------------------------------
def test_activation_modes_parse_by_code_and_name():
    assert ActivationMode.parse(3) is ActivationMode.RELU
    assert ActivationMode.parse("7") is ActivationMode.CLIPPED_RELU
    assert ActivationMode.parse("leakyrelu") is ActivationMode.LEAKY_RELU
    assert ActivationMode.parse("miopenActivationLOGISTIC") is ActivationMode.LOGISTIC


@pytest.mark.parametrize("mode", [10, -1, "swish", 2.5, True])
def test_unknown_activation_mode(mode):
    with pytest.raises(errors.BadParm) as info:
        ActivationDesc(mode)
    assert _field(info) == "mode"


def test_activation_bad_parameters_name_the_field():
    x = TensorDesc("fp32", (2, 3, 4, 5))
    relu = ActivationDesc("RELU")
    with pytest.raises(errors.BadParm) as info:
        ActivationDesc("ELU", alpha=float("nan"))
    assert _field(info) == "alpha"
    with pytest.raises(errors.BadParm) as info:
        ActivationProblem.create(relu, x, "B", dx=TensorDesc("fp32", (2, 3, 4, 6)))
    assert _field(info) == "dx.lens" and "dy.lens" in str(info.value)
    with pytest.raises(errors.BadParm) as info:
        ActivationProblem.create(relu, x, "B", dy=TensorDesc("fp16", (2, 3, 4, 5)))
    assert _field(info) == "dy.dtype"
    with pytest.raises(errors.BadParm) as info:
        ActivationProblem.create(relu, x, "F", y=TensorDesc("fp32", (2, 3, 5, 4)))
    assert _field(info) == "y.lens"
    with pytest.raises(errors.BadParm) as info:
        ActivationProblem.create(relu, x, "sideways")
    assert _field(info) == "direction"


def test_activation_keys_round_trip():
    lens = (2, 3, 4, 5)
    problems = [
        ActivationProblem.create(ActivationDesc("TANH", 0.5, -1.25, 1), TensorDesc("fp16", lens), "F"),
        ActivationProblem.create(
            ActivationDesc("POWER", 1e-7, 2, 3.5),
            TensorDesc("bf16", lens, layout="NHWC"),
            "B",
            dy=TensorDesc("bf16", lens, strides=(200, 50, 10, 2)),
        ),
    ]
    for p in problems:
        assert ActivationProblem.parse(p.key()) == p
        assert ActivationProblem.parse(p.key()).key() == p.key()
    assert problems[0].key() == "activ_TANH_a0.5_b-1.25_g1_2x3x4x5_NCHW_FP16_F"
    assert problems[0].inputs == ("x",) and problems[0].outputs == ("y",)
    assert problems[1].inputs == ("x", "y")  # POWER's gradient ignores dy, as MIOpen's
    with pytest.raises(errors.BadParm) as info:
        ActivationProblem.parse("activ_RELU_a1_b1_g1_2x3_NCHW_FP32_Q")
    assert _field(info) == "key"


def test_activation_driver_args():
    p = ActivationProblem.create(ActivationDesc("ELU", 0.5), TensorDesc("fp16", (8, 16, 7, 9)), "B")
    assert p.driver_args() == ("activfp16 -n 8 -c 16 -H 7 -W 9 -m 9 -A 0.5 -B 1 -G 1 -F 2".split())


def test_activation_reference_formulas():
    x = np.array([-1.5, -0.25, 0.5, 2.0])
    d = ActivationDesc
    np.testing.assert_allclose(activ_forward(d("LOGISTIC"), x), 1 / (1 + np.exp(-x)))
    np.testing.assert_allclose(activ_forward(d("TANH", 2, 3), x), 3 * np.tanh(2 * x))
    np.testing.assert_allclose(activ_forward(d("SOFTRELU"), x), np.log1p(np.exp(x)))
    np.testing.assert_allclose(activ_forward(d("CLIPPED_RELU", 1), x), [0, 0, 0.5, 1])
    np.testing.assert_allclose(activ_forward(d("POWER", 1, 2, 2), x), [0, 0.25, 4, 25])
    np.testing.assert_allclose(activ_forward(d("ELU", 0.5), x), np.where(x > 0, x, 0.5 * np.expm1(x)))
    dy = np.array([1.0, 2.0, 3.0, 4.0])
    y = activ_forward(d("LOGISTIC"), x)
    np.testing.assert_allclose(activ_backward(d("LOGISTIC"), x, y, dy), dy * y * (1 - y))
    np.testing.assert_allclose(activ_backward(d("ABS"), x, x, dy), [-1, -2, 3, 4])
    np.testing.assert_allclose(activ_backward(d("LEAKY_RELU", 0.1), x, x, dy), [0.1, 0.2, 3, 4])
    # the numeric derivative of the smooth modes matches
    h = 1e-6
    for mode, args in (("SOFTRELU", ()), ("TANH", (0.7, 1.3)), ("ELU", (0.5,)), ("LOGISTIC", ())):
        desc = d(mode, *args)
        numeric = (activ_forward(desc, x + h) - activ_forward(desc, x - h)) / (2 * h)
        got = activ_backward(desc, x, activ_forward(desc, x), np.ones_like(x))
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-8)


# ---- pooling ------------------------------------------------------------------------------------
def test_pooling_output_shapes_and_pad_modes():
    x = TensorDesc("fp32", (32, 64, 112, 112), layout="NHWC")
    p = PoolingProblem.create(PoolingDesc("max", (3, 3), (2, 2), (1, 1)), x)
    assert p.y.lens == (32, 64, 56, 56) and p.y.layout == "NHWC" and p.pads == (1, 1)
    same = PoolingProblem.create(
        PoolingDesc("max", (3, 3), (2, 2), pad_mode="same"), TensorDesc("fp32", (1, 1, 7, 8))
    )
    assert same.y.lens == (1, 1, 4, 4) and same.pads == (1, 0)
    valid = PoolingProblem.create(
        PoolingDesc("avg", (3, 2), (2, 2), pad_mode="valid"), TensorDesc("fp32", (1, 1, 7, 8))
    )
    assert valid.y.lens == (1, 1, 3, 4) and valid.pads == (0, 0)
    three = PoolingProblem.create(
        PoolingDesc("avg_in", (2, 2, 2), (2, 2, 2)), TensorDesc("fp16", (1, 2, 4, 6, 8))
    )
    assert three.y.lens == (1, 2, 2, 3, 4)


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: PoolingDesc("median"), "mode"),
        (lambda: PoolingDesc("max", (3, 3), (0, 2)), "strides"),
        (lambda: PoolingDesc("max", (3, 0)), "window"),
        (lambda: PoolingDesc("max", (3, 3), (1, 1), (3, 0)), "pads"),
        (lambda: PoolingDesc("max", (3, 3, 3, 3)), "window"),
        (lambda: PoolingDesc("max", (3, 3), pad_mode="full"), "pad_mode"),
        (lambda: PoolingDesc("max", index_type="miopenIndexUint7"), "index_type"),
        (lambda: PoolingDesc("max", index_mode=2), "index_mode"),
        (
            lambda: PoolingProblem.create(PoolingDesc("max", (5, 5)), TensorDesc("fp32", (1, 1, 4, 9))),
            "window[H]",
        ),
        (
            lambda: PoolingProblem.create(
                PoolingDesc("max", (3, 3), pad_mode="valid"), TensorDesc("fp32", (1, 1, 9, 2))
            ),
            "window[W]",
        ),
        (
            lambda: PoolingProblem.create(PoolingDesc("max", (16, 16)), TensorDesc("fp32", (1, 1, 16, 16))),
            "index_type",
        ),
        (
            lambda: PoolingProblem.create(
                PoolingDesc("max", (2, 2), index_mode="image", index_type="u8"),
                TensorDesc("fp32", (1, 1, 16, 16)),
            ),
            "index_type",
        ),
        (lambda: PoolingProblem.create(PoolingDesc(), TensorDesc("fp32", (1, 1, 4, 4, 4))), "x.lens"),
        (
            lambda: PoolingProblem(
                PoolingDesc(), TensorDesc("fp32", (1, 2, 8, 8)), TensorDesc("fp32", (1, 2, 6, 5)), "B"
            ),
            "dy.lens",
        ),
        (
            lambda: PoolingProblem(
                PoolingDesc(), TensorDesc("fp32", (1, 2, 8, 8)), TensorDesc("fp16", (1, 2, 6, 6))
            ),
            "y.dtype",
        ),
    ],
)
def test_pooling_bad_parameters_name_the_field(make, field):
    with pytest.raises(errors.BadParm) as info:
        make()
    assert _field(info) == field


def test_index_type_limits():
    assert IndexType.parse("miopenIndexUint16").max == 65535
    assert IndexType.parse(3).itemsize == 8
    # 255 positions fit a uint8 mask; an average pooling needs no index at all
    PoolingProblem.create(PoolingDesc("max", (15, 17)), TensorDesc("fp32", (1, 1, 20, 20)))
    PoolingProblem.create(PoolingDesc("avg", (16, 16)), TensorDesc("fp32", (1, 1, 16, 16)))
    big = PoolingProblem.create(
        PoolingDesc("max", (16, 16)), TensorDesc("fp32", (1, 1, 16, 16)), save_index=False
    )
    assert "index" not in big.tensors()


def test_pooling_keys_round_trip():
    problems = [
        PoolingProblem.create(
            PoolingDesc("max", (3, 3), (2, 2), (1, 1), index_type="u32", index_mode="image"),
            TensorDesc("fp16", (32, 64, 112, 112), layout="NHWC"),
            "B",
        ),
        PoolingProblem.create(
            PoolingDesc("avg_in", (2, 3, 3), (1, 2, 2), pad_mode="same"), TensorDesc("fp32", (1, 2, 5, 6, 7))
        ),
        PoolingProblem.create(
            PoolingDesc("max", (2, 2), (2, 2)),
            TensorDesc("bf16", (2, 3, 8, 8)),
            y_strides=(100, 1, 20, 3),
            save_index=False,
        ),
    ]
    for p in problems:
        assert PoolingProblem.parse(p.key()).key() == p.key()
    assert problems[0].key() == "pool_max_3x3_s2x2_p1x1_32x64x112x112_NHWC_FP16_B_u32image"
    assert PoolingProblem.parse(problems[0].key()) == problems[0]
    assert problems[0].inputs == ("dy", "index") and problems[0].outputs == ("dx",)
    with pytest.raises(errors.BadParm) as info:
        PoolingProblem.parse("pool_avg_3x3_s1x1_p0x0_1x1x4x4_NCHW_FP32_F_u8mask")
    assert _field(info) == "key"


def test_pooling_driver_args():
    p = PoolingProblem.create(
        PoolingDesc("max", (3, 2), (2, 1), (1, 0), index_type="u16"),
        TensorDesc("fp16", (32, 64, 56, 56), layout="NHWC"),
    )
    assert p.driver_args() == (
        "poolfp16 -W 32x64x56x56,NHWC -y 3 -x 2 -v 2 -u 1 -p 1 -q 0 -m max -z default -M 0 "
        "-I miopenIndexUint16 -F 0".split()
    )


def _brute(p: PoolingProblem, x: np.ndarray):
    """Plain loops over every output and tap (the reference must agree)."""
    d = p.desc
    k, s, pads = d.window, d.strides, p.pads
    x5 = x if x.ndim == 5 else x[:, :, None]
    if len(k) == 2:
        k, s, pads = (1, *k), (1, *s), (0, *pads)
    dims = x5.shape[2:]
    ylens = p.y.lens5()
    y, idx = np.zeros(ylens), np.zeros(ylens, np.int64)
    for n, c, od, oh, ow in itertools.product(*map(range, ylens)):
        best, where, total, count = -np.inf, 0, 0.0, 0
        for t, tap in enumerate(itertools.product(*map(range, k))):
            pos = [o * st - q + f for o, st, q, f in zip((od, oh, ow), s, pads, tap)]
            if not all(0 <= a < b for a, b in zip(pos, dims)):
                continue
            v = x5[n, c, pos[0], pos[1], pos[2]]
            total, count = total + v, count + 1
            if v > best:
                image = (pos[0] * dims[1] + pos[1]) * dims[2] + pos[2]
                best, where = v, t if d.index_mode is IndexMode.MASK else image
        value = {PoolingMode.MAX: best, PoolingMode.AVG: total / count}.get(d.mode, total / np.prod(k))
        y[n, c, od, oh, ow], idx[n, c, od, oh, ow] = value, where
    return (y, idx) if x.ndim == 5 else (y[:, :, 0], idx[:, :, 0])


def test_pooling_reference_matches_loops():
    rng = np.random.default_rng(0)
    checked = 0
    while checked < 25:
        dims = int(rng.choice([2, 3]))
        window = [int(rng.integers(1, 4)) for _ in range(dims)]
        desc_args = dict(
            mode=str(rng.choice(["max", "avg", "avg_in"])),
            window=window,
            strides=[int(rng.integers(1, 4)) for _ in range(dims)],
            pads=[int(rng.integers(0, w)) for w in window],
            pad_mode=str(rng.choice(["default", "same", "valid"])),
            index_type="u32",
            index_mode=str(rng.choice(["mask", "image"])),
        )
        try:
            p = PoolingProblem.create(
                PoolingDesc(**desc_args), TensorDesc("fp32", (2, 2, *rng.integers(3, 8, dims)))
            )
        except errors.BadParm:
            continue  # window larger than the input: drawn again
        x = np.round(rng.random(p.x.lens) * 8) / 8  # ties: the first maximum wins
        y, index = pool_forward(p, x)
        y_loop, index_loop = _brute(p, x)
        np.testing.assert_allclose(y, y_loop)
        if p.desc.mode is PoolingMode.MAX:
            np.testing.assert_array_equal(index, index_loop)
        # backward is the transpose of forward: <dx, x> == <dy, y> for max (at the index) and avg
        back = PoolingProblem(p.desc, p.x, p.y, "B")
        dy = rng.random(p.y.lens)
        dx = pool_backward(back, dy, index_loop)
        assert np.isclose((dx * x).sum(), (dy * y).sum())
        checked += 1
