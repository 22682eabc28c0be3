"""The CUDA-graph tree driven directly: plain functions wrapped as tree functions, real graphs and pool.

Generations advance with mini_inductor.mark_step() here (no Dynamo in the loop), as after a user's
first mark_step call.
"""
import gc
import logging
import warnings

import pytest
import torch

import mini_inductor
from cg_helpers import in_pool, manager, stats, tree_fn
from mini_inductor.runtime.cudagraphs.utils import pool_segments

pytestmark = pytest.mark.gpu


def step():
    mini_inductor.mark_step()


def test_first_call_warms_up_second_records_then_replays():
    f = tree_fn(lambda x: (x.sin() * 2,))
    for i in range(5):
        step()
        x = torch.randn(64, device="cuda")
        (y,) = f([x])
        torch.testing.assert_close(y, x.sin() * 2)
    s = stats()
    assert (s["warmups"], s["recordings"], s["replays"]) == (1, 1, 3)
    assert manager().graph_ids == 1 and manager().warmup_ids == -1


def test_skip_warmup_records_on_first_call():
    f = tree_fn(lambda x: (x + 1,), cudagraph_skip_warmup=True)
    (y,) = f([torch.ones(4, device="cuda")])
    assert y.tolist() == [2.0] * 4
    assert stats()["warmups"] == 0 and stats()["recordings"] == 1


def test_force_warmup_never_records():
    f = tree_fn(lambda x: (x + 1,), cudagraph_force_warmup=True)
    for _ in range(4):
        step()
        (y,) = f([torch.ones(4, device="cuda")])
        assert y.tolist() == [2.0] * 4
    assert stats()["recordings"] == 0 and stats()["warmups"] == 4


def test_broadcast_input_with_stride_zero_replays_correctly():
    f = tree_fn(lambda x: (x * 3,))
    for _ in range(4):
        step()
        base = torch.randn(1, 8, device="cuda")
        x = base.expand(5, 8)
        (y,) = f([x])
        torch.testing.assert_close(y, x * 3)


def test_static_input_used_in_place_and_its_changes_are_seen():
    w = torch.randn(8, device="cuda")
    f = tree_fn(lambda w, x: (w * x,), static=(0,))
    for i in range(4):
        step()
        w.add_(1.0)  # in place between calls: the replay reads the parameter's memory
        x = torch.randn(8, device="cuda")
        (y,) = f([w, x])
        torch.testing.assert_close(y, w * x)
    assert stats()["recorded_non_static_inputs"] == 1   # only x was copied


def test_moved_static_input_rerecords_and_stays_correct():
    f = tree_fn(lambda w, x: (w + x,), static=(0,))
    x = torch.randn(8, device="cuda")
    for w in [torch.randn(8, device="cuda") for _ in range(3)] * 2:
        step()
        (y,) = f([w, x.clone()])
        torch.testing.assert_close(y, w + x)
    assert manager().num_recordings >= 3


def test_moved_static_input_in_strict_mode_raises_with_pointers():
    f = tree_fn(lambda w, x: (w + x,), static=(0,), cudagraph_rerecord_on_static_change=False)
    w = torch.randn(8, device="cuda")
    for _ in range(3):
        step()
        f([w, torch.randn(8, device="cuda")])
    w2 = torch.randn(8, device="cuda")
    step()
    with pytest.raises(RuntimeError, match="static input data pointer changed") as e:
        f([w2, torch.randn(8, device="cuda")])
    assert "f_in0" in str(e.value) and str(w.data_ptr()) in str(e.value) and str(w2.data_ptr()) in str(e.value)


def test_rerecord_limit_falls_back_without_graphs_and_logs_once(caplog):
    f = tree_fn(lambda w, x: (w + x,), static=(0,), cudagraph_rerecord_limit=2)
    x = torch.randn(8, device="cuda")
    weights = [torch.full((8,), float(i), device="cuda") for i in range(8)]   # eight distinct addresses
    w = torch.zeros(8, device="cuda")
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for i in range(8):
            step()
            w.data = weights[i]        # the same static tensor moved: an unexpected re-record
            (y,) = f([w, x.clone()])
            torch.testing.assert_close(y, w + x)
    msgs = [r.getMessage() for r in caplog.records if "exceeding max re-recording limit" in r.getMessage()]
    assert len(msgs) == 1 and "(=2)" in msgs[0] and "static input data pointer changed" in msgs[0]
    assert stats()["skips"] == 1 and manager().num_fallback_runs >= 1


def test_output_of_one_graph_feeds_the_next_without_a_copy():
    a = tree_fn(lambda x: (x * 2,), "a")
    b = tree_fn(lambda y: (y + 1,), "b")
    for _ in range(4):
        step()
        x = torch.randn(16, device="cuda")
        (y,) = a([x])
        (z,) = b([y])
        del y
        torch.testing.assert_close(z, x * 2 + 1)
    assert manager().tree_shape() == {"a": [1]}     # b is a's child
    assert stats()["recorded_non_static_inputs"] == 1   # only a's x; b reads a's output in place


def test_held_output_forces_a_sibling_and_is_not_corrupted():
    a = tree_fn(lambda x: (x * 2, x * 3), "a")
    b = tree_fn(lambda y: (y * 10,), "b")
    x = torch.ones(1024, device="cuda")   # one input buffer: a's recording never moves
    for _ in range(3):  # steady state with a's second output dropped before b runs
        step()
        y1, y2 = a([x])
        del y2
        b([y1])
    step()
    y1, y2 = a([x])
    held = y2                                   # now held while b runs
    del y2
    (z,) = b([y1])
    torch.testing.assert_close(held, torch.full((1024,), 3.0, device="cuda"))
    torch.testing.assert_close(z, torch.full((1024,), 20.0, device="cuda"))
    root = manager().roots[0][0]
    assert len(root.children[1]) == 2          # b recorded twice under a: one per liveness pattern


def test_all_outputs_dead_ends_the_path_and_next_function_becomes_a_root():
    a = tree_fn(lambda x: (x * 2,), "a")
    b = tree_fn(lambda x: (x + 2,), "b")
    for _ in range(3):
        step()
        a([torch.randn(8, device="cuda")])        # output dropped at once
        (z,) = b([torch.ones(8, device="cuda")])
        assert z.tolist() == [3.0] * 8
    assert manager().tree_shape() == {"a": [0], "b": [0]}


def test_new_generation_frees_and_poisons_recording_outputs():
    f = tree_fn(lambda x: (x.cos(),), traces=["model.py:12 in forward: y = x.cos()"])
    step()
    (y1,) = f([torch.randn(256, device="cuda")])   # warmup output
    step()
    (y2,) = f([torch.randn(256, device="cuda")])   # new generation: y1 freed
    with pytest.raises(RuntimeError, match="overwritten by a subsequent run") as e:
        y1.sum()
    assert "model.py:12 in forward: y = x.cos()" in str(e.value)
    assert "clone the tensor outside of torch.compile()" in str(e.value)
    assert "cudagraph_mark_step_begin" in str(e.value)
    assert manager().live_pool_blocks() == 1        # only y2 holds pool memory
    view = y2[:10]
    step()
    f([torch.randn(256, device="cuda")])
    with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
        view.sum()                                   # a view of a freed output is poisoned too


def test_replay_outputs_are_stable_objects_and_add_no_pool_blocks():
    f = tree_fn(lambda x: (x + 1,))
    outs = []
    for _ in range(5):
        step()
        (y,) = f([torch.randn(32, device="cuda")])
        outs.append(id(y))
        del y
    assert outs[2] == outs[3] == outs[4]           # replays hand back the same tensor object
    gc.collect()
    assert manager().live_pool_blocks() == 0


def test_dropping_every_reference_makes_a_cached_output_dead_without_gc():
    f = tree_fn(lambda x: (x + 1,))
    for _ in range(3):
        step()
        (y,) = f([torch.randn(32, device="cuda")])
    node = manager().current
    ref = node.outputs_refs[0]
    assert ref.alive()
    v = y.view(4, 8)
    del y
    assert ref.alive()              # the view still holds the storage
    del v
    assert not ref.alive()


def test_outputs_aliasing_a_static_input_are_not_pool_managed():
    w = torch.randn(8, 4, device="cuda")
    f = tree_fn(lambda w, x: (w.t(), w[0:2], x * 2), static=(0,))
    for _ in range(4):
        step()
        wt, w2, y = f([w, torch.randn(3, device="cuda")])
        assert wt.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
        assert w2.data_ptr() == w.data_ptr()
    node = manager().current
    assert node.outputs_refs[0] is None and node.outputs_refs[1] is None and node.outputs_refs[2] is not None
    del wt, w2, y
    gc.collect()
    assert manager().live_pool_blocks() == 0


def test_aliased_outputs_of_one_graph_share_one_storage_object():
    def fn(x):
        y = x * 2
        return y, y[1:], y.view(2, -1)
    f = tree_fn(fn)
    for _ in range(4):
        step()
        a, b, c = f([torch.randn(8, device="cuda")])
        assert a.untyped_storage()._cdata == b.untyped_storage()._cdata == c.untyped_storage()._cdata
        torch.testing.assert_close(b, a[1:])


def test_output_aliasing_an_earlier_graphs_output_shares_its_storage():
    a = tree_fn(lambda x: (x * 2,), "a")
    b = tree_fn(lambda y: (y[2:], y.sum()), "b")
    for _ in range(4):
        step()
        (y,) = a([torch.randn(8, device="cuda")])
        tail, s = b([y])
        assert tail.untyped_storage()._cdata == y.untyped_storage()._cdata
        torch.testing.assert_close(s, y.sum())


def test_int_and_none_outputs_are_returned_as_recorded():
    f = tree_fn(lambda x: (x + 1, 7, None))
    for _ in range(4):
        step()
        y, k, n = f([torch.zeros(2, device="cuda")])
        assert k == 7 and n is None and y.tolist() == [1.0, 1.0]


def test_cpu_output_in_a_recording_fails_the_capture_and_the_function_runs_without_graphs():
    f = tree_fn(lambda x: (x.cpu() + 1,), traces=["net.py:3 y = x.cpu()"])
    for _ in range(4):   # warmup (CPU outputs are not tracked), the failed recording, two plain runs
        step()
        (y,) = f([torch.zeros(2, device="cuda")])
        assert y.device.type == "cpu" and y.tolist() == [1.0, 1.0]
    s = stats()
    assert s["recordings"] == 0 and s["skips"] == 1, s
    assert "a failed CUDA graph capture of f" in s["skip_reasons"][0]


def test_mutating_an_input_from_outside_the_pool_runs_without_graphs_and_logs_once(caplog):
    def fn(x):
        x.add_(1)
        return (x * 2,)
    f = tree_fn(fn, mutated=(0,))
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for _ in range(4):
            step()
            x = torch.zeros(4, device="cuda")
            (y,) = f([x])
            assert x.tolist() == [1.0] * 4 and y.tolist() == [2.0] * 4   # the caller's tensor mutated
    msgs = [r.getMessage() for r in caplog.records if "skipping cudagraphs due to mutated inputs" in r.getMessage()]
    assert len(msgs) == 1 and "(1 instances)" in msgs[0] and "Found from" in msgs[0]
    assert stats()["skips"] == 1 and manager().tree_shape() == {}


def test_mutating_an_earlier_graphs_output_is_graphed():
    a = tree_fn(lambda x: (x * 2,), "a")

    def bump(y):
        y.add_(1)
        return (y * 1,)
    b = tree_fn(bump, "b", mutated=(0,))
    x = torch.ones(4, device="cuda")
    for _ in range(4):
        step()
        (y,) = a([x])
        (z,) = b([y])
        assert y.tolist() == [3.0] * 4 and z.tolist() == [3.0] * 4
    assert stats()["skips"] == 0 and manager().num_replays >= 4


def test_mutation_is_decided_per_parent():
    a = tree_fn(lambda x: (x * 2,), "a")

    def bump(y):
        y.add_(1)
        return (y * 1,)
    b = tree_fn(bump, "b", mutated=(0,))
    for _ in range(3):
        step()
        (y,) = a([torch.ones(4, device="cuda")])
        b([y])
    step()
    outside = torch.ones(4, device="cuda")
    (z,) = b([outside])          # a tensor from outside the pool: runs without graphs
    assert outside.tolist() == [2.0] * 4 and z.tolist() == [2.0] * 4
    assert stats()["skips"] == 1


def test_checkpoint_after_replay_restores_pool_to_live_outputs():
    a = tree_fn(lambda x: (x * 2,), "a")
    b = tree_fn(lambda y: (y + 1,), "b")
    c = tree_fn(lambda y: (y - 1,), "c")
    for _ in range(3):
        step()
        (y,) = a([torch.ones(256, device="cuda")])
        b([y])
    before = manager().num_checkpoints
    step()
    (y,) = a([torch.ones(256, device="cuda")])   # replay
    (w,) = c([y])                                 # new function after a replay: checkpoint, then warm up
    assert manager().num_checkpoints == before + 1
    assert w.tolist() == [1.0] * 256
    (w2,) = c([y])  # still the same iteration: the path is warming up
    step()
    (y,) = a([torch.ones(256, device="cuda")])
    (w,) = c([y])                                 # replay of a, then c is recorded: a second checkpoint
    assert manager().num_checkpoints == before + 2
    assert w.tolist() == [1.0] * 256


def test_replay_output_held_through_a_checkpoint_becomes_allocator_owned():
    a = tree_fn(lambda x: (x * 2,), "a")
    c = tree_fn(lambda x: (x + 5,), "c")
    for _ in range(3):
        step()
        (held,) = a([torch.ones(1024, device="cuda")])
    (w,) = c([torch.ones(8, device="cuda")])   # same iteration: checkpoint adopts `held`
    assert held.tolist() == [2.0] * 1024
    del w
    blocks = manager().live_pool_blocks()
    del held
    gc.collect()
    assert manager().live_pool_blocks() == blocks - 1


def test_pending_backward_warning_is_issued_once_per_function():
    f = tree_fn(lambda x: (x * 2,), "fwd", mode="forward")
    mini_inductor.runtime.cudagraphs.trees._MarkStep.counter = 0   # generations from Dynamo: none advance here
    keep = []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        import torch._dynamo.mutation_guard as mg
        for _ in range(5):
            mg.GenerationTracker.generation += 1      # a new top-level compiled call
            keep.append(f([torch.randn(4, device="cuda")])[0])
    msgs = [x for x in w if "Unable to hit fast path of CUDAGraphs because of pending, uninvoked backwards"
            in str(x.message)]
    assert len(msgs) == 1
    assert manager().pending_backward


def test_backward_clears_pending_flag_and_next_call_starts_new_generation():
    fwd = tree_fn(lambda x: (x * 2,), "fwd", mode="forward")
    bwd = tree_fn(lambda g: (g * 2,), "bwd", mode="backward")
    import torch._dynamo.mutation_guard as mg
    for _ in range(4):
        mg.GenerationTracker.generation += 1
        (y,) = fwd([torch.randn(4, device="cuda")])
        assert manager().pending_backward
        bwd([torch.ones(4, device="cuda")])
        assert not manager().pending_backward
    assert manager().tree_shape() == {"fwd": [1]}     # backward recorded as the forward's child


def _two_weight_op(backward, adoptable=()):
    """An autograd Function of two weights whose forward (x * 2 of their sum) and backward
    (`backward(g)`: the two gradients) are functions of the tree; with `adoptable`, the backward notes
    its autograd edges as a compiled backward does."""
    from mini_inductor.runtime.cudagraphs.gradients import current_backward_edges
    from mini_inductor.runtime.cudagraphs.trees import note_gradient_source
    fwd = tree_fn(lambda x: (x * 2,), "fwd", mode="forward")
    bwd = tree_fn(backward, "bwd", mode="backward", adoptable=adoptable)

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, w1, w2):
            return fwd([w1 + w2])[0]

        @staticmethod
        def backward(ctx, g):
            out = tuple(bwd([g.contiguous()]))
            if adoptable:
                note_gradient_source(0, current_backward_edges())
            return out
    return Op


def test_backward_outputs_sharing_memory_are_copied_into_grads_and_accumulate():
    # two gradients that are views of one buffer are rebuilt on every replay (not cached): they are
    # pinned too, so that AccumulateGrad copies them instead of making pool memory the `.grad`
    Op = _two_weight_op(lambda g: tuple(torch.stack([g * 2, g * 3]).unbind(0)))
    import torch._dynamo.mutation_guard as mg
    w1, w2 = (torch.zeros(16, device="cuda", requires_grad=True) for _ in range(2))
    for _ in range(4):
        w1.grad = w2.grad = None
        for scale in (1.0, 3.0):   # two micro-batches with different gradients
            mg.GenerationTracker.generation += 1
            (Op.apply(w1, w2) * scale).sum().backward()
        torch.testing.assert_close(w1.grad, torch.full_like(w1, 2 * 4.0))
        torch.testing.assert_close(w2.grad, torch.full_like(w2, 3 * 4.0))
    assert stats()["replays"] >= 8
    (node,) = [n for n in manager().all_graph_nodes() if n.info.name == "bwd"]
    from mini_inductor.runtime.cudagraphs.nodes import _SAME_GRAPH
    assert [k[0] for k in node.kinds][1] == _SAME_GRAPH and not any(node.cacheable)
    assert not in_pool(w1.grad) and not in_pool(w2.grad)


def test_adopted_backward_outputs_become_grad_in_the_pool_and_move_out_when_still_held():
    # an adoptable gradient is taken by AccumulateGrad as it is (pool memory); one still held when the
    # next iteration starts (the second micro-batch) gets fresh memory first, with its values; so does a
    # view of it kept across
    Op = _two_weight_op(lambda g: (g * 2, g * 3), adoptable=(0, 1))
    import torch._dynamo.mutation_guard as mg
    w1, w2 = (torch.zeros(16, device="cuda", requires_grad=True) for _ in range(2))
    for _ in range(4):
        w1.grad = w2.grad = None
        mg.GenerationTracker.generation += 1
        Op.apply(w1, w2).sum().backward()
        assert in_pool(w1.grad) and in_pool(w2.grad)   # adopted: no copy
        view = w2.grad[3:]
        moved = stats()["gradients_moved_out"]
        mg.GenerationTracker.generation += 1
        (Op.apply(w1, w2) * 3.0).sum().backward()      # moves both out, then adds in place
        assert stats()["gradients_moved_out"] == moved + 3
        assert not in_pool(w1.grad) and not in_pool(w2.grad)
        torch.testing.assert_close(w1.grad, torch.full_like(w1, 2 * 4.0))
        torch.testing.assert_close(w2.grad, torch.full_like(w2, 3 * 4.0))
        assert not in_pool(view)   # moved with it (found by a scan of Python's objects): still its view
        assert view.untyped_storage().data_ptr() == w2.grad.untyped_storage().data_ptr()
        torch.testing.assert_close(view, w2.grad[3:])
    assert stats()["replays"] >= 6
    (node,) = [n for n in manager().all_graph_nodes() if n.info.name == "bwd"]
    assert node.adopted == {0, 1} and not node.pinned


def test_rebuilt_backward_outputs_are_live_while_the_caller_holds_either():
    # the pins of a backward's rebuilt outputs are discounted, a caller's hold on the tensors is not
    fwd = tree_fn(lambda x: (x * 2,), "fwd", mode="forward")
    bwd = tree_fn(lambda g: tuple(torch.stack([g * 2, g * 3]).unbind(0)), "bwd", mode="backward")
    import torch._dynamo.mutation_guard as mg
    for _ in range(4):
        mg.GenerationTracker.generation += 1
        fwd([torch.randn(4, device="cuda")])
        a, b = bwd([torch.ones(4, device="cuda")])
    (node,) = [n for n in manager().all_graph_nodes() if n.info.name == "bwd"]
    assert sorted(node.pinned_rebuilt) == [0, 1] and stats()["replays"] >= 4
    refs = node.outputs_refs
    assert refs[0].alive() and refs[1].alive()
    del a
    assert refs[0].alive() and refs[1].alive()   # b holds their shared memory
    del b
    assert not refs[0].alive() and not refs[1].alive()
    torch.testing.assert_close(node.pinned_rebuilt[1], torch.full((4,), 3.0, device="cuda"))


def test_backward_output_in_a_forward_output_memory_is_copied_into_grads():
    # the backward returns the forward's saved output (pool memory of an earlier node) as a gradient:
    # pinned, it is copied by autograd, so `.grad` neither lives in the pool nor changes with the next
    # forward's replay
    fwd = tree_fn(lambda x: (x * 2,), "fwd", mode="forward")
    bwd = tree_fn(lambda g, y: (y,), "bwd", mode="backward")

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, w, scale):
            (y,) = fwd([w * scale])
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return bwd([g.contiguous(), y])[0], None

    import torch._dynamo.mutation_guard as mg
    w = torch.ones(16, device="cuda", requires_grad=True)
    for _ in range(4):
        w.grad = None
        for scale in (1.0, 3.0):
            mg.GenerationTracker.generation += 1
            Op.apply(w, scale).sum().backward()
        torch.testing.assert_close(w.grad, torch.full_like(w, 2 * 4.0))   # y = 2 * scale * w, summed
    assert stats()["replays"] >= 8
    from mini_inductor.runtime.cudagraphs.nodes import _PRIOR
    (node,) = [n for n in manager().all_graph_nodes() if n.info.name == "bwd"]
    assert node.kinds[0][0] == _PRIOR


def test_reset_tears_down_pool_and_old_functions_fail():
    f = tree_fn(lambda x: (x * 2,))
    for _ in range(3):
        step()
        f([torch.randn(1 << 16, device="cuda")])
    m = manager()
    pool = m.pool
    assert pool_segments(pool) > 0
    mini_inductor.cudagraphs.reset()
    gc.collect()
    torch.cuda.empty_cache()
    assert pool_segments(pool) == 0
    assert mini_inductor.cudagraphs.get_manager(0) is None
    assert mini_inductor.cudagraphs._MarkStep.counter == 0
    with pytest.raises(AssertionError, match="Running CUDAGraph after shutdown"):
        f([torch.randn(4, device="cuda")])


def test_manager_goes_away_when_every_function_is_collected():
    f = tree_fn(lambda x: (x * 2,))
    step()
    f([torch.randn(4, device="cuda")])
    assert mini_inductor.cudagraphs.get_manager(0) is not None
    del f
    gc.collect()
    assert mini_inductor.cudagraphs.get_manager(0) is None


def test_same_input_buffer_every_call_is_read_in_place_without_copy():
    f = tree_fn(lambda x: (x * 2,))
    buf = torch.zeros(1024, device="cuda")   # a serving loop's preallocated input
    for i in range(5):
        step()
        buf.fill_(float(i))
        (y,) = f([buf])
        assert y[0].item() == 2.0 * i
    assert stats()["recorded_non_static_inputs"] == 0
    moved = torch.full((1024,), 7.0, device="cuda")
    step()
    (y,) = f([moved])                       # the buffer moved: re-record with a copy, still correct
    assert y[0].item() == 14.0
    step()
    (y,) = f([torch.full((1024,), 3.0, device="cuda")])
    assert y[0].item() == 6.0


def test_replay_time_invariant_violation_raises():
    a = tree_fn(lambda x: (x * 2,), "a")
    b = tree_fn(lambda y: (y + 1,), "b")
    for _ in range(3):
        step()
        (y,) = a([torch.ones(4, device="cuda")])
        args = [y]
        del y
        b(args)                  # b's input died during recording: it was the last reference
    step()
    (y,) = a([torch.ones(4, device="cuda")])
    node = manager().current.children[1][0]
    keep = y
    with pytest.raises(RuntimeError, match="did not occur during replay"):
        node.check([y])          # y is still held by `keep`: replaying would overwrite it
    del keep


def test_rng_state_is_preserved_by_recording():
    f = tree_fn(lambda x: (x + 1,))
    torch.manual_seed(1)
    for _ in range(3):
        step()
        f([torch.ones(4, device="cuda")])
        state = torch.cuda.get_rng_state()
        expected = torch.rand(3, device="cuda")
        torch.cuda.set_rng_state(state)
        torch.testing.assert_close(torch.rand(3, device="cuda"), expected)


def test_force_sync_option_replays_correctly():
    f = tree_fn(lambda x: (x.exp(),), cudagraph_force_sync=True)
    for _ in range(4):
        step()
        x = torch.randn(8, device="cuda")
        (y,) = f([x])
        torch.testing.assert_close(y, x.exp())


def test_view_of_a_temporary_managed_input_replays_and_shares_its_storage():
    a = tree_fn(lambda x: (x * 2,), "a")
    b = tree_fn(lambda y: (y[2:],), "b")
    for _ in range(4):
        step()
        args = a([torch.arange(8.0, device="cuda")])   # a's output reaches b only through the list
        (tail,) = b(args)
        assert tail.tolist() == [4.0, 6.0, 8.0, 10.0, 12.0, 14.0]
        assert tail.untyped_storage().data_ptr() == tail.data_ptr() - 2 * 4


def test_output_kept_across_replays_is_poisoned_not_silently_overwritten():
    f = tree_fn(lambda x: (x * 2,), traces=["eval.py:7 preds = model(x)"])
    kept = []
    for i in range(5):
        step()
        (y,) = f([torch.full((4,), float(i), device="cuda")])
        kept.append(y)
        assert y.tolist() == [2.0 * i] * 4        # the newest output is always right
    with pytest.raises(RuntimeError, match="overwritten by a subsequent run") as e:
        kept[2].sum()                             # replayed over: raises instead of showing new values
    assert "eval.py:7 preds = model(x)" in str(e.value)


def test_rebinding_the_output_each_call_keeps_values_right():
    f = tree_fn(lambda x: (x + 1,))
    y = None
    for i in range(6):
        step()
        y = f([torch.full((4,), float(i), device="cuda")])[0]   # the old y is still bound during the call
        assert y.tolist() == [i + 1.0] * 4


def test_or_error_option_raises_instead_of_running_without_graphs():
    def fn(x):
        x.add_(1)
        return (x * 2,)
    f = tree_fn(fn, mutated=(0,), cudagraph_or_error=True)
    step()
    with pytest.raises(RuntimeError, match="skipping cudagraphs due to mutated inputs"):
        f([torch.zeros(4, device="cuda")])
