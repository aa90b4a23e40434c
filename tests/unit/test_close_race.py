"""Close races in find and tuning (bench.close_race): candidates whose first times lie within a
few per cent of the fastest are timed again in interleaved rounds and ranked by their medians."""

from __future__ import annotations

from miopy.engine import bench
from miopy.engine.tune import RACE_ROUNDS, exhaustive


def noisy(true: dict[str, float], first: dict[str, float]):
    """A measure returning ``first[c]`` on a candidate's first call, then its true time, and the
    log of calls."""
    calls: list[str] = []

    def measure(c: str) -> float | None:
        calls.append(c)
        if true[c] is None:
            return None
        return first[c] if calls.count(c) == 1 else true[c]

    return measure, calls


def test_a_lucky_first_sample_loses_the_race():
    true = {"a": 1.00, "b": 1.01, "c": 1.02, "far": 1.50}
    first = {"a": 1.025, "b": 1.00, "c": 1.02, "far": 1.50}
    measure, calls = noisy(true, first)
    timed = [(c, measure(c)) for c in true]
    raced = bench.close_race(timed, measure, rounds=3)
    assert [c for c, _ in raced] == ["a", "b", "c", "far"]
    assert raced[0][1] == 1.00 and raced[-1] == ("far", 1.50)
    # a, b and c were timed 3 times more, one round each in turn; "far" never again
    assert calls[4:] == ["b", "c", "a"] * 3


def test_a_later_pass_running_slower_does_not_crown_the_first_left_out():
    """Every sample after the first runs 4 % slower (a drift between passes): "c", left out of
    a race of two, keeps its first sample, yet must not beat the raced "a" with it."""
    first = {"a": 1.00, "b": 1.01, "c": 1.02, "d": 1.30}
    true = {c: t * 1.04 for c, t in first.items()}
    measure, calls = noisy(true, first)
    timed = [(c, measure(c)) for c in first]
    raced = bench.close_race(timed, measure, rounds=3, margin=0.05, most=2)
    assert [c for c, _ in raced] == ["a", "b", "c", "d"]
    assert raced[0] == ("a", 1.04) and raced[2] == ("c", 1.01 * 1.04) and raced[3] == ("d", 1.30)
    assert calls.count("c") == calls.count("d") == 1


def test_no_race_without_a_close_second():
    measure, calls = noisy({"a": 1.0, "b": 1.2}, {"a": 1.0, "b": 1.2})
    assert bench.close_race([("a", 1.0), ("b", 1.2)], measure, rounds=3) == [("a", 1.0), ("b", 1.2)]
    assert calls == []


def test_exhaustive_runs_the_race_and_skips_failures():
    true = {"x": 2.0, "y": 1.95, "z": None}
    first = {"x": 1.9, "y": 1.95, "z": None}
    measure, calls = noisy(true, first)
    best = exhaustive(list(true), measure)
    assert best == ("y", 1.95)
    assert calls.count("x") == calls.count("y") == 1 + RACE_ROUNDS and calls.count("z") == 1


def test_tuning_races_more_near_equals_than_find():
    """A search space's race (tune.exhaustive) takes up to tune.RACE_MOST configs within
    tune.RACE_MARGIN: here the true best's first sample ranked fifth, 4 % behind the luckiest."""
    from miopy.engine import tune

    names = "abcdefg"
    first = dict(zip(names, (1.00, 1.01, 1.02, 1.03, 1.04, 1.045, 1.20), strict=True))
    true = {**first, "e": 0.97}
    measure, calls = noisy(true, first)
    assert tune.RACE_MARGIN > bench.RACE_MARGIN and tune.RACE_MOST > bench.RACE_MOST
    # the default race (bench.RACE_MARGIN, bench.RACE_MOST) does not take "e" again: "a" wins
    measure_find, calls_find = noisy(true, first)
    raced = bench.close_race([(c, measure_find(c)) for c in names], measure_find, rounds=3)
    assert raced[0][0] != "e" and calls_find.count("e") == 1
    best = exhaustive(list(names), measure)
    assert best == ("e", 0.97)
    assert calls.count("e") == 1 + tune.RACE_ROUNDS and calls.count("g") == 1
