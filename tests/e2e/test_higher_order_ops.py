"""Higher-order ops (torch.cond, while_loop, map) inside a compiled graph: the op runs in ATen with its
functions defined in the generated module (lowering/subgraphs.py), the rest of the graph keeps its
kernels. Until session 41 any such op sent its whole graph to eager."""
import importlib.util
import warnings

import pytest
import torch
from torch._higher_order_ops.map import map as hop_map
from torch._higher_order_ops.while_loop import while_loop

import mini_inductor  # noqa: F401  registers the backend
from common import COUNTS_KERNELS, assert_fallback, check, generated_sources, kernels_generated, reset_metrics
from mini_inductor import metrics


@pytest.fixture(autouse=True)
def on_device(device):
    torch.set_default_device(device)
    yield
    torch.set_default_device(None)


def _branchy(x):
    y = x * 2 + 1
    return torch.cond(y.sum() > 0, lambda y: y.sin() * 2, lambda y: y.cos() + 1, (y,)) * 3


def _no_graph_ran_eagerly():
    assert metrics.compiled_graphs, "nothing was compiled"
    assert not any(g.ran_eagerly for g in metrics.compiled_graphs), \
        [(g.name, g.ran_eagerly) for g in metrics.compiled_graphs]


@pytest.mark.parametrize("sign", [1, -1], ids=["true_branch", "false_branch"])
def test_cond_runs_in_aten_between_generated_kernels(sign):
    torch._dynamo.reset()
    check(_branchy, sign * (torch.rand(4, 8) + 0.5))
    _no_graph_ran_eagerly()
    assert_fallback("cond")
    if COUNTS_KERNELS:
        assert kernels_generated() == 2   # the ops before and after the cond
        from compile_ir import lower_fn
        lowered, _ = lower_fn(_branchy, torch.rand(4, 8, device="cpu"))
        assert "higher-order op" in lowered.fallback_reasons["cond"], lowered.fallback_reasons
        source = generated_sources()
        assert "torch.ops.higher_order.cond(" in source and "def subgraph_true_graph_0(" in source


def test_cond_in_a_dynamic_training_graph_compiles_once_and_matches_eager_gradients():
    torch._dynamo.reset()
    reset_metrics()
    w = torch.randn(8, 8, requires_grad=True)

    def f(x):
        y = x @ w
        return torch.cond(y.sum() > 0, lambda y: y.sin() * 2, lambda y: y.cos() + 1, (y,)).sum(1)

    compiled = torch.compile(f, backend="mini_inductor", dynamic=True)
    for n in (4, 6, 9):
        for sign in (1, -1):
            x = sign * torch.randn(n, 8)
            w.grad = None
            compiled(x).sum().backward()
            got = w.grad.clone()
            w.grad = None
            f(x).sum().backward()
            torch.testing.assert_close(got, w.grad)
    _no_graph_ran_eagerly()
    if COUNTS_KERNELS:
        assert sorted(g.name.split("_")[0] for g in metrics.compiled_graphs) == ["backward", "forward"]
        assert all(g.dynamic_symbols and not g.dynamic_fallback for g in metrics.compiled_graphs)


def test_while_loop_and_map_run_in_aten_between_generated_kernels():
    torch._dynamo.reset()

    def loop(x):
        return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2), (torch.tensor(0), x + 1))[1] * 5

    def mapped(x):
        return hop_map(lambda row: row * 2 + 1, x.exp()) - 1

    check(loop, torch.randn(4, 8))
    assert_fallback("while_loop")
    check(mapped, torch.randn(4, 8))
    assert_fallback("map_impl")
    _no_graph_ran_eagerly()


def test_graphs_that_differ_only_in_a_branch_do_not_share_a_cache_entry():
    # the branch bodies are submodules: the graph cache's key holds their code
    torch._dynamo.reset()
    x = torch.rand(4, 8) + 0.5
    sine = torch.compile(lambda x: torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,)) + 1,
                         backend="mini_inductor")
    torch.testing.assert_close(sine(x), x.sin() + 1)
    torch._dynamo.reset()
    tangent = torch.compile(lambda x: torch.cond(x.sum() > 0, lambda x: x.tan(), lambda x: x.cos(), (x,)) + 1,
                            backend="mini_inductor")
    torch.testing.assert_close(tangent(x), x.tan() + 1)


def test_the_generated_module_with_a_cond_runs_on_its_own():
    torch._dynamo.reset()
    reset_metrics()
    x = torch.rand(4, 8) + 0.5
    torch.compile(_branchy, backend="mini_inductor")(x)
    if not COUNTS_KERNELS:
        return
    (record,) = metrics.compiled_graphs
    spec = importlib.util.spec_from_file_location("standalone_cond", record.source_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)   # a fresh module object: nothing from the compile's process state
    inputs = module.make_example_inputs()
    expected = _branchy(inputs[0].clone())
    torch.testing.assert_close(module.call(list(inputs))[0], expected)


def test_a_cond_nested_in_a_branch_keeps_the_graph_eager_with_its_reason():
    torch._dynamo.reset()
    reset_metrics()

    def nested(x):
        def outer(x):
            return torch.cond(x.mean() > 0, lambda x: x * 2, lambda x: x * 3, (x,))
        return torch.cond(x.sum() > 0, outer, lambda x: x - 1, (x,)) + 1

    x = torch.rand(4, 8) + 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.compile(nested, backend="mini_inductor")(x)
    torch.testing.assert_close(out, nested(x))
    if COUNTS_KERNELS:
        reasons = [g.ran_eagerly for g in metrics.compiled_graphs]
        assert any(r and "nested higher-order ops" in r for r in reasons), reasons
