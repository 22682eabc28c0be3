"""CPU scalar inputs under CUDA graphs (cudagraph-tests.md §5 #31; see TOP40.md): a CPU 0-d tensor read
by GPU ops is copied to the GPU once and the graph is not split; results equal eager's, the input is left
unchanged by a round trip, and a copy into it is written back.
"""
import pytest
import torch
from cg_helpers import compiled, graphed_partitions, stats

pytestmark = pytest.mark.gpu


# --- #31 CPU scalars: copied to the GPU once, the graph is not split ---------------------------------

def test_cpu_scalar_used_twice_and_one_incremented_on_the_cpu_give_eager_results_in_one_graph():
    def fn(s, x):
        return x + s, (x * s).sum(), x + (s + 1)
    f = compiled(fn)
    for i in range(4):
        s, x = torch.tensor(float(i)), torch.randn(16, device="cuda")
        for got, want in zip(f(s, x), fn(s, x)):
            torch.testing.assert_close(got, want)
    assert graphed_partitions() == 1 and stats()["recordings"] == 1 and stats()["replays"] == 2


def test_two_cpu_scalars_after_a_gpu_op_give_one_graph():
    def fn(x, s, t):
        y = x.sin() * 2
        return y + s - t
    f = compiled(fn)
    for i in range(4):
        x, s, t = torch.randn(16, device="cuda"), torch.tensor(float(i)), torch.tensor(0.5 * i)
        torch.testing.assert_close(f(x, s, t), fn(x, s, t))
    assert graphed_partitions() == 1 and stats()["recordings"] == 1


def test_cpu_scalar_round_trip_through_the_gpu_leaves_the_input_unchanged():
    def fn(s):
        return (s.to("cuda") + 1).to("cpu")
    f = compiled(fn)
    s = torch.tensor(2.0)
    for _ in range(3):
        out = f(s)
        assert out.device.type == "cpu" and out.item() == 3.0 and s.item() == 2.0


def test_copy_of_a_gpu_value_into_a_cpu_scalar_input_is_written_back_with_one_graph():
    def fn(s, y):
        s.copy_(y)
        return y * 2
    f = compiled(fn)
    for i in range(3):
        s, y = torch.tensor(1.0), torch.tensor(float(i + 5), device="cuda")
        out = f(s, y)
        assert s.item() == i + 5 and y.item() == i + 5 and out.item() == 2 * (i + 5)
    assert stats()["recordings"] == 1
