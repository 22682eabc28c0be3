"""CUDA graphs and devices: CPU inputs are partitioned out, a graph on two GPUs runs ungraphed with
a logged skip, each GPU has its own tree, and a graph compiled on GPU 1 lives on GPU 1.

The two-GPU tests skip when fewer than two GPUs are visible; the codegen test runs on the CPU.
"""
import copy
import os
import sys

import pytest
import torch
import torch.nn as nn
from cg_helpers import run_gpu_and_cpu_inputs, train_step_matches_eager

import mini_inductor
from mini_inductor.runtime.cudagraphs.utils import counters, skip_reasons

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from compile_ir import generate_fn  # noqa: E402

TWO_GPUS = torch.cuda.is_available() and torch.cuda.device_count() >= 2
two_gpus = pytest.mark.skipif(not TWO_GPUS, reason="needs 2 CUDA GPUs (torch.cuda.device_count() < 2)")
# Fake tensors on cuda:1 need no GPU at all, but with CUDA present torch checks the ordinal against the real ones
fake_cuda1 = pytest.mark.skipif(torch.cuda.is_available() and not TWO_GPUS,
                                reason="fake cuda:1 tensors on a machine with one real GPU (torch checks the ordinal)")


def compiled(fn, **options):
    return torch.compile(fn, backend="mini_inductor", dynamic=False, options=options or None)


# --- codegen (CPU, fake CUDA tensors) -------------------------------------------------------------

@fake_cuda1
def test_kernels_of_a_graph_on_two_gpus_launch_under_their_own_device_guard():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x, y = torch.empty(8, device="cuda:0"), torch.empty(8, device="cuda:1")
    _, gen = generate_fn(lambda x, y: (x.sin() + 1, y.cos() * 2), x, y)
    src = gen.source
    part = src[src.index("def partition_0("):src.index("def call(")]
    launches = [ln.strip() for ln in part.splitlines() if "_DeviceGuard" in ln or "triton_poi" in ln]
    launches = [ln for ln in launches if not ln.startswith("#")]
    assert len(launches) == 4 and launches[0] == "with torch.cuda._DeviceGuard(0):" \
        and launches[2] == "with torch.cuda._DeviceGuard(1):"
    assert "(x_1, " in launches[1] and "(y_1, " in launches[3]   # each kernel under its input's GPU
    call = src[src.index("def call("):]
    assert "_DeviceGuard" not in call[:call.index("return")]   # no whole-call guard: it spans two GPUs


@fake_cuda1
def test_kernels_of_a_graph_on_one_gpu_run_under_one_guard_for_the_call():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(8, device="cuda:1")
    _, gen = generate_fn(lambda x: x.sin() + 1, x)
    assert gen.source.count("_DeviceGuard(") == 1
    assert "    with torch.cuda._DeviceGuard(1):" in gen.source[gen.source.index("def call("):]


def test_inputs_on_two_gpus_are_skipped_with_a_message_naming_both(monkeypatch):
    from cg_helpers import fake_cuda_module, pretend_cuda
    from mini_inductor import config
    from mini_inductor.runtime import CompiledGraph
    pretend_cuda(monkeypatch)
    graph = CompiledGraph("inference_7", fake_cuda_module(["cuda:0", "cuda:1"]), "", {}, cfg=config.current())
    assert graph.tree_functions == [] and graph.device is None
    assert counters["skips"] == 1
    assert skip_reasons == ["skipping cudagraphs due to multiple devices: cuda:0, cuda:1. Found from : \n inference_7"]


# --- one GPU --------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_cpu_input_is_partitioned_out_and_the_gpu_part_is_graphed():
    def fn(x, y):
        return x + 1, y + 2
    f = compiled(fn)
    for _ in range(4):
        x, y = torch.randn(16, device="cuda"), torch.randn(16, device="cpu")
        a, b = f(x, y)
        assert a.device.type == "cuda" and b.device.type == "cpu"
        torch.testing.assert_close(a, x + 1)
        torch.testing.assert_close(b, y + 2)
    s = mini_inductor.cudagraphs.stats(0)
    assert counters["skips"] == 0 and not skip_reasons
    assert s["recordings"] == 1 and s["replays"] == 2


@pytest.mark.gpu
def test_partitioning_around_the_cpu_op_is_logged_once_with_its_source_line(caplog):
    def fn(x, y):
        return x + 1, y + 2
    f = compiled(fn)
    run_gpu_and_cpu_inputs(f, caplog)
    text = caplog.text
    assert text.count("cudagraph partition due to") == 1, text
    assert text.count("Found from") == 1 and text.count("return x + 1, y + 2") == 1, text
    assert "cudagraph partition into 2 partitions" in text, text
    assert text.index("cudagraph partition due to") < text.index("cudagraph partition into")
    assert counters["skips"] == 0


@pytest.mark.gpu
def test_each_device_has_its_own_manager_and_reset_removes_it():
    f = compiled(lambda x: x * 3 + 1)
    current = torch.cuda.current_device()
    for _ in range(2):
        x = torch.randn(8, device="cuda")
        torch.testing.assert_close(f(x), x * 3 + 1)
    assert mini_inductor.cudagraphs.get_manager(current) is not None
    assert mini_inductor.cudagraphs.get_manager(current + 1) is None
    del f
    torch._dynamo.reset()
    assert mini_inductor.cudagraphs.get_manager(current) is None


# --- two GPUs -------------------------------------------------------------------------------------

@pytest.mark.gpu
@two_gpus
def test_inputs_on_two_gpus_skip_cudagraphs_with_a_message():
    def fn(x, y):
        return x * 2 + 1, y.sin()
    f = compiled(fn)
    for _ in range(3):
        x, y = torch.randn(32, device="cuda:0"), torch.randn(32, device="cuda:1")
        a, b = f(x, y)
        assert a.device == x.device and b.device == y.device
        torch.testing.assert_close(a, x * 2 + 1)
        torch.testing.assert_close(b, y.sin())
    msgs = [r for r in skip_reasons if "skipping cudagraphs due to multiple devices" in r]
    assert len(msgs) == 1 and "cuda:0" in msgs[0] and "cuda:1" in msgs[0]
    assert counters["skips"] == 1
    assert mini_inductor.cudagraphs.get_manager(0) is None and mini_inductor.cudagraphs.get_manager(1) is None


@pytest.mark.gpu
@two_gpus
def test_graph_compiled_on_device_1_lives_on_device_1():
    torch.cuda.set_device(0)
    f = compiled(lambda x: (x.exp() + 1).sum(0))
    for _ in range(4):
        x = torch.randn(16, 8, device="cuda:1")
        out = f(x)
        assert out.device == torch.device("cuda:1")
        torch.testing.assert_close(out, (x.exp() + 1).sum(0))
    assert mini_inductor.cudagraphs.get_manager(0) is None
    manager = mini_inductor.cudagraphs.get_manager(1)
    assert manager is not None and manager.device == 1 and manager.stream.device == torch.device("cuda:1")
    s = mini_inductor.cudagraphs.stats(1)
    assert s["recordings"] == 1 and s["replays"] == 2
    segments = [seg for seg in torch.cuda.memory_snapshot() if tuple(seg.get("segment_pool_id", ())) == tuple(manager.pool)]
    assert segments and all(seg["device"] == 1 for seg in segments)
    assert torch.cuda.current_device() == 0


@pytest.mark.gpu
@two_gpus
def test_training_on_device_1_matches_eager_and_uses_only_device_1_tree():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to("cuda:1")
    ref = copy.deepcopy(model)
    f = compiled(model)
    for _ in range(4):
        x = torch.randn(8, 16, device="cuda:1")
        train_step_matches_eager(f, model, ref, x)
    s = mini_inductor.cudagraphs.stats(1)
    assert s["recordings"] == 2 and s["replays"] >= 2          # forward and backward
    assert mini_inductor.cudagraphs.get_manager(0) is None


@pytest.mark.gpu
@two_gpus
def test_each_gpu_gets_its_own_tree_and_pool():
    f = compiled(lambda x: x.cos() * 2)
    g = compiled(lambda x: x.sin() - 1)
    for _ in range(3):
        x0, x1 = torch.randn(8, device="cuda:0"), torch.randn(8, device="cuda:1")
        torch.testing.assert_close(f(x0), x0.cos() * 2)
        torch.testing.assert_close(g(x1), x1.sin() - 1)
    m0, m1 = mini_inductor.cudagraphs.get_manager(0), mini_inductor.cudagraphs.get_manager(1)
    assert m0 is not None and m1 is not None and m0 is not m1
    assert tuple(m0.pool) != tuple(m1.pool)
    assert mini_inductor.cudagraphs.stats(0)["recordings"] == 1
    assert mini_inductor.cudagraphs.stats(1)["recordings"] == 1
    torch._dynamo.reset()
    assert mini_inductor.cudagraphs.get_manager(0) is None and mini_inductor.cudagraphs.get_manager(1) is None
