"""The lifecycle verifier over planned wrapper lines, and extern (ATen) outputs in the reuse pool.

verify_lifecycle is on for every compile in the test suite (tests/conftest.py sets
MINI_INDUCTOR_VERIFY_MEMORY_PLAN=1), so every e2e graph is checked; the tests here show that it
catches each kind of flaw, and run it over the built-in example models.
"""
import weakref

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from compile_ir import generate_fn, run_fn
from mini_inductor import config
from mini_inductor.lowering.decompositions import decomposition_table
from mini_inductor.codegen import generate
from mini_inductor.caching.modules import load_module
from mini_inductor.codegen.memory_plan import plan_reuse, verify_lifecycle
from mini_inductor.codegen.wrapper_ir import (AllocateLine, ExternCallLine, FreeLine, KernelCallLine, PartitionCallLine,
                                              ReturnLine, ReuseLine)
from mini_inductor.examples import EXAMPLES
from mini_inductor.errors import CodegenError
from mini_inductor.lowering import lower_graph
from mini_inductor.lowering.ir import InputBuffer, Layout
from mini_inductor.runtime.interpreter import install as install_interpreter_shims
from mini_inductor.scheduler import partition, schedule

aten = torch.ops.aten
F32 = torch.float32
CPU = torch.device("cpu")


def alloc(name, n=4):
    return AllocateLine(name, (n,), (1,), F32, CPU)


def kernel(*args):
    return KernelCallLine("k", list(args), 4, None, {"XBLOCK": 4}, 4, "")


def problems(lines, inputs=("x",), outputs=(), never_reuse=()):
    return verify_lifecycle(lines, inputs=set(inputs), outputs=set(outputs), never_reuse=set(never_reuse))


def test_a_sound_plan_has_no_problems():
    lines = [alloc("buf0"), kernel("x", "buf0"), alloc("buf1"), kernel("buf0", "buf1"), FreeLine(["buf0"]),
             alloc("buf2"), kernel("buf1", "buf2"), FreeLine(["buf1"]), ReturnLine(["buf2"])]
    planned = plan_reuse(lines, outputs={"buf2"}, never_reuse=set())
    assert any(isinstance(ln, ReuseLine) for ln in planned)
    assert problems(planned, outputs={"buf2"}) == []


def test_use_before_allocation_is_caught():
    assert problems([kernel("x", "buf0"), alloc("buf0")]) == ["line 0 (KernelCallLine) k uses buf0 before it is allocated"]
    assert problems([alloc("buf0"), alloc("buf0")]) == ["line 1 (AllocateLine) defines buf0, which is already live"]


def test_use_after_free_is_caught():
    found = problems([alloc("buf0"), kernel("x", "buf0"), FreeLine(["buf0"]), kernel("buf0")])
    assert found == ["line 3 (KernelCallLine) k uses buf0 after it was freed"]


def test_double_free_is_caught():
    found = problems([alloc("buf0"), kernel("x", "buf0"), FreeLine(["buf0"]), FreeLine(["buf0"])])
    assert found == ["line 3 (FreeLine) frees buf0 again (it was freed)"]


def test_freeing_or_reusing_a_scope_output_is_caught():
    assert problems([alloc("buf0"), FreeLine(["buf0"]), ReturnLine(["buf0"])], outputs={"buf0"})[0] == \
        "line 1 (FreeLine) freed buf0, an output of this scope"
    free = FreeLine(["buf0"], reused={"buf0"})
    lines = [alloc("buf0"), free, ReuseLine("buf0", alloc("buf1"), (4,), (1,)), ReturnLine(["buf1"])]
    assert any("an output of this scope" in p for p in problems(lines, outputs={"buf0", "buf1"}))


def test_use_of_a_buffer_after_its_storage_went_to_a_reuse_is_caught():
    free = FreeLine(["buf0"], reused={"buf0"})
    lines = [alloc("buf0"), free, ReuseLine("buf0", alloc("buf1"), (4,), (1,)), kernel("buf0", "buf1")]
    assert problems(lines) == ["line 3 (KernelCallLine) k uses buf0 after it was reused by buf1"]


def test_reuse_without_a_free_or_of_an_aliased_buffer_is_caught():
    lines = [alloc("buf0"), ReuseLine("buf0", alloc("buf1"), (4,), (1,))]
    assert problems(lines) == ["line 1 (ReuseLine) reuses buf0, which was not freed first"]
    free = FreeLine(["buf0"], reused={"buf0"})
    lines = [alloc("buf0"), free, ReuseLine("buf0", alloc("buf1"), (4,), (1,))]
    assert problems(lines, never_reuse={"buf0"}) == [
        "line 2 (ReuseLine) reuses buf0, whose storage another name may alias"]


def test_in_place_write_must_feed_the_next_kernel():
    lines = [alloc("buf0"), kernel("x", "buf0"), ReuseLine("buf0", alloc("buf1"), (4,), (1,), inplace=True),
             kernel("x", "buf2")]
    assert problems(lines, inputs={"x", "buf2"}) == [
        "line 2 (ReuseLine) writes buf1 in place of buf0, but the next kernel does not take it"]


def test_partition_calls_define_their_outputs_and_end_what_they_free():
    call = PartitionCallLine("partition_0", ["x", "buf0"], ["buf1"], ["buf0"])
    lines = [alloc("buf0"), call, kernel("buf1"), kernel("buf0")]
    assert problems(lines) == ["line 3 (KernelCallLine) k uses buf0 after it was freed inside partition_0"]


def test_extern_call_arguments_must_be_live():
    x = InputBuffer("x", Layout(CPU, F32, (4,), (1,)), 0)
    stale = InputBuffer("buf0", Layout(CPU, F32, (4,), (1,)), 1)
    lines = [alloc("buf0"), FreeLine(["buf0"]), ExternCallLine("buf1", aten.add.Tensor, (x, stale), {}, "")]
    assert problems(lines) == ["line 2 (ExternCallLine) uses buf0 after it was freed"]


def test_a_promised_reuse_that_never_comes_is_caught():
    lines = [alloc("buf0"), FreeLine(["buf0"], reused={"buf0"})]
    assert problems(lines) == ["buf0 was promised to a reuse that never came"]


def test_codegen_raises_when_the_plan_is_unsound(monkeypatch):
    def drop_allocations(lines, **kwargs):
        planned = plan_reuse(lines, **kwargs)
        return [ln for ln in planned if not isinstance(ln, AllocateLine)]
    monkeypatch.setattr("mini_inductor.codegen.wrapper.plan_reuse", drop_allocations)
    with pytest.raises(CodegenError, match="memory plan of partition_0 is unsound: .* before it is allocated"):
        generate_fn(lambda x: x.sin() + 1, torch.randn(4, 4), verify_memory_plan=True)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_lifecycle_verifier_passes_on_the_example_models(name, device):
    model, inputs = EXAMPLES[name].build(device, torch.float32)
    cfg = config.current().replace(verify_memory_plan=True)
    with torch.no_grad():
        gm = make_fx(lambda *a: model(*a), decomposition_table=decomposition_table())(*inputs)
    lowered = lower_graph(gm, list(inputs), f"example_{name}", cfg)
    gen = generate(schedule(lowered, cfg), cfg)   # raises CodegenError on a flaw
    assert gen.kernel_names


# ── extern (ATen) outputs in the reuse pool ──────────────────────────────────────────────────────

def test_dead_extern_output_with_a_fresh_layout_is_reused_by_a_later_allocation():
    fresh = alloc("buf0")
    lines = [ExternCallLine("buf0", aten.mm.default, (), {}, "", fresh), FreeLine(["buf0"]), alloc("buf1")]
    planned = plan_reuse(lines, outputs=set(), never_reuse=set())
    assert isinstance(planned[2], ReuseLine) and planned[2].old == "buf0"
    aliased = [ExternCallLine("buf0", aten.add_.Tensor, (), {}, ""), FreeLine(["buf0"]), alloc("buf1")]
    assert not any(isinstance(ln, ReuseLine) for ln in plan_reuse(aliased, outputs=set(), never_reuse=set()))


def one_scope(monkeypatch):
    """On the CPU every ATen call is its own unsafe partition, so kernels never share a scope with
    one; count them safe, as CUDA ones are, to put ATen calls and kernels in one function."""
    monkeypatch.setattr(partition, "cudagraph_unsafe_reason", lambda node, *rest: "")


@pytest.mark.skipif(torch.cuda.is_available(), reason="makes CPU extern calls cudagraph-safe to share one scope")
def test_an_inplace_aten_result_and_its_base_are_never_reused(monkeypatch):
    one_scope(monkeypatch)

    def control(x):
        return (x * 2).sin()     # sin writes in place into x * 2

    def mutated(x):
        t = x * 2
        t.add_(1)                # t's buffer and the add_'s result share one storage
        return t.sin()
    _, gen = generate_fn(control, torch.randn(8), max_fusion_size=1, realize_reads_threshold=0)
    assert len(gen.inplace) == 1
    sched, gen = generate_fn(mutated, torch.randn(8), max_fusion_size=1, realize_reads_threshold=0)
    assert len(sched.aliases) == 1
    assert gen.inplace == [] and gen.reused == []


def mm_then_reduce_then_same_sized(x, w):
    s = (x @ w).sum(1, keepdim=True)    # the mm output dies in a reduction: no in-place write
    return (x.sin() * s).relu()         # an [8, 8] allocation after it: takes the mm output's storage


def mm_then_relu(x, w):
    return (x @ w).relu() + 1           # the relu writes in place into the mm output


@pytest.mark.skipif(torch.cuda.is_available(), reason="makes CPU extern calls cudagraph-safe to share one scope")
def test_extern_outputs_are_reused_and_written_in_place_when_in_the_same_scope(monkeypatch):
    one_scope(monkeypatch)
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    sched, gen, _ = run_fn(mm_then_reduce_then_same_sized, x, w, max_fusion_size=1)
    mm = [n.name for n in sched.nodes if n.is_extern()][0]
    assert [old for old, new in gen.reused if (old, new) not in gen.inplace] == [mm]
    sched, gen, _ = run_fn(mm_then_relu, x, w)
    mm = [n.name for n in sched.nodes if n.is_extern()][0]
    assert [old for old, _ in gen.inplace] == [mm]


@pytest.mark.gpu
def test_extern_outputs_are_reused_and_written_in_place_on_the_gpu():
    x, w = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    # (cuBLAS calls: under matmul_templates="auto" the relu would make the mm a template on a GPU)
    sched, gen, _ = run_fn(mm_then_reduce_then_same_sized, x, w, max_fusion_size=1, matmul_templates="off")
    mm = [n.name for n in sched.nodes if n.is_extern()][0]
    assert [old for old, new in gen.reused if (old, new) not in gen.inplace] == [mm]
    sched, gen, _ = run_fn(mm_then_relu, x, w, matmul_templates="off")
    mm = [n.name for n in sched.nodes if n.is_extern()][0]
    assert [old for old, _ in gen.inplace] == [mm]


# ── the plan against what really happens when the module runs ────────────────────────────────────

def traced_run(gen, args, constants=None):
    """Run the generated module with its `empty_strided` recording each allocation and, through a
    finalizer, the moment the tensor dies; return (peak live bytes, bytes still live after the call,
    the outputs)."""
    install_interpreter_shims()
    # a same-layout reuse hands over the tensor object itself, so the object's life is the storage's
    assert "torch.as_strided(buf" not in gen.source
    module, _ = load_module(gen.source, config.current().cache_dir)
    live = {"now": 0, "peak": 0}

    def release(nbytes):
        live["now"] -= nbytes

    def tracked(size, stride, **kwargs):
        t = torch.empty_strided(size, stride, **kwargs)
        nbytes = t.untyped_storage().nbytes()
        live["now"] += nbytes
        live["peak"] = max(live["peak"], live["now"])
        weakref.finalize(t, release, nbytes)
        return t
    module.empty_strided = tracked   # the module may be cached and shared: put the original back after
    try:
        outs = module.call(list(args), dict(constants or {}))
    finally:
        module.empty_strided = torch.empty_strided
    still = live["now"]
    return live["peak"], still, outs


@pytest.mark.parametrize("fn, options", [
    (lambda x: torch.softmax(x, -1), {"max_fusion_size": 1}),
    (lambda x: torch.softmax(x, -1), {}),
    (lambda x: torch.nn.functional.layer_norm(x * 2 + 1, (32,)).relu() + x, {"max_fusion_size": 2}),
], ids=["unfused_softmax", "softmax", "layer_norm_chain"])
def test_real_allocations_peak_where_the_plan_says_and_only_outputs_survive(fn, options):
    x = torch.randn(16, 32)
    sched, gen = generate_fn(fn, x, **options)
    peak, still, outs = traced_run(gen, [x])
    assert peak == gen.planned_peak_bytes
    assert still == sum(o.untyped_storage().nbytes() for o in outs)  # everything else was freed
    torch.testing.assert_close(outs[0], fn(x))
