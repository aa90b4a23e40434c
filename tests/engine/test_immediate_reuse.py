"""Immediate mode keeps its answer in the handle: the same Solution objects for the same problem
(later iterations choose in a lookup and replay their prepared calls), until a find or perf
record is written or a knob that steers applicability changes; and it still runs right."""

from __future__ import annotations

import numpy as np
import pytest
from support import check

from miopy.db.find_db import FindDb, FindRecord
from miopy.engine.candidates import make_solution
from miopy.engine.find import find_solutions, get_solutions
from miopy.handle import Handle
from miopy.problem.conv import ConvDesc, ConvProblem
from miopy.solvers import by_name
from miopy.tensor import TensorDesc


def small(hw: int = 6) -> ConvProblem:
    return ConvProblem.create(
        TensorDesc("fp32", (1, 2, hw, hw)), TensorDesc("fp32", (4, 2, 3, 3)), ConvDesc((1, 1)), "F"
    )


@pytest.fixture
def handle(isolated, monkeypatch):
    for name in ("MIOPY_FIND_MODE", "MIOPY_FIND_ENFORCE", "MIOPY_DEBUG_FIND_ONLY_SOLVER"):
        monkeypatch.delenv(name, raising=False)
    return Handle("opencl")


def test_same_problem_same_solutions(handle):
    first = get_solutions(handle, small())
    again = get_solutions(handle, small())  # an equal problem, another object
    assert [id(s) for s in again] == [id(s) for s in first] and again is not first
    again.clear()  # the caller's list is its own
    assert [id(s) for s in get_solutions(handle, small())] == [id(s) for s in first]
    other = get_solutions(handle, small(hw=8))
    assert {id(s) for s in other}.isdisjoint(id(s) for s in first)
    assert other[0].problem.x.lens == (1, 2, 8, 8)
    check(handle, get_solutions(handle, small())[0])  # against the NumPy reference


def test_a_find_record_written_anywhere_in_the_process_is_seen(handle):
    problem = small()
    before = get_solutions(handle, problem)
    last = before[-1].solver
    assert before[0].solver != last
    # another FindDb object (another handle, a tool) writes a record ranking the last one first
    view_solution = make_solution(handle, problem, by_name(last, "conv"))
    db = FindDb(handle.db_basename, "opencl")
    db.store(problem.key(), [FindRecord(last, 0.1, view_solution.workspace, view_solution.algorithm, None)])
    db.close()
    after = get_solutions(handle, problem)
    assert [s.solver for s in after] == [last]
    check(handle, after[0])


def test_a_changed_knob_is_seen(handle, monkeypatch):
    problem = small()
    names = [s.solver for s in get_solutions(handle, problem)]
    assert len(names) >= 2
    monkeypatch.setenv("MIOPY_DEBUG_FIND_ONLY_SOLVER", names[-1])
    assert [s.solver for s in get_solutions(handle, problem)] == [names[-1]]
    monkeypatch.delenv("MIOPY_DEBUG_FIND_ONLY_SOLVER")
    assert [s.solver for s in get_solutions(handle, problem)] == names


def test_find_then_immediate_mode_follows_the_new_record(handle, monkeypatch):
    problem = small()
    get_solutions(handle, problem)
    monkeypatch.setenv("MIOPY_FIND_MODE", "NORMAL")
    timed = find_solutions(handle, problem)
    monkeypatch.delenv("MIOPY_FIND_MODE")
    ranked = get_solutions(handle, problem)
    assert [s.solver for s in ranked] == [s.solver for s in timed]
    assert np.isfinite([s.time_ms for s in ranked]).all()


def _eager(handle, solution):
    """The same solver and config built at once, as before deferral."""
    return make_solution(handle, solution.problem, by_name(solution.solver, "conv"), solution.config)


def test_only_the_first_solution_is_built_until_the_others_are_used(handle):
    problem = small()
    found = get_solutions(handle, problem)  # no find record, no package: every applicable solver
    assert len(found) >= 2
    assert found[0].built and not any(s.built for s in found[1:])
    last = found[-1]
    eager = _eager(handle, last)
    assert last.workspace == eager.workspace  # builds it
    assert last.built and last.program == eager.program and last.extra == eager.extra
    assert last == eager  # every field, the program included
    check(handle, last)  # and it runs right


def test_a_find_record_list_defers_all_but_its_first(handle):
    problem = small()
    solvers = [s.solver for s in get_solutions(handle, problem)][:3]
    db = FindDb(handle.db_basename, "opencl")
    records = []
    for i, name in enumerate(solvers):
        s = make_solution(handle, problem, by_name(name, "conv"))
        records.append(FindRecord(name, 0.1 * (i + 1), s.workspace, s.algorithm, s.config))
    db.store(problem.key(), records)
    db.close()
    fresh = Handle("opencl")  # a new process's view: nothing kept
    ranked = find_solutions(fresh, problem)  # FIND_MODE default: the record's ranking
    assert [s.solver for s in ranked] == solvers
    assert [s.time_ms for s in ranked] == pytest.approx([0.1, 0.2, 0.3][: len(solvers)])
    assert ranked[0].built and not any(s.built for s in ranked[1:])
    for s in ranked[1:]:
        assert s == _eager(fresh, s).with_time(s.time_ms)
    check(fresh, ranked[1])
