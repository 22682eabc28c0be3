"""Graph partitions around cudagraph-unsafe nodes, with their inputs and outputs
(wrapper-and-partitions.md §2.3, checklist 13-15)."""
import pytest
import sympy
import torch

from compile_ir import run_fn, schedule_fn
from mini_inductor.lowering.ir import Buffer, ExternKernel, InputBuffer, Layout, ReinterpretView
from mini_inductor.scheduler.partition import cudagraph_unsafe_reason_of, partition_nodes

aten = torch.ops.aten
CUDA = torch.device("cuda")  # only the device's name is used: no GPU needed


def extern(op, device=CUDA, size=(4,), **kw):
    return ExternKernel("buf9", Layout.contiguous(device, torch.float32, size), op, (), {}, fallback=True,
                        **kw)


def test_cudagraph_unsafe_reasons():
    assert cudagraph_unsafe_reason_of(extern(aten.mm.default)) == ""
    assert "on the CPU" in cudagraph_unsafe_reason_of(extern(aten.mm.default, device=torch.device("cpu")))
    assert "data-dependent" in cudagraph_unsafe_reason_of(extern(aten.nonzero.default))
    assert "data-dependent" in cudagraph_unsafe_reason_of(extern(aten._local_scalar_dense.default))
    assert "data-dependent" in cudagraph_unsafe_reason_of(extern(aten.masked_select.default))  # by its tag
    assert "device copy" in cudagraph_unsafe_reason_of(extern(aten._to_copy.default, cudagraph_unsafe=True))
    u0 = sympy.Symbol("u0", integer=True, positive=True)
    assert "sizes" in cudagraph_unsafe_reason_of(extern(aten.mm.default, size=(u0,)))


def test_a_call_that_defines_a_size_symbol_stays_outside_cuda_graphs():
    # torch 2.11 gives a slice by an unbacked length a fresh unbacked length of its own: the slice, a
    # view no CUDA graph needs to leave, is the call `call` reads that symbol from, so it must run in
    # `call`, not inside the partition that is passed the symbol (NameError on CUDA, session 35)
    sliced = extern(aten.slice.Tensor, size=(3, 4))   # (its size in the graph is the symbol, bound by then)
    assert cudagraph_unsafe_reason_of(sliced) == ""
    sliced.defines_symbols = ("u1",)
    assert cudagraph_unsafe_reason_of(sliced) == "defines the size u1 that later code reads (aten.slice.Tensor)"


def test_as_strided_with_an_offset_into_a_graph_input_reads_the_input_itself():
    # the offset counts from the input's storage; a CUDA graph replays on a copy of the input that starts
    # at its view (the first CUDA run of test_views.py read other elements, session 48)
    x = InputBuffer("arg0_1", Layout.contiguous(CUDA, torch.float32, (10,)), 0)
    made = Buffer("buf1", Layout.contiguous(CUDA, torch.float32, (10,)))

    def as_strided(source, *offset, **kwargs):
        return ExternKernel("buf9", Layout.contiguous(CUDA, torch.float32, (2, 2)), aten.as_strided.default,
                            (source, [2, 2], [1, 1], *offset), kwargs, fallback=True)
    assert "storage offset into a graph input" in cudagraph_unsafe_reason_of(as_strided(x, 5))
    assert "storage offset into a graph input" in cudagraph_unsafe_reason_of(as_strided(x, storage_offset=5))
    view = ReinterpretView(x, Layout(CUDA, torch.float32, (sympy.Integer(5),), (sympy.Integer(2),), sympy.Integer(1)))
    assert "storage offset into a graph input" in cudagraph_unsafe_reason_of(as_strided(view, 5))
    assert cudagraph_unsafe_reason_of(as_strided(x)) == ""            # the input's own offset: a view of the copy
    assert cudagraph_unsafe_reason_of(as_strided(made, 5)) == ""      # a buffer of the graph's own


def index_put_extern(index_dtype, op=aten.index_put.default):
    x = Buffer("buf1", Layout.contiguous(CUDA, torch.float32, (4, 3)))
    index = Buffer("buf2", Layout.contiguous(CUDA, index_dtype, (4,)))
    values = Buffer("buf3", Layout.contiguous(CUDA, torch.float32, ()))
    return ExternKernel("buf9", Layout.contiguous(CUDA, torch.float32, (4, 3)), op, (x, [index], values, True), {},
                        fallback=True)


def test_boolean_mask_indices_sync_so_their_fallback_is_unsafe():
    """ATen finds a mask's positions with nonzero (a device sync) though the output size is fixed."""
    for dtype in (torch.bool, torch.uint8):
        for op in (aten.index_put.default, aten.index_put_.default, aten._unsafe_index_put.default):
            assert "boolean-mask indices" in cudagraph_unsafe_reason_of(index_put_extern(dtype, op))
    assert cudagraph_unsafe_reason_of(index_put_extern(torch.int64)) == ""      # int64 accumulate: graphed
    no_index = index_put_extern(torch.int64)
    no_index.args = (no_index.args[0], [None, no_index.args[1][0]], *no_index.args[2:])
    assert cudagraph_unsafe_reason_of(no_index) == ""


def test_host_checks_histc_without_a_range_and_multinomial_without_replacement_sync():
    assert "syncs" in cudagraph_unsafe_reason_of(extern(aten._linalg_check_errors.default))
    x = Buffer("buf1", Layout.contiguous(CUDA, torch.float32, (8,)))

    def histc(*args):
        return ExternKernel("buf9", Layout.contiguous(CUDA, torch.float32, (4,)), aten.histc.default, (x, *args),
                             {}, fallback=True)
    assert "syncs" in cudagraph_unsafe_reason_of(histc(4))                 # min == max == 0: the data's range
    assert "syncs" in cudagraph_unsafe_reason_of(histc(4, 1.0, 1.0))
    assert cudagraph_unsafe_reason_of(histc(4, -1.0, 1.0)) == ""

    def multinomial(*args, **kwargs):
        return ExternKernel("buf9", Layout.contiguous(CUDA, torch.int64, (4,)), aten.multinomial.default,
                            (x, *args), kwargs, fallback=True)
    assert "syncs" in cudagraph_unsafe_reason_of(multinomial(4))               # without replacement
    assert "syncs" in cudagraph_unsafe_reason_of(multinomial(1, True))         # one sample
    assert cudagraph_unsafe_reason_of(multinomial(4, True)) == ""
    assert cudagraph_unsafe_reason_of(multinomial(4, replacement=True)) == ""


def mask_index_put_in_the_middle(x, mask, v):
    y = torch.ops.aten.index_put(torch.relu(x) * 2, [mask], v, True)
    return (y + 1).sum(-1)


def test_boolean_mask_index_put_fallback_is_cut_out_of_the_graphs():
    """The fallback syncs with the device: it runs between two CUDA graphs, never inside one."""
    x, v = torch.randn(4, 3), torch.randn(3)
    mask = torch.tensor([True, False, True, True])
    sched, gen, _ = run_fn(mask_index_put_in_the_middle, x, mask, v)
    assert [p.safe for p in sched.partitions] == [True, False, True]
    unsafe = sched.partitions[1]
    assert unsafe.reason == "boolean-mask indices: ATen syncs to find their positions (aten.index_put.default)"
    assert gen.partition_functions == ["partition_0", "partition_1"]
    for name in gen.partition_functions:
        body = gen.source.split(f"def {name}(args):")[1].split("\ndef ")[0]
        assert "index_put" not in body
    assert "aten.index_put.default" in gen.source.split("def call")[1]


def nonzero_in_the_middle(x):
    a = torch.relu(x) * 2
    idx = torch.nonzero(a > 1)
    return (idx * 3).sum(0), (a + 1).sum(-1)


def test_nonzero_cuts_the_graph_into_safe_unsafe_safe():
    x = torch.randn(8, 16)
    sched, gen, _ = run_fn(nonzero_in_the_middle, x)
    assert [p.safe for p in sched.partitions] == [True, False, True]
    first, unsafe, last = sched.partitions
    assert unsafe.reason == "data-dependent output (aten.nonzero.default)"
    (nonzero_buf,) = unsafe.nodes
    # the unsafe op's input comes out of partition 0; its output goes into partition 1, which frees it
    assert len(unsafe.inputs) == 1 and unsafe.inputs[0] in first.outputs and unsafe.outputs == [nonzero_buf]
    assert nonzero_buf in last.inputs
    assert gen.partition_functions == ["partition_0", "partition_1"]
    assert "def partition_0(args):" in gen.source and "def partition_1(args):" in gen.source
    call = gen.source.split("def call")[1]
    assert f"partition_1_args = [" in call and f"del {nonzero_buf}" in call


def test_partition_inputs_and_outputs_are_in_graph_order():
    x = torch.randn(8, 16)
    sched = schedule_fn(nonzero_in_the_middle, x)
    first, _, last = sched.partitions
    assert first.inputs == ["x_1"]
    for p in sched.partitions:
        for names in (p.inputs, p.outputs):
            nums = [int(n[3:]) for n in names if n.startswith("buf")]
            assert nums == sorted(nums)
    assert set(last.outputs) == set(sched.output_names) - set(first.outputs)


def test_buffer_returned_by_a_partition_is_neither_freed_nor_reused_inside_it():
    # partition 0's last allocation is the mask that only the unsafe nonzero reads (PR 165514)
    sched, gen, _ = run_fn(nonzero_in_the_middle, torch.randn(8, 16))
    body = gen.source.split("def partition_0(args):")[1].split("\ndef ")[0]
    for name in sched.partitions[0].outputs:
        assert f"del {name}" not in body and f"= {name};" not in body


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU kernels under the interpreter; a GPU machine leaves CPU ops to ATen")
def test_extern_call_on_the_cpu_is_its_own_unsafe_partition():
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    sched, gen, _ = run_fn(lambda x, w: torch.sigmoid(torch.relu(x) @ w) + 1, x, w)
    assert [p.safe for p in sched.partitions] == [True, False, True]
    assert "on the CPU (aten.mm.default)" in sched.partitions[1].reason
    assert sched.partitions[1].inputs == ["w_1", sched.partitions[0].outputs[0]]


def test_graph_of_kernels_only_is_one_partition():
    sched, gen, _ = run_fn(lambda x: torch.softmax(x, -1) * 2, torch.randn(8, 16))
    (p,) = sched.partitions
    assert p.safe and p.has_kernels and p.reason == "" and p.inputs == ["x_1"] and p.outputs == sched.output_names


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU kernels under the interpreter; a GPU machine leaves CPU ops to ATen")
def test_partitions_without_kernels_are_not_functions():
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    sched, gen, _ = run_fn(lambda x, w: x @ w, x, w)
    assert [p.safe for p in sched.partitions] == [False]
    assert gen.partition_functions == [] and "def partition_" not in gen.source


class StubNode:
    """Just enough of a scheduler node for partition_nodes."""

    def __init__(self, name, reads, extern=False):
        self.name, self.reads, self.extern = name, set(reads), extern
        self.node = extern and ExternKernel(name, None, aten.nonzero.default, (), {}, fallback=True, device=CUDA)

    def is_extern(self):
        return self.extern

    def get_names(self):
        return {self.name}

    def used_buffer_names(self):
        return self.reads | {self.name}


def test_a_buffer_freed_inside_a_partition_is_its_input_even_if_never_read_there():
    nodes = [StubNode("buf0", ["x"]), StubNode("buf1", ["buf0"], extern=True), StubNode("buf2", ["buf1"])]
    frees = [[], [], ["buf1", "buf0"]]   # buf0's storage is released in the last partition
    parts = partition_nodes(nodes, frees, ["buf2"], {"x": 0})
    assert [(p.name, p.inputs, p.outputs) for p in parts] == [
        ("partition_0", ["x"], ["buf0"]),
        ("unsafe_0", ["buf0"], ["buf1"]),
        ("partition_1", ["buf0", "buf1"], ["buf2"]),
    ]


def test_a_graph_input_dying_in_a_partition_that_does_not_read_it_is_not_passed_in():
    # x's storage dies with buf2 (an alias would do this); a CUDA graph would copy x in just to drop it,
    # so `call` lets go of x itself and the partition does not take it
    nodes = [StubNode("buf0", ["x"]), StubNode("buf1", ["buf0"], extern=True), StubNode("buf2", ["buf1"])]
    frees = [["buf0"], [], ["buf1", "x"]]
    parts = partition_nodes(nodes, frees, ["buf2"], {"x": 0})
    assert [(p.name, p.inputs) for p in parts] == [("partition_0", ["x"]), ("unsafe_0", ["buf0"]),
                                                    ("partition_1", ["buf1"])]


def test_user_listed_ops_are_cut_out_in_either_name_form():
    for listed in ("aten.mm", "aten.mm.default"):
        reason = cudagraph_unsafe_reason_of(extern(aten.mm.default), frozenset({listed}))
        assert reason == "aten.mm.default is listed in cudagraph_unsafe_ops"
    assert cudagraph_unsafe_reason_of(extern(aten.addmm.default), frozenset({"aten.mm"})) == ""  # not a prefix match


@pytest.mark.gpu
def test_listed_op_splits_the_graph_around_it_and_results_match():
    import mini_inductor
    from mini_inductor import metrics

    def fn(x, w):
        return torch.relu(x @ w).sum(0) + 1
    x, w = torch.randn(8, 16, device="cuda"), torch.randn(16, 4, device="cuda")
    f = torch.compile(fn, backend="mini_inductor", options={"cudagraph_unsafe_ops": "aten.mm"})
    for _ in range(3):
        torch.testing.assert_close(f(x, w), fn(x, w))
    assert metrics.compiled_graphs[-1].source_path
    with open(metrics.compiled_graphs[-1].source_path) as src:
        text = src.read()
    assert text.count("def partition_") == 1 and "aten.mm.default" in text.split("def call")[1]
    assert mini_inductor.cudagraphs.stats()["replays"] >= 1
