"""The memory plan over wrapper lines: reuse of dead buffers, in-place writes, kernel-local buffers,
planned peak memory and the bytes-moved estimate (scheduler.md §16, wrapper-and-partitions.md §2.2)."""
import re

import torch

from compile_ir import generate_fn, run_fn
from mini_inductor import metrics
from mini_inductor.codegen.wrapper import _may_alias_inputs
from mini_inductor.codegen.memory_plan import plan_reuse, simulate_peak
from mini_inductor.codegen.wrapper_ir import AllocateLine, FreeLine, ReturnLine, ReuseLine

aten = torch.ops.aten
F32 = torch.float32
CPU = torch.device("cpu")


def alloc(name, size, stride, dtype=F32):
    return AllocateLine(name, size, stride, dtype, CPU)


def emitted(lines):
    return [ln.emit() for ln in lines if ln.emit()]


# ── the planning pass on lines ───────────────────────────────────────────────────────────────────

def test_free_then_same_key_allocate_becomes_a_reuse_and_the_free_emits_nothing():
    lines = [alloc("buf0", (4, 8), (8, 1)), FreeLine(["buf0"]), alloc("buf1", (4, 8), (8, 1))]
    planned = plan_reuse(lines, outputs=set(), never_reuse=set())
    assert emitted(planned) == ["buf0 = empty_strided((4, 8), (8, 1), device='cpu', dtype=torch.float32)",
                                "buf1 = buf0; del buf0  # reuse"]


def test_reuse_across_shapes_of_equal_storage_uses_as_strided():
    lines = [alloc("buf0", (4, 8), (8, 1)), FreeLine(["buf0"]), alloc("buf1", (8, 4), (1, 8))]
    planned = plan_reuse(lines, outputs=set(), never_reuse=set())
    assert isinstance(planned[2], ReuseLine)
    assert planned[2].emit() == "buf1 = torch.as_strided(buf0, (8, 4), (1, 8)); del buf0  # reuse"


def test_different_dtype_or_size_is_not_reused():
    lines = [alloc("buf0", (4, 8), (8, 1)), FreeLine(["buf0"]), alloc("buf1", (4, 8), (8, 1), torch.int32),
             alloc("buf2", (4, 9), (9, 1))]
    planned = plan_reuse(lines, outputs=set(), never_reuse=set())
    assert not any(isinstance(ln, ReuseLine) for ln in planned)
    assert planned[1].emit() == "del buf0"


def test_outputs_and_possibly_aliased_buffers_are_never_reused():
    for outputs, never in (({"buf0"}, set()), (set(), {"buf0"})):
        lines = [alloc("buf0", (4,), (1,)), FreeLine(["buf0"]), alloc("buf1", (4,), (1,))]
        planned = plan_reuse(lines, outputs=outputs, never_reuse=never)
        assert not any(isinstance(ln, ReuseLine) for ln in planned)


def test_buffers_not_allocated_in_this_scope_are_never_reused():
    lines = [FreeLine(["buf0"]), alloc("buf1", (4,), (1,))]  # buf0 came from another partition
    planned = plan_reuse(lines, outputs=set(), never_reuse=set())
    assert emitted(planned)[0] == "del buf0"


def test_frees_right_before_the_return_print_nothing_but_still_count():
    lines = [alloc("buf0", (4,), (1,)), alloc("buf1", (4,), (1,)), FreeLine(["buf0"]), ReturnLine(["buf1"])]
    planned = plan_reuse(lines, outputs={"buf1"}, never_reuse=set())
    assert emitted(planned)[-2:] == ["buf1 = empty_strided((4,), (1,), device='cpu', dtype=torch.float32)",
                                     "return (buf1,)"]
    assert simulate_peak(planned, {"buf0": 16, "buf1": 16}) == (32, 16)


def test_planned_peak_of_partitions_counts_inputs_they_free():
    def f(x, w1, w2):
        return torch.relu(torch.relu(x @ w1) @ w2)
    x, w1, w2 = torch.randn(8, 16), torch.randn(16, 32), torch.randn(32, 16)
    _, gen, _ = run_fn(f, x, w1, w2)
    if x.device.type == "cpu":
        # mm, partition_0, mm, partition_1 (ATen calls on the CPU are partitions of their own):
        # mm1 + relu1 live together, then relu1 + mm2, then mm2 + output
        assert gen.planned_peak_bytes == 2 * 8 * 32 * 4
    else:
        # one partition: relu1 is written in place into mm1's output, then mm2 (8 x 16) beside it
        assert gen.planned_peak_bytes == (8 * 32 + 8 * 16) * 4


def test_simulated_peak_counts_live_storage_and_reuse_moves_it():
    lines = [alloc("buf0", (4, 8), (8, 1)), alloc("buf1", (4,), (1,)), FreeLine(["buf0"]),
             alloc("buf2", (4, 8), (8, 1)), FreeLine(["buf1"])]
    planned = plan_reuse(lines, outputs=set(), never_reuse=set())
    nbytes = {"buf0": 128, "buf1": 16, "buf2": 128}
    assert simulate_peak(planned, nbytes) == (144, 128)


def test_view_returning_and_inplace_aten_ops_may_alias_their_inputs():
    assert _may_alias_inputs(aten.t.default)
    assert _may_alias_inputs(aten.add_.Tensor)
    assert not _may_alias_inputs(aten.mm.default)
    assert _may_alias_inputs(lambda x: x)  # unknown callables: assume the worst


# ── the plan in generated code ───────────────────────────────────────────────────────────────────

def two_reductions_then_a_same_sized_output(x):
    a = x * 2 + 1
    return x * a.sum(0)[None, :] + a.sum(1)[:, None]


def test_dead_intermediate_storage_is_reused_by_a_later_buffer_of_the_same_size():
    x = torch.randn(16, 32)
    sched, gen, _ = run_fn(two_reductions_then_a_same_sized_output, x)
    assert re.search(r"^\s*buf\d+ = buf\d+; del buf\d+  # reuse$", gen.source, re.M), gen.source
    (old, new), = [(o, n) for o, n in gen.reused if (o, n) not in gen.inplace]
    assert new in sched.output_names and old not in sched.output_names


def test_unfused_softmax_divides_in_place_into_the_exp_buffer():
    x = torch.randn(16, 32)
    sched, gen, _ = run_fn(lambda x: torch.softmax(x, -1), x, max_fusion_size=1)
    assert len(gen.kernel_names) == 4
    (old, new), = gen.inplace
    assert f"{new} = {old}; del {old}  # in-place" in gen.source
    launch = [ln for ln in gen.source.splitlines() if ln.strip().startswith(gen.kernel_names[-1] + "[")][0]
    assert launch.count(new) == 2  # read and written through the same storage
    # amax's [16] buffer is dead when sum allocates its [16] output: a plain reuse
    assert any((o, n) not in gen.inplace for o, n in gen.reused)


def test_in_place_write_follows_the_output_strides_of_a_transposed_read():
    def f(x):
        a = x.exp() * 2
        return a.t() + a.sum(0)  # eager gives this output a's transposed strides: same element order
    _, gen, _ = run_fn(f, torch.randn(16, 16), max_fusion_size=1)
    assert len(gen.inplace) == 1


def test_no_in_place_write_over_an_input_also_read_at_another_index():
    def f(x):
        a = x.exp() * 2
        return a.t() * a + a.sum(0)
    _, gen, _ = run_fn(f, torch.randn(16, 16), max_fusion_size=1)
    assert gen.inplace == []
    assert "# in-place" not in gen.source


def test_intermediate_consumed_inside_its_kernel_is_never_allocated():
    x = torch.randn(16, 32)
    sched, gen, _ = run_fn(lambda x: torch.softmax(x, -1), x)
    assert len(gen.kernel_names) == 1
    assert gen.removed_buffers
    for name in gen.removed_buffers:
        assert f"{name} = empty_strided" not in gen.source
        assert re.search(rf"\b{name}\b", gen.source.split("def call")[1]) is None


def test_planned_peak_of_unfused_softmax_counts_the_reused_and_in_place_storage_once():
    x = torch.randn(16, 32)
    _, gen = generate_fn(lambda x: torch.softmax(x, -1), x, max_fusion_size=1)
    # amax [16] + exp [16, 32] live together; sum reuses amax's storage, the division writes in place
    assert gen.planned_peak_bytes == 16 * 4 + 16 * 32 * 4
    _, fused = generate_fn(lambda x: torch.softmax(x, -1), x)
    assert fused.planned_peak_bytes == 16 * 32 * 4


def test_estimated_bytes_moved_of_a_pointwise_kernel_is_its_reads_and_writes():
    x = torch.randn(16, 32)
    sched, gen = generate_fn(lambda x: x.sin() + 1, x)
    assert sched.estimated_bytes_moved == gen.estimated_bytes_moved == 2 * 16 * 32 * 4


def test_broadcast_read_counts_the_small_buffer_once():
    x, b = torch.randn(16, 32), torch.randn(32)
    sched, _ = generate_fn(lambda x, b: x + b, x, b)
    assert sched.estimated_bytes_moved == 2 * 16 * 32 * 4 + 32 * 4


def test_graph_record_and_summary_report_peak_and_bytes_moved():
    import mini_inductor  # noqa: F401  registers the backend
    x = torch.randn(16, 32)
    compiled = torch.compile(lambda x: torch.softmax(x, -1), backend="mini_inductor")
    torch.testing.assert_close(compiled(x), torch.softmax(x, -1))
    record = metrics.compiled_graphs[-1]
    assert record.planned_peak_bytes == 16 * 32 * 4
    assert record.estimated_bytes_moved == 2 * 16 * 32 * 4
    assert "planned peak 2048 B" in record.summary() and "moved (est.)" in record.summary()


def test_summary_counts_in_the_singular_where_one():
    record = metrics.GraphRecord("inference_0", num_fx_nodes=1, nodes_before_fusion=1, nodes_after_fusion=1,
                                 kernel_names=["triton_poi_fused_relu_0"], extern_calls=["aten.mm.default"])
    record.fallback_ops["aten.sort.default"] = 1
    assert record.summary().startswith("inference_0: 1 ATen node, 1 → 1 scheduler node, 1 Triton kernel, "
                                       "1 extern call, 1 fallback op, ")


# ── in-place writes: only where every element is read before the same program overwrites it ──────

def _then(consumer):
    """a = exp(x) + x, a buffer of its own (two readers): first `a * 3`, then `consumer(a, x)` as a's
    last reader, in its own kernel (run with max_fusion_size=1)."""
    def f(x, *rest):
        a = x.exp() + x
        return a * 3, consumer(a, x, *rest)
    return f


def test_elementwise_consumer_writes_in_place_into_the_dying_buffer():
    sched, gen, _ = run_fn(_then(lambda a, x: a.sin() + x), torch.randn(8, 8), max_fusion_size=1)
    (old, new), = gen.inplace
    assert old == sched.nodes[0].name
    assert f"{new} = {old}; del {old}  # in-place" in gen.source


def test_no_in_place_write_for_a_broadcast_read():
    _, gen, _ = run_fn(_then(lambda a, x: a[:, :1] + x), torch.randn(8, 8), max_fusion_size=1)
    assert gen.inplace == [] and "# in-place" not in gen.source


def test_no_in_place_write_for_a_reversed_read():
    _, gen, _ = run_fn(_then(lambda a, x: a.flip(0) + x), torch.randn(8, 8), max_fusion_size=1)
    assert gen.inplace == [] and "# in-place" not in gen.source


def test_no_in_place_write_for_an_indirect_read():
    _, gen, _ = run_fn(_then(lambda a, x, i: a[i] + x), torch.randn(8, 8), torch.randperm(8), max_fusion_size=1)
    assert gen.inplace == [] and "# in-place" not in gen.source


def test_no_in_place_write_for_a_reduction_even_at_the_same_index():
    def f(x, y):
        a = x.exp() + x   # two readers: a buffer of its own
        return a.sum(), (a.unsqueeze(-1) * y).sum(-1)  # a [4, 8] read at the [4, 8] index the sum writes
    sched, gen, _ = run_fn(f, torch.randn(4, 8), torch.randn(4, 8, 5), max_fusion_size=1)
    red = len(sched.nodes) - 1
    a = sched.nodes[0]
    assert sched.frees_after[red] == [a.name, "y_1"]  # a dies in the reduction (and has the output's key); so does input y
    assert a.node.layout.size == sched.nodes[red].node.layout.size
    assert gen.inplace == [] and "# in-place" not in gen.source
