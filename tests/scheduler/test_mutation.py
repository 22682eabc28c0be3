"""Mutation and aliasing in the scheduler (scheduler.md §6.1-6.4, feature list 7-9, 13, 41).

Graphs come from make_fx without functionalization, so in-place ATen ops reach the scheduler as
extern calls that write into their arguments: a reader scheduled before such a call must stay
before it, even once fused, and readers after it must wait for it.
"""
import torch

from compile_ir import lower_fn
from mini_inductor.codegen import generate
from mini_inductor.caching.modules import load_module
from mini_inductor.lowering.ir import ExternKernel, InputBuffer, Layout, ReinterpretView
from mini_inductor.runtime.interpreter import install as install_interpreter_shims
from mini_inductor.scheduler import schedule
from mini_inductor.scheduler.dependencies import WeakDep
from mini_inductor.scheduler.mutation import aliased_buffers, mutated_buffers

aten = torch.ops.aten
CPU = torch.device("cpu")


def run_mutating(fn, *args):
    """Compile stage by stage; run compiled and eager on fresh copies; outputs and inputs must agree."""
    install_interpreter_shims()
    lowered, cfg = lower_fn(fn, *[a.clone() for a in args])
    sched = schedule(lowered, cfg)
    gen = generate(sched, cfg)
    module, _ = load_module(gen.source, cfg.cache_dir)
    got_args, want_args = [a.clone() for a in args], [a.clone() for a in args]
    got = module.call(list(got_args), dict(lowered.constants))
    want = fn(*want_args)
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    for g, w in zip(got_args, want_args):
        torch.testing.assert_close(g, w)  # inputs mutated exactly as eager mutates them
    return sched, gen


def position(sched, op: str) -> int:
    """Index in the schedule of the group holding an IR node that came from ATen op `op`."""
    (i,) = [i for i, n in enumerate(sched.nodes) if any(o.op == op for o in n.origins)]
    return i


def extern(name, op, args, kwargs=None):
    return ExternKernel(name, Layout(CPU, torch.float32, (4,), (1,)), op, args, kwargs or {}, fallback=True)


def test_schemas_name_the_buffers_a_call_writes_and_the_ones_its_output_aliases():
    x = InputBuffer("x", Layout(CPU, torch.float32, (4,), (1,)), 0)
    idx = InputBuffer("idx", Layout(CPU, torch.int64, (2,), (1,)), 1)
    v = InputBuffer("v", Layout(CPU, torch.float32, (2,), (1,)), 2)
    add_ = extern("buf0", aten.add_.Tensor, (x, 1))
    assert mutated_buffers(add_) == ["x"] and aliased_buffers(add_) == ["x"]
    put = extern("buf1", aten.index_put_.default, (x, [idx], v))
    assert mutated_buffers(put) == ["x"] and aliased_buffers(put) == ["x"]
    view = ReinterpretView(x, Layout(CPU, torch.float32, (2,), (2,)))
    copy_ = extern("buf2", aten.copy_.default, (view, v))
    assert mutated_buffers(copy_) == ["x"]  # a write through a view writes the viewed buffer
    split = extern("buf3", aten.split.Tensor, (x, 2))
    assert mutated_buffers(split) == [] and aliased_buffers(split) == ["x"]
    mm = extern("buf4", aten.mm.default, (x, x))
    assert mutated_buffers(mm) == [] and aliased_buffers(mm) == []


def test_reader_before_an_inplace_add_is_not_fused_past_it():
    def fn(x):
        y = x.sum()
        x.add_(1)
        return y + x
    sched, _ = run_mutating(fn, torch.randn(8))
    total, add_, plus = (position(sched, op) for op in ("aten.sum.dim_IntList", "aten.add_.Tensor", "aten.add.Tensor"))
    assert total < add_ < plus
    mutation = sched.nodes[add_]
    reader = sched.nodes[total]
    assert WeakDep(reader.name, "x_1") in mutation.unmet_dependencies
    assert sched.mutations == {"x_1": [mutation.name]}
    assert sched.aliases == {mutation.name: "x_1"}
    refused = {(d.node1, d.node2): d.reason for d in sched.decisions if not d.fused}
    assert refused[(reader.name, sched.nodes[plus].name)] == "intermediate nodes between node1 & node2"


def test_sum_then_add_then_return_both_keeps_program_order():
    def fn(x):
        y = x.sum()
        x.add_(1)
        return y, x
    sched, gen = run_mutating(fn, torch.randn(8))
    assert position(sched, "aten.sum.dim_IntList") < position(sched, "aten.add_.Tensor")


def test_index_put_on_an_input_waits_for_earlier_readers_and_later_readers_wait_for_it():
    def fn(x, idx, v):
        s = x.sum(0)
        x.index_put_((idx,), v)
        return s, x * 2
    x, idx, v = torch.randn(6, 4), torch.tensor([0, 3]), torch.randn(2, 4)
    sched, _ = run_mutating(fn, x, idx, v)
    put = position(sched, "aten.index_put_.default")
    assert position(sched, "aten.sum.dim_IntList") < put < position(sched, "aten.mul.Tensor")
    assert list(sched.mutations) == ["x_1"] and sched.mutated_inputs() == [0]
    assert f"# x_1 (input 0) mutated by {sched.nodes[put].name}" in sched.describe()


def test_copy_into_an_input_waits_for_the_kernel_that_read_the_old_values():
    def fn(x, y):
        a = x * 2
        x.copy_(y)
        return a + x
    sched, gen = run_mutating(fn, torch.randn(8), torch.randn(8))
    assert position(sched, "aten.mul.Tensor") < position(sched, "aten.copy_.default") < position(sched, "aten.add.Tensor")
    assert len(gen.kernel_names) == 2  # x * 2 may not fuse into a + x: the copy lies between them


def test_write_through_a_view_orders_later_reads_of_the_base():
    def fn(x):
        s = x.sum()
        x[0].add_(1)
        return s + x.sum()  # reads the base x, not the add_'s result
    sched, _ = run_mutating(fn, torch.randn(4, 4))
    add_ = position(sched, "aten.add_.Tensor")
    later = [i for i, n in enumerate(sched.nodes) if WeakDep(sched.nodes[add_].name, "x_1") in n.unmet_dependencies]
    assert later and all(i > add_ for i in later)
    assert sum(1 for i in range(add_) if not sched.nodes[i].is_extern()) == 1  # only the first sum runs before


def test_two_mutations_of_one_input_form_a_version_chain():
    def fn(x):
        a = x + 1
        x.mul_(2)
        b = x + 1
        x.add_(3)
        return a, b, x + 1
    sched, _ = run_mutating(fn, torch.randn(8))
    mul_, add_ = position(sched, "aten.mul_.Tensor"), position(sched, "aten.add_.Tensor")
    assert sched.mutations == {"x_1": [sched.nodes[mul_].name, sched.nodes[add_].name]}
    assert mul_ < add_
    assert f"x_1 (input 0) mutated by {sched.nodes[mul_].name}, {sched.nodes[add_].name}" in sched.describe()


def test_inplace_on_an_intermediate_keeps_its_base_alive_and_unreused_until_the_alias_dies():
    def fn(x):
        t = x * 2
        t.add_(1)           # returns an alias of t's buffer
        u = x.sin() * 3     # a buffer of t's size, allocated while the alias is alive
        return (t * u).sum(0)
    sched, gen = run_mutating(fn, torch.randn(8, 8), )
    (alias, base), = sched.aliases.items()
    last_alias_use = max(i for i, n in enumerate(sched.nodes) if alias in n.used_buffer_names())
    (freed_at,) = [i for i, f in enumerate(sched.frees_after) if base in f]
    assert freed_at == last_alias_use
    assert all(base != old and alias != old for old, _ in gen.reused)


def test_dead_reader_of_a_mutated_input_is_removed_without_breaking_the_order():
    def fn(x):
        x.sum()  # nobody reads it: removed, and the WeakDep to it goes with it
        x.add_(1)
        return x * 2
    sched, _ = run_mutating(fn, torch.randn(8))
    assert len(sched.removed) == 1
    names = {n.name for n in sched.nodes}
    assert all(d.name in names for n in sched.nodes for d in n.unmet_dependencies)
