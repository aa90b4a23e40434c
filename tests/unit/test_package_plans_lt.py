"""A kernel package's program row for a cuBLASLt solution (``kdb_plan``): the product's arguments
and the algorithm's attributes written as data, read back as placeholders that the backend binds
(checked) before use; damaged or planted rows are refused on read, never run, and a refused
binding makes the row a miss with a log line. The library is not needed here (the real binding:
tests/tool/test_package_plans_cuda.py on a GPU)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from miopy import log
from miopy.backends.cuda_libs import ALGO_FIELDS, LtAlgo
from miopy.db import package_plans
from miopy.db.package_choices import PackageChoices
from miopy.db.package_plans import LtChoice, LtProduct
from miopy.solution import Call, KernelSpec, Launch, Program, Tensor, Workspace

KEY = (2, 1, 0, 64, 128, 32, 32, 32, 64, 1, 0, 0, 0, 0)  # LtGemm's arguments: fp16, A^T, B, m n k ...
CONFIG = (20, 18, 26, 1, 0, 0, 0, 4, 0)  # ALGO_FIELDS values


class FakeGemm:
    """What a cuBLASLt step holds in the solver's program: a product with its arguments."""

    def __init__(self, key):
        self.key = key


def lt_program(scratch: bool = False) -> Program:
    gemm, algo = FakeGemm(KEY), LtAlgo(CONFIG, object(), 4096)
    tail = (Workspace(), 1024) if scratch else (Workspace(),)
    call = Call("lt_matmul", (gemm, algo, Tensor("w"), 0, Tensor("x"), 256, Tensor("y"), 0, *tail))
    steps: tuple = (call,)
    if scratch:  # as GemmLtWrw1x1Nchw: a kernel after the product
        spec = KernelSpec("lt_wrw_nchw", "batch_sum_f32", {"MIOPY_DTYPE": 0})
        steps += (
            Launch(spec, (Workspace(), np.int64(16), Tensor("w"), np.int64(64), np.int32(4)), (64,), (64,)),
        )
    return Program(steps, 8192, {"library": "cublasLt"})


@pytest.mark.parametrize("scratch", [False, True])
def test_a_cublaslt_program_is_written_and_read_back_as_placeholders(scratch):
    program = lt_program(scratch)
    text = package_plans.encode(program)
    again = package_plans.decode(text)
    assert again is not None and package_plans.library_steps(again)
    call = again.steps[0]
    assert call.method == "lt_matmul"
    assert call.args[0] == LtProduct(KEY) and call.args[1] == LtChoice(CONFIG, 4096)
    assert call.args[2:] == program.steps[0].args[2:]
    assert [type(v) for v in call.args[2:]] == [type(v) for v in program.steps[0].args[2:]]
    assert again.steps[1:] == program.steps[1:] and again.workspace == 8192
    assert again.notes == {"library": "cublasLt"}
    assert package_plans.encode(again) == text  # placeholders write the same row
    assert "lt_matmul" in text and "object" not in text  # data only


def test_a_heuristics_index_or_another_library_call_gets_no_row():
    by_index = Program(
        (Call("lt_matmul", (FakeGemm(KEY), 3, Tensor("a"), 0, Tensor("b"), 0, Tensor("c"), 0)),)
    )
    with pytest.raises(package_plans.Unplannable):
        package_plans.encode(by_index)
    other = Program((Call("other", (FakeGemm(KEY), LtAlgo(CONFIG, None, 0))),))
    with pytest.raises(package_plans.Unplannable):
        package_plans.encode(other)


def _damaged(text: str) -> list[str]:
    """Rows each with one field off: what decode must refuse."""
    item = json.loads(text)
    out = []

    def edit(change):
        copy = json.loads(json.dumps(item))
        change(copy["steps"][0]["call"])
        out.append(json.dumps(copy))

    edit(lambda c: c.update(method="gemm"))
    edit(lambda c: c.update(key=c["key"][:-1]))
    edit(lambda c: c["key"].__setitem__(0, 7))  # no such data type
    edit(lambda c: c["key"].__setitem__(1, 2))  # no such transpose
    edit(lambda c: c["key"].__setitem__(3, 0))  # an empty product
    edit(lambda c: c["key"].__setitem__(4, -5))
    edit(lambda c: c["key"].__setitem__(5, True))  # a bool is no size
    edit(lambda c: c["algo"].__setitem__(0, -1))
    edit(lambda c: c.update(algo=c["algo"] + [0]))
    edit(lambda c: c["algo"].__setitem__(2, 1.5))
    edit(lambda c: c.update(need=-1))
    edit(lambda c: c.update(need=1 << 40))
    edit(lambda c: c.update(extra=1))
    edit(lambda c: c["codes"].__setitem__(0, "S"))  # an operand that is a scalar
    edit(lambda c: c["codes"].__setitem__(1, "T"))  # an offset that is a tensor
    edit(lambda c: c["args"].__setitem__(1, -256))  # a negative offset
    edit(lambda c: c.update(codes=c["codes"][:-1], args=c["args"][:-1]))  # no workspace
    edit(lambda c: c["args"].__setitem__(0, 5))  # a role that is not a string
    return out


def test_damaged_or_planted_cublaslt_rows_are_refused():
    text = package_plans.encode(lt_program())
    rows = _damaged(text)
    assert len(rows) == 18
    for row in rows:
        assert package_plans.decode(row) is None, row
    assert package_plans.decode(text) is not None  # the untouched row still reads


def _choices(text: str, binder) -> PackageChoices:
    """A trusted package's records as PackageChoices holds them, one problem with ``text``."""
    choices = PackageChoices([], "sm_90_132", "cuda", "f")
    choices._rows = {}
    choices._plans = {("conv", "P", "I"): (text, None)}
    choices.binder = binder
    return choices


def test_a_cublaslt_row_is_bound_before_use_and_a_refusal_is_a_miss(monkeypatch, caplog):
    monkeypatch.setattr(log, "_warned", set())
    monkeypatch.setattr(logging.getLogger("miopy"), "propagate", True)
    text = package_plans.encode(lt_program())
    seen = []

    def bind(program):
        seen.append(program)
        call = program.steps[0]
        bound = Call(call.method, ("gemm", "algo", *call.args[2:]))
        return Program((bound,), program.workspace, program.notes)

    choices = _choices(text, bind)
    choices.read_ahead()
    got = choices.plan("conv", "P", "I")
    assert got is not None and got.steps[0].args[:2] == ("gemm", "algo") and len(seen) == 1
    assert choices.plan("conv", "P", "I") is got and len(seen) == 1  # bound once per problem
    refused = _choices(text, lambda program: None)
    with caplog.at_level(logging.WARNING, logger="miopy"):
        assert refused.plan("conv", "P", "I") is None
        assert _choices(text, None).plan("conv", "P", "I") is None  # OpenCL: no binder
    messages = [r.getMessage() for r in caplog.records]
    assert any("cuBLASLt call" in m and "refused here" in m for m in messages)
    assert any("cannot run on this backend" in m for m in messages)


def test_a_damaged_cublaslt_row_is_ignored_with_a_log_line(monkeypatch, caplog):
    monkeypatch.setattr(log, "_warned", set())
    monkeypatch.setattr(logging.getLogger("miopy"), "propagate", True)
    bad = _damaged(package_plans.encode(lt_program()))[1]
    choices = _choices(bad, lambda program: pytest.fail("a damaged row is never bound"))
    with caplog.at_level(logging.WARNING, logger="miopy"):
        assert choices.read_ahead() == 0
        assert choices.plan("conv", "P", "I") is None
    assert any("damaged program" in r.getMessage() for r in caplog.records)


class FakeLibGemm(FakeGemm):
    """A product as the cuBLASLt solvers use it, with a fake library's checked algorithms."""

    def resolve(self, config):
        return LtAlgo(tuple(config), object(), 512)


@pytest.mark.parametrize(
    "name,config,layout,direction",
    [
        ("GemmLtFwd1x1", {"order": "col", **dict(zip(ALGO_FIELDS, CONFIG))}, "NHWC", "F"),
        ("GemmLtWrw1x1Nchw", {"mode": "packed", "algo": list(CONFIG)}, "NCHW", "W"),
        ("GemmLtWrw1x1Nchw", {"mode": "batched", "algo": list(CONFIG)}, "NCHW", "W"),
    ],
)
def test_the_cublaslt_solvers_programs_are_written(monkeypatch, name, config, layout, direction):
    """The programs GemmLtFwd1x1 and GemmLtWrw1x1Nchw make (a fake library in place of cuBLASLt)
    get a row that reads back as the same steps, the product and algorithm as placeholders."""
    from miopy.problem.conv import ConvDesc, ConvProblem
    from miopy.solvers import by_name
    from miopy.solvers.conv import gemm_lt, gemm_lt_wrw
    from miopy.tensor import TensorDesc

    fake = FakeLibGemm
    monkeypatch.setattr(gemm_lt, "_lt_gemm", fake)
    monkeypatch.setattr(gemm_lt_wrw, "_lt_gemm", fake)
    x = TensorDesc("fp32", (4, 24, 6, 8), layout=layout)
    w = TensorDesc("fp32", (40, 24, 1, 1), layout=layout)
    problem = ConvProblem.create(x, w, ConvDesc((0, 0)), direction, y_layout=layout)
    program = by_name(name, "conv").get_program(None, problem.solver_view(), config)
    again = package_plans.decode(package_plans.encode(program))
    assert again is not None and package_plans.library_steps(again)
    calls = [i for i, s in enumerate(program.steps) if isinstance(s, Call)]
    assert len(calls) == 1
    for i, (mine, read) in enumerate(zip(program.steps, again.steps)):
        if i in calls:
            assert read.args[0] == LtProduct(mine.args[0].key)
            assert read.args[1] == LtChoice(CONFIG, 512)
            assert read.args[2:] == mine.args[2:]
        else:
            assert read == mine
    assert again.workspace == program.workspace and again.notes == program.notes


def test_the_stream_warm_up_never_raises_and_always_lets_the_first_call_go():
    """cuda_warm.warm_on_stream (the set-up thread's cuBLASLt calls on the handle's stream): with
    no recorded cuBLASLt algorithm nothing runs, and with a backend that fails it returns 0; the
    event the first cuBLASLt call waits on is set either way."""
    import threading

    from miopy.backends import cuda_warm

    gemm_only = {"kind": "gemm", "dtype": "FP32", "trans_a": False, "trans_b": False}
    gemm_only |= dict.fromkeys(("m", "n", "k", "lda", "ldb", "ldc", "batch"), 4)
    gemm_only |= dict.fromkeys(("stride_a", "stride_b", "stride_c"), 0)
    by_index = {"kind": "lt", "key": list(KEY), "algo": 3}  # a heuristics index: not recorded
    for values in ([], [gemm_only, by_index, {"kind": "lt", "key": [1], "algo": []}]):
        ready = threading.Event()
        assert cuda_warm.warm_on_stream(object(), values, 0, ready) == 0 and ready.is_set()

    class Broken:
        @property
        def device(self):
            raise RuntimeError("no device")

    ready = threading.Event()
    recorded = {"kind": "lt", "key": list(KEY), "algo": list(CONFIG)}
    assert cuda_warm.warm_on_stream(Broken(), [recorded], 0, ready) == 0 and ready.is_set()


def test_a_stream_being_captured_gets_no_warm_up_call():
    """No warm-up call joins a user's CUDA graph: a capturing stream, or one the runtime will not
    answer for (the legacy stream while another captures), is skipped."""
    from types import SimpleNamespace

    from miopy.backends import cuda_warm

    def runtime(answer):
        def is_capturing(ptr):
            if isinstance(answer, Exception):
                raise answer
            return answer

        return SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(streamIsCapturing=is_capturing)))

    assert cuda_warm._capturing(runtime(1), 5) and not cuda_warm._capturing(runtime(0), 5)
    assert cuda_warm._capturing(runtime(RuntimeError("implicit capture")), 0)
