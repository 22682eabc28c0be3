"""The fuzzer under --dynamic calls each program at other input sizes than the traced ones (tests/fuzz/sizes.py).

A compile with every size a symbol can be wrong only at sizes it was not traced at (a reduction's row
bounded by the traced length, a kernel specialized on a size's value): these check that the other sizes
are drawn sound, called, compared, named in the failure, kept by the shrinker and written into repros.
Fast: custom backends stand in for mini_inductor, except one small compile in the interpreter.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.fuzz.execute import Outcome, run_program
from tests.fuzz.program import InputSpec, Program, Stmt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def dynamic(monkeypatch):
    monkeypatch.setenv("MINI_FUZZ_DYNAMIC", "1")


def _row_sums(other_shapes=((5, 7), (2, 9)), autograd=False) -> Program:
    x0 = InputSpec("x0", (3, 4), "float32", requires_grad=autograd, other_shapes=other_shapes)
    return Program(seed=0, index=0, inputs=(x0,), stmts=(Stmt("v0", "x0.sum(-1) * 2", "sum", "reduction"),),
                   outputs=("v0",), autograd=autograd)


def _recording_backend(seen: list):
    def backend(gm, example_inputs):
        def run(*args):
            seen.append([tuple(a.shape) for a in args if isinstance(a, torch.Tensor)])
            return gm(*args)
        return run
    return backend


def test_a_program_drawn_under_dynamic_is_called_at_its_other_sizes_with_one_compile(dynamic):
    from tests.fuzz.generate import generate

    program = next(p for p in (generate(5, i, other_sizes=2) for i in range(20)) if p.size_sets == 2)
    seen: list = []
    outcome = run_program(program, _recording_backend(seen))
    assert outcome.cls == "ok" and outcome.other_calls == 2, outcome
    assert len(seen) == 4, seen      # two calls at the traced sizes, one at each other size set
    for k, call in ((0, 0), (0, 1), (1, 2), (2, 3)):
        assert set(seen[call]) <= {tuple(i.at(k).shape) for i in program.inputs}, (k, seen)
    assert seen[2] != seen[0] and seen[3] != seen[0], seen


def test_a_wrong_answer_only_at_another_size_is_caught_and_says_which_call_and_sizes(dynamic):
    def wrong_elsewhere(gm, example_inputs):
        first = []

        def run(*args):
            shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            first[:] = first or shapes
            out = gm(*args)
            return out if shapes == first else tuple(o + 1 for o in out)   # right only at the traced sizes
        return run

    outcome = run_program(_row_sums(), wrong_elsewhere)
    assert (outcome.cls, outcome.category, outcome.sizes) == ("wrong", "value", 1), outcome
    assert outcome.detail.startswith("(call 3, sizes 1: x0 (5, 7)) output 0:"), outcome.detail
    assert outcome.signature() == "wrong:value@other_sizes"


def test_a_gradient_wrong_only_at_another_size_is_caught(dynamic):
    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g * 3 if g.shape[0] == 2 else g   # x0 (2, 9): 2 rows

    def wrong_grad(gm, example_inputs):
        return lambda *args: tuple(Wrong.apply(o) for o in gm(*args))

    outcome = run_program(_row_sums(autograd=True), wrong_grad)
    assert (outcome.cls, outcome.category, outcome.sizes) == ("wrong", "grad", 2), outcome
    assert outcome.detail.startswith("(call 4, sizes 2: x0 (2, 9)) grad of input 0:"), outcome.detail


def test_mini_inductor_compiles_a_row_reduction_once_for_all_the_sizes(dynamic):
    outcome = run_program(_row_sums(autograd=True))
    assert (outcome.cls, outcome.other_calls, outcome.recompiles) == ("ok", 2, 0), outcome


def test_an_error_at_other_sizes_is_one_failure_whatever_the_shapes():
    a = Outcome("error", "RuntimeError", "(call 3, sizes 1: x0 (5, 7), x1 (7,)) boom at 3", sizes=1)
    b = Outcome("error", "RuntimeError", "(call 3, sizes 1: x0 (2,)) boom at 4", sizes=1)
    assert a.signature() == b.signature() != Outcome("error", "RuntimeError", "boom at 3").signature()


def test_other_sizes_vary_by_class_and_keep_the_sizes_the_program_ties():
    from tests.fuzz.sizes import size_classes, with_other_sizes

    x0 = InputSpec("x0", (6,), "float32")                                   # 6: tied by the literal view
    x1 = InputSpec("x1", (4, 5), "float32")
    x2 = InputSpec("x2", (3,), "int64", values=(0, 2, 1))                    # fixed values: 3 stays
    x3 = InputSpec("x3", (3, 5), "float32")
    program = Program(0, 0, (x0, x1, x2, x3),
                      (Stmt("v0", "x0.view(2, 3)", "view", "view"), Stmt("v1", "x1.sum(0) + x3", "add", "binary"),
                       Stmt("v2", "x1[x2]", "index_select", "indexing")), ("v0", "v1", "v2"))
    assert size_classes(program) == [4, 5, 6]
    program = with_other_sizes(program, 2)
    assert program.size_sets == 2
    for k in (1, 2):
        x0k, x1k, x2k, x3k = (i.at(k).shape for i in program.inputs)
        assert x0k == (6,) and x2k == (3,) and x3k[0] == 3, program.shapes(k)
        assert x1k[1] == x3k[1] and x1k[0] >= 3 and min(x1k) >= 2, program.shapes(k)   # x2 reads rows 0..2
    x1_other = [program.inputs[1].at(k).shape for k in (1, 2)]
    assert all(a != 4 and b != 5 for a, b in x1_other), x1_other      # both free classes vary in both sets


def test_a_set_that_changes_a_broadcast_is_not_kept():
    # x0[2:] has 1 row at size 3 (broadcast against x1's 2), none at size 2: both change what the program means
    from tests.fuzz.sizes import _structure

    program = Program(0, 0, (InputSpec("x0", (4, 2), "float32"), InputSpec("x1", (2,), "float32")),
                      (Stmt("v0", "x0[2:] + x1", "add", "binary"),), ("v0",))
    traced = _structure(program, {})
    assert _structure(program, {4: 3}) != traced and _structure(program, {4: 2}) != traced
    assert _structure(program, {4: 7}) == traced and _structure(program, {4: 7, 2: 5}) == traced


def test_a_failure_at_other_sizes_shrinks_to_the_size_set_it_needs_and_its_repro_calls_it(tmp_path, dynamic):
    from tests.fuzz.shrink import repro_script, shrink

    program = Program(0, 0, (InputSpec("x0", (3, 4), "float32", other_shapes=((5, 7), (2, 9))),
                             InputSpec("x1", (4,), "float32", other_shapes=((7,), (9,)))),
                      (Stmt("v0", "x0.sum(-1)", "sum", "reduction"), Stmt("v1", "x0 * x1", "mul", "binary"),
                       Stmt("v2", "torch.sin(x1)", "sin", "pointwise")), ("v0", "v1", "v2"))

    def evaluate(programs):   # fails where a set has rows of 7 or more, reading x0
        return [Outcome("wrong", "value", sizes=1) if any(s[-1] >= 7 for s in p.inputs[0].other_shapes)
                and "x0" in {r for s in p.stmts for r in s.reads()} else Outcome("ok") for p in programs]

    small, _ = shrink(program, "wrong:value@other_sizes", evaluate, budget=300)
    assert [s.expr for s in small.stmts] == ["x0.sum(-1)"] and [i.name for i in small.inputs] == ["x0"]
    assert small.size_sets == 1 and small.inputs[0].other_shapes[0][-1] >= 7, small.inputs
    # a traced dim of 1 is 1 in the set too: Dynamo specializes it, the set would run another graph
    assert all(e == 1 for d, e in zip(small.inputs[0].shape, small.inputs[0].other_shapes[0]) if d == 1), small.inputs

    path = tmp_path / "repro.py"
    path.write_text(repro_script(small, Outcome("wrong", "value", "why", sizes=1), file="repro.py"))
    assert "OTHER_SIZES = 1" in path.read_text() and "elif sizes == 1:" in path.read_text()
    done = subprocess.run([sys.executable, str(path), "cpu", "eager"], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT), timeout=300)
    assert done.returncode == 0 and "compiled matches eager" in done.stdout, done.stderr[-2000:]
    at = small.inputs[0].other_shapes[0]
    assert f"sizes 1 ({at})" in done.stdout, done.stdout
