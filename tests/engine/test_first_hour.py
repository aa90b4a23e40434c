"""What a new user met in the first hour: bad MIOPY_LOG_LEVEL refused, the missing-kdb warning
once per user and device, tuning invalidating the find record it makes stale."""

from __future__ import annotations

import logging

import pytest

import miopy
from miopy import BadParm, log
from miopy.engine import bench


@pytest.mark.parametrize("value", ["abc", "9", "-1", "2.5"])
def test_bad_log_level_is_refused(monkeypatch, value):
    monkeypatch.setenv("MIOPY_LOG_LEVEL", value)
    with pytest.raises(BadParm, match="MIOPY_LOG_LEVEL"):
        miopy.Handle("opencl")


def test_good_log_levels_accepted(monkeypatch):
    from miopy import config

    for value in ("0", "7", " 5 "):
        monkeypatch.setenv("MIOPY_LOG_LEVEL", value)
        assert config.log_level() == int(value)


def test_warning_once_per_user_and_device(isolated, caplog):
    logger = logging.getLogger("miopy.test_once")
    logger.propagate = True
    with caplog.at_level(logging.INFO, logger="miopy.test_once"):
        log.warn_once_per_user(logger, "kdb dev_a", "missing kdb for dev_a")
        log._warned.discard("missing kdb for dev_a")  # a new process
        log.warn_once_per_user(logger, "kdb dev_a", "missing kdb for dev_a")
        log.warn_once_per_user(logger, "kdb dev_b", "missing kdb for dev_b")
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert levels == [
        (logging.WARNING, "missing kdb for dev_a"),
        (logging.INFO, "missing kdb for dev_a"),
        (logging.WARNING, "missing kdb for dev_b"),
    ]
    assert (isolated / "db" / ".warned").is_dir()


def test_tuning_updates_the_find_record(ocl, isolated):
    x = miopy.TensorDesc("fp32", (1, 4, 6, 6))
    w = miopy.TensorDesc("fp32", (4, 4, 3, 3))
    problem = miopy.ConvProblem.create(x, w, miopy.ConvDesc(pads=(1, 1)), "forward")
    miopy.find_solutions(ocl, problem)
    assert ocl.find_db.load(problem.key()) is not None
    before = bench.counters["benchmarks"]
    miopy.find_solutions(ocl, problem)  # answered by the find DB
    assert bench.counters["benchmarks"] == before

    def first_two(configs, measure):
        timed = [(c, measure(c)) for c in configs[:2]]
        return min(timed, key=lambda ct: ct[1])

    results = miopy.tune(ocl, problem, strategy=first_two)
    assert results, "no tunable solver applies to the test problem"
    records = {r.solver: r for r in ocl.find_db.load(problem.key())}
    ranked = miopy.find_solutions(ocl, problem)  # the default mode: answered by the find DB
    for name, (cfg, ms) in results.items():
        assert records[name].config == cfg and records[name].time_ms == pytest.approx(ms)
        (found,) = [s for s in ranked if s.solver == name]
        assert dict(found.config) == cfg  # the tuned config, not the one find timed before
    times = [s.time_ms for s in ranked]
    assert times == sorted(times)
