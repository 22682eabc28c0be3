"""Activation checkpointing with random ops: the recompute in the backward replays the forward's random
numbers (cudagraph-tests.md #34). Through torch.compile the forward saves what the recompute needs
(run_and_save_rng_state: on the CPU the generator's state, on a GPU the seed drawn in the graph;
random_lowerings.py). aot_autograd's other form, a generator per graph wrapped in
`graphsafe_run_with_rng_state` (what it gives CUDA ops unless backend.py turns it off), is still
lowered, with a seed drawn from that generator at each call: that part is checked here on graphs
traced with the same wrapper, on the CPU. The CUDA-graph runs are in
tests/cudagraphs/test_checkpoint_rng_graphs.py.
"""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.checkpoint import checkpoint

from mini_inductor import config
from mini_inductor.pipeline import compile_graph
from mini_inductor.runtime import CompiledGraph

aten = torch.ops.aten
graphsafe = pytest.importorskip("torch._prims.rng_prims").graphsafe_run_with_rng_state


def forward(x, gen):
    out, mask = graphsafe(aten.native_dropout.default, x.sin(), 0.5, True, rng_state=gen)
    return (out * 2,)


def _make_fx_takes_a_generator() -> bool:
    """torch 2.11's make_fx cannot pass a Generator to graphsafe_run_with_rng_state (the fx proxy refuses
    its type); 2.13's can. The graphs under test are what aot_autograd emits, traced that way."""
    try:
        make_fx(forward, tracing_mode="fake")(torch.ones(2), torch.Generator())
    except NotImplementedError:
        return False
    return True


pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU twin of the GPU tests")
traces_a_generator = pytest.mark.skipif(
    not _make_fx_takes_a_generator(), reason="this torch's make_fx takes no Generator argument (torch 2.11): "
    "the GPU twin, tests/cudagraphs/test_checkpoint_rng_graphs.py, runs there")


def recompute(x, grad, gen):
    # what the backward of a checkpointed forward does: run the random op again, use its mask
    _, mask = graphsafe(aten.native_dropout.default, x.sin(), 0.5, True, rng_state=gen)
    return (grad * mask * 4.0 * x.cos(),)


def compiled(fn, *example):
    """fn traced with the graph-safe wrapper as aot_autograd emits it (generator placeholders carry a
    generator as their example value), then compiled by mini_inductor."""
    gm = make_fx(fn, tracing_mode="fake")(*example)
    for node, value in zip([n for n in gm.graph.nodes if n.op == "placeholder"], example):
        if isinstance(value, torch.Generator):
            node.meta["val"] = value.clone_state()
    graph = compile_graph(gm, list(example), kind="inference", cfg=config.current())
    assert isinstance(graph, CompiledGraph), getattr(graph, "reason", graph)
    return graph


@traces_a_generator
def test_recompute_with_an_equal_generator_gets_the_forwards_mask():
    x = torch.randn(256)
    fwd_gen, bwd_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    fw = compiled(forward, x, fwd_gen)
    bw = compiled(recompute, x, torch.ones(256), bwd_gen)
    with open(fw.source_path) as src:
        source = src.read()
    assert "randint" not in source.split("def call")[1]   # the seed is an argument, not drawn inside
    assert fw.generator_idxs == (1,)
    outs = []
    for _ in range(3):
        (out,) = fw([x, fwd_gen])
        (grad,) = bw([x, torch.ones(256), bwd_gen])
        kept = out != 0
        assert 0.3 < kept.float().mean() < 0.7
        torch.testing.assert_close(grad, torch.where(kept, 4.0 * x.cos(), 0.0))   # grad 0 exactly where dropped
        outs.append(out)
    assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[1], outs[2])   # a fresh seed per call


@traces_a_generator
def test_rand_like_under_the_wrapper_draws_from_its_own_seed():
    def fw(x, gen):
        return (x * (graphsafe(aten.rand_like.default, x, rng_state=gen) > 0.5),)

    def bw(x, gen):
        return ((graphsafe(aten.rand_like.default, x, rng_state=gen) > 0.5).float(),)
    x = torch.randn(256)
    g1, g2 = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    f, b = compiled(fw, x, g1), compiled(bw, x, g2)
    for _ in range(2):
        (out,) = f([x, g1])
        (mask,) = b([x, g2])
        torch.testing.assert_close(mask, (out != 0).float())


@traces_a_generator
def test_each_call_advances_the_generator_by_one_seed_draw():
    x = torch.randn(64)
    gen = torch.Generator().manual_seed(3)
    fw = compiled(forward, x, gen)
    before = gen.get_state()
    fw([x, gen])
    replica = torch.Generator()
    replica.set_state(before)
    torch.randint(0, 2**63 - 1, (1,), generator=replica)
    assert torch.equal(gen.get_state(), replica.get_state())


@traces_a_generator
def test_restoring_the_generator_state_replays_an_earlier_forward():
    # aot_autograd's answer to backwards in another order than their forwards: it saves the
    # generator state of each forward and restores it before that forward's backward
    x = torch.randn(128)
    gen = torch.Generator().manual_seed(11)
    fw = compiled(forward, x, gen)
    saved = gen.get_state()
    (first,) = fw([x, gen])
    first = first.clone()
    (second,) = fw([x, gen])
    assert not torch.equal(first, second)
    bwd_gen = torch.Generator()
    bwd_gen.set_state(saved)
    bw = compiled(recompute, x, torch.ones(128), bwd_gen)
    (grad,) = bw([x, torch.ones(128), bwd_gen])
    torch.testing.assert_close(grad, torch.where(first != 0, 4.0 * x.cos(), 0.0))


def block(x):
    return F.dropout(torch.sin(x), p=0.5, training=True) * 2


@torch._functorch.config.patch(donated_buffer=False)   # retain_graph needs it off (aot_autograd's check)
def test_checkpointed_dropout_grads_follow_the_forward_mask_in_uneven_order_and_with_retain_graph():
    f = torch.compile(lambda x: checkpoint(block, x, use_reentrant=False), backend="mini_inductor")
    x1, x2 = torch.randn(64, requires_grad=True), torch.randn(64, requires_grad=True)
    out1, out2 = f(x1), f(x2)
    out2.sum().backward()          # backwards in the reverse order of the forwards
    out1.sum().backward(retain_graph=True)
    for x, out in ((x2, out2), (x1, out1)):   # d/dx of 2 * dropout(sin x): 2 * 2 * cos x where kept
        torch.testing.assert_close(x.grad, torch.where(out != 0, 4 * torch.cos(x.detach()), 0.0))
    out1.sum().backward()          # the retained graph recomputes the same mask again
    torch.testing.assert_close(x1.grad, 2 * torch.where(out1 != 0, 4 * torch.cos(x1.detach()), 0.0))
    assert not torch.equal(out1 != 0, out2 != 0)


@traces_a_generator
def test_a_graph_that_runs_eagerly_with_a_checkpointed_random_op_warns_that_its_numbers_are_atens():
    from mini_inductor.runtime import EagerGraph
    gm = make_fx(forward, tracing_mode="fake")(torch.randn(8), torch.Generator())
    with pytest.warns(UserWarning, match="recompute in the backward does not repeat"):
        EagerGraph("forward_9", gm, "a reason")


def test_eager_checkpoint_around_a_compiled_block_recomputes_the_same_mask():
    # torch.utils.checkpoint restores the RNG state before the recompute; the compiled block draws its
    # seed from the default generator inside the graph, so it draws the same seed again
    from mini_inductor import metrics
    compiled_block = torch.compile(block, backend="mini_inductor")
    for _ in range(3):
        x = torch.randn(64, requires_grad=True)
        out = checkpoint(compiled_block, x, use_reentrant=False)
        out.sum().backward()
        torch.testing.assert_close(x.grad, torch.where(out != 0, 4 * torch.cos(x.detach()), 0.0))
    assert metrics.compiled_graphs and not any(r.ran_eagerly for r in metrics.compiled_graphs)
