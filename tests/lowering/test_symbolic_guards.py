"""Guards a compile adds to a dynamic graph's ShapeEnv after the caches' keys were made."""
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

from mini_inductor.caching import shape_guards
from mini_inductor.lowering import symbolic


def _int_input_graph(hint):
    env = ShapeEnv()
    k = env.create_unspecified_symint_and_symbol(hint, ConstantSource("k"), DimDynamic.DYNAMIC)
    graph = torch.fx.Graph()
    node = graph.placeholder("k")
    node.meta["val"] = k
    graph.output(node)
    return torch.fx.GraphModule({}, graph), k


def test_a_guard_added_during_the_compile_is_reported():
    # a compile that evaluates a condition on a symbol specializes on it (the ShapeEnv gets a guard
    # Dynamo checks); the caches' keys, made before, do not hold it, so the entry keeps it
    gm, k = _int_input_graph(5)
    with symbolic.graph_shapes(gm):
        env = symbolic.current().shape_env
        before = symbolic.guard_count()
        assert shape_guards.pack(env, before) == ([], None)
        assert not bool(k > 6)
        added = [str(e) for e in shape_guards.added(env, before)]
        trees, why = shape_guards.pack(env, before)
    assert added == [f"{k.node.expr} <= 6"], added
    assert why is None and [str(shape_guards.decode(t)) for t in trees] == added


def test_a_static_graph_has_no_guards_to_report():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(2, 3)
    graph.output(x)
    with symbolic.graph_shapes(torch.fx.GraphModule({}, graph)):
        assert symbolic.guard_count() == 0 and shape_guards.pack(symbolic.current().shape_env, 0) == ([], None)
