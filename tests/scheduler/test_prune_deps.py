"""Ordering deps made redundant by fusion are pruned between rounds (scheduler.md §4.3, §12.1, feature 39).

A WeakDep only orders two nodes (a mutation after an earlier reader of its storage); it is not a
MemoryDep, so vertical fusion refuses a pair while the consumer holds one on the producer ("memory
deps did not match"). Once the WeakDep's target shares a kernel with a node the consumer reads for
real, that real edge orders them and the WeakDep goes: the next round fuses the pair.

Only ATen calls mutate in mini_inductor today, so no graph gives one kernel node a WeakDep on another
by itself; these tests add the WeakDep that a kernel writing `x` in place would get (after the kernel
that read `x` before it), through the same hook the scheduler uses for mutation deps.
"""
import pytest
import torch

from compile_ir import lower_fn
from mini_inductor.codegen import generate
from mini_inductor.caching.modules import load_module
from mini_inductor.runtime.interpreter import install as install_interpreter_shims
from mini_inductor.scheduler import schedule
from mini_inductor.scheduler import scheduler as scheduler_module
from mini_inductor.scheduler.dependencies import WeakDep
from mini_inductor.scheduler.nodes import FusedSchedulerNode
from mini_inductor.scheduler.scheduler import prune_redundant_deps


def by_op(nodes, op: str):
    (node,) = [n for n in nodes if any(o.op == op for o in n.node.origins)]
    return node


def f(x):
    p = x * 2 + 1              # P: read by R and by M, so a buffer of its own
    r = (p + x).cos()          # R: reads x
    m = p.sigmoid()            # M: as if it then wrote x in place, it waits for R
    return r, m


@pytest.fixture
def ordered_after_reader(monkeypatch):
    """M gets WeakDep(R) on top of its real read of P, as mutation.py gives a mutation after a reader."""
    added = []
    real_add = scheduler_module.add_mutation_deps

    def add_mutation_deps(nodes, groups):
        versions = real_add(nodes, groups)
        reader, mutator = by_op(nodes, "aten.cos.default"), by_op(nodes, "aten.sigmoid.default")
        mutator.unmet_dependencies.add(WeakDep(reader.name, "x_1"))
        added.append((reader.name, mutator.name))
        return versions
    monkeypatch.setattr(scheduler_module, "add_mutation_deps", add_mutation_deps)
    return added


def compile_and_run(fn, *args):
    install_interpreter_shims()
    lowered, cfg = lower_fn(fn, *args)
    sched = schedule(lowered, cfg)
    gen = generate(sched, cfg)
    module, _ = load_module(gen.source, cfg.cache_dir)
    outs = module.call(list(args), dict(lowered.constants))
    for got, want in zip(outs, fn(*args)):
        torch.testing.assert_close(got, want)
    return sched, gen


def test_fusion_blocked_by_a_weak_dep_in_round_one_goes_through_after_pruning(ordered_after_reader):
    sched, gen = compile_and_run(f, torch.randn(4, 8))
    ((reader, mutator),) = ordered_after_reader
    refused = [d for d in sched.decisions if not d.fused and d.node2 == mutator]
    assert all(d.round == 0 for d in refused)
    # P alone may not take M (R must run in between); P+R may not either while M holds WeakDep(R)
    (blocked,) = [d for d in refused if d.reason == "memory deps did not match"]
    assert reader in blocked.node1.split("_")          # the container holding R, the WeakDep's target
    fused = [d for d in sched.decisions if d.fused and d.node2 == mutator]
    assert [d.round for d in fused] == [1]              # the next round, once the dep is pruned
    assert len(sched.nodes) == 1 and len(gen.kernel_names) == 1
    # the order the WeakDep asked for holds inside the kernel
    names = [m.name for m in sched.nodes[0].get_nodes()]
    assert names.index(reader) < names.index(mutator)


def test_without_the_weak_dep_the_same_graph_fuses_in_round_one():
    sched, gen = compile_and_run(f, torch.randn(4, 8))
    assert len(gen.kernel_names) == 1
    assert all(d.round == 0 for d in sched.decisions if d.fused)


def test_a_weak_dep_still_needed_for_ordering_is_kept():
    # M waits for R, and nothing else orders them: R is not in a container M reads
    x = torch.randn(4, 8)
    sched = schedule(*lower_fn(lambda x: (x.cos(), x.sin()), x))
    a, b = sched.nodes if len(sched.nodes) == 2 else sched.nodes[0].get_nodes()
    a.unmet_dependencies, b.unmet_dependencies = set(), {WeakDep(a.name)}
    node_of = {a.name: a, b.name: b}
    assert prune_redundant_deps([a, b], node_of) == 0
    assert b.unmet_dependencies == {WeakDep(a.name)}


def test_weak_deps_into_the_own_container_or_to_removed_buffers_are_pruned_from_members_too():
    x = torch.randn(4, 8)
    lowered, cfg = lower_fn(lambda x: ((x * 2).cos(), (x * 2).sin()), x)
    sched = schedule(lowered, cfg)
    members = sched.nodes[0].get_nodes()
    assert len(sched.nodes) == 1 and len(members) >= 2
    first, last = members[0], members[-1]
    last.unmet_dependencies = last.unmet_dependencies | {WeakDep(first.name), WeakDep("buf_removed")}
    fused = FusedSchedulerNode(members)
    assert WeakDep("buf_removed") in fused.unmet_dependencies
    node_of = {m.name: fused for m in members}
    assert prune_redundant_deps([fused], node_of) == 1          # the removed buffer's (the own one was never
    assert not any(isinstance(d, WeakDep) for d in fused.unmet_dependencies)   # collected by the container)
    assert not any(isinstance(d, WeakDep) for d in last.unmet_dependencies)    # nor comes back on re-fusion
    assert prune_redundant_deps([fused], node_of) == 0


def test_real_mutation_orderings_still_hold_after_pruning():
    # an ATen call writing x: the reader before it and the reader after it stay on their sides
    def g(x):
        before = x.sin() * 2
        x.add_(1)
        after = x.cos() + before
        return before, after
    x = torch.randn(4, 8)
    install_interpreter_shims()
    lowered, cfg = lower_fn(g, x.clone())
    sched = schedule(lowered, cfg)
    module, _ = load_module(generate(sched, cfg).source, cfg.cache_dir)
    got_x, want_x = x.clone(), x.clone()
    got = module.call([got_x], dict(lowered.constants))
    want = g(want_x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(got_x, want_x)
