"""Partition-aware scheduling: independent cudagraph-safe and unsafe work is moved apart so that the
safe nodes form as few partitions (CUDA graphs) as the dependencies allow (cudagraph-tests.md #39).

On the CPU the generated Triton kernels (run by the interpreter) are the safe nodes and ATen calls on
the CPU are unsafe, the same split a CUDA graph sees between GPU kernels and CPU ops.
"""
import logging

import pytest
import torch

from compile_ir import run_fn
from mini_inductor.lowering.ir import ExternKernel
from mini_inductor.scheduler.partition import count_runs, reorder_for_partitions

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="CPU kernels under the interpreter; a GPU machine leaves CPU ops to ATen")
aten = torch.ops.aten


def graphed(sched) -> int:
    return sum(1 for p in sched.partitions if p.safe and p.has_kernels)


def both(fn, *args):
    """The schedule without and with the reorder; each compiled, run and checked against eager."""
    before, _, _ = run_fn(fn, *args, reorder_for_partitions=False)
    after, gen, _ = run_fn(fn, *args)
    return before, after, gen


def gpu_cpu_gpu_cpu(x, y, z, w):
    x1 = (x + 1).sum(-1)       # safe
    y1 = y @ w                 # unsafe (CPU mm)
    z1 = (z * 2).amax(0)       # safe, reads nothing of y1
    y2 = y1 @ w                # unsafe
    return x1, y2, z1


def test_independent_cpu_and_gpu_chains_form_one_graphed_partition(caplog):
    args = torch.randn(8, 16), torch.randn(4, 4), torch.randn(6, 5), torch.randn(4, 4)
    with caplog.at_level(logging.DEBUG, logger="mini_inductor.schedule"):
        before, after, gen = both(gpu_cpu_gpu_cpu, *args)
    assert [p.safe for p in before.partitions] == [True, False, True, False] and before.partition_moves == []
    assert [p.safe for p in after.partitions] == [True, False] and gen.partition_functions == ["partition_0"]
    (move,) = after.partition_moves
    amax = next(n.name for n in after.nodes if any(o.op == "aten.amax.default" for o in n.origins))
    first_mm = before.partitions[1].nodes[0]
    assert move.node == amax and move.overtook == (first_mm,) and move.count == 1 and move.safe
    assert "2 → 1 graphed partitions" in move.reason
    assert f"# reorder for partitions: moved {amax} before {first_mm}" in after.describe()
    assert f"moved {amax} before {first_mm}" in caplog.text
    assert "reorder for partitions moved 1 nodes (2 → 1 graphed partitions)" in caplog.text


def five_chains(a, b, c, d, e, w):
    a1 = (a.sin() + 1).sum(0)          # safe chain A
    b1 = a1.unsqueeze(0) @ w           # unsafe chain B: needs A
    c1 = (c * 3).amax(-1)              # safe chain C
    d1 = (d @ w) @ w                   # unsafe chain D, independent
    e1 = (e.exp() - 1).sum(-1)         # safe chain E
    return b1, c1, d1, e1


def test_interleaved_chains_with_a_cpu_chain_that_needs_a_gpu_chain_give_one_graph():
    w = torch.randn(4, 4)
    args = torch.randn(5, 4), torch.randn(1), torch.randn(3, 7), torch.randn(2, 4), torch.randn(6, 9), w
    before, after, _ = both(five_chains, *args)
    assert graphed(before) == 3
    # every safe chain first (B waits for A), then the CPU chains, in their own order
    assert [p.safe for p in after.partitions] == [True, False]
    unsafe = after.partitions[1].nodes
    assert unsafe == [n for p in before.partitions if not p.safe for n in p.nodes]


def hoist_me(x, w):
    s = x.sin().sum(-1)                # safe
    m = w @ w                          # unsafe, reads only graph inputs
    return (m + 1).sum(0) * s.sum()    # safe, needs both


def test_unsafe_op_without_dependencies_is_hoisted_to_the_front():
    before, after, _ = both(hoist_me, torch.randn(8, 4), torch.randn(4, 4))
    assert [p.safe for p in before.partitions] == [True, False, True]
    assert [p.safe for p in after.partitions] == [False, True]
    (move,) = after.partition_moves
    assert not move.safe and move.reason.startswith("unsafe, depends on none of them")


def chain(x, w):
    return ((x.sin() @ w).cos() @ w).sum()


def test_a_dependent_chain_is_not_reordered():
    before, after, _ = both(chain, torch.randn(4, 4), torch.randn(4, 4))
    assert [p.safe for p in after.partitions] == [p.safe for p in before.partitions] == [True, False, True, False, True]
    assert after.partition_moves == [] and [n.name for n in after.nodes] == [n.name for n in before.nodes]


def read_then_mutate(x, y, w):
    old = (x * 2).sum(0)               # safe: must read x before the in-place add
    x.add_(1)                          # unsafe (an ATen call on the CPU) that writes x
    new = (x * 3).sum(0)               # safe: must read x after it
    return old, new, y @ w             # an independent unsafe node the reorder may move


def test_mutation_ordering_deps_hold_across_the_reorder():
    from test_mutation import run_mutating
    x, y, w = torch.randn(4, 5), torch.randn(3, 4), torch.randn(4, 4)
    sched, _ = run_mutating(read_then_mutate, x, y, w)   # outputs and the mutated x match eager
    names = [n.name for n in sched.nodes]
    add_ = next(i for i, n in enumerate(sched.nodes) if any(o.op == "aten.add_.Tensor" for o in n.origins))
    kernels = [i for i, n in enumerate(sched.nodes) if not n.is_extern()]
    assert len(kernels) == 2 and kernels[0] < add_ < kernels[1], names
    # the reorder ran (the independent mm joined the add_) but could not merge the two kernels
    assert [m.node for m in sched.partition_moves] == [sched.nodes[add_ + 1].name] and graphed(sched) == 2


class Stub:
    """A scheduler node with just what the reorder reads."""

    def __init__(self, name, deps=(), unsafe=False):
        from mini_inductor.scheduler.dependencies import StarDep
        self.name = name
        self.unmet_dependencies = {StarDep(d) for d in deps}
        self.node = ExternKernel(name, None, aten.nonzero.default, (), {}, fallback=True,
                                 device=torch.device("cuda")) if unsafe else None

    def is_extern(self):
        return self.node is not None

    def get_nodes(self):
        return [self]

    def get_names(self):
        return {self.name}


def test_unsafe_nodes_keep_their_relative_order_and_every_dependency_holds():
    # u1 could run first (no deps) but u0 came before it: unsafe nodes may sync or draw host RNG
    nodes = [Stub("s0"), Stub("u0", ["s0"], True), Stub("s1"), Stub("u1", unsafe=True), Stub("s2", ["u0"]),
             Stub("s3", ["s1"]), Stub("u2", ["s3"], True), Stub("s4", ["u2", "u1"])]
    order, moves = reorder_for_partitions(nodes)
    names = [n.name for n in order]
    position = {n: i for i, n in enumerate(names)}
    for n in nodes:
        for d in n.unmet_dependencies:
            assert position[d.name] < position[n.name], names
    assert [n for n in names if n.startswith("u")] == ["u0", "u1", "u2"]
    assert count_runs([not n.startswith("u") for n in names]) < count_runs([not n.name.startswith("u") for n in nodes])
    assert {m.node for m in moves} and all(position[o] > position[m.node] for m in moves for o in m.overtook)


def test_counting_runs():
    assert count_runs([True, False, True, True, False]) == (2, 2)
    assert count_runs([False]) == (0, 1) and count_runs([]) == (0, 0)


def test_a_long_alternating_graph_is_reordered_quickly_and_its_moves_stay_short():
    import time
    nodes = []
    for i in range(4000):   # a chain of safe nodes, each followed by an unsafe node that reads it
        nodes.append(Stub(f"u{i}", [f"s{i - 1}"], True) if i % 2 else Stub(f"s{i}", [f"s{i - 2}"] if i >= 2 else []))
    start = time.perf_counter()
    order, moves = reorder_for_partitions(nodes)
    assert time.perf_counter() - start < 2.0
    kinds = [not n.name.startswith("u") for n in order]
    assert count_runs(kinds) == (1, 1) and len(moves) == 1999
    assert max(len(m.overtook) for m in moves) == 8 and moves[-1].count == 1999
    assert str(moves[-1]).endswith("and 1991 more: cudagraph-safe, depends on none of them "
                                   "(2000 → 1 graphed partitions)")
