"""The cuBLAS workspace a CUDA-graph warm-up or recording allocates besides the planned buffers
(runtime/cudagraphs/cublas_workspace.py): its size as torch picks it, which partitions call cuBLAS, and the
figure on the graph record, its summary, the debug report and the on-disk cache entry."""
import pytest
import torch

import mini_inductor  # noqa: F401  registers the backend
from mini_inductor import metrics
from mini_inductor.caching import graph_cache
from mini_inductor.debug import trace as debug_trace
from mini_inductor.debug.html import graph_section
from mini_inductor.debug.report import graph_report
from mini_inductor.runtime.cudagraphs.cublas_workspace import (LARGE_DEFAULT, LT_DEFAULT, SMALL_DEFAULT,
                                                               cublas_workspace_bytes, cublaslt_workspace_bytes,
                                                               graphed_workspace_bytes, lt_workspace_bytes,
                                                               workspace_bytes)
from mini_inductor.runtime.module_spec import PartitionSpec
from mini_inductor.scheduler import partition
from tests.compile_ir import run_fn

MIB = 2**20


def mm_then_softmax(x, w):
    return torch.softmax(x @ w, -1)


# ── the size torch allocates ─────────────────────────────────────────────────────────────────

def test_the_size_torch_reports_wins_over_the_config_and_the_default():
    assert workspace_bytes(":16:8", (9, 0), 12345) == 12345
    assert workspace_bytes(None, None, 0) == 0


def test_config_pairs_are_kib_times_count_summed():
    assert workspace_bytes(":4096:8", (8, 0), None) == 32 * MIB
    assert workspace_bytes(":4096:2:16:8", (9, 0), None) == 8 * MIB + 128 * 1024
    assert workspace_bytes(":16:8", (9, 0), None) == 128 * 1024
    assert workspace_bytes(":0:0", (9, 0), None) == 0


def test_a_config_without_a_pair_takes_the_default_of_the_gpu():
    assert workspace_bytes("4096", (9, 0), None) == 32 * MIB
    assert workspace_bytes("", (8, 6), None) == 8 * MIB + 128 * 1024


def test_default_is_32_mib_on_hopper_and_blackwell_and_8_mib_plus_128_kib_before():
    assert LARGE_DEFAULT == 33_554_432 and SMALL_DEFAULT == 8_519_680
    for capability in ((9, 0), (10, 0), (12, 0)):
        assert workspace_bytes(None, capability, None) == LARGE_DEFAULT, capability
    for capability in ((7, 0), (7, 5), (8, 0), (8, 6), (8, 9)):
        assert workspace_bytes(None, capability, None) == SMALL_DEFAULT, capability
    assert workspace_bytes(None, None, None) == SMALL_DEFAULT


def test_cublaslt_takes_1_mib_of_its_own_unless_unified():
    assert LT_DEFAULT == MIB
    assert lt_workspace_bytes(None, None, 32 * MIB, None, unified_by_default=False) == MIB
    assert lt_workspace_bytes(None, None, 32 * MIB, None, unified_by_default=True) == 0
    assert lt_workspace_bytes("1", None, 32 * MIB, None, unified_by_default=False) == 0
    assert lt_workspace_bytes("0", None, 32 * MIB, None, unified_by_default=True) == MIB
    assert lt_workspace_bytes(None, "2048", 32 * MIB, None, unified_by_default=False) == 2 * MIB
    assert lt_workspace_bytes(None, "not a number", 32 * MIB, None, unified_by_default=False) == MIB
    assert lt_workspace_bytes(None, None, 32 * MIB, 3 * MIB, unified_by_default=False) == 3 * MIB   # torch's word


def test_cublaslt_size_is_capped_at_the_cublas_workspace_unless_unification_is_off():
    assert lt_workspace_bytes(None, "65536", 32 * MIB, None, unified_by_default=False) == 32 * MIB
    assert lt_workspace_bytes("0", "65536", 32 * MIB, None, unified_by_default=False) == 64 * MIB


# ── which graphs allocate one ────────────────────────────────────────────────────────────────

def test_one_workspace_when_a_graphed_partition_calls_cublas():
    size_of = {0: 7 * MIB, 1: 3 * MIB}.__getitem__
    with_mm = {"partition_0": PartitionSpec(inputs=(), traces=(), cublas=()),
               "partition_1": PartitionSpec(inputs=(), traces=(), cublas=("aten.mm.default", "aten.bmm.default"))}
    assert graphed_workspace_bytes(with_mm, 0, size_of) == 7 * MIB
    assert graphed_workspace_bytes(with_mm, 1, size_of) == 3 * MIB
    kernels_only = {"partition_0": PartitionSpec(inputs=(), traces=(), cublas=())}
    assert graphed_workspace_bytes(kernels_only, 0, size_of) == 0
    assert graphed_workspace_bytes({}, 0, size_of) == 0                          # no trees: nothing graphed


def test_a_cublaslt_call_adds_its_own_workspace_to_cublass():
    size_of, lt_size_of = {0: 32 * MIB}.__getitem__, {0: MIB}.__getitem__
    lt = {"partition_0": PartitionSpec(inputs=(), traces=(), cublas=("aten.mm.default",)),
          "partition_1": PartitionSpec(inputs=(), traces=(), cublas=("aten.addmm.default",),
                                       cublaslt=("aten.addmm.default",))}
    assert graphed_workspace_bytes(lt, 0, size_of, lt_size_of) == 33 * MIB
    del lt["partition_1"]
    assert graphed_workspace_bytes(lt, 0, size_of, lt_size_of) == 32 * MIB


def test_cublas_ops_are_named_in_either_form():
    assert partition.calls_cublas("aten.mm.default") and partition.calls_cublas("aten.addmm")
    assert partition.calls_cublas("aten._scaled_mm.default")
    assert not partition.calls_cublas("aten.convolution.default") and not partition.calls_cublas("aten.mul.Tensor")


@pytest.mark.skipif(torch.cuda.is_available(), reason="makes CPU extern calls cudagraph-safe to share one partition")
def test_partition_table_lists_the_cublas_calls_of_each_partition_function(monkeypatch):
    # on the CPU an ATen call is its own unsafe partition; count it safe, as a CUDA one is
    monkeypatch.setattr(partition, "cudagraph_unsafe_reason", lambda node, *rest: "")
    sched, gen, _ = run_fn(mm_then_softmax, torch.randn(8, 16), torch.randn(16, 8))   # checked against eager
    (part,) = sched.partitions
    assert part.safe and part.cublas_calls == ["aten.mm.default"]
    assert "cublas=('aten.mm.default',)" in gen.source
    sched, gen, _ = run_fn(lambda x: torch.softmax(x, -1), torch.randn(8, 16))
    assert sched.partitions[0].cublas_calls == [] and "cublas=()" in gen.source


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU graph gets code only under Triton's interpreter (CPU CI)")
def test_a_cpu_graph_records_no_workspace():
    x, w = torch.randn(8, 16, device="cpu"), torch.randn(16, 8, device="cpu")
    with debug_trace.capture() as traces:
        got = torch.compile(mm_then_softmax, backend="mini_inductor")(x, w)
    torch.testing.assert_close(got, mm_then_softmax(x, w))
    record = metrics.compiled_graphs[-1]
    assert record.extern_calls == ["aten.mm.default"]
    assert record.graphed_workspace_bytes == 0 and record.recording_peak_bytes == record.planned_peak_bytes > 0
    assert "cuBLAS" not in record.summary()
    assert graph_report(traces[-1])["memory"]["graphed_workspace_bytes"] == 0


# ── where the figure is shown and kept ───────────────────────────────────────────────────────

def test_summary_shows_the_workspace_after_the_planned_peak():
    record = metrics.GraphRecord("inference_0", planned_peak_bytes=83_886_080, graphed_workspace_bytes=33_554_432)
    assert record.recording_peak_bytes == 117_440_512
    assert "planned peak 83.89 MB (+33.55 MB cuBLAS workspace while recording), " in record.summary()
    record.graphed_workspace_bytes = 0
    assert "planned peak 83.89 MB, " in record.summary() and "cuBLAS" not in record.summary()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU graph gets code only under Triton's interpreter (CPU CI)")
def test_html_report_shows_the_workspace_next_to_the_planned_peak():
    x, w = torch.randn(8, 16, device="cpu"), torch.randn(16, 8, device="cpu")
    with debug_trace.capture() as traces:
        torch.compile(mm_then_softmax, backend="mini_inductor")(x, w)
    report = graph_report(traces[-1])
    assert "cuBLAS workspace" not in graph_section(report, "digraph {}", None, {})
    report["memory"]["graphed_workspace_bytes"] = 32 * MIB
    assert "(+32.00 MiB cuBLAS workspace while recording a CUDA graph)" in graph_section(report, "digraph {}", None, {})


def test_cache_entry_keeps_the_workspace():
    record = metrics.GraphRecord("inference_0", planned_peak_bytes=4096, graphed_workspace_bytes=32 * MIB)
    entry = graph_cache.CacheEntry.from_json(graph_cache.make_entry(record, "def call(args):\n    pass\n", [], []).to_json())
    restored = metrics.GraphRecord("inference_1")
    graph_cache.restore_record(restored, entry)
    assert restored.graphed_workspace_bytes == 32 * MIB and restored.planned_peak_bytes == 4096


@pytest.mark.skipif(torch.cuda.is_available(), reason="makes CPU extern calls cudagraph-safe to share one partition")
@pytest.mark.parametrize("bias_shape, via_lt", [((8,), True), ((4, 8), False)], ids=["1-d bias", "2-d bias"])
def test_addmm_runs_through_cublaslt_only_with_a_1d_bias(monkeypatch, bias_shape, via_lt):
    monkeypatch.setattr(partition, "cudagraph_unsafe_reason", lambda node, *rest: "")
    sched, gen, _ = run_fn(lambda x, w, b: torch.addmm(b, x, w).relu(),
                           torch.randn(4, 16), torch.randn(16, 8), torch.randn(*bias_shape))
    (part,) = sched.partitions
    assert part.cublas_calls == ["aten.addmm.default"]
    assert part.cublaslt_calls == (["aten.addmm.default"] if via_lt else [])
    assert f"cublaslt={tuple(part.cublaslt_calls)!r}" in gen.source


# ── on the GPU: the figure against what the allocator sees ───────────────────────────────────

def _measure(fn, args, **options):
    from benchmarks.peak_memory import measure
    planned, workspace, measured = measure(fn, args, options)
    (record,) = [g for g in metrics.compiled_graphs if not g.ran_eagerly]
    return record, planned, workspace, measured


def _chain_of_mms(x, w):
    for _ in range(2):
        x = torch.relu(x @ w) + x
    return x


@pytest.mark.gpu
def test_recording_a_graph_with_mms_allocates_the_workspace_the_record_names():
    x, w = torch.randn(2048, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda") / 32
    record, planned, workspace, measured = _measure(_chain_of_mms, (x, w))
    print(record.summary(), f"measured {measured} B")
    assert workspace == record.graphed_workspace_bytes == cublas_workspace_bytes(torch.cuda.current_device()) > 0
    assert "cuBLAS workspace while recording" in record.summary()
    assert abs((planned + workspace) / measured - 1) <= 0.10, (planned, workspace, measured)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(_chain_of_mms, backend="mini_inductor")(x, w), _chain_of_mms(x, w))


@pytest.mark.gpu
def test_without_cudagraphs_no_workspace_is_planned_and_none_is_measured():
    x, w = torch.randn(2048, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda") / 32
    record, planned, workspace, measured = _measure(_chain_of_mms, (x, w), cudagraphs=False)
    print(record.summary(), f"measured {measured} B")
    assert workspace == record.graphed_workspace_bytes == 0
    assert abs(planned / measured - 1) <= 0.10, (planned, measured)


def _linear(x, w, b):
    return torch.nn.functional.linear(x, w, b)


@pytest.mark.gpu
def test_addmm_with_a_bias_allocates_the_cublas_and_the_cublaslt_workspace_the_record_names():
    # addmm with a 1-d bias runs in cuBLASLt (bias in the epilogue): the cuBLAS workspace of its
    # handle and, unless torch shares it, a cuBLASLt workspace of its own (1 MiB on torch 2.11)
    x, w, b = (torch.randn(1024, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda"),
               torch.randn(1024, device="cuda"))
    record, planned, workspace, measured = _measure(_linear, (x, w, b))
    print(record.summary(), f"measured {measured} B")
    device = torch.cuda.current_device()
    assert record.extern_calls == ["aten.addmm.default"]
    assert workspace == cublas_workspace_bytes(device) + cublaslt_workspace_bytes(device) > 0
    assert measured == planned + workspace, (planned, workspace, measured)
