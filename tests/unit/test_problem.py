"""Descriptors, keys, output shapes and bad parameters (no device needed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from miopy import errors
from miopy.problem.conv import ConvDesc, ConvProblem, Direction
from miopy.tensor import DataType, TensorDesc, from_bf16_bits, packed_strides, to_bf16_bits


def test_packed_strides_for_each_layout():
    assert TensorDesc("fp32", (2, 3, 4, 5)).strides == (60, 20, 5, 1)
    assert TensorDesc("fp32", (2, 3, 4, 5), layout="NHWC").strides == (60, 1, 15, 3)
    assert TensorDesc("fp16", (2, 3, 4, 5, 6), layout="NDHWC").strides == (360, 1, 90, 18, 3)
    assert packed_strides((2, 3, 4, 5, 6), "NCDHW") == (360, 120, 30, 6, 1)


def test_explicit_strides_detect_layout_or_strided():
    assert TensorDesc("fp32", (2, 3, 4, 5), strides=(60, 1, 15, 3)).layout == "NHWC"
    d = TensorDesc("fp32", (2, 3, 4, 5), strides=(100, 30, 6, 1))
    assert d.layout == "STRIDED" and d.element_space == 100 + 2 * 30 + 3 * 6 + 4 + 1
    assert d.key() == "s100,30,6,1"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(dtype="fp8", lens=(1, 1, 1, 1)), "dtype"),  # fp64 and int32 exist for reductions
        (dict(dtype="fp32", lens=(1, 1, 1)), "lens"),
        (dict(dtype="fp32", lens=(1, 0, 1, 1)), "lens[C]"),
        (dict(dtype="fp32", lens=(1, 2, 3, 4), layout="NCDHW"), "layout"),
        (dict(dtype="fp32", lens=(1, 2, 3, 4), strides=(1, 2, 3)), "strides"),
        (dict(dtype="fp32", lens=(1, 2, 3, 4), strides=(1, 0, 3, 4)), "strides"),
    ],
)
def test_bad_tensor_desc_names_the_field(kwargs, field):
    with pytest.raises(errors.BadParm) as info:
        TensorDesc(**kwargs)
    assert str(info.value).startswith(field + "=")


def test_bf16_round_trip_rounds_to_nearest_even():
    values = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0], dtype=np.float32)
    back = from_bf16_bits(to_bf16_bits(values))
    assert np.all(np.abs(back - values) <= np.abs(values) * 2**-8)
    # 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0)
    assert from_bf16_bits(to_bf16_bits(np.array([1 + 2**-8], np.float32)))[0] == 1.0


def _problem(c=8, hw=(9, 9), k=4, fil=(3, 3), direction="F", **conv):
    x = TensorDesc("fp32", (2, c, *hw))
    mode = conv.get("mode", "conv")
    g = conv.get("groups", 1)
    w = TensorDesc("fp32", (k, c // g, *fil) if mode == "conv" else (c, k // g, *fil))
    return ConvProblem.create(x, w, ConvDesc(**conv), direction)


@pytest.mark.parametrize(
    "conv, out",
    [
        (dict(pads=(1, 1)), (9, 9)),
        (dict(pads=(0, 0)), (7, 7)),
        (dict(pads=(1, 0), strides=(2, 2)), (5, 4)),
        (dict(pads=(0, 0), dilations=(2, 2)), (5, 5)),
        (dict(pads=(0, 0), strides=(2, 2), pad_mode="same"), (5, 5)),
        (dict(pads=(5, 5), pad_mode="valid"), (7, 7)),
        (dict(pads=(1, 1), strides=(2, 2), mode="trans"), (17, 17)),
        (dict(pads=(1, 1), strides=(2, 2), mode="trans", trans_output_pads=(1, 0)), (18, 17)),
    ],
)
def test_output_shape_rule(conv, out):
    assert _problem(**conv).y.lens[2:] == out


def test_3d_output_and_flops():
    x = TensorDesc("fp32", (2, 4, 5, 6, 7))
    w = TensorDesc("fp32", (8, 2, 3, 3, 3))
    p = ConvProblem.create(x, w, ConvDesc((1, 1, 1), groups=2), "F")
    assert p.y.lens == (2, 8, 5, 6, 7)
    assert p.flops() == 2 * 2 * 8 * 5 * 6 * 7 * 2 * 27
    assert p.bytes_read() == (x.element_count + w.element_count) * 4
    assert p.bytes_written() == p.y.element_count * 4


def test_transposed_conv_view_swaps_roles_and_direction():
    p = _problem(direction="F", pads=(1, 1), strides=(2, 2), mode="trans")
    v = p.conv_view()
    assert v.direction is Direction.BACKWARD_DATA and v.conv.mode == "conv"
    assert v.x == p.y and v.y == p.x and p.roles == {"x": "y", "w": "w", "y": "x"}
    assert p.flops() == _problem(direction="B", pads=(1, 1), strides=(2, 2), mode="trans").flops()


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: _problem(c=6, groups=4), "groups"),
        (lambda: _problem(c=8, k=6, groups=4), "groups"),
        (lambda: _problem(hw=(2, 2), fil=(3, 3)), "fil_h"),
        (lambda: _problem(hw=(9, 2), fil=(1, 5)), "fil_w"),
        (lambda: _problem(pads=(-1, 0)), "pads"),
        (lambda: _problem(pads=(0, 0), strides=(0, 1)), "strides"),
        (lambda: _problem(pads=(0, 0), dilations=(1, 0)), "dilations"),
        (lambda: _problem(pads=(0, 0), mode="deconv"), "mode"),
        (lambda: _problem(pads=(0, 0), pad_mode="full"), "pad_mode"),
        (lambda: _problem(pads=(0, 0), trans_output_pads=(1, 0)), "trans_output_pads"),
        (lambda: _problem(pads=(0, 0), mode="trans", trans_output_pads=(1, 0)), "trans_output_pads"),
        (lambda: _problem(direction="sideways", pads=(0, 0)), "direction"),
        (
            lambda: ConvProblem.create(
                TensorDesc("fp32", (1, 4, 5, 5)), TensorDesc("fp32", (4, 2, 3, 3)), ConvDesc((0, 0)), "F"
            ),
            "w.lens",
        ),
        (
            lambda: ConvProblem.create(
                TensorDesc("fp32", (1, 4, 5, 5)), TensorDesc("fp32", (4, 4, 3, 3, 3)), ConvDesc((0, 0)), "F"
            ),
            "w.lens",
        ),
        (
            lambda: ConvProblem(
                TensorDesc("fp32", (1, 4, 5, 5)),
                TensorDesc("fp32", (4, 4, 3, 3)),
                TensorDesc("fp32", (1, 4, 5, 5)),
                ConvDesc((0, 0)),
                "F",
            ),
            "y.lens",
        ),
        (
            lambda: ConvProblem(
                TensorDesc("fp32", (1, 4, 5, 5)),
                TensorDesc("fp16", (4, 4, 3, 3)),
                TensorDesc("fp32", (1, 4, 3, 3)),
                ConvDesc((0, 0)),
                "F",
            ),
            "dtype",
        ),
        (lambda: ConvProblem.parse("not-a-key"), "key"),
        (lambda: ConvProblem.parse("8-9-9-3x3-4-9-9-2-1x1-1x1-1x1-0-NCHW-FP99-F"), "key"),
    ],
)
def test_bad_parameters_raise_badparm_naming_the_field(make, field):
    with pytest.raises(errors.BadParm) as info:
        make()
    assert str(info.value).startswith(field + "="), str(info.value)
    assert isinstance(info.value, errors.MiopyError) and info.value.status == "miopenStatusBadParm"


@st.composite
def problems(draw):
    dims = draw(st.sampled_from([2, 3]))
    g = draw(st.sampled_from([1, 2, 4]))
    c, k = g * draw(st.integers(1, 3)), g * draw(st.integers(1, 3))
    sp = draw(st.lists(st.integers(4, 20), min_size=dims, max_size=dims))
    fil = draw(st.lists(st.integers(1, 3), min_size=dims, max_size=dims))
    pads = draw(st.lists(st.integers(0, 2), min_size=dims, max_size=dims))
    strides = draw(st.lists(st.integers(1, 3), min_size=dims, max_size=dims))
    dils = draw(st.lists(st.integers(1, 2), min_size=dims, max_size=dims))
    mode = draw(st.sampled_from(["conv", "trans"]))
    pad_mode = draw(st.sampled_from(["default", "default", "same", "valid"]))
    opads = [draw(st.integers(0, s - 1)) for s in strides] if mode == "trans" else None
    layouts = ["NCHW", "NHWC"] if dims == 2 else ["NCDHW", "NDHWC"]
    dtype = draw(st.sampled_from(["fp32", "fp16", "bf16"]))
    x = TensorDesc(dtype, (draw(st.integers(1, 4)), c, *sp), layout=draw(st.sampled_from(layouts)))
    w = TensorDesc(
        dtype,
        (k, c // g, *fil) if mode == "conv" else (c, k // g, *fil),
        layout=draw(st.sampled_from(layouts)),
    )
    conv = ConvDesc(pads, strides, dils, g, mode, opads, pad_mode)
    try:
        return ConvProblem.create(
            x, w, conv, draw(st.sampled_from("FBW")), y_layout=draw(st.sampled_from(layouts))
        )
    except errors.BadParm:
        assume(False)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_key_round_trips(problem):
    key = problem.key()
    again = ConvProblem.parse(key)
    assert again.key() == key
    assert again == problem or again.conv.pad_mode != "default"
    assert again.network_config() == problem.network_config()


def test_strided_tensors_round_trip_in_key():
    x = TensorDesc("fp32", (2, 3, 5, 5), strides=(100, 30, 6, 1))
    w = TensorDesc("fp32", (4, 3, 3, 3))
    p = ConvProblem.create(x, w, ConvDesc((1, 1)), "F")
    assert ConvProblem.parse(p.key()).key() == p.key()
    assert "s100,30,6,1" in p.key()


def test_datatype_parse_aliases():
    assert DataType.parse("half") is DataType.FP16 and DataType.parse("bfp16") is DataType.BF16


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: TensorDesc("fp32", (1, 2, 3, 4), layout=5), "layout"),
        (lambda: ConvProblem.create("x", TensorDesc("fp32", (1, 2, 1, 1)), ConvDesc(), "F"), "x"),
        (
            lambda: ConvProblem.create(
                TensorDesc("fp32", (1, 2, 3, 4)), TensorDesc("fp32", (1, 2, 1, 1)), "conv", "F"
            ),
            "conv",
        ),
        (
            lambda: ConvProblem(
                TensorDesc("fp32", (1, 2, 3, 4)), TensorDesc("fp32", (1, 2, 1, 1)), "y", ConvDesc(), "F"
            ),
            "y",
        ),
        (lambda: ConvProblem.parse(None), "key"),
    ],
)
def test_wrong_types_raise_badparm(make, field):
    with pytest.raises(errors.BadParm) as info:
        make()
    assert str(info.value).startswith(field + "=")


def test_handle_device_must_be_an_index():
    from miopy.handle import Handle

    with pytest.raises(errors.BadParm, match="device="):
        Handle("opencl", device="a")


def test_a_problem_computes_its_keys_and_view_once():
    """Problems are frozen: key, network config, invoker key and solver view are computed once
    per problem object and kept (not fields: equality, hashing and pickling are unchanged)."""
    import pickle

    from miopy.problem.conv import ConvDesc, ConvProblem
    from miopy.tensor import TensorDesc

    def make():
        x, w = TensorDesc("fp32", (1, 2, 6, 6)), TensorDesc("fp32", (2, 4, 3, 3))
        return ConvProblem.create(x, w, ConvDesc((1, 1), mode="trans"), "F")

    p = make()
    first = (p.key(), p.network_config(), p.invoker_key(), p.solver_view())
    again = (p.key(), p.network_config(), p.invoker_key(), p.solver_view())
    assert all(a is b for a, b in zip(first, again, strict=True))
    fresh = make()
    assert fresh == p and hash(fresh) == hash(p)
    assert (fresh.key(), fresh.network_config(), fresh.invoker_key()) == first[:3]
    assert fresh.solver_view() == first[3] and first[3] is not p  # a transposed conv's view
    back = pickle.loads(pickle.dumps(p))
    assert back == p and back.key() == first[0]
