"""Every refusal reason we can reach, the cycle check, dead-node elimination and the decision record
(scheduler.md §12-14). Graphs come from small functions traced with make_fx and lowered directly."""
import logging

import torch

from compile_ir import run_fn, schedule_fn
from mini_inductor.scheduler.fusion import can_fuse, will_fusion_create_cycle
from mini_inductor.scheduler.nodes import FusedSchedulerNode


def refusals(sched):
    return {(d.node1, d.node2): d.reason for d in sched.decisions if not d.fused}


def reasons(sched):
    return set(refusals(sched).values())


def kernels(sched):
    return sum(1 for n in sched.nodes if not n.is_extern())


def test_extern_nodes_never_fuse_on_either_side():
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    sched = schedule_fn(lambda x, w: torch.relu((x.sin() * 2) @ w), x, w)
    assert {"node1 is extern or nop", "node2 is extern or nop"} <= reasons(sched)


def test_nodes_reading_one_buffer_at_different_indices_share_no_data():
    x = torch.randn(16, 16)
    sched = schedule_fn(lambda x: (x * 2, (x.t() * 3).contiguous()), x)
    assert refusals(sched)[("buf0", "buf1")] == ("no shared data accessed alike: each accesses x_1 in a "
                                                 "different order (a transposed or broadcast read)")
    assert kernels(sched) == 2


def test_max_fusion_size_option_caps_kernel_members():
    x = torch.randn(8, 16)
    sched = schedule_fn(lambda x: torch.softmax(x, -1), x, max_fusion_size=1)
    assert "exceeds max fusion" in reasons(sched)
    assert kernels(sched) == 4
    assert kernels(schedule_fn(lambda x: torch.softmax(x, -1), x, max_fusion_size=2)) == 2


def test_reductions_over_different_ranges_do_not_fuse():
    x = torch.randn(8, 16)
    sched = schedule_fn(lambda x: (x.sum(-1), x.sum()), x)
    assert "numel/rnumel mismatch (reduce)" in reasons(sched)


def test_pointwise_nodes_over_different_ranges_do_not_fuse():
    x, y = torch.randn(8), torch.randn(8, 16)
    sched = schedule_fn(lambda x, y: (x.exp() + 1, x[:, None].exp() * y), x, y)
    assert "numel/rnumel mismatch (non-reduce)" in reasons(sched)


def test_pointwise_over_neither_the_reduction_input_nor_its_output_does_not_fuse():
    x, w = torch.randn(8, 16), torch.randn(8, 4)
    sched = schedule_fn(lambda x, w: x.sum(-1)[:, None] * w, x, w)
    assert "nodes numel incompatibility" in reasons(sched)
    assert kernels(sched) == 2


def test_consumer_reading_the_producer_also_transposed_does_not_fuse():
    def f(x):
        y = x * 2 + 1
        return y, y + y.t()   # one read matches the producer's write, the transposed one does not
    sched = schedule_fn(f, torch.randn(16, 16))
    assert "memory deps did not match" in reasons(sched)
    assert kernels(sched) == 2


def test_consumer_reading_the_producer_only_transposed_shares_no_data():
    def f(x):
        y = x * 2 + 1
        return y, (y.t() + 1).contiguous()
    sched = schedule_fn(f, torch.randn(16, 16))
    assert refusals(sched)[("buf0", "buf1")].startswith("no shared data accessed alike: each accesses buf0 ")
    assert kernels(sched) == 2


def test_column_sum_of_a_pointwise_result_names_the_buffer_it_reads_in_another_order():
    # a backward's bias gradient: the refusal must not say the pair shares nothing, as it reads buf0
    def f(x):
        y = x.sin() * 2
        return y, y.sum(0)
    sched = schedule_fn(f, torch.randn(64, 16))
    assert refusals(sched)[("buf0", "buf1")] == ("no shared data accessed alike: each accesses buf0 in a "
                                                 "different order (a transposed or broadcast read)")


def test_pair_without_a_common_buffer_shares_no_data():
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    n1, n2 = schedule_fn(lambda x, y: (x.sum(-1), y.sum(-1)), x, y).nodes[:2]
    assert can_fuse(n1, n2, max_fusion_size=64, node_of={}, buffer_bytes={}) == "no shared data"


def test_producer_and_consumer_with_an_extern_call_between_them_do_not_fuse():
    def f(x, w):
        a = x.sin() * 2
        return a + a @ w
    sched = schedule_fn(f, torch.randn(16, 16), torch.randn(16, 16))
    assert "intermediate nodes between node1 & node2" in reasons(sched)


def test_horizontal_pair_far_apart_in_the_order_would_increase_peak_memory():
    def f(x, y, w):
        first = x.sum(-1)
        for _ in range(70):
            y = y @ w
        return first, y, x.amax(-1)
    sched = schedule_fn(f, torch.randn(8, 16), torch.randn(4, 4), torch.randn(4, 4))
    assert "will increase peak memory" in reasons(sched)
    assert kernels(sched) == 2


def test_backwards_pair_is_refused():
    def f(x):
        a = x.sin() * 2
        return a, a.sum(-1)
    sched = schedule_fn(f, torch.randn(8, 16), max_fusion_size=1)
    producer, consumer = sched.nodes
    node_of = {n.name: n for n in sched.nodes}
    assert can_fuse(consumer, producer, max_fusion_size=64, node_of=node_of, buffer_bytes={}) == \
        "node1 must go before node2"
    assert can_fuse(producer, producer, max_fusion_size=64, node_of=node_of, buffer_bytes={}) == "same node"


def cycle_graph(x):
    n1 = x.sin() * 2          # buf0
    a = n1.cos() * 3          # buf1 = A, depends on n1
    b = x.tan() * 4           # buf2 = B, independent of n1
    n2 = b.exp() * x          # buf3, depends on B and shares x with n1
    return n1, a, b, n2


def test_fusion_through_another_fused_node_would_create_a_cycle():
    sched = schedule_fn(cycle_graph, torch.randn(8, 16), max_fusion_size=1)
    n1, a, b, n2 = sched.nodes
    ab = FusedSchedulerNode.fuse(a, b)
    node_of = {"buf0": n1, "buf1": ab, "buf2": ab, "buf3": n2}
    # n1 and n2 are independent, so can_fuse sees a horizontal pair; n1 → A·B → n2 closes a cycle
    assert not (n1.bits & n2.ancestor_bits)
    assert will_fusion_create_cycle(n1, n2, node_of)
    assert not will_fusion_create_cycle(n1, a, {"buf0": n1, "buf1": a, "buf2": b, "buf3": n2})


def test_cycle_search_from_the_fewer_fused_members_outside_the_ancestors_finds_it_too():
    def f(x):
        n1 = x.sin() * 2
        a = n1.cos() * 3
        z = x.cos() * 5
        b = z.tan() * 4
        return n1, a, z, b, b.exp() * x
    sched = schedule_fn(f, torch.randn(8, 16), max_fusion_size=1)
    n1, a, z, b, n2 = sched.nodes
    ab = FusedSchedulerNode.fuse(a, b)
    node_of = {n1.name: n1, a.name: ab, z.name: z, b.name: ab, n2.name: n2}
    # z and b are fused ancestors of n2, a is the one fused member outside: search starts from a
    assert will_fusion_create_cycle(n1, n2, node_of, fused_bits=ab.bits | z.bits)
    assert not will_fusion_create_cycle(n1, n2, {**node_of, a.name: a, b.name: b}, fused_bits=z.bits)


def test_cycle_graph_compiles_and_matches_eager():
    sched, gen, _ = run_fn(cycle_graph, torch.randn(8, 16))
    assert kernels(sched) == 1


def test_unused_buffer_is_removed_as_dead():
    def f(x):
        x.sum(-1)  # traced, lowered, never used
        return x * 2
    sched = schedule_fn(f, torch.randn(8, 16))
    assert sched.removed == ["buf0"]
    assert [n.name for n in sched.nodes] == ["buf1"]


def test_every_candidate_is_recorded_once_with_score_or_reason():
    x = torch.randn(8, 16)
    sched = schedule_fn(lambda x: torch.softmax(x, -1), x, max_fusion_size=1)
    keys = [(d.node1, d.node2, d.reason) for d in sched.decisions]
    assert len(keys) == len(set(keys))
    assert all(d.score is not None for d in sched.decisions)
    fused = schedule_fn(lambda x: torch.softmax(x, -1), x)
    assert [d.fused for d in fused.decisions].count(True) == 3
    assert all(d.score[2] > 0 for d in fused.decisions if d.fused)  # every fusion saved memory


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_fusion_log_prints_rounds_fusions_and_refusals():
    log = logging.getLogger("mini_inductor.fusion")
    handler, level = Collect(), log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        x, w = torch.randn(8, 16), torch.randn(16, 16)
        schedule_fn(lambda x, w: torch.relu(torch.softmax(x, -1) @ w), x, w)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    text = "\n".join(handler.messages)
    assert "attempting fusion (1/10)" in text and "found " in text and "fusion complete" in text
    assert "fusing buf" in text
    assert "cannot fuse buf" in text and ": node1 is extern or nop" in text
    assert len(handler.messages) == len(set(handler.messages))
