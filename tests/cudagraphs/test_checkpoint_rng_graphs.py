"""Activation checkpointing under CUDA graphs: the recompute of a checkpointed dropout in the backward
replays the forward's random numbers (cudagraph-tests.md #34, TestSAC). The port checks mask
consistency: the gradient is 0 exactly where the forward output was dropped, and elsewhere the
derivative of the kept value. The CPU twin (lowering, seeds, generator restore) is
tests/e2e/test_checkpoint_rng.py."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import mini_inductor
from mini_inductor import metrics

pytestmark = pytest.mark.gpu


def stats():
    return mini_inductor.cudagraphs.stats(0)


def block(x):
    return F.dropout(torch.sin(x), p=0.5, training=True) * 2


def fn(x):
    return checkpoint(block, x, use_reentrant=False)


def compiled(**options):
    return torch.compile(fn, backend="mini_inductor", dynamic=False, options=options or None)


def expected_grad(x, out):
    """d/dx of 2 * dropout(sin x, 0.5) = 2 * 2 * cos x where the element was kept, 0 where dropped."""
    return torch.where(out != 0, 4 * torch.cos(x.detach()), torch.zeros_like(out))


def leaf():
    return torch.randn(512, device="cuda", requires_grad=True)


def rand_mask(x):
    return x * (torch.rand_like(x) > 0.5)       # the spec's form: d/dx is the mask itself


def test_rand_like_mask_recompute_matches_the_forward_under_graphs():
    f = torch.compile(lambda x: checkpoint(rand_mask, x, use_reentrant=False), backend="mini_inductor",
                      dynamic=False)
    for _ in range(4):
        x = leaf()
        out = f(x)
        kept = (out != 0).float().clone()
        out.sum().backward()
        torch.testing.assert_close(x.grad, kept)
        assert 0.35 < kept.mean().item() < 0.65
    assert stats()["replays"] >= 2 and stats()["skips"] == 0


def test_recompute_replays_the_forward_mask_across_warmup_record_and_replay():
    f = compiled()
    masks = []
    for _ in range(4):
        x = leaf()
        out = f(x)
        kept = (out != 0).clone()
        out.sum().backward()
        torch.testing.assert_close(x.grad, expected_grad(x, out))
        assert 0.35 < kept.float().mean().item() < 0.65
        masks.append(kept)
    assert all(not torch.equal(a, b) for a, b in zip(masks, masks[1:]))   # a fresh seed per iteration
    s = stats()
    assert s["recordings"] >= 2 and s["replays"] >= 2 and s["skips"] == 0, s
    assert not any(r.ran_eagerly for r in metrics.compiled_graphs), [r.ran_eagerly for r in metrics.compiled_graphs]


def test_manual_seed_repeats_a_checkpointed_regions_mask_across_warmup_record_and_replay():
    # eager and Inductor repeat it; aot_autograd's generators per graph, seeded once, did not (session
    # 40): the forward now saves the device generator's state for the recompute (backend.py)
    f = compiled()
    masks = []
    for _ in range(4):
        x = leaf()
        torch.manual_seed(3)
        out = f(x)
        masks.append((out != 0).clone())
        out.sum().backward()
        torch.testing.assert_close(x.grad, expected_grad(x, out))
    assert all(torch.equal(masks[0], m) for m in masks[1:])
    assert 0.35 < masks[0].float().mean().item() < 0.65
    s = stats()
    assert s["recordings"] >= 2 and s["replays"] >= 2 and s["skips"] == 0, s


@pytest.mark.parametrize("eager_kind", ["forward", "backward"])
def test_a_pair_with_one_graph_run_eagerly_converts_the_saved_seed_or_state(monkeypatch, eager_kind):
    # a compiled forward saves a seed on the GPU where the graph says a generator state; an eagerly
    # run backward takes a state made from it, and a compiled backward a seed drawn from the state
    # an eagerly run forward saved (runtime/rng.py as_state, as_seed). The numbers are ATen's on one
    # side (the warning), but nothing crashes and the gradient is finite and zero where dropped
    from mini_inductor import pipeline
    from mini_inductor.errors import LoweringError
    real = pipeline.run_stages

    def run_stages(gm, example_inputs, name, record, graph_args):
        if graph_args["kind"] == eager_kind:
            raise LoweringError("injected by the test", graph=name)
        return real(gm, example_inputs, name, record, graph_args)
    monkeypatch.setattr(pipeline, "run_stages", run_stages)
    torch._dynamo.reset()   # (nothing served from the caches)
    f = compiled(fallback_on_error=True)
    with pytest.warns(UserWarning, match="does not repeat"):
        for _ in range(3):
            x = leaf()
            out = f(x)
            out.sum().backward()
            assert x.grad.isfinite().all()
            assert 0.3 < (x.grad != 0).float().mean().item() < 0.7
    assert any(r.ran_eagerly for r in metrics.compiled_graphs)


def test_cudagraphs_on_and_off_give_the_same_outputs_and_grads():
    runs = []
    for options in ({}, {"cudagraphs": False}):
        torch._dynamo.reset()
        torch.manual_seed(0)
        f = compiled(**options)
        xs = [torch.randn(256, device="cuda") for _ in range(3)]
        got = []
        for x0 in xs:
            x = x0.clone().requires_grad_()
            out = f(x)
            out.sum().backward()
            torch.testing.assert_close(x.grad, expected_grad(x, out))
            got.append((out.detach().clone(), x.grad.clone()))
        runs.append(got)
    for (out_cg, grad_cg), (out_eager, grad_eager) in zip(*runs):
        torch.testing.assert_close(out_cg, out_eager)
        torch.testing.assert_close(grad_cg, grad_eager)
    assert stats()["skips"] == 0


def test_two_forwards_then_backwards_in_reverse_order():
    f = compiled()
    for _ in range(3):      # warmup, record, replay of whatever the tree can graph
        x1, x2 = leaf(), leaf()
        out1 = f(x1)
        out1_kept = out1.detach().clone()
        out2 = f(x2)
        out2_kept = out2.detach().clone()
        out2.sum().backward()
        out1.sum().backward()
        torch.testing.assert_close(x2.grad, expected_grad(x2, out2_kept))
        torch.testing.assert_close(x1.grad, expected_grad(x1, out1_kept))
        assert not torch.equal(out1_kept != 0, out2_kept != 0)
        mini_inductor.mark_step()


@torch._functorch.config.patch(donated_buffer=False)   # retain_graph needs it off (aot_autograd's own check)
def test_retain_graph_recomputes_the_same_mask_twice():
    f = compiled()
    for _ in range(3):
        x = leaf()
        out = f(x)
        kept = out.detach().clone()
        out.sum().backward(retain_graph=True)
        out.sum().backward()
        torch.testing.assert_close(x.grad, 2 * expected_grad(x, kept))
        mini_inductor.mark_step()


def test_eager_checkpoint_around_a_compiled_block_recomputes_the_same_mask():
    # torch.utils.checkpoint restores the CUDA RNG state before the recompute; the block's graph draws
    # its seed from the default generator, which a CUDA graph replay reads at replay time
    compiled_block = torch.compile(block, backend="mini_inductor", dynamic=False)
    for _ in range(4):
        x = leaf()
        out = checkpoint(compiled_block, x, use_reentrant=False)
        kept = out.detach().clone()
        out.sum().backward()
        torch.testing.assert_close(x.grad, expected_grad(x, kept))
        mini_inductor.mark_step()
    assert stats()["skips"] == 0


def test_a_seed_drawn_from_a_restored_generator_repeats():
    # the primitive the design rests on (cf. test_cudagraph_uneven_forward_backward): aot_autograd
    # restores a backward generator to a forward's state; the seed drawn after equals that forward's
    from mini_inductor.runtime import draw_seed
    gen = torch.Generator(device="cuda").manual_seed(5)
    saved = gen.get_state()
    first = [draw_seed(gen).item() for _ in range(3)]
    assert len(set(first)) == 3
    gen.set_state(saved)
    assert [draw_seed(gen).item() for _ in range(3)] == first


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_checkpointed_random_regions_on_two_gpus_each_recompute_their_own_mask():
    # cudagraph-tests.md #34 (TestSAC.test_multi_device): one region per device in one function
    def two_devices(a, b):
        return checkpoint(rand_mask, a, use_reentrant=False), checkpoint(rand_mask, b, use_reentrant=False)
    f = torch.compile(two_devices, backend="mini_inductor", dynamic=False)
    for _ in range(3):
        a = torch.randn(512, device="cuda:0", requires_grad=True)
        b = torch.randn(512, device="cuda:1", requires_grad=True)
        out_a, out_b = f(a, b)
        kept_a, kept_b = (out_a != 0).float().clone(), (out_b != 0).float().clone()
        (out_a.sum() + out_b.sum().to("cuda:0")).backward()
        torch.testing.assert_close(a.grad, kept_a)
        torch.testing.assert_close(b.grad, kept_b)
        assert 0.35 < kept_a.mean().item() < 0.65 and 0.35 < kept_b.mean().item() < 0.65
