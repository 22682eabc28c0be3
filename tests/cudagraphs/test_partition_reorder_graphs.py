"""Partition-aware scheduling under CUDA graphs: independent CPU and GPU work is reordered so that
the GPU work is recorded as few graphs as the dependencies allow (cudagraph-tests.md #39; the CPU
side of it, partition counts and numerics, is in tests/scheduler/test_partition_reorder.py).

On the GPU machine tests/conftest.py makes CUDA the default device, so a tensor made without a device
is a CUDA tensor: every CPU tensor here says device="cpu" (without it there is no CPU op to reorder)."""
import pytest
import torch

import mini_inductor
from mini_inductor import metrics

pytestmark = pytest.mark.gpu


def stats():
    return mini_inductor.cudagraphs.stats(0)


def compiled(fn, **options):
    return torch.compile(fn, backend="mini_inductor", dynamic=False, options=options or None)


def check(f, fn, *args):
    for got, want in zip(f(*args), fn(*args)):
        torch.testing.assert_close(got, want)


def gpu_cpu_gpu(x, y_cpu, z, w, w_cpu):
    x2 = 2 * ((x + 1) @ w + x)
    y1 = (y_cpu + 1) @ w_cpu
    z2 = 2 * ((z + 1) @ w + z)
    return x2, y1, z2


def on(devices: str, *size):
    """One random tensor per letter of `devices`: "g" on the GPU, "c" on the CPU (named, not defaulted)."""
    return tuple(torch.randn(*size, device="cuda" if d == "g" else "cpu") for d in devices)


def graphed_partitions() -> int:
    """The CUDA-graph partitions in the last compiled graph's generated module."""
    path = metrics.compiled_graphs[-1].source_path
    assert path
    with open(path) as src:
        return src.read().count("def partition_")


def inputs():
    return on("gcggc", 3, 3)


def test_reorder_puts_independent_gpu_chains_into_one_graph():
    args = inputs()
    assert [a.device.type for a in args] == ["cuda", "cpu", "cuda", "cuda", "cpu"]
    f = compiled(gpu_cpu_gpu)
    for _ in range(3):
        check(f, gpu_cpu_gpu, *args)
    assert stats()["recordings"] == 1 and stats()["replays"] == 1
    assert graphed_partitions() == 1


def test_without_the_reorder_the_same_function_records_two_graphs():
    # the CPU chain (an ATen add and mm on the CPU) sits between the two GPU chains in program order
    args = inputs()
    f = compiled(gpu_cpu_gpu, reorder_for_partitions=False)
    for _ in range(3):
        check(f, gpu_cpu_gpu, *args)
    assert graphed_partitions() == 2
    assert stats()["recordings"] == 2


def five_chains(a, b_cpu, c, d_cpu, e, w, w_cpu):
    a1 = (a.sin() + 1) @ w                 # GPU
    b1 = a1.cpu() @ w_cpu + b_cpu          # CPU, needs the first GPU chain
    c1 = (c * 3).relu() @ w                # GPU
    d1 = (d_cpu @ w_cpu).exp()             # CPU, independent
    e1 = (e.exp() - 1) @ w                 # GPU
    return b1, c1, d1, e1


def test_interleaved_chains_with_a_cpu_chain_that_needs_a_gpu_chain_record_one_graph():
    args = on("gcgcggc", 4, 4)
    f = compiled(five_chains)
    for _ in range(3):
        check(f, five_chains, *args)
    assert graphed_partitions() == 1
    assert stats()["recordings"] == 1
    # in program order the two CPU chains split the three GPU chains into three graphs
    g = compiled(five_chains, reorder_for_partitions=False)
    for _ in range(3):
        check(g, five_chains, *args)
    assert graphed_partitions() == 3
    assert stats()["recordings"] == 1 + 3


def hoist_me(x, w):
    s = x.sin().sum(-1)
    m = w @ w                              # listed as unsafe below; reads only graph inputs
    return (m + 1).sum(0) * s.sum()


def test_unsafe_op_without_dependencies_is_hoisted_so_the_rest_is_one_graph():
    x, w = torch.randn(8, 4, device="cuda"), torch.randn(4, 4, device="cuda")
    f = compiled(hoist_me, cudagraph_unsafe_ops="aten.mm")
    for _ in range(3):
        torch.testing.assert_close(f(x, w), hoist_me(x, w))
    assert stats()["recordings"] == 1
    g = compiled(hoist_me, cudagraph_unsafe_ops="aten.mm", reorder_for_partitions=False)
    for _ in range(3):
        torch.testing.assert_close(g(x, w), hoist_me(x, w))
    assert stats()["recordings"] == 1 + 2


def cpu_and_gpu(x, y_cpu):
    return (x * 2).sum(0) + 1, (y_cpu + 1).sum()


def test_cpu_tensor_shape_changes_record_one_graph_per_compiled_graph():
    # Dynamic shapes run eagerly here (README), so a new CPU shape is a new compiled graph; what must
    # hold is that its GPU work stays one graph (the CPU ops do not split it) and revisits replay.
    f = compiled(cpu_and_gpu)
    x = torch.randn(4, 4, device="cuda")
    for n in (2, 3, 2, 3, 3, 2):
        for _ in range(2):
            y = torch.randn(n, n, device="cpu")
            check(f, cpu_and_gpu, x, y)
    assert stats()["recordings"] == 2 and stats()["skips"] == 0
