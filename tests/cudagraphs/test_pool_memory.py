"""The CUDA-graph pool's memory (cudagraph-tests.md §5 #6, #7, #20; see TOP40.md): a reset with
outputs alive leaves no pool memory once they die, each new warmup or recording reclaims the older
outputs' memory, and the checkpoint taken before a new recording frees outputs (and their aliases)
that died since, keeps a buffer while any view of it lives, and follows inputs moved out of the pool.
The item number of the spec is in a comment above each group.
"""
import gc

import pytest
import torch
from cg_helpers import compiled, manager, step, tree_fn

import mini_inductor
from mini_inductor.runtime.cudagraphs.utils import pool_blocks, pool_segments

pytestmark = pytest.mark.gpu


# --- #6 teardown ---------------------------------------------------------------------------------

def test_reset_with_outputs_alive_drops_the_manager_and_leaves_no_pool_memory_once_they_die():
    f = compiled(lambda x: x * 2 + 1)
    outs = [f(torch.randn(1 << 16, device="cuda")) for _ in range(4)]   # warmup, recording, replays
    pool = manager().pool
    torch._dynamo.reset()
    assert mini_inductor.cudagraphs.get_manager(0) is None
    del outs, f
    gc.collect()
    torch.cuda.empty_cache()
    assert pool_blocks(pool) == [] and pool_segments(pool) == 0


# --- #7 pool reuse across generations ------------------------------------------------------------

def test_each_new_warmup_or_recording_reclaims_the_older_outputs_pool_memory():
    f = compiled(lambda x: x * 2 + 1)
    y = f(torch.zeros(5, device="cuda"))                   # warmup
    assert manager().live_pool_blocks() == 1
    y = f(torch.zeros(5, device="cuda"))                   # recording: the warmup output is freed
    assert manager().live_pool_blocks() == 1
    y = f(torch.zeros(6, device="cuda"))                   # a new shape: a new root warms up
    assert manager().live_pool_blocks() == 1
    y = f(torch.zeros(6, device="cuda"))                   # and is recorded
    assert manager().live_pool_blocks() == 1
    assert y.tolist() == [1.0] * 6
    del y
    gc.collect()
    assert manager().live_pool_blocks() == 0


# --- #20 checkpoints: tensors dead since recording, inputs moved out of the pool --------------------

def test_output_that_died_before_a_new_recording_is_freed_by_the_checkpoint():
    a = tree_fn(lambda x: (x * 2, x * 3), "a", cudagraph_skip_warmup=True)
    b = tree_fn(lambda y: (y + 1,), "b", cudagraph_skip_warmup=True)
    x = torch.ones(256, device="cuda")
    step()
    a([x])                                       # recorded; both outputs dropped
    step()
    y1, y2 = a([x])                              # replayed
    del y2                                       # dies before b is recorded
    args = [y1]
    del y1
    (z,) = b(args)                               # execution → recording: one checkpoint
    assert manager().num_checkpoints == 1
    assert z.tolist() == [3.0] * 256
    assert manager().live_pool_blocks() == 1     # only b's output: a's dead output was freed
    del z
    gc.collect()
    assert manager().live_pool_blocks() == 0


def test_dead_output_and_its_alias_are_both_freed_by_the_checkpoint():
    def two_and_a_view(x):
        y3 = x * 3
        return x * 2, y3, y3[1:]
    a = tree_fn(two_and_a_view, "a", cudagraph_skip_warmup=True)
    b = tree_fn(lambda y: (y + 1,), "b", cudagraph_skip_warmup=True)
    x = torch.ones(256, device="cuda")
    step()
    a([x])
    step()
    y1, y2, view = a([x])
    del y2, view                                 # an output and its alias die before b is recorded
    args = [y1]
    del y1
    (z,) = b(args)
    assert manager().num_checkpoints == 1 and z.tolist() == [3.0] * 256
    assert manager().live_pool_blocks() == 1
    del z
    gc.collect()
    assert manager().live_pool_blocks() == 0


def test_two_row_views_of_one_buffer_keep_it_until_both_die():
    a = tree_fn(lambda x: (x[0], x[1]), "a", cudagraph_skip_warmup=True)
    b = tree_fn(lambda y: (y * 2,), "b", cudagraph_skip_warmup=True)
    x = torch.randn(2, 64, device="cuda")
    step()
    a([x])
    step()
    r0, r1 = a([x])                              # views of the graph's copy of x
    assert r0.untyped_storage().data_ptr() == r1.untyped_storage().data_ptr()
    assert r1.data_ptr() == r0.data_ptr() + 64 * 4
    (z,) = b([r0])                               # after a replay: one checkpoint
    assert manager().num_checkpoints == 1
    torch.testing.assert_close(z, x[0] * 2)
    torch.testing.assert_close(r1, x[1])
    del z
    gc.collect()
    assert manager().live_pool_blocks() == 1     # the one storage under both views
    del r0
    gc.collect()
    assert manager().live_pool_blocks() == 1
    del r1
    gc.collect()
    assert manager().live_pool_blocks() == 0


def test_input_moved_out_of_the_pool_records_a_new_child_after_a_checkpoint():
    a = tree_fn(lambda x: (x * 2,), "a", cudagraph_skip_warmup=True)
    b = tree_fn(lambda y: (y + 1,), "b", cudagraph_skip_warmup=True)
    x = torch.ones(64, device="cuda")
    step()
    (y,) = a([x])
    (z,) = b([y])                                # b recorded on a's output
    step()
    (y,) = a([x])                                # replay
    (z,) = b([torch.zeros(64, device="cuda")])   # not a pool tensor: a new child
    assert z.tolist() == [1.0] * 64
    assert manager().num_checkpoints == 1
    assert manager().tree_shape() == {"a": [2]}


# --- the pool check (cudagraph_slow_asserts) --------------------------------------------------------

def test_the_pool_check_takes_the_live_outputs_again_after_collecting_reference_cycles():
    # session 37: a cycle (a torch.func.vjp closure in BERT's backward) held a tracked output and
    # untracked pool memory; the slow path collected it, then compared the blocks left with the live
    # set taken before the collection and reported the output as "not allocated in pool"
    from mini_inductor.runtime.cudagraphs.utils import allocating_in_pool, check_pool, is_live

    f = compiled(lambda x: x * 2 + 1)
    y = f(torch.zeros(1 << 12, device="cuda"))          # a warmup output, tracked as live
    mgr = manager()
    refs = [r for level in mgr.current.path_refs for r in level if r is not None]
    assert refs and all(is_live(r) for r in refs)
    gc.disable()
    try:
        with allocating_in_pool(mgr.device, mgr.pool, mgr.stream):
            untracked = torch.empty(1 << 12, device="cuda")
        cycle = [y, untracked]
        cycle.append(cycle)
        del y, untracked, cycle
        assert all(is_live(r) for r in refs)             # held by the uncollected cycle
        check_pool(mgr.device, mgr.pool, refs)
    finally:
        gc.enable()
    assert not any(is_live(r) for r in refs)
    assert manager().live_pool_blocks() == 0
