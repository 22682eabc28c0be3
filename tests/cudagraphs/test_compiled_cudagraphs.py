"""CUDA-graph trees under torch.compile: compiled partitions run from recorded graphs and match eager."""
import copy
import gc
import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mini_inductor
from cg_helpers import in_pool
from mini_inductor.runtime.cudagraphs.utils import pool_segments

pytestmark = pytest.mark.gpu


def stats():
    return mini_inductor.cudagraphs.stats(0)


def compiled(fn, **options):
    return torch.compile(fn, backend="mini_inductor", dynamic=False, options=options or None)


class MLP(nn.Module):
    def __init__(self, d=64, layers=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        for lin in self.layers:
            x = F.silu(lin(x))
        return self.norm(x)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.fc(x.mean((2, 3)))


class Block(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def test_inference_records_once_then_replays_and_matches_eager():
    m = MLP().cuda()
    cm = compiled(m)
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(8, 64, device="cuda")
            torch.testing.assert_close(cm(x), m(x), atol=1e-4, rtol=1e-4)
    s = stats()
    assert s["warmups"] == 1 and s["recordings"] == 1 and s["replays"] == 4


@pytest.mark.parametrize("make,shape,steps", [(MLP, (8, 64), 5), (ConvNet, (4, 3, 8, 8), 5), (Block, (2, 16, 32), 4)],
                         ids=["mlp", "convnet_batchnorm", "transformer_block"])
def test_training_loop_losses_and_grads_match_eager(make, shape, steps):
    torch.manual_seed(0)
    model = make().cuda()
    ref = copy.deepcopy(model)
    cm = compiled(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for _ in range(steps):
        x = torch.randn(*shape, device="cuda")
        loss = cm(x).square().mean()
        loss.backward()
        ref_loss = ref(x).square().mean()
        ref_loss.backward()
        torch.testing.assert_close(loss, ref_loss, atol=1e-4, rtol=1e-4)
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=n)
        opt.step(), ref_opt.step()
        opt.zero_grad(), ref_opt.zero_grad()
    for b, rb in zip(model.buffers(), ref.buffers()):
        torch.testing.assert_close(b, rb, atol=1e-4, rtol=1e-4)   # batch-norm running stats updated in place
    s = stats()
    assert s["recordings"] >= 2 and s["replays"] >= 2 and s["skips"] == 0


def _drop_grads(*models) -> None:
    for m in models:
        for p in m.parameters():
            p.grad = None


def _backward_both(cm, ref, d: int = 32) -> None:
    """One backward of the sum of `cm` (compiled) and of `ref` (eager) on the same random batch of 8."""
    x = torch.randn(8, d, device="cuda")
    cm(x).sum().backward()
    ref(x).sum().backward()


def _mlp_pair(layers: int, adopt: bool):
    """An MLP on the GPU (seed 0), its eager copy, and it compiled with gradients adopted or not."""
    torch.manual_seed(0)
    model = MLP(32, layers).cuda()
    return model, copy.deepcopy(model), compiled(model, cudagraph_adopt_gradients=adopt)


ADOPT = {"cudagraph_adopt_gradients": True}
both_gradient_modes = pytest.mark.parametrize("adopt", [False, True], ids=["copied_out", "adopted"])


@both_gradient_modes
def test_gradient_accumulation_without_zero_grad_matches_eager(adopt):
    model, ref, cm = _mlp_pair(2, adopt=adopt)
    for _ in range(4):   # .grad accumulates: replay outputs must never become .grad themselves
        x = torch.randn(4, 32, device="cuda")
        cm(x).sum().backward()
        ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)


def _accumulate_two_micro_batches(model, steps=5, adopt=False):
    """The usual accumulation loop: grads set to None, then two backwards per optimizer step."""
    ref = copy.deepcopy(model)
    cm = compiled(model, cudagraph_adopt_gradients=adopt)
    for _ in range(steps):
        _drop_grads(model, ref)
        for _ in range(2):
            x = torch.randn(8, model.d_in, device="cuda")
            cm(x).sum().backward()
            ref(x).sum().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    return model


@both_gradient_modes
def test_accumulation_after_grads_set_to_none_matches_eager_and_grads_stay_out_of_the_pool(adopt):
    # replayed gradients used to become `.grad` in pool memory (1-D ones: bias, norm weight), which the
    # next micro-batch's replay overwrote before autograd added to it
    torch.manual_seed(0)
    model = MLP(32, 2).cuda()
    model.d_in = 32
    _accumulate_two_micro_batches(model, adopt=adopt)
    assert stats()["replays"] >= 8
    assert not [n for n, p in model.named_parameters() if in_pool(p.grad)]


def _train_steps(model, ref, xs, **options):
    """SGD steps of `model` compiled and of `ref` eagerly over `xs`, grads set to None each step."""
    cm = compiled(model, **options)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    for x in xs:
        for m, o in ((cm, opt), (ref, ref_opt)):
            o.zero_grad(set_to_none=True)
            m(x).square().mean().backward()
            o.step()
    return cm


def test_replayed_parameter_gradients_become_grad_in_the_pool_and_nothing_is_copied():
    # AccumulateGrad adopts a replay's parameter gradients where the graph wrote them (as Inductor
    # lets it): no copy per parameter, no batched copy out of the pool, in the usual loop
    torch.manual_seed(0)
    model = MLP(32, 3).cuda()
    ref = copy.deepcopy(model)
    xs = [torch.randn(8, 32, device="cuda") for _ in range(6)]
    cm = _train_steps(model, ref, xs[:5], **ADOPT)
    params = list(model.parameters())
    _drop_grads(model, ref)
    cm(xs[5]).square().mean().backward()
    ref(xs[5]).square().mean().backward()
    assert [n for n, p in model.named_parameters() if not in_pool(p.grad)] == []   # adopted, not copied
    assert len({p.grad.untyped_storage().data_ptr() for p in params}) == len(params)
    for p, q in zip(params, ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
    s = stats()
    assert s["replays"] >= 6 and s["gradients_moved_out"] == 0   # every step dropped its gradients


def test_without_adoption_parameter_gradients_are_moved_out_in_one_batched_copy():
    torch.manual_seed(0)
    model = MLP(32, 3).cuda()
    ref = copy.deepcopy(model)
    xs = [torch.randn(8, 32, device="cuda") for _ in range(6)]
    cm = _train_steps(model, ref, xs[:5], cudagraph_adopt_gradients=False)
    params = list(model.parameters())
    _drop_grads(model, ref)
    cm(xs[5]).square().mean().backward()
    ref(xs[5]).square().mean().backward()
    assert len({p.grad.untyped_storage().data_ptr() for p in params}) == 1   # the batched buffer's views
    assert not [n for n, p in model.named_parameters() if in_pool(p.grad)]
    for p, q in zip(params, ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
    assert stats()["replays"] >= 6


def test_gradients_and_views_kept_after_zero_grad_move_out_of_the_pool_with_their_values(caplog):
    # last step's `.grad` (and a view of one) kept by the user after setting the parameters' to None:
    # no parameter leads to them, so a scan of Python's objects finds them, said in a warning
    model, ref, cm = _mlp_pair(2, adopt=True)
    held = None
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for step in range(5):
            _drop_grads(model, ref)
            _backward_both(cm, ref)
            if held is not None:
                grads, view, expected = held
                for g, e in zip(grads, expected):
                    assert not in_pool(g)
                    torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
                assert not in_pool(view)
                torch.testing.assert_close(view, expected[0][1:], atol=1e-4, rtol=1e-4)
            held = ([p.grad for p in model.parameters()], model.layers[0].weight.grad[1:],
                    [q.grad.clone() for q in ref.parameters()])
    assert stats()["replays"] >= 4 and stats()["gradients_moved_out"] >= 3 * len(held[0])
    assert "scan of Python's objects" in caplog.text


def test_a_recordings_gradients_held_at_another_models_step_move_out_together_without_a_warning(caplog):
    # session 39, on the H200: the last step of a recording kept its gradients as `.grad` when another
    # compiled model's step ended the path; a scan of Python's objects ran for each of them (4 s for 24
    # gradients) and warned, though it found no one but the parameters. Now one batched copy, no warning.
    model, ref, cm = _mlp_pair(2, adopt=True)
    _, _, other = _mlp_pair(2, adopt=True)
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for _ in range(2):   # a warmup, then the recording whose gradients stay held
            _drop_grads(model, ref)
            _backward_both(cm, ref)
        assert stats()["recordings"] >= 2 and stats()["replays"] == 0
        assert all(in_pool(p.grad) for p in model.parameters())   # adopted where the recording wrote them
        other(torch.randn(8, 32, device="cuda")).sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert not [g for g in grads if in_pool(g)]
    assert len({g.untyped_storage().data_ptr() for g in grads}) == 1   # one buffer, one batched copy
    assert stats()["gradients_moved_out"] == len(grads)
    for g, q in zip(grads, ref.parameters()):
        torch.testing.assert_close(g, q.grad, atol=1e-4, rtol=1e-4)
    assert "scan of Python's objects" not in caplog.text


def test_a_gradient_a_hook_kept_is_not_what_later_micro_batches_accumulate_into():
    # session 31's review: a gradient autograd may adopt as `.grad` must not be the tensor a hook kept
    # (eager copies it then), or the next micro-batch adds into the user's logged tensor
    model, ref, cm = _mlp_pair(2, adopt=True)
    logs = {id(m): [] for m in (model, ref)}
    for m in (model, ref):
        m.layers[0].bias.register_hook(lambda g, key=id(m): logs[key].append(g))
    for _ in range(4):
        _drop_grads(model, ref)
        for _ in range(2):
            _backward_both(cm, ref)
        torch.testing.assert_close(model.layers[0].bias.grad, ref.layers[0].bias.grad, atol=1e-4, rtol=1e-4)
    assert len(logs[id(model)]) == 8
    for got, want in zip(logs[id(model)], logs[id(ref)]):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert stats()["replays"] >= 8


@both_gradient_modes
def test_gradients_from_autograd_grad_kept_across_steps_keep_their_values(adopt):
    model, ref, cm = _mlp_pair(2, adopt=adopt)
    kept = []
    for _ in range(4):
        x = torch.randn(8, 32, device="cuda")
        got = torch.autograd.grad(cm(x).sum(), list(model.parameters()))
        want = torch.autograd.grad(ref(x).sum(), list(ref.parameters()))
        kept.append((got, want))
    for got, want in kept:   # every step's, read after the last one's replay
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
    assert stats()["replays"] >= 2


class CatWeights(nn.Module):
    """Two weights used as one: their gradients are two views of one backward buffer (made by the
    wrapper, outside the graphed partition, on the GPU)."""

    def __init__(self, d=32):
        super().__init__()
        self.d_in = d
        self.w1 = nn.Parameter(torch.randn(d, d) / d)
        self.w2 = nn.Parameter(torch.randn(d, d) / d)

    def forward(self, x):
        return F.linear(x, torch.cat([self.w1, self.w2])).relu()


@both_gradient_modes
def test_accumulation_of_gradients_sharing_one_buffer_matches_eager(adopt):
    torch.manual_seed(0)
    model = _accumulate_two_micro_batches(CatWeights().cuda(), adopt=adopt)
    assert stats()["replays"] >= 8
    assert not [n for n, p in model.named_parameters() if in_pool(p.grad)]


@both_gradient_modes
def test_gradients_held_from_the_last_step_keep_their_values(adopt):
    model, ref, cm = _mlp_pair(2, adopt=adopt)
    held = None
    for _ in range(5):
        _drop_grads(model, ref)
        _backward_both(cm, ref)
        if held is not None:   # last step's grads, read after this step's replay
            for h, r in zip(*held):
                torch.testing.assert_close(h, r, atol=1e-4, rtol=1e-4)
        held = [p.grad for p in model.parameters()], [q.grad.clone() for q in ref.parameters()]
    assert stats()["replays"] >= 4


def test_overwritten_output_error_names_the_source_line():
    f = compiled(lambda x: (x * 2).sin())
    y1 = f(torch.randn(16, device="cuda"))
    f(torch.randn(16, device="cuda"))
    with pytest.raises(RuntimeError, match="overwritten by a subsequent run") as e:
        print(y1)
    assert "test_compiled_cudagraphs.py" in str(e.value) and "(x * 2).sin()" in str(e.value)


def test_mark_step_makes_consecutive_forwards_new_iterations():
    m = MLP(32, 2).cuda()
    cm = compiled(m)
    for _ in range(5):   # training mode, no backward: without mark_step the path would never end
        mini_inductor.mark_step()
        x = torch.randn(4, 32, device="cuda")
        out = cm(x)
        torch.testing.assert_close(out, m(x), atol=1e-4, rtol=1e-4)
    assert stats()["replays"] >= 2


def test_forward_of_second_module_is_a_child_when_backward_is_pending():
    m1, m2 = nn.Linear(16, 16).cuda(), nn.Linear(16, 16).cuda()
    c1, c2 = compiled(m1), compiled(m2)
    for _ in range(4):
        x = torch.randn(4, 16, device="cuda")
        c2(c1(x)).sum().backward()
        ref = m2(m1(x))
        assert ref is not None
    shape = mini_inductor.cudagraphs.get_manager(0).tree_shape()
    roots = [name for name in shape if name.startswith("forward")]
    assert len(roots) == 1 and shape[roots[0]][0] >= 3   # m2's forward and both backwards hang below m1's
    assert not stats()["pending_backward"]


def test_backward_that_never_runs_does_not_wedge_the_tree():
    m = nn.Linear(8, 8).cuda()
    cm = compiled(m)
    for i in range(5):
        mini_inductor.mark_step()
        out = cm(torch.randn(2, 8, device="cuda"))
        if i % 2 == 0:
            out.sum().backward()
    torch.testing.assert_close(cm(torch.ones(2, 8, device="cuda")), m(torch.ones(2, 8, device="cuda")))


def test_graph_break_chain_runs_as_parent_and_child():
    def fn(x):
        y = x.sin() * 2
        torch._dynamo.graph_break()
        return y.cos() + 1
    f = compiled(fn)
    for _ in range(4):
        x = torch.randn(32, device="cuda")
        torch.testing.assert_close(f(x), fn(x))
    shape = mini_inductor.cudagraphs.get_manager(0).tree_shape()
    assert list(shape.values()) == [[1]]
    assert stats()["recorded_non_static_inputs"] == 1   # the second graph reads the first's output in place


def test_cpu_op_in_the_middle_splits_into_graphed_partitions():
    def fn(x):
        a = x.sin() + 1
        n = torch.nonzero(a > 1.2).shape[0]
        return a * 2, (a.cos() + n)
    f = compiled(fn)
    for _ in range(4):
        x = torch.randn(64, device="cuda")
        for got, want in zip(f(x), fn(x)):
            torch.testing.assert_close(got, want)
    assert stats()["recordings"] >= 1 and stats()["replays"] >= 1


def test_cudagraphs_option_off_and_no_cudagraphs_mode_run_without_trees():
    f = compiled(lambda x: x.exp() + 1, cudagraphs=False)
    for _ in range(3):
        x = torch.randn(8, device="cuda")
        torch.testing.assert_close(f(x), x.exp() + 1)
    g = torch.compile(lambda x: x.exp() + 2, backend="mini_inductor", mode="max-autotune-no-cudagraphs")
    x = torch.randn(8, device="cuda")
    torch.testing.assert_close(g(x), x.exp() + 2)
    assert mini_inductor.cudagraphs.get_manager(0) is None


def test_reduce_overhead_mode_is_accepted_and_graphs():
    f = torch.compile(lambda x: x.tanh() * 3, backend="mini_inductor", mode="reduce-overhead")
    for _ in range(4):
        x = torch.randn(8, device="cuda")
        torch.testing.assert_close(f(x), x.tanh() * 3)
    assert stats()["replays"] == 2


def test_user_input_mutation_is_applied_every_iteration():
    def fn(x, y):
        x.add_(y)
        return x * 2
    f = compiled(fn)
    x = torch.zeros(8, device="cuda")
    for i in range(5):
        y = torch.ones(8, device="cuda")
        out = f(x, y)
        assert x[0].item() == i + 1 and out[0].item() == 2 * (i + 1)


def test_parameter_aliasing_output_shares_the_parameter_storage():
    lin = nn.Linear(4, 4).cuda()

    def fn(x):
        return lin.weight.t(), lin(x)
    f = compiled(fn)
    with torch.no_grad():
        for _ in range(4):
            wt, y = f(torch.randn(2, 4, device="cuda"))
            assert wt.untyped_storage().data_ptr() == lin.weight.untyped_storage().data_ptr()


def test_each_shape_gets_its_own_recording_and_revisits_replay():
    f = compiled(lambda x: x.relu() + 1)
    for n in [8, 16, 8, 16, 8, 16, 8, 16]:
        x = torch.randn(n, device="cuda")
        torch.testing.assert_close(f(x), x.relu() + 1)
    s = stats()
    assert s["recordings"] == 2 and s["replays"] == 4


def test_seeded_random_ops_reproduce_across_warmup_record_replay():
    f = compiled(lambda x: x + torch.rand_like(x))
    outs = []
    for _ in range(4):
        torch.manual_seed(123)
        outs.append(f(torch.zeros(1000, device="cuda")).clone())
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0])
    assert 0.4 < outs[0].mean().item() < 0.6


def test_reset_after_compiled_training_leaves_no_pool_memory():
    model = MLP(32, 2).cuda()
    cm = compiled(model)
    for _ in range(3):
        cm(torch.randn(4, 32, device="cuda")).sum().backward()
    pool = mini_inductor.cudagraphs.get_manager(0).pool
    model.zero_grad(set_to_none=True)
    del cm
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    assert mini_inductor.cudagraphs.get_manager(0) is None
    assert pool_segments(pool) == 0


def test_same_input_tensor_each_call_is_not_copied():
    f = compiled(lambda x: (x * x).sum(-1))
    x = torch.randn(64, 256, device="cuda")
    for i in range(5):
        x.normal_()
        torch.testing.assert_close(f(x), (x * x).sum(-1))
    assert stats()["recorded_non_static_inputs"] == 0


def test_many_shapes_warn_once_with_the_remedies(caplog):
    f = compiled(lambda x: x * 2, cudagraph_dynamic_shape_warn_limit=2)
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for n in [4, 5, 6, 7, 8, 4]:
            x = torch.randn(n, device="cuda")
            torch.testing.assert_close(f(x), x * 2)
    msgs = [r.getMessage() for r in caplog.records if "distinct sizes" in r.getMessage()]
    assert len(msgs) == 1 and "observed 3 distinct sizes" in msgs[0] and "a) padding inputs" in msgs[0]
    assert "b) options=" in msgs[0] and "to silence this warning" in msgs[0]


def test_cpu_scalar_tensor_input_is_correct_across_replays():
    f = compiled(lambda x, s: x * s + 1)
    for i in range(4):
        x = torch.randn(16, device="cuda")
        s = torch.tensor(float(i))          # a 0-dim CPU tensor, new value each call
        torch.testing.assert_close(f(x, s), x * s + 1)


def test_item_graph_break_gives_correct_results_under_graphs():
    def fn(x):
        k = (x > 0).sum().item()
        return x * k
    f = compiled(fn)
    for _ in range(4):
        x = torch.randn(32, device="cuda")
        torch.testing.assert_close(f(x), fn(x))


def test_autocast_outputs_are_not_kept_by_the_cast_cache():
    lin = nn.Linear(16, 16).cuda()
    f = compiled(lambda x: lin(x).relu())
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(8, 16, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = f(x)
                torch.testing.assert_close(out.float(), lin(x).relu().float(), atol=3e-2, rtol=3e-2)


def test_inputs_made_on_a_user_stream_are_seen_by_warmup_record_and_replay():
    f = compiled(lambda x: x * 3 + 1)
    side = torch.cuda.Stream()
    for _ in range(4):
        with torch.cuda.stream(side):
            x = torch.randn(1 << 16, device="cuda")   # written on the user's side stream
            out = f(x)                                # called from that stream
        side.synchronize()
        torch.testing.assert_close(out, x * 3 + 1)


def test_hooks_on_a_replayed_output_do_not_carry_over_to_the_next_iteration():
    lin = nn.Linear(8, 8).cuda()
    cm = compiled(lin)
    calls = []
    for i in range(5):
        out = cm(torch.randn(4, 8, device="cuda"))
        if i % 2 == 0:
            out.register_hook(lambda g: calls.append(1))
        out.sum().backward()
    assert len(calls) == 3   # only the iterations that registered one


def test_a_hook_registers_on_a_reused_output_object_after_one_was_dropped():
    """FSDP2 registers a pre-backward hook on every block's output: the reused output object must
    take a new hook (its hooks were once reset to a plain dict, which `register_hook` cannot weakref)."""
    lin = nn.Linear(8, 8).cuda()
    cm = compiled(lin)
    calls = []
    for _ in range(4):
        out = cm(torch.randn(4, 8, device="cuda"))
        out.register_hook(lambda g: calls.append(1))
        out.sum().backward()
        del out   # the next replay hands back the same output object
    assert len(calls) == 4


class TwoGraphs(nn.Module):
    """Two compiled graphs per step (a graph break between the blocks): two backward nodes on a path."""

    def __init__(self, d=32):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        x = F.silu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(x)


@both_gradient_modes
def test_accumulating_across_two_graphs_matches_eager_and_stops_recording(adopt):
    # review, session 38: gradients moved out at a checkpoint made the next child's recording see
    # them dead, so it could never replay while `.grad` held new ones (a recording every step)
    torch.manual_seed(0)
    model = TwoGraphs().cuda()
    ref = copy.deepcopy(model)
    cm = compiled(model, cudagraph_adopt_gradients=adopt)
    recordings = []
    for step in range(8):
        if step % 2 == 0:
            _drop_grads(model, ref)
        _backward_both(cm, ref)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
        recordings.append(stats()["recordings"])
    assert recordings[-1] == recordings[-3], recordings   # the last steps record nothing new


def test_a_view_of_grad_kept_while_accumulating_stays_a_view_of_it():
    # review, session 38: `.grad` and a view of it moved out one by one became two copies, and
    # accumulation into `.grad` no longer showed in the view
    model, ref, cm = _mlp_pair(2, adopt=True)
    view = None
    for _ in range(4):
        _backward_both(cm, ref)
        if view is None:
            view = model.layers[0].weight.grad.view(-1)
    w = model.layers[0].weight.grad
    assert view.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    torch.testing.assert_close(view, w.view(-1))
    torch.testing.assert_close(w, ref.layers[0].weight.grad, atol=1e-4, rtol=1e-4)


@both_gradient_modes
def test_the_tutorial_loop_zero_grad_after_the_forward_matches_eager(adopt):
    # forward, zero_grad, backward, step: last step's `.grad` is still held when the next forward
    # ends the path, so adopted gradients move out each step (in one batched copy)
    model, ref, cm = _mlp_pair(3, adopt=adopt)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    for _ in range(6):
        x = torch.randn(8, 32, device="cuda")
        for m, o in ((cm, opt), (ref, ref_opt)):
            loss = m(x).square().mean()
            o.zero_grad()
            loss.backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5)
    assert stats()["replays"] >= 6


@both_gradient_modes
def test_a_compiled_function_scaling_grads_in_place_matches_eager(adopt):
    # review, session 38: a function that writes the adopted gradients in place, recorded after the
    # path's end moved them out of the pool, must not write a pool copy instead
    model, ref, cm = _mlp_pair(2, adopt=adopt)

    def scale(ps):
        for p in ps:
            p.grad.mul_(0.5)
    cscale = compiled(scale, cudagraph_adopt_gradients=adopt)
    for _ in range(5):
        _drop_grads(model, ref)
        _backward_both(cm, ref)
        cscale(list(model.parameters()))
        scale(list(ref.parameters()))
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
