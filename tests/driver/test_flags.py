"""Flag parsing and parameter errors: no device needed."""

from __future__ import annotations

import pytest

from miopy.driver import conv
from miopy.driver.cli import parse_flags
from miopy.errors import BadParm
from miopy.problem.conv import Direction


def _problem(argv, direction="F", dtype="FP32"):
    return conv.build_problem(conv.parse(argv), dtype, direction)


SHORT_LONG = [
    ("-n", "--batchsize", "3"),
    ("-c", "--in_channels", "6"),
    ("-H", "--in_h", "11"),
    ("-W", "--in_w", "9"),
    ("-k", "--out_channels", "4"),
    ("-y", "--fil_h", "3"),
    ("-x", "--fil_w", "2"),
    ("-p", "--pad_h", "1"),
    ("-q", "--pad_w", "2"),
    ("-u", "--conv_stride_h", "2"),
    ("-v", "--conv_stride_w", "1"),
    ("-l", "--dilation_h", "2"),
    ("-j", "--dilation_w", "1"),
    ("-g", "--group_count", "2"),
    ("-I", "--in_layout", "NHWC"),
    ("-O", "--out_layout", "NHWC"),
    ("-f", "--fil_layout", "NHWC"),
    ("-F", "--forw", "2"),
]

SHORT_LONG_3D = [
    ("-n", "--batchsize", "2"),
    ("-c", "--in_channels", "4"),
    ("-!", "--in_d", "7"),
    ("-H", "--in_h", "6"),
    ("-W", "--in_w", "5"),
    ("-k", "--out_channels", "6"),
    ("-@", "--fil_d", "3"),
    ("-$", "--pad_d", "1"),
    ("-#", "--conv_stride_d", "2"),
    ("-^", "--dilation_d", "1"),
    ("-%", "--trans_output_pad_d", "1"),
    ("-Y", "--trans_output_pad_h", "0"),
    ("-X", "--trans_output_pad_w", "0"),
    ("-_", "--spatial_dim", "3"),
    ("-m", "--mode", "trans"),
    ("-z", "--pad_mode", "default"),
    ("-g", "--group_count", "2"),
]


@pytest.mark.parametrize("table", [SHORT_LONG, SHORT_LONG_3D], ids=["2d", "3d"])
def test_short_long_and_equals_forms_give_the_same_problem(table):
    short = [a for s, _, v in table for a in (s, v)]
    long = [a for _, lg, v in table for a in (lg, v)]
    equals = [f"{lg}={v}" for _, lg, v in table]
    values = [conv.parse(argv) for argv in (short, long, equals)]
    assert values[0] == values[1] == values[2]
    for _, lg, v in table:
        assert str(values[0][lg[2:]]) == v
    keys = {_problem(argv).key() for argv in (short, long, equals)}
    assert len(keys) == 1


def test_defaults_match_driver_flags():
    v = conv.parse([])
    assert (v["batchsize"], v["in_channels"], v["in_h"], v["in_w"], v["in_d"]) == (100, 3, 32, 32, 32)
    assert (v["out_channels"], v["fil_h"], v["fil_w"], v["fil_d"]) == (32, 3, 3, 3)
    assert (v["iter"], v["verify"], v["time"], v["printconv"], v["solution"]) == (10, 1, 0, 1, "-1")
    p = _problem([])
    assert p.x.lens == (100, 3, 32, 32) and p.y.lens == (100, 32, 30, 30) and p.x.layout == "NCHW"
    p3 = _problem(["-_", "3"])
    assert p3.x.lens == (100, 3, 32, 32, 32) and p3.x.layout == "NCDHW" and p3.w.layout == "NCDHW"


def test_values_may_start_with_a_dash_and_last_flag_wins():
    v = conv.parse(["-S", "-1", "-n", "4", "-n", "5"])
    assert v["solution"] == "-1" and v["batchsize"] == 5


def test_no_prefix_matching():
    with pytest.raises(BadParm, match="--batch"):
        parse_flags(["--batch", "3"], conv.FLAGS)


def test_layouts_and_groups_reach_the_problem():
    p = _problem(["-n", "2", "-c", "6", "-k", "4", "-g", "2", "-I", "NHWC", "-f", "nhwc", "-O", "NCHW"])
    assert (p.x.layout, p.w.layout, p.y.layout) == ("NHWC", "NHWC", "NCHW")
    assert p.w.lens == (4, 3, 3, 3) and p.conv.groups == 2
    t = _problem(
        [
            "-n",
            "2",
            "-c",
            "6",
            "-H",
            "8",
            "-W",
            "8",
            "-k",
            "4",
            "-g",
            "2",
            "-m",
            "trans",
            "-u",
            "2",
            "-v",
            "2",
            "-Y",
            "1",
        ]
    )
    assert t.w.lens == (6, 2, 3, 3) and t.y.lens == (2, 4, 18, 17)
    s = _problem(["-H", "9", "-W", "8", "-z", "same", "-u", "2", "-v", "2"])
    assert s.y.lens[2:] == (5, 4) and s.conv.pad_mode == "same"


@pytest.mark.parametrize(
    "forw, expected", [(0, "FBW"), (1, "F"), (2, "B"), (3, "FB"), (4, "W"), (5, "FW"), (6, "BW")]
)
def test_forw_selects_directions(forw, expected):
    assert [d.value for d in conv.directions(conv.parse(["-F", str(forw)]))] == list(expected)


BAD = [
    (["-n", "0"], "-n/--batchsize"),
    (["-c", "-3"], "-c/--in_channels"),
    (["--in_h", "0"], "-H/--in_h"),
    (["-k", "x"], "-k/--out_channels"),
    (["-n", "2.5"], "-n/--batchsize"),
    (["-H", "2", "-W", "8"], "-y/--fil_h"),
    (["-W", "4", "-x", "3", "-j", "2"], "-x/--fil_w"),
    (["-_", "3", "-!", "2"], "-@/--fil_d"),
    (["-c", "3", "-g", "2"], "-g/--group_count"),
    (["-c", "4", "-k", "6", "-g", "4"], "-g/--group_count"),
    (["-g", "0"], "-g/--group_count"),
    (["-p", "-1"], "-p/--pad_h"),
    (["-u", "0"], "-u/--conv_stride_h"),
    (["-m", "deconv"], "-m/--mode"),
    (["-z", "full"], "-z/--pad_mode"),
    (["-I", "CHWN"], "-I/--in_layout"),
    (["-f", "NCDHW"], "-f/--fil_layout"),
    (["-_", "3", "-O", "NHWC"], "-O/--out_layout"),
    (["-_", "4"], "-_/--spatial_dim"),
    (["-F", "7"], "-F/--forw"),
    (["-Y", "1"], "-Y/--trans_output_pad_h"),
    (["-m", "trans", "-X", "1"], "-X/--trans_output_pad_w"),
    (["--nonsense", "1"], "--nonsense"),
    (["-K", "1"], "-K"),
    (["-n"], "-n/--batchsize"),
    (["5"], "'5'"),
    (["-i", "0"], "-i/--iter"),
    (["-t", "2"], "-t/--time"),
    (["-G", "1"], "-G/--gpualloc"),
]


@pytest.mark.parametrize("argv, flag", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_parameters_give_one_line_naming_the_flag(drive, argv, flag):
    rc, out, err = drive("conv", *argv)
    assert rc == 1
    assert len(err) == 1, err
    assert err[0].startswith("miopy-driver: ") and flag in err[0]
    assert "Traceback" not in "\n".join(out + err)


@pytest.mark.parametrize(
    "argv", [["-b", "1"], ["-r", "1"], ["-Z", "1"], ["-L", "4"], ["-U", "0"], ["-T", "1"], ["-R", "2"]]
)
def test_unsupported_options_are_one_clear_line(drive, argv):
    rc, _, err = drive("conv", *argv)
    assert rc == 1 and len(err) == 1 and "not supported" in err[0] and argv[0] in err[0]


def test_unknown_subcommand_and_usage(drive):
    rc, _, err = drive("convint4", "-n", "1")
    assert rc == 1 and len(err) == 1 and "convint4" in err[0]
    rc, _, err = drive()
    assert rc == 1 and len(err) == 1 and "usage" in err[0]
    rc, out, _ = drive("--help")
    assert rc == 0 and "conv" in out[0]


def test_help_lists_every_flag(drive):
    rc, out, _ = drive("conv", "--help")
    text = "\n".join(out)
    assert rc == 0
    for flag in conv.FLAGS:
        assert f"-{flag.short}  --{flag.long}" in text


def test_problem_from_args_takes_the_subcommand_and_one_direction():
    p = conv.problem_from_args(["convbfp16", "-n", "2", "-F", "4"])
    assert p.dtype.value == "BF16" and p.direction is Direction.BACKWARD_WEIGHTS
    with pytest.raises(BadParm, match="-F/--forw"):
        conv.problem_from_args(["conv", "-F", "3"])
