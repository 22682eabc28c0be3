"""The fuzzer under --warm compiles each program a second time after torch._dynamo.reset(): a warm
start served from the disk caches (the front cache where the graph qualifies, without AOT autograd),
compared with eager like the first round. Small compiles in the interpreter."""
from __future__ import annotations

import pytest

from mini_inductor.caching import front_cache
from tests.fuzz.execute import run_program
from tests.fuzz.program import InputSpec, Program, Stmt
from tests.fuzz.shrink import repro_script


@pytest.fixture
def warm(monkeypatch):
    monkeypatch.setenv("MINI_FUZZ_WARM", "1")


def _program(autograd: bool) -> Program:
    x0 = InputSpec("x0", (3, 4), "float32", requires_grad=autograd)
    x1 = InputSpec("x1", (4,), "float32", requires_grad=autograd)
    return Program(seed=0, index=0, inputs=(x0, x1),
                   stmts=(Stmt("v0", "torch.tanh(x0 * x1)", "tanh", "pointwise"),
                          Stmt("v1", "v0.sum(-1)", "sum", "reduction")),
                   outputs=("v0", "v1"), autograd=autograd)


@pytest.mark.parametrize("autograd", [False, True], ids=["inference", "training"])
def test_the_second_round_is_served_from_the_front_cache_and_compared(warm, autograd):
    outcome = run_program(_program(autograd))
    assert outcome.cls == "ok", outcome
    expected = [front_cache.LABEL] * (2 if autograd else 1)   # forward and backward, or the inference graph
    assert outcome.warm_caches == expected, outcome.warm_caches


def test_a_wrong_answer_only_on_the_warm_start_is_caught_and_labelled(warm, monkeypatch):
    real = front_cache._aot_runtime

    def off_by_one(*args, **kwargs):   # a served graph whose first output is wrong
        run = real(*args, **kwargs)
        return lambda *a: [run(*a)[0] + 1, *run(*a)[1:]]

    monkeypatch.setattr(front_cache, "_aot_runtime", off_by_one)
    outcome = run_program(_program(False))
    assert outcome.cls == "wrong" and outcome.category == "value", outcome
    assert outcome.detail.startswith("(warm start) "), outcome.detail


def test_the_repro_of_a_warm_failure_compiles_twice(warm):
    source = repro_script(_program(False), run_program(_program(False)))
    assert "torch._dynamo.reset()" in source and "if True:   # found under --warm" in source
