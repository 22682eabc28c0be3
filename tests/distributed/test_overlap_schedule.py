"""The scheduler's overlap pass (distributed/overlap.py) on one rank: collectives issued as soon as
their inputs exist, waits as late as their readers allow, collectives in program order, and the
storage a collective reads not handed to another buffer before its wait."""
import torch

from compile_ir import generate_fn, run_fn, schedule_fn
from mini_inductor.distributed.overlap import collective_spans

c10d = torch.ops._c10d_functional


def _kinds(sched) -> list[str]:
    """Each scheduled node as "collective:<op>", "wait" or "kernel"."""
    out = []
    for node in sched.nodes:
        buf = getattr(node, "node", None)
        name = type(buf).__name__
        if name == "CollectiveKernel":
            out.append("collective:" + buf.op_name.split(".")[1])
        elif name == "WaitKernel":
            out.append("wait")
        else:
            out.append("kernel")
    return out


def test_a_collective_is_issued_before_independent_kernels_and_waited_for_after_them(one_rank_group):
    def f(x, w):
        a = c10d.all_reduce(torch.relu(x), "sum", one_rank_group)
        b = (w.sin() * 2).sum(0)              # reads nothing the collective writes
        c = torch.cos(w) + 1
        return c10d.wait_tensor(a) + b, c
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    sched = schedule_fn(f, x, w)
    kinds = _kinds(sched)
    issue, wait = kinds.index("collective:all_reduce"), kinds.index("wait")
    assert issue == 1                                      # right after relu, its input
    assert kinds[issue + 1:wait].count("kernel") >= 2      # sin·sum and cos run while it is in flight
    # the partition reorder had put the kernels first (one graph for them); the collective moved back up
    assert [(m.node, m.kind, m.count) for m in sched.overlap_moves] == [(sched.nodes[issue].name, "issue early", 2)]
    described = sched.describe()
    assert f"# overlap: issued {sched.nodes[issue].name} (all_reduce) before" in described
    assert "# collective: all_reduce" in described and "nodes overlap it" in described
    run_fn(f, x, w)   # and it computes what eager does


def test_collectives_keep_program_order_even_when_a_later_one_is_ready_first(one_rank_group):
    def f(x, w):
        late_input = torch.relu(x).exp()
        first = c10d.all_reduce(late_input, "sum", one_rank_group)
        second = c10d.all_reduce(w * 2, "sum", one_rank_group)   # its input is ready from the start
        return c10d.wait_tensor(first) + c10d.wait_tensor(second)
    sched = schedule_fn(f, torch.randn(8, 8), torch.randn(8, 8))
    # every rank must issue them in the same order: the program's, whatever is ready first
    sent = [n.node.args[0].name for n in sched.nodes if type(n.node).__name__ == "CollectiveKernel"]
    producer = {name: n for n in sched.nodes for name in n.get_names()}
    assert len(sent) == 2
    assert "exp" in str(producer[sent[0]].origins) and "mul" in str(producer[sent[1]].origins)


def test_what_a_collective_sends_lives_until_its_wait_and_its_result_is_the_waits(one_rank_group):
    # The transfer reads the input until the wait: the input dies at the wait, not at the collective,
    # so the memory plan cannot hand its storage to a buffer made in between. The wait returns the
    # collective's output itself: one storage group. (On the CPU a collective is always outside the
    # kernels' partitions, where no buffer could take the storage anyway; test_distributed_gpu.py
    # runs the case where one could.)
    def f(x, y):
        sent = x @ x
        gathered = c10d.all_gather_into_tensor(sent, 1, one_rank_group)
        other = torch.sin(y) * 3
        return c10d.wait_tensor(gathered) + 1, other
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    sched, gen = generate_fn(f, x, y)
    at = {type(n.node).__name__: i for i, n in enumerate(sched.nodes) if n.is_extern()}
    collective = sched.nodes[at["CollectiveKernel"]].node
    wait = sched.nodes[at["WaitKernel"]].node
    sent = collective.args[0].name
    assert sent in sched.frees_after[at["WaitKernel"]]
    assert not any(sent in names for names in sched.frees_after[:at["WaitKernel"]])
    assert sched.aliases == {wait.name: collective.name}
    assert not any(old in (sent, collective.name, wait.name) for old, _ in gen.reused)
    run_fn(f, x, y)


def test_the_fusion_report_shows_each_collective_and_what_runs_while_it_is_in_flight(one_rank_group):
    import torch._dynamo
    from mini_inductor.debug import trace as debug_trace
    from mini_inductor.debug.html import graph_section
    from mini_inductor.debug.report import graph_report

    def f(x, w):
        a = c10d.all_reduce(torch.relu(x), "sum", one_rank_group)
        b = torch.cos(w).sum()                # a kernel of its own (another size than relu's)
        return c10d.wait_tensor(a) * b
    torch._dynamo.reset()
    with debug_trace.capture() as traces:
        torch.compile(f, backend="mini_inductor")(torch.randn(8, 8), torch.randn(4, 32))
    (trace,) = traces
    report = graph_report(trace)
    (span,) = report["overlap"]["collectives"]
    assert span["op"] == "all_reduce" and len(span["overlapped"]) == 1   # the cos·sum kernel
    assert report["overlap"]["moves"] and report["overlap"]["moves"][0].startswith("issued")
    page = graph_section(report)
    assert "Collectives and overlap" in page and span["overlapped"][0] in page
    # and explain's text report has the same table
    from mini_inductor import explain
    torch._dynamo.reset()
    text = str(explain(f, torch.randn(8, 8), torch.randn(4, 32)))
    assert "Collectives (issued early, waited for late)" in text and "all_reduce" in text


def test_the_memory_budget_stops_a_collective_from_being_issued_across_more_memory_in_flight(one_rank_group):
    """Two all-reduces of 16 KiB each: with room for one result in flight the second is not issued
    while the first is in flight (the stop is named); without a budget both are hoisted."""
    def f(x, y, w):
        a = c10d.wait_tensor(c10d.all_reduce(torch.relu(x), "sum", one_rank_group)) * 2
        b = c10d.wait_tensor(c10d.all_reduce(torch.relu(y), "sum", one_rank_group)) * 3
        c = (w.sin() * 2).sum(0)
        return a + c, b * torch.cos(w)
    args = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64, 64)
    free = schedule_fn(f, *args, overlap_memory_budget=None)
    tight = schedule_fn(f, *args, overlap_memory_budget=20_000)
    assert not any(m.budget_stop for m in free.overlap_moves)
    stopped = [m for m in tight.overlap_moves if m.budget_stop]
    assert stopped, [str(m) for m in tight.overlap_moves]
    assert "the memory budget stopped it at" in str(stopped[0])

    def widest(sched) -> int:   # the most collective results in flight at once, in bytes
        spans = [(r["issued_at"], r["waited_at"]) for r in collective_spans(sched.nodes)]
        return max(sum(64 * 64 * 4 for s, e in spans if s < k < e) for k in range(len(sched.nodes)))
    assert widest(free) == 2 * 64 * 64 * 4 and widest(tight) <= 20_000
    run_fn(f, *args, overlap_memory_budget=20_000)
