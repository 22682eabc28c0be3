"""The tables a generated module hands the runtime (runtime/module_spec.py): codegen writes them as
spec records, the runtime reads every field it needs from them, and a field renamed on one side
fails on the CPU, when the module is imported, not only inside a CUDA-graph recording on a GPU."""
import dataclasses
import pathlib

import pytest
import torch

import mini_inductor
import mini_inductor.runtime as runtime
from mini_inductor import config
from mini_inductor.runtime import CompiledGraph
from mini_inductor.runtime.cudagraphs.cublas_workspace import graphed_workspace_bytes
from mini_inductor.runtime.launch import precompile
from mini_inductor.runtime.module_spec import (ConstantSpec, InputSpec, KernelLaunch, PartitionSpec,
                                               UnsafePartition)
from mini_inductor.scheduler import partition

from mini_inductor.caching import PROCESS  # noqa: E402
assert mini_inductor


def addmm_mm_cos(x, w, b, w2):
    h = torch.addmm(b, x, w).relu()
    o = torch.mm(h, w2)
    return o.cos() + 1


@pytest.fixture
def two_partition_module(monkeypatch):
    """The module of addmm_mm_cos with its mm kept out of CUDA graphs (listed unsafe), the rest as on a
    GPU: partition_0 (addmm through cuBLASLt, relu), unsafe_0 (mm), partition_1 (cos + 1)."""
    real = partition.cudagraph_unsafe_reason

    def as_on_a_gpu(node, *rest):   # on the CPU every ATen call would be a partition of its own
        reason = real(node, *rest)
        return "" if reason.startswith("extern kernel on the CPU") else reason
    monkeypatch.setattr(partition, "cudagraph_unsafe_reason", as_on_a_gpu)
    torch._dynamo.reset()
    args = (torch.randn(4, 16), torch.randn(16, 8), torch.randn(8), torch.randn(8, 4))
    f = torch.compile(addmm_mm_cos, backend="mini_inductor", options={"cudagraph_unsafe_ops": "aten.mm"})
    torch.testing.assert_close(f(*args), addmm_mm_cos(*args))
    yield list(PROCESS.graphs.values())[-1].compiled.module, args
    torch._dynamo.reset()


def test_generated_module_writes_each_table_as_spec_records(two_partition_module):
    module, args = two_partition_module
    assert all(isinstance(s, InputSpec) for s in module.INPUT_SPECS)
    assert sorted((s.size, s.stride, s.dtype, s.device) for s in module.INPUT_SPECS) == \
        sorted((tuple(a.shape), a.stride(), a.dtype, str(a.device)) for a in args)   # in the graph's order
    assert list(module.PARTITIONS) == ["partition_0", "partition_1"]
    assert all(isinstance(p, PartitionSpec) for p in module.PARTITIONS.values())
    first = module.PARTITIONS["partition_0"]
    assert first.cublas == first.cublaslt == ("aten.addmm.default",)   # a 1-d bias: through cuBLASLt
    assert len(first.input_traces) == len(first.inputs) and all("addmm" in t for t in first.input_traces)
    assert module.PARTITIONS["partition_1"].cublas == ()
    (unsafe,) = module.UNSAFE_PARTITIONS.values()
    assert isinstance(unsafe, UnsafePartition)
    assert unsafe.reason == "aten.mm.default is listed in cudagraph_unsafe_ops" and "torch.mm(h, w2)" in unsafe.source
    assert module.KERNEL_LAUNCHES and all(isinstance(k, KernelLaunch) for k in module.KERNEL_LAUNCHES)
    assert {k.kernel for k in module.KERNEL_LAUNCHES} <= set(vars(module))
    assert all(isinstance(c, ConstantSpec) for c in module.CONSTANT_SPECS.values())


def test_runtime_reads_every_table_of_a_generated_module(two_partition_module, monkeypatch):
    module, _ = two_partition_module
    # what CompiledGraph decides before any CUDA call, as if CUDA graphs were available
    monkeypatch.setattr(runtime, "interpreting", lambda: False)
    monkeypatch.setattr(runtime, "have_cuda_graph_apis", lambda: True)
    monkeypatch.setattr(runtime, "graphed_workspace_bytes", lambda partitions, device: 0)   # asks CUDA
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._guards.CompileContext, "current_compile_id", staticmethod(lambda: None))
    graph = CompiledGraph("inference_spec", module, module.__file__, {}, cfg=config.current())
    assert [t.info.name for t in graph.tree_functions] == ["inference_spec.partition_0", "inference_spec.partition_1"]
    info = graph.tree_functions[0].info
    assert info.input_names == list(module.PARTITIONS["partition_0"].inputs)
    assert "addmm" in info.input_trace(0) and "relu" in info.trace_of(0)
    # the workspaces the first partition's recording allocates: cuBLAS's and cuBLASLt's
    assert graphed_workspace_bytes(module.PARTITIONS, 0, lambda d: 32, lambda d: 1) == 33
    # the precompile jobs, one per kernel launch signature
    jobs = precompile.compile_jobs(module, module.KERNEL_LAUNCHES)
    assert len(jobs) == len({(k.kernel, k.dtypes, k.sizes) for k in module.KERNEL_LAUNCHES}) > 0
    assert all(job.kwargs["num_warps"] > 0 and isinstance(job.args[0], torch.dtype) for job in jobs)


def test_cudagraph_partitioning_off_names_the_unsafe_op_of_a_generated_module(two_partition_module, monkeypatch):
    module, _ = two_partition_module
    monkeypatch.setattr(runtime, "interpreting", lambda: False)
    monkeypatch.setattr(runtime, "have_cuda_graph_apis", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    skipped = []
    monkeypatch.setattr(runtime, "log_skip", lambda why, where, cfg: skipped.append((why, where)))
    graph = CompiledGraph("inference_spec", module, module.__file__, {},
                          cfg=config.current().replace(cudagraph_partition=False))
    assert graph.tree_functions == []
    (why, where), = skipped
    assert why == "incompatible op: aten.mm.default is listed in cudagraph_unsafe_ops (cudagraph_partition is off)"
    assert "torch.mm(h, w2)" in where


def test_generated_module_makes_its_own_inputs_from_input_specs(two_partition_module):
    module, args = two_partition_module
    inputs = module.make_example_inputs()
    assert [(tuple(t.shape), t.stride(), t.dtype) for t in inputs] == \
        [(s.size, s.stride, s.dtype) for s in module.INPUT_SPECS]
    by_shape = {tuple(t.shape): t for t in inputs}   # the four shapes differ: the user's argument order
    x, w, b, w2 = (by_shape[tuple(a.shape)] for a in args)
    torch.testing.assert_close(module.call(list(inputs))[0], addmm_mm_cos(x, w, b, w2))


@pytest.mark.parametrize("written, renamed", [("PartitionSpec(\n        inputs=", "PartitionSpec(\n        input_names="),
                                              ("UnsafePartition(reason=", "UnsafePartition(why="),
                                              ("InputSpec(size=", "InputSpec(shape="),
                                              ("KernelLaunch(kernel=", "KernelLaunch(name=")])
def test_a_field_renamed_in_the_generated_code_fails_at_import(two_partition_module, written, renamed):
    module, _ = two_partition_module
    source = pathlib.Path(module.__file__).read_text()
    assert written in source
    keyword = renamed.split()[-1].split("(")[-1].rstrip("=")
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
        exec(compile(source.replace(written, renamed), module.__file__, "exec"), {"__name__": "renamed"})


def test_spec_records_take_no_unknown_field_and_cannot_be_changed():
    with pytest.raises(TypeError, match="cublas_ops"):
        PartitionSpec(inputs=("x",), traces=(None,), cublas_ops=())
    with pytest.raises(TypeError):
        InputSpec(size=(2,), stride=(1,), dtype=torch.float32)   # every field is written out
    spec = UnsafePartition(reason="syncs with the device (aten.nonzero.default)")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.reason = "other"
