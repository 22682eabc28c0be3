"""CUDA-graph skip messages: a graph that runs eagerly (symbolic shapes, data-dependent ops) says why it
runs without CUDA graphs and quotes the user's line; with cudagraph_partition off a graph holding an
unsafe op or a CPU input is skipped whole, naming it; cudagraph_or_error raises instead of skipping; a
user-listed custom op is accepted in its "namespace::name" form. (cudagraph-tests.md §5 #17, #27, #29,
#32, #38, #40; see TOP40.md.)

Without a GPU the graphs are captured through Dynamo and aot_autograd on the CPU; their inputs are then
made fake CUDA tensors, which is all the message builder looks at. The tests marked `gpu` at the end take
the same skips on real CUDA inputs: the graph runs ungraphed, the skip is counted and logged once on the
perf-hints logger. The item number of the spec is in a comment above each of those groups.
"""

import logging

import pytest
import torch
from cg_helpers import compiled, run_gpu_and_cpu_inputs, skip_messages
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

import mini_inductor
from mini_inductor import config, metrics
from mini_inductor.runtime import CompiledGraph, eager_graph_skip
from mini_inductor.runtime.cudagraphs.utils import counters, skip_reasons
from mini_inductor.runtime.module_spec import UnsafePartition

from mini_inductor.caching import PROCESS  # noqa: E402
from mini_inductor.pipeline import DYNAMIC_SHAPES  # noqa: E402


def traced_aten_graph(fn, *args, dynamic=False):
    """The ATen graph aot_autograd hands a backend for `fn(*args)`."""
    graphs = []

    def grab(gm, example_inputs):
        def keep(g, _):
            graphs.append(g)
            return make_boxed_func(g)
        return aot_module_simplified(gm, example_inputs, fw_compiler=keep)
    torch.compile(fn, backend=grab, dynamic=dynamic)(*args)
    return graphs[-1]


def aten_graph(fn, *args, dynamic=False):
    """traced_aten_graph, its inputs turned into fake CUDA tensors."""
    gm = traced_aten_graph(fn, *args, dynamic=dynamic)
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and isinstance(val, torch.Tensor):
            with val.fake_mode:
                node.meta["val"] = torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device="cuda")
    return gm


def add(x, y):
    return x + y


def test_graph_with_symbolic_shape_inputs_is_skipped_naming_the_line_that_reads_them():
    gm = aten_graph(add, torch.randn(4), torch.randn(4), dynamic=True)
    reason, line = eager_graph_skip(gm, DYNAMIC_SHAPES, dynamic=True)
    assert reason == "graph with symbolic shapes inputs"
    assert "test_skip_messages.py" in line and "return x + y" in line


def nonzero_rows(x):
    idx = torch.nonzero(x > 0)
    return idx.float().sum() + 1


def test_data_dependent_op_skip_names_the_op_and_its_line():
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        gm = aten_graph(nonzero_rows, torch.randn(8))
    reason, line = eager_graph_skip(gm, "data-dependent output sizes (node %nonzero, aten.nonzero.default)",
                                    dynamic=False)
    assert reason.startswith("incompatible op aten.nonzero.default (data-dependent output sizes"), reason
    assert "idx = torch.nonzero(x > 0)" in line


def test_graph_without_cuda_inputs_gets_no_cudagraph_skip():
    gm = traced_aten_graph(add, torch.randn(4, device="cpu"), torch.randn(4, device="cpu"), dynamic=True)
    assert eager_graph_skip(gm, DYNAMIC_SHAPES, dynamic=True) is None


def test_eager_graph_on_the_cpu_logs_no_skip():
    f = torch.compile(add, backend="mini_inductor", dynamic=True, options={"dynamic_shapes": "eager"})
    x, y = torch.randn(5, device="cpu"), torch.randn(5, device="cpu")
    torch.testing.assert_close(f(x, y), x + y)   # Dynamo's first call is static: the second is dynamic
    x, y = torch.randn(6, device="cpu"), torch.randn(6, device="cpu")
    torch.testing.assert_close(f(x, y), x + y)
    assert any(r.ran_eagerly for r in metrics.compiled_graphs)
    assert counters["skips"] == 0 and not skip_reasons


def test_partitioning_off_skips_the_whole_graph_naming_the_unsafe_op(monkeypatch):
    from cg_helpers import fake_cuda_module, pretend_cuda
    pretend_cuda(monkeypatch)
    counters.clear()
    skip_reasons.clear()
    module = fake_cuda_module(["cuda:0"])
    module.UNSAFE_PARTITIONS = {"unsafe_0": UnsafePartition(reason="mylib.mysin.default is tagged cudagraph_unsafe",
                                                            source='File "net.py", line 3, in forward: y = mysin(x)')}
    graph = CompiledGraph("inference_4", module, "", {}, cfg=config.current().replace(cudagraph_partition=False))
    assert graph.tree_functions == [] and graph.device is None
    assert counters["skips"] == 1
    assert skip_reasons == ["skipping cudagraphs due to incompatible op: mylib.mysin.default is tagged "
                            "cudagraph_unsafe (cudagraph_partition is off). Found from : \n "
                            'File "net.py", line 3, in forward: y = mysin(x)']


def test_with_partitioning_on_the_same_graph_has_its_safe_run_graphed(monkeypatch):
    from cg_helpers import fake_cuda_module, pretend_cuda
    pretend_cuda(monkeypatch)
    counters.clear()
    module = fake_cuda_module(["cuda:0"])
    module.UNSAFE_PARTITIONS = {"unsafe_0": UnsafePartition(reason="extern kernel on the CPU (aten.add.Tensor)")}
    module.partition_0 = lambda args: []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._guards.CompileContext, "current_compile_id", staticmethod(lambda: None))
    graph = CompiledGraph("inference_5", module, "", {}, cfg=config.current())
    assert len(graph.tree_functions) == 1 and counters["skips"] == 0


@torch.library.custom_op("mini_cg::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@scale.register_fake
def _(x):
    return torch.empty_like(x)


def uses_scale(x):
    return torch.ops.mini_cg.scale(x.sin()) + 1


@pytest.mark.parametrize("listed", ["mini_cg::scale", "mini_cg::scale.default", "mini_cg.scale"])
def test_user_listed_custom_op_is_accepted_in_each_name_form(listed):
    f = torch.compile(uses_scale, backend="mini_inductor", options={"cudagraph_unsafe_ops": listed})
    x = torch.randn(8)
    torch.testing.assert_close(f(x), uses_scale(x))
    module = list(PROCESS.graphs.values())[-1].compiled.module
    reasons = [run.reason for run in module.UNSAFE_PARTITIONS.values()]
    assert "mini_cg.scale.default is listed in cudagraph_unsafe_ops" in reasons


def _unsafe_reasons():
    module = list(PROCESS.graphs.values())[-1].compiled.module
    return [run.reason for run in module.UNSAFE_PARTITIONS.values()]


def test_changing_the_listed_ops_does_not_recompile_and_a_fresh_compile_follows_it():
    f = torch.compile(uses_scale, backend="mini_inductor")
    x = torch.randn(8)
    with config.patch(cudagraph_unsafe_ops="mini_cg::scale"):
        torch.testing.assert_close(f(x), uses_scale(x))
    assert "mini_cg.scale.default is listed in cudagraph_unsafe_ops" in _unsafe_reasons()
    with torch.compiler.set_stance("fail_on_recompile"):   # the option is not part of Dynamo's guards
        torch.testing.assert_close(f(x), uses_scale(x))
    torch._dynamo.reset()
    torch.testing.assert_close(f(x), uses_scale(x))
    assert not any("listed in cudagraph_unsafe_ops" in r for r in _unsafe_reasons())


def test_or_error_raises_where_partitioning_off_would_skip(monkeypatch):
    from cg_helpers import fake_cuda_module, pretend_cuda
    from mini_inductor.runtime.cudagraphs.utils import CudaGraphSkipped
    pretend_cuda(monkeypatch)
    counters.clear()
    module = fake_cuda_module(["cuda:0"])
    module.UNSAFE_PARTITIONS = {"unsafe_0": UnsafePartition(reason="extern kernel on the CPU (aten.add.Tensor)")}
    cfg = config.current().replace(cudagraph_partition=False, cudagraph_or_error=True)
    with pytest.raises(CudaGraphSkipped, match="skipping cudagraphs due to incompatible op: extern kernel on the CPU"):
        CompiledGraph("inference_6", module, "", {}, cfg=cfg)
    assert counters["skips"] == 0


# ── on a GPU: the same skips taken by compiled graphs on CUDA inputs ─────────────────────────────


# --- #17 symbolic shapes -------------------------------------------------------------------------

@pytest.mark.gpu
def test_graph_with_symbolic_shape_inputs_runs_ungraphed_with_one_counted_skip_naming_the_line(caplog):
    f = torch.compile(add, backend="mini_inductor", dynamic=True, options={"dynamic_shapes": "eager"})
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for _ in range(3):
            x, y = torch.randn(8, device="cuda"), torch.randn(8, device="cuda")
            torch.testing.assert_close(f(x, y), x + y)
    msgs = skip_messages(caplog, "skipping cudagraphs due to graph with symbolic shapes inputs")
    assert len(msgs) == 1 and "Found from" in msgs[0] and "return x + y" in msgs[0]
    assert counters["skips"] == 1
    assert mini_inductor.cudagraphs.get_manager(0) is None


# --- #27 a CPU input with partitioning off --------------------------------------------------------

@pytest.mark.gpu
def test_cpu_input_with_partitioning_off_skips_the_graph_with_a_message_and_the_line(caplog):
    def fn(x, y):
        return x + 1, y + 2
    f = compiled(fn, cudagraph_partition=False)
    run_gpu_and_cpu_inputs(f, caplog)
    msgs = skip_messages(caplog, "skipping cudagraphs due to incompatible op")
    assert len(msgs) == 1 and "cudagraph_partition is off" in msgs[0] and "return x + 1, y + 2" in msgs[0]
    assert counters["skips"] == 1 and mini_inductor.cudagraphs.get_manager(0) is None


# --- #32 data-dependent ops ------------------------------------------------------------------------

# By default such graphs compile (the data-dependent call runs outside CUDA graphs, the rest in
# partitions: tests/cudagraphs/test_recordings_per_shape.py); dynamic_shapes='eager' runs them eagerly,
# as Inductor does without graph partitions, and the skip says why.
RUN_EAGERLY = {"dynamic_shapes": "eager"}


def nonzero_of(x):
    return x.nonzero()


@pytest.mark.gpu
def test_nonzero_runs_ungraphed_with_a_skip_naming_the_op_and_the_line(caplog):
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True), \
            caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        f = torch.compile(nonzero_of, backend="mini_inductor", options=RUN_EAGERLY)
        for values in ([1, 0, 2, 0], [0, 3, 0, 4], [5, 6, 0, 7]):
            x = torch.tensor(values, device="cuda")
            torch.testing.assert_close(f(x), nonzero_of(x))
    msgs = skip_messages(caplog, "skipping cudagraphs due to incompatible op aten.nonzero.default")
    assert len(msgs) == 1 and "return x.nonzero()" in msgs[0]
    assert counters["skips"] == 1


def item_plus_one(x):
    return (x + 1).item()


@pytest.mark.gpu
def test_item_runs_ungraphed_with_a_skip_naming_the_op():
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        f = torch.compile(item_plus_one, backend="mini_inductor", options=RUN_EAGERLY)
        assert f(torch.tensor(2, device="cuda")) == 3
        assert f(torch.tensor(5, device="cuda")) == 6
    msgs = [r for r in skip_reasons if "_local_scalar_dense" in r]
    assert len(msgs) == 1 and msgs[0].startswith("skipping cudagraphs due to incompatible op aten._local_scalar_dense")
    assert counters["skips"] == 1


def two_nonzeros(x):
    y = x.nonzero().float()
    torch._dynamo.graph_break()
    return y.nonzero()


@pytest.mark.gpu
def test_nonzero_on_both_sides_of_a_graph_break_counts_one_skip_per_compiled_graph():
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        f = torch.compile(two_nonzeros, backend="mini_inductor", options=RUN_EAGERLY)
        for values in ([1, 0, 2, 0], [5, 6, 7, 0]):   # the second graph sees 2, then 3 rows
            x = torch.tensor(values, device="cuda")
            torch.testing.assert_close(f(x), two_nonzeros(x))
    # graph 1 holds nonzero; graph 2 takes nonzero's output, whose row count Dynamo keeps symbolic:
    # under dynamic_shapes='eager' it runs eagerly for its symbolic input, and says so. One counted
    # skip per graph that runs eagerly
    graphs = [g for g in mini_inductor.metrics.compiled_graphs if g.ran_eagerly]
    assert counters["skips"] == len(graphs) >= 2, skip_reasons
    assert skip_reasons[0].startswith("skipping cudagraphs due to incompatible op aten.nonzero.default")
    assert "y = x.nonzero().float()" in skip_reasons[0]
    assert all("aten.nonzero.default" in r or "symbolic shapes" in r for r in skip_reasons), skip_reasons


# --- #38 or-error --------------------------------------------------------------------------------

@pytest.mark.gpu
def test_or_error_raises_instead_of_running_a_graph_without_cuda_graphs():
    f = compiled(lambda x, y: (x + 1, y + 2), cudagraph_partition=False, cudagraph_or_error=True)
    with pytest.raises(RuntimeError, match="skipping cudagraphs due to incompatible op"):
        f(torch.randn(4, device="cuda"), torch.randn(4, device="cpu"))
    g = torch.compile(add, backend="mini_inductor", dynamic=True,
                      options={"cudagraph_or_error": True, "dynamic_shapes": "eager"})
    with pytest.raises(RuntimeError, match="skipping cudagraphs due to graph with symbolic shapes inputs"):
        g(torch.randn(8, device="cuda"), torch.randn(8, device="cuda"))
