"""The fuzzer's Python-number arguments (tests/fuzz/ops_scalar.py, the scalar family).

Programs take ints and floats beside tensors (Dynamo makes an int a SymInt under dynamic shapes, a float a
0-d tensor or a guarded constant): these check that such programs are drawn only when asked for, carry
their numbers through the worker protocol, the program text, the shrinker and the repro script, that
--dynamic's other size sets vary the numbers (0 and negatives where the program allows; a divisor 0
only where eager raises, and then the compiled call must raise too).
Fast: custom backends stand in for mini_inductor, except one small compile in the interpreter.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.fuzz import ops
from tests.fuzz.execute import Outcome, run_program
from tests.fuzz.generate import generate
from tests.fuzz.program import InputSpec, Program, Stmt, load

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def scalars(monkeypatch):
    monkeypatch.setitem(ops.FAMILY_WEIGHTS, "scalar", 15)


@pytest.fixture
def dynamic(monkeypatch):
    monkeypatch.setenv("MINI_FUZZ_DYNAMIC", "1")


def _drawn_with_scalars(seed: int = 7, **kw) -> list[Program]:
    return [p for p in (generate(seed, i, **kw) for i in range(12)) if p.scalars()]


def _divides(value: int = 3, other_values=(), other_shapes=()) -> Program:
    """x0 * (7 // x1): x1 a divisor."""
    x0 = InputSpec("x0", (3, 4), "float32", other_shapes=other_shapes)
    x1 = InputSpec("x1", (), "int", value=value, nonzero=True, other_values=other_values,
                   other_shapes=tuple(() for _ in other_values))
    return Program(0, 0, (x0, x1), (Stmt("v0", "x0 * (7 // x1)", "scalar_int_math", "scalar"),), ("v0",))


def test_the_default_weights_draw_the_programs_drawn_before_the_scalar_family(monkeypatch):
    # weight 0 and last in FAMILY_WEIGHTS: no draw of another family moves, so every seed's programs stay
    before = [generate(3, i).to_source() for i in range(15)]
    monkeypatch.delitem(ops.FAMILY_WEIGHTS, "scalar")
    assert [generate(3, i).to_source() for i in range(15)] == before
    assert not any(generate(3, i).scalars() for i in range(15))


def test_a_program_with_numbers_round_trips_through_the_worker_protocol_and_its_source(scalars):
    programs = _drawn_with_scalars(autograd=True)
    assert len(programs) >= 6, "the scalar family at weight 15 draws numbers in most programs"
    kinds = {spec.dtype for p in programs for spec in p.scalars()}
    assert kinds == {"int", "float"}, kinds
    for p in programs:
        assert Program.from_dict(json.loads(json.dumps(p.to_dict()))) == p
        source = p.to_source()
        for spec in p.scalars():
            assert f"    {spec.name} = {spec.value!r}\n" in source, source
        make_inputs, f = load(p)
        args = make_inputs("cpu")
        for spec, x in zip(p.inputs, args):
            assert (type(x).__name__ == spec.dtype and x == spec.value) if spec.is_scalar else isinstance(x, torch.Tensor)
        f(*args)


def test_other_size_sets_vary_the_numbers_and_keep_the_program_s_structure():
    from tests.fuzz.sizes import _structure, with_other_sizes

    x0 = InputSpec("x0", (4, 6), "float32")
    k = InputSpec("x1", (), "int", value=3)           # a slice bound: x0[:, :k] keeps 2 or more columns
    m = InputSpec("x2", (), "int", value=2)           # a multiplier: any value
    s = InputSpec("x3", (), "float", value=0.5)       # a float scale
    program = Program(5, 0, (x0, k, m, s), (Stmt("v0", "x0[:, :x1] * x2 + x3", "scalar_slice", "scalar"),), ("v0",))
    program = with_other_sizes(program, 2)
    assert program.size_sets == 2, program.inputs
    traced = _structure(program, {})
    for n in (1, 2):
        assert _structure(program, {spec.name: spec.at(n).value for spec in program.scalars()}) == traced
        assert program.inputs[1].at(n).value >= 2 or program.inputs[1].at(n).value <= -2, program.shapes(n)
    for spec in program.scalars():
        assert len(spec.other_values) == 2
    assert any(v != 2 for v in program.inputs[2].other_values), program.inputs[2]
    assert any(v != 0.5 for v in program.inputs[3].other_values), program.inputs[3]
    assert "x1=" in program.shapes(1) and "x0 (" in program.shapes(1)
    assert "elif sizes == 2:" in program.to_source() and f"x2 = {program.inputs[2].other_values[1]!r}" in program.to_source()


def test_without_dynamic_the_numbers_alone_take_other_values(scalars, monkeypatch):
    # the second call at another int recompiles (automatic dynamic: a SymInt), the case where a cache keyed
    # on the graph can serve the compile made for another value
    monkeypatch.delenv("MINI_FUZZ_DYNAMIC", raising=False)
    programs = _drawn_with_scalars()
    assert programs and all(p.size_sets >= 1 for p in programs), [p.size_sets for p in programs]
    for p in programs:
        for n in range(1, p.size_sets + 1):
            assert [i.shape for i in p.inputs] == [i.at(n).shape for i in p.inputs], p.shapes(n)
        assert any(v != spec.value for spec in p.scalars() for v in spec.other_values), p.shapes(1)


def test_a_divisor_is_never_0_at_other_sizes_but_gets_a_set_of_its_own_where_eager_raises(dynamic):
    from tests.fuzz.sizes import with_other_sizes

    program = with_other_sizes(_divides(), 2)
    values = program.inputs[1].other_values
    assert 0 not in values[:-1] and values[-1] == 0, values
    assert program.inputs[0].at(program.size_sets).shape == (3, 4)    # all else as traced

    outcome = run_program(program, "eager")    # Dynamo's graph raises too: 7 // 0
    assert outcome.cls == "ok" and outcome.other_calls == program.size_sets, outcome

    def swallows(gm, example_inputs):       # a compiler that returns something where eager raises
        def run(*args):
            try:
                return gm(*args)
            except ZeroDivisionError:
                return (torch.zeros(3, 4),)
        return run
    outcome = run_program(program, swallows)
    assert (outcome.cls, outcome.category, outcome.sizes) == ("wrong", "raises", program.size_sets), outcome
    assert "eager raised ZeroDivisionError" in outcome.detail and "x1=0" in outcome.detail, outcome.detail


def test_no_zero_divisor_set_where_only_a_dead_statement_divides():
    # a compiler leaves out a statement no output needs (AOT autograd does): eager's raise there is no
    # finding (fuzz seed 1001, programs 103 and 129)
    from tests.fuzz.sizes import with_other_sizes

    dead = _divides()
    dead = Program(0, 0, dead.inputs, dead.stmts + (Stmt("v1", "x0 + 1", "add_int_scalar", "pointwise"),), ("v1",))
    assert all(0 not in spec.other_values for spec in with_other_sizes(dead, 2).scalars())


def test_a_wrong_answer_at_another_value_of_a_number_is_caught(dynamic):
    def wrong_for_negative(gm, example_inputs):
        def run(*args):
            out = gm(*args)
            return tuple(o + 1 for o in out) if any(isinstance(a, int) and a < 0 for a in args) else out
        return run

    program = _divides(value=3, other_values=(-2,), other_shapes=((3, 4),))
    outcome = run_program(program, wrong_for_negative)
    assert (outcome.cls, outcome.category, outcome.sizes) == ("wrong", "value", 1), outcome
    assert outcome.detail.startswith("(call 3, sizes 1: x0 (3, 4), x1=-2) output 0:"), outcome.detail


def test_the_shrinker_writes_in_a_number_the_failure_does_not_need_and_keeps_the_one_it_does(tmp_path, dynamic):
    from tests.fuzz.shrink import repro_script, shrink

    x0 = InputSpec("x0", (3, 4), "float32", other_shapes=((3, 4), (3, 4)))
    k = InputSpec("x1", (), "int", value=3, other_values=(-2, 5), other_shapes=((), ()))
    m = InputSpec("x2", (), "float", value=0.5, other_values=(1.5, -2.0), other_shapes=((), ()))
    program = Program(0, 0, (x0, k, m), (Stmt("v0", "torch.roll(x0, x1, 1) * x2", "scalar_roll", "scalar"),), ("v0",))

    def evaluate(programs):   # fails where x1 is an argument that is negative in an other size set
        return [Outcome("wrong", "value", sizes=1) if any(i.name == "x1" and min(i.other_values or (0,)) < 0
                                                          for i in p.inputs) else Outcome("ok") for p in programs]

    small, _ = shrink(program, "wrong:value@other_sizes", evaluate, budget=200)
    assert [i.name for i in small.inputs] == ["x0", "x1"], small.inputs
    assert small.stmts[0].expr == "torch.roll(x0, x1, 1) * (0.5)" and small.inputs[1].other_values == (-2,)

    path = tmp_path / "repro.py"
    path.write_text(repro_script(small, Outcome("wrong", "value", "why", sizes=1), file="repro.py"))
    assert "x1 = -2" in path.read_text()
    done = subprocess.run([sys.executable, str(path), "cpu", "eager"], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT), timeout=300)
    assert done.returncode == 0 and "compiled matches eager" in done.stdout, done.stderr[-2000:]
    assert f"sizes 1 ({small.inputs[0].at(1).shape}, -2)" in done.stdout, done.stdout


def test_a_repro_whose_divisor_is_0_checks_that_both_raise(tmp_path, dynamic):
    from tests.fuzz.shrink import repro_script

    path = tmp_path / "repro.py"
    path.write_text(repro_script(_divides(other_values=(0,), other_shapes=((3, 4),)), Outcome("ok"), file="repro.py"))
    done = subprocess.run([sys.executable, str(path), "cpu", "eager"], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT), timeout=300)
    assert done.returncode == 0 and "both raised" in done.stdout, (done.stdout, done.stderr[-2000:])


def test_mini_inductor_compiles_a_slice_by_an_int_argument_once_for_its_values(dynamic):
    x0 = InputSpec("x0", (4, 6), "float32", requires_grad=True, other_shapes=((4, 6), (4, 9)))
    k = InputSpec("x1", (), "int", value=3, other_values=(4, -2), other_shapes=((), ()))
    program = Program(0, 0, (x0, k), (Stmt("v0", "x0[:, :x1] * x1", "scalar_slice", "scalar"),), ("v0",),
                      autograd=True)
    outcome = run_program(program)
    assert (outcome.cls, outcome.other_calls) == ("ok", 2), outcome
