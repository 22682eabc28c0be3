"""Which collectives a CUDA graph may capture (distributed/policy.py), and what the partitions and the
overlap pass do with the answer. The CUDA half of the rule runs in test_distributed_gpu.py."""
import os
import tempfile

import pytest
import torch
import torch.distributed as dist

from torch.fx.experimental.proxy_tensor import make_fx

from compile_ir import lower_fn, schedule_fn
from mini_inductor import config
from mini_inductor.lowering import lower_graph
from mini_inductor.distributed.overlap import reorder_for_overlap
from mini_inductor.distributed.policy import decide, group_backend
from mini_inductor.errors import LoweringError
from mini_inductor.scheduler import schedule
from mini_inductor.scheduler.partition import cudagraph_unsafe_reason

c10d = torch.ops._c10d_functional
ALL_REDUCE = "_c10d_functional.all_reduce.default"
CUDA = torch.device("cuda", 0)


def test_nccl_collectives_on_cuda_are_captured_and_others_are_not():
    assert decide(ALL_REDUCE, CUDA, "nccl") == ""
    assert decide(ALL_REDUCE, CUDA, "gloo") == f"collective of a gloo process group syncs with the host ({ALL_REDUCE})"
    assert "cannot resolve" in decide(ALL_REDUCE, CUDA, "")
    assert decide(ALL_REDUCE, torch.device("cpu"), "gloo") == f"collective on cpu tensors ({ALL_REDUCE})"


def test_the_backend_of_a_group_is_read_from_the_process_group(one_rank_group):
    assert group_backend(one_rank_group, torch.device("cpu")) == "gloo"
    assert group_backend("no such group", torch.device("cpu")) == ""


def test_a_collective_that_cannot_be_captured_is_a_partition_of_its_own_named_by_its_op(one_rank_group):
    def f(x):
        y = c10d.wait_tensor(c10d.all_reduce(x.relu(), "sum", one_rank_group))
        return y * 2
    sched = schedule_fn(f, torch.randn(8))
    unsafe = [p for p in sched.partitions if not p.safe]
    assert [p.reason for p in unsafe] == [f"collective on cpu tensors ({ALL_REDUCE}); "
                                          "collective on cpu tensors (_c10d_functional.wait_tensor.default)"]
    assert [p.safe for p in sched.partitions] == [True, False, True]


def test_a_collective_a_cuda_graph_may_capture_does_not_move_across_a_node_it_may_not(one_rank_group):
    def f(x, w):
        a = x.relu()
        m = a @ w                      # an extern call on the CPU, never captured, after a
        s = w.sin() * 2
        y = c10d.wait_tensor(c10d.all_reduce(a, "sum", one_rank_group))
        return y + 1, m, s
    lowered, cfg = lower_fn(f, torch.randn(8, 8), torch.randn(8, 8), reorder_for_partitions=False,
                          max_fusion_size=1)
    sched = schedule(lowered, cfg)
    program = sorted(sched.nodes, key=lambda n: n.min_order)
    unsafe = lambda n: cudagraph_unsafe_reason(n) != ""   # noqa: E731

    def collective_at(nodes):
        return next(i for i, n in enumerate(nodes) if type(getattr(n, "node", None)).__name__ == "CollectiveKernel")
    def index_of(nodes, op):
        return next(i for i, n in enumerate(nodes) if any(op in o.op for o in n.origins))
    assert index_of(program, "relu") < index_of(program, "aten.mm") < collective_at(program)
    # on the CPU the collective is never captured: it moves up to its input, across the matmul
    moved, _ = reorder_for_overlap(program, unsafe)
    assert collective_at(moved) == index_of(moved, "relu") + 1
    # as an NCCL collective on CUDA would be captured, it stops below the matmul (one graph, not two)
    for n in program:
        if type(getattr(n, "node", None)).__name__ in ("CollectiveKernel", "WaitKernel"):
            n.node.capture_reason = ""   # what policy.decide answers for NCCL on CUDA
    moved, _ = reorder_for_overlap(program, unsafe)
    assert collective_at(moved) == index_of(moved, "aten.mm") + 1


def test_a_group_passed_as_an_object_is_a_lowering_error_naming_the_node(one_rank_group):
    # what a graph holds when a collective is given its ProcessGroup (schema `Any group_name`)
    gm = make_fx(lambda x: c10d.wait_tensor(c10d.all_reduce(x * 2, "sum", one_rank_group)))(torch.randn(8))
    node = next(n for n in gm.graph.nodes if n.target is c10d.all_reduce.default)
    node.args = (*node.args[:2], dist.group.WORLD)
    with pytest.raises(LoweringError, match=r"_c10d_functional.all_reduce.default \(node %all_reduce\) in graph "
                                            r"test_0: the process group is a ProcessGroup, not a group name"):
        lower_graph(gm, [torch.randn(8)], "test_0", config.current())


def test_the_graph_cache_key_holds_the_backend_of_each_collectives_group(one_rank_group):
    from mini_inductor.caching.graph_cache import graph_key
    gm = make_fx(lambda x: c10d.wait_tensor(c10d.all_reduce(x * 2, "sum", one_rank_group)))(torch.randn(8))
    node = next(n for n in gm.graph.nodes if n.target is c10d.all_reduce.default)
    from mini_inductor.distributed.policy import graph_key_part
    assert graph_key_part(node) == f"group {one_rank_group} on cpu: gloo"
    before = graph_key(gm, [torch.randn(8)], config.current())
    node.meta["val"] = torch.empty(8, device="meta")    # as if on another device: another backend to look up
    assert graph_key(gm, [torch.randn(8)], config.current()) != before


def test_destroy_process_group_frees_the_cuda_graph_trees_while_the_group_is_alive(one_rank_group, monkeypatch):
    # with NCCL kernels captured in a live CUDA graph, destroy_process_group() waits forever; the real
    # hang and its fix run on two GPUs (test_distributed_gpu.py); here, the order and that it destroys
    from torch.distributed import distributed_c10d
    from mini_inductor.runtime.cudagraphs import trees
    monkeypatch.setattr(trees, "_teardown_guarded", False)
    monkeypatch.setattr(distributed_c10d, "destroy_process_group", distributed_c10d.destroy_process_group)
    monkeypatch.setattr(dist, "destroy_process_group", dist.destroy_process_group)
    seen, release = [], trees._release_graphs
    monkeypatch.setattr(trees, "_release_graphs", lambda: (seen.append(dist.is_initialized()), release()))
    trees.release_before_process_group_teardown()   # what a recording in this process does
    trees.release_before_process_group_teardown()   # once only
    assert dist.destroy_process_group.mini_inductor_releases_graphs
    assert dist.destroy_process_group is distributed_c10d.destroy_process_group
    dist.destroy_process_group()
    assert seen == [True] and not dist.is_initialized()
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)   # the fixture destroys one
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def test_without_a_process_group_nothing_is_wrapped(monkeypatch):
    from mini_inductor.runtime.cudagraphs import trees
    monkeypatch.setattr(trees, "_teardown_guarded", False)
    original = dist.destroy_process_group
    trees.release_before_process_group_teardown()
    assert dist.destroy_process_group is original
