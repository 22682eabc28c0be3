"""The guards a dynamic graph's compile added, kept in its front cache entry and added again at a warm
start (caching/shape_guards.py): their JSON form, what reads back, and a warm hit that guards as the
compile did (a size the guard rules out compiles again, in the warm process as in the cold one)."""
import json
import logging
import pathlib

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._sympy.functions import FloorDiv, ModularIndexing, ToFloat

from mini_inductor import config, metrics
from mini_inductor.caching import files, front_cache, shape_guards

HIT = front_cache.LABEL


def _env(**values):
    """A ShapeEnv with a backed symbol per value, named as given (Dynamo names them s0, s27, ...)."""
    env = ShapeEnv()
    symbols = {}
    for name, value in values.items():
        expr = env.create_symbol(value, source=torch._dynamo.source.ConstantSource(name))
        symbols[name] = expr
    return env, symbols


def _added(env, *exprs):
    since = len(env.guards)
    for expr in exprs:
        env.evaluate_expr(expr)
    return since


def test_guards_of_sizes_read_back_as_themselves_and_hold_where_they_held():
    env, syms = _env(a=8, b=6)
    a, b = syms["a"], syms["b"]
    exprs = [sympy.Ne(FloorDiv(a, FloorDiv(a, 2)), 0), sympy.Lt(8, 8 * FloorDiv(a, 2) * b),
             sympy.Eq(ModularIndexing(a, 1, 4), 0), sympy.Ge(a + 2 * b, 11), sympy.Ne(a - 2, 1)]
    since = _added(env, *exprs)
    trees, reason = shape_guards.pack(env, since)
    assert reason is None and len(trees) == len(shape_guards.added(env, since))
    assert json.loads(json.dumps(trees)) == trees            # plain JSON
    # a new process: a ShapeEnv whose symbols have the same names, at other sizes where they hold
    env2, _ = _env(a=12, b=6)
    exprs2, reason = shape_guards.check(env2, trees)
    assert reason is None and [str(e) for e in exprs2] == [str(e) for e in shape_guards.added(env, since)]
    before = len(env2.guards)
    shape_guards.install(env2, exprs2)
    assert len(env2.guards) > before                        # Dynamo checks them from here on


def test_a_guard_that_does_not_hold_or_cannot_be_read_adds_nothing():
    env, syms = _env(a=8)
    since = _added(env, sympy.Ne(syms["a"] - 2, 1))
    trees, _ = shape_guards.pack(env, since)
    env3, _ = _env(a=3)                                       # a - 2 == 1 here
    exprs, reason = shape_guards.check(env3, trees)
    assert exprs == [] and reason == f"its guard Ne({syms['a']} - 2, 1) does not hold at these sizes"
    for bad, why in ((["Symbol", "zz"], "symbol zz is not one of the graph's sizes"),
                     (["Eval", ["Symbol", "a"]], "'Eval' is not an operation on sizes"),
                     ([True], "True is not an operation on sizes"), ("a > 1", "is not a guard's part"),
                     (["Add", True, 1], "True is not a guard's part"),
                     (["Pow", 10, 10 ** 9], "a power that is not of a small number"),   # (no endless arithmetic)
                     (["Add", 10 ** 30, 1], "a number too large for a size"), (["FloorDiv", 1, 0], "cannot be read"),
                     (["Rational", 1, 0], "'Rational' is not an operation on sizes")):
        exprs, reason = shape_guards.check(env, [bad])
        assert exprs == [] and why in reason, (bad, reason)
    deep = ["Symbol", "a"]
    for _ in range(100):
        deep = ["Add", deep, 1]
    assert "nested too deep" in shape_guards.check(env, [deep])[1]
    assert shape_guards.check(None, [["true"]])[1] == "the entry holds guards and the graph has no ShapeEnv"
    assert shape_guards.check(None, []) == ([], None)


def test_metadata_sizes_come_back_with_their_symbols_assumptions():
    s = sympy.Symbol("s77", integer=True, positive=True)
    expr = FloorDiv(s, 2) * s + ModularIndexing(s, 1, 4) - 3
    tree = shape_guards.encode(expr)
    assert shape_guards.decode(json.loads(json.dumps(tree))) == expr
    assert shape_guards.decode(["Symbol", "s77", {"integer": True, "positive": True}]) == s
    for bad in (["Symbol", "s77", {"__class__": True}], ["Symbol", "s77", {"positive": "yes"}],
                ["Symbol", "s77", []]):
        with pytest.raises(ValueError, match="are not a size's"):
            shape_guards.decode(bad)


def test_a_guard_over_floats_reads_back_exactly_and_only_finite_python_floats_are_kept():
    # a float argument's value specialized (Eq(zf, 0.1)), an int's compared with a float (ToFloat)
    env, syms = _env(a=8)
    zf = sympy.Symbol("zf3", real=True)
    for expr in (sympy.Eq(zf, sympy.Float(0.1)), sympy.Lt(syms["a"] * sympy.Float(0.5), 7),
                 sympy.Eq(ToFloat(syms["a"]), sympy.Float(8.0)), sympy.Ne(zf, sympy.Float(-2.5e-300))):
        tree = json.loads(json.dumps(shape_guards.encode(expr)))
        back = shape_guards.decode(tree)
        assert back == expr and (not back.atoms(sympy.Float) or
                                 {float(f) for f in back.atoms(sympy.Float)} == {float(f) for f in expr.atoms(sympy.Float)})
    assert shape_guards.encode(sympy.Float(0.1)) == ["Float", (0.1).hex()]   # the double itself, not its text
    for bad in (sympy.Float("0.1", 40), sympy.oo, sympy.nan):    # more bits than a double; not finite
        with pytest.raises(ValueError):
            shape_guards.encode(bad)
    for bad in (["Float", "inf"], ["Float", "nan"], ["Float", "0x1p+" + "9" * 40], ["Float", 0.5], ["Float"]):
        with pytest.raises(ValueError):
            shape_guards.decode(bad)
    since = _added(env, sympy.Lt(syms["a"] * sympy.Float(0.5), 7))
    trees, reason = shape_guards.pack(env, since)
    assert reason is None and shape_guards.check(env, trees)[1] is None


def _conv(x):
    # conv1d under dynamic shapes: AOT autograd's trace adds Ne(n - 2, 1) (an output of length 1) after
    # the front cache's key
    return F.conv1d(x[None], torch.ones(3, 4, 3))


def _calls(compiled, sizes):
    """AOT autograd's calls at each size (the first marked dynamic), each output checked against eager."""
    out = []
    for i, n in enumerate(sizes):
        x = torch.randn(4, n)
        if i == 0:
            torch._dynamo.mark_dynamic(x, 1)
        before = counters["aot_autograd"]["total"]
        torch.testing.assert_close(compiled(x), _conv(x))
        out.append(counters["aot_autograd"]["total"] - before)
    return out


def test_a_warm_hit_adds_the_entrys_guards_so_a_size_they_rule_out_compiles_again(caplog):
    # cold: compiled at 12 (an entry holding Ne(n - 2, 1)), served at 10; at 3 the guard fails and Dynamo
    # compiles again (an entry holding the opposite guard, beside the first). Warm: the same two
    # compiles, each served by its entry; without the hit adding the guard, 3 would reuse 12's graph
    with torch.no_grad():
        runs = []
        for _ in range(2):
            torch._dynamo.reset()
            compiled = torch.compile(_conv, backend="mini_inductor")
            first = len(metrics.compiled_graphs)
            with caplog.at_level(logging.INFO, logger="mini_inductor.schedule"):
                calls = _calls(compiled, (12, 10, 3, 4))
            runs.append((calls, [r.cache for r in metrics.compiled_graphs[first:]]))
    assert runs == [([1, 0, 1, 0], ["miss", "miss"]), ([0, 0, 0, 0], [HIT, HIT])], runs
    entries = sorted((pathlib.Path(config.current().cache_dir) / "front").rglob("*.json"))
    guards = [json.dumps(front_cache.load_entry(config.current().cache_dir, p.stem).guards) for p in entries]
    assert len(entries) == 2 and any("Unequality" in g for g in guards) and any('"Equality"' in g for g in guards)
    assert "does not hold at these sizes" in caplog.text


def test_a_damaged_guard_in_an_entry_is_a_miss_not_a_failure(caplog):
    with torch.no_grad():
        torch._dynamo.reset()
        _calls(torch.compile(_conv, backend="mini_inductor"), (12,))
        (path,) = sorted((pathlib.Path(config.current().cache_dir) / "front").rglob("*.json"))
        data = json.loads(files.read(str(path), "entry", "", lambda b: b.decode()))
        data["guards"] = [["Symbol", "not_a_size"]]
        files.write(str(path), json.dumps(data), "front cache entry")
        torch._dynamo.reset()
        with caplog.at_level(logging.INFO, logger="mini_inductor.schedule"):
            assert _calls(torch.compile(_conv, backend="mini_inductor"), (10,)) == [1]
    assert "a guard cannot be read (symbol not_a_size is not one of the graph's sizes)" in caplog.text


def _lp_pool(x):
    # lp_pool2d of a channels-last input under dynamic shapes: our own compile (eager's layouts, after the
    # ATen graph's key) adds guards on the output's size
    return F.lp_pool2d(x, 3, (3, 4), stride=2)


@pytest.mark.parametrize("front", [True, False], ids=["front cache", "ATen-graph cache"])
def test_guards_our_compile_adds_are_kept_by_both_caches_and_added_again_by_a_hit(front):
    def call(compiled, h, w):
        x = (torch.rand(2, 1, h, w) + 0.1).contiguous(memory_format=torch.channels_last).requires_grad_()
        before, first = counters["aot_autograd"]["total"], len(metrics.compiled_graphs)
        out = compiled(x)
        out.sum().backward()
        ref = x.detach().clone().requires_grad_()
        _lp_pool(ref).sum().backward()
        torch.testing.assert_close(out, _lp_pool(ref))
        torch.testing.assert_close(x.grad, ref.grad)
        return counters["aot_autograd"]["total"] - before, [r.cache for r in metrics.compiled_graphs[first:]]
    runs = []
    with config.patch(front_cache=front):
        for _ in range(2):
            torch._dynamo.reset()
            compiled = torch.compile(_lp_pool, backend="mini_inductor", dynamic=True)
            # (4, 5): a size the added guards rule out, compiled again (Dynamo checks them after a hit too)
            runs.append([call(compiled, h, w) for h, w in ((9, 8), (11, 10), (4, 5))])
    assert runs[0] == [(1, ["miss", "miss"]), (0, []), (1, ["miss", "miss"])], runs
    served = [HIT, HIT] if front else ["disk", "disk"]
    assert runs[1] == [(0 if front else 1, served), (0, []), (0 if front else 1, served)], runs
    entries = sorted((pathlib.Path(config.current().cache_dir) / "graphs").rglob("*.json"))
    from mini_inductor.caching import graph_cache
    assert any(graph_cache.load(config.current().cache_dir, p.stem).guards for p in entries)
