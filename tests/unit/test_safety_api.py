"""Issue 6, item 2: the public API raises MiopyError subclasses naming the field, never a bare
Python exception, never a silent coercion; plus a seeded fuzz of descriptors, problems, keys
and FindOptions (no device needed)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from miopy import errors
from miopy.checks import INDEX_MAX
from miopy.engine.find import FindOptions
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.tensor import TensorDesc

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(lens=(1, INF, 8, 8)), "lens"),
        (dict(lens=(1, NAN, 8, 8)), "lens"),
        (dict(lens=(1, 4.9, 8, 8)), "lens"),  # was truncated to 4
        (dict(lens=(1, 4.0, 8, 8)), "lens"),
        (dict(lens="1488"), "lens"),  # was read as (1, 4, 8, 8)
        (dict(lens=(1, True, 8, 8)), "lens"),
        (dict(lens=(1, 4, 8, INDEX_MAX + 1)), "lens"),
        (dict(lens=(1, 4, 8, 8), strides=(INF, 64, 8, 1)), "strides"),
        (dict(lens=(1, 4, 8, 8), strides=(256.0, 64, 8, 1)), "strides"),
        (dict(lens=(2, 4, 8, 8), strides=(2**62, 64, 8, 1)), "strides"),  # bytes past i64
        (dict(lens=(2**31 - 1,) * 4), "lens"),  # more elements than i64 counts
        (dict(lens=(1, 4, 8, 8), layout="garbage"), "layout"),
        (dict(lens=(1, 4, 8, 8), layout=5), "layout"),
    ],
)
def test_tensor_desc_refuses_with_the_field(kwargs, field):
    with pytest.raises(errors.BadParm) as info:
        TensorDesc("fp32", **kwargs)
    assert str(info.value).startswith(field), str(info.value)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(pads=(INF, 0)), "pads"),
        (dict(pads=(NAN, 0)), "pads"),
        (dict(pads=(0.5, 1)), "pads"),  # was truncated to 0
        (dict(pads=(1.0, 1)), "pads"),
        (dict(pads="11"), "pads"),
        (dict(pads=(1, 1), strides=(1, INF)), "strides"),
        (dict(pads=(1, 1), dilations=(1, 2.5)), "dilations"),
        (dict(pads=(1, 1), groups=INF), "groups"),
        (dict(pads=(1, 1), groups=NAN), "groups"),
        (dict(pads=(1, 1), groups=2.0), "groups"),
        (dict(pads=(1, 1), groups="2"), "groups"),
        (dict(pads=(INDEX_MAX + 1, 0)), "pads"),
        (dict(pads=(1, 1), mode=5), "mode"),
    ],
)
def test_conv_desc_refuses_with_the_field(kwargs, field):
    with pytest.raises(errors.BadParm) as info:
        ConvDesc(**kwargs)
    assert str(info.value).startswith(field), str(info.value)


def test_numpy_integers_are_integers():
    d = TensorDesc("fp32", np.array([1, 4, 8, 8]), strides=np.array([256, 64, 8, 1], dtype=np.int64))
    assert d.lens == (1, 4, 8, 8) and all(type(v) is int for v in d.lens + d.strides)
    assert ConvDesc(np.array([1, 1]), groups=np.int32(1)).pads == (1, 1)


def test_sizes_past_the_kernels_int32_are_refused_at_construction():
    x = TensorDesc("fp32", (1, 1, 2**30, 4))
    w = TensorDesc("fp32", (1, 1, 3, 3))
    with pytest.raises(errors.BadParm, match=f"^in_h=.*{INDEX_MAX}"):
        ConvProblem.create(x, w, ConvDesc((2**30, 0)), "F")
    with pytest.raises(errors.BadParm, match=f"^dilations=.*{INDEX_MAX}"):
        ConvDesc((0, 0), dilations=(2**31, 1))


def test_element_counts_do_not_overflow():
    d = TensorDesc("fp32", (2**20, 2**20, 2**10, 2**10))
    assert d.element_count == 2**60  # np.prod wrapped this to 0 on int64
    assert d.nbytes == 2**62


@pytest.mark.parametrize(
    "key",
    [
        "3-7-7-3x3-2-7-7-1-1x1-1x1-1x1-0-NCHW-FP32-F_gx",
        "3-7-7-3x3-2-7-7-1-1x1-1x1-1x1-0-sX,1-FP32-F",
        "3-7-7-3x3-2-7-7-1-1x1-1x1-1x1-0-s1,2-FP32-F",
        "3-7-7-3x3-2-7-7-1-1x1-1x1-1x1-0-NCHW.NCHW-FP32-F",
        "3-7-7-3x3-2-7-7-1-1x1-1x1-1x1-0-NCHW-FP32-F_g0",
        "3-7-7-3x3-2-7-7-1-1x1-1x1-1x1-0-NCHW-FP32-F_trans",
        "3-7-7-3x3-2-9-9-1-1x1-1x1-1x1-0-NCHW-FP32-F",  # output lens do not match
        "3-7-7-3x3-2-7-7-1-99999999999999999999x1-1x1-1x1-0-NCHW-FP32-F",
        "3-7-7-3x3-2-7-7-1-1x1-1x1-1x1-0-NCHW-FP64-F",
        "3-٣-7-3x3-2-7-7-1-1x1-1x1-1x1-0-NCHW-FP32-F",
        "",
        "-" * 12,
    ],
)
def test_parse_of_a_malformed_key_is_badparm(key):
    with pytest.raises(errors.BadParm, match="^key="):
        ConvProblem.parse(key)


@pytest.mark.parametrize("limit", [NAN, INF, "8", "lots", [1], -1, True])
def test_find_options_refuses_bad_workspace_limits(limit):
    with pytest.raises(errors.BadParm, match="^workspace_limit="):
        FindOptions(workspace_limit=limit)


def test_find_options_accepts_numbers_of_bytes():
    assert FindOptions(workspace_limit=1e6).workspace_limit == 1_000_000
    assert FindOptions(workspace_limit=np.int64(5)).workspace_limit == 5
    with pytest.raises(errors.BadParm, match="^results_order="):
        FindOptions(results_order=["time"])
    with pytest.raises(errors.BadParm, match="^tuning="):
        FindOptions(tuning="yes")


# ---- fuzz --------------------------------------------------------------------------------------
_ODD = [NAN, INF, -INF, 0, -1, 1, 2, 3, 4.5, 2.0, "3", "", None, True, 2**31, 2**63, -(2**40), [1], (), b"1"]


def _odd_seq(rng: random.Random, n: int):
    r = rng.random()
    if r < 0.3:
        return rng.choice(_ODD)
    out = [rng.randint(1, 6) for _ in range(rng.choice([n, n, rng.randint(0, 6)]))]
    if out:
        out[rng.randrange(len(out))] = rng.choice(_ODD)
    return np.array(out, dtype=object) if r > 0.9 else out


def _fuzz_case(rng: random.Random) -> None:
    """A valid random problem with zero, one or two fields replaced by something hostile."""
    dims = rng.choice([2, 3])
    n, c, k, g = rng.randint(1, 3), rng.choice([2, 4]), rng.choice([2, 4]), rng.choice([1, 2])
    sp = [rng.randint(3, 7) for _ in range(dims)]
    fil = [rng.randint(1, 3) for _ in range(dims)]
    layouts = ("NCHW", "NHWC") if dims == 2 else ("NCDHW", "NDHWC")
    mode = rng.choice(["conv", "conv", "trans"])
    f = {
        "dtype": rng.choice(["fp32", "fp16", "bf16"]),
        "xlens": [n, c, *sp],
        "wlens": [k, c // g, *fil] if mode == "conv" else [c, k // g, *fil],
        "xstrides": None,
        "layout": rng.choice(layouts),
        "pads": [rng.randint(0, 1) for _ in range(dims)],
        "strides": [rng.randint(1, 2) for _ in range(dims)],
        "dils": [rng.randint(1, 2) for _ in range(dims)],
        "groups": g,
        "mode": mode,
        "opads": None,
        "pad_mode": rng.choice(["default", "default", "same", "valid"]),
        "direction": rng.choice("FBW"),
    }
    if rng.random() < 0.2:  # a padded tensor: explicit strides, label kept or dropped
        lens = f["xlens"]
        strides, step = [0] * len(lens), 1
        for i in reversed(range(len(lens))):
            strides[i] = step
            step *= lens[i] + rng.randint(0, 2)
        f["xstrides"] = strides
        f["layout"] = rng.choice([None, layouts[0], layouts[1]])
    for _ in range(rng.choice([0, 1, 1, 2])):
        name = rng.choice(list(f))
        size = {"xlens": dims + 2, "wlens": dims + 2, "xstrides": dims + 2}.get(name, dims)
        if name in ("xlens", "wlens", "xstrides", "pads", "strides", "dils", "opads"):
            f[name] = _odd_seq(rng, size)
        else:
            f[name] = rng.choice([*_ODD, "garbage", "FP64", "NHWC", "trans", "same", "W"])
    x = TensorDesc(f["dtype"], f["xlens"], strides=f["xstrides"], layout=f["layout"])
    assert x.element_space >= 1 and x.nbytes == x.element_space * x.dtype.itemsize
    w = TensorDesc(x.dtype, f["wlens"])
    conv = ConvDesc(f["pads"], f["strides"], f["dils"], f["groups"], f["mode"], f["opads"], f["pad_mode"])
    p = ConvProblem.create(x, w, conv, f["direction"])
    again = ConvProblem.parse(p.key())  # pads a pad mode ignores are not part of the problem
    assert again.key() == p.key() and again.invoker_key() == p.invoker_key()
    p.network_config(), p.invoker_key(), p.flops(), p.conv_view().key()


def _mangle(rng: random.Random, key: str) -> str:
    chars = list(key)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(chars) + 1)
        op = rng.random()
        if op < 0.4 and chars:
            del chars[min(i, len(chars) - 1)]
        elif op < 0.8:
            chars.insert(i, rng.choice("0123456789x-_.,sgNCHWFBT ٣\n"))
        else:
            chars[min(i, len(chars) - 1)] = rng.choice("9x-_")
    return "".join(chars)


def test_fuzz_public_api_gives_results_or_miopy_errors():
    rng = random.Random(20260606)
    outcomes = {"ok": 0, "error": 0}
    keys = []
    for _ in range(3000):
        try:
            _fuzz_case(rng)
            outcomes["ok"] += 1
        except errors.MiopyError as exc:
            assert str(exc) and "\n" not in str(exc)
            outcomes["error"] += 1
    assert outcomes["ok"] > 500 and outcomes["error"] > 1000, outcomes
    # keys: valid ones from small random problems, mangled
    while len(keys) < 40:
        try:
            x = TensorDesc("fp32", (1, 4, 6, 6), layout=rng.choice(["NCHW", "NHWC"]))
            w = TensorDesc("fp32", (4, 2, 3, 3))
            keys.append(ConvProblem.create(x, w, ConvDesc((1, 1), groups=2), rng.choice("FBW")).key())
        except errors.MiopyError:
            pass
    parsed = 0
    for _ in range(2000):
        key = _mangle(rng, rng.choice(keys))
        try:
            p = ConvProblem.parse(key)
            assert ConvProblem.parse(p.key()).key() == p.key()
            parsed += 1
        except errors.BadParm as exc:
            assert str(exc).startswith("key=")
    for _ in range(500):
        limit = rng.choice([*_ODD, 0, 10**9, 1.5e9, -2.5])
        try:
            opts = FindOptions(
                rng.choice(["time", "workspace", "speed", 1]), limit, rng.choice([True, False, 2])
            )
            assert isinstance(opts.workspace_limit, int | type(None))
            assert opts.workspace_limit is None or (
                opts.workspace_limit >= 0 and not math.isnan(opts.workspace_limit)
            )
        except errors.BadParm:
            pass
