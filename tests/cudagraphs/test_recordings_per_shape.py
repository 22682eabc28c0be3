"""Dynamic shapes under CUDA-graph trees (cudagraph-tests.md §5 #15; see TOP40.md): a graph's body runs
at warmup and recording only, once per shape; a backward over dynamic shapes matches eager; each shape
of a graph with a CPU op records one graph per GPU partition.
"""
import pytest
import torch
from cg_helpers import compiled, graphed_partitions, stats

pytestmark = pytest.mark.gpu


# --- #15 dynamic shapes --------------------------------------------------------------------------

_BODY_RUNS = [0]


@torch.library.custom_op("mini_cg_test::counted_add", mutates_args=())
def counted_add(x: torch.Tensor) -> torch.Tensor:
    _BODY_RUNS[0] += 1
    return x + 1


@counted_add.register_fake
def _(x):
    return torch.empty_like(x)


def test_graph_body_runs_at_warmup_and_recording_only_once_per_shape():
    _BODY_RUNS[0] = 0
    f = compiled(lambda x: torch.ops.mini_cg_test.counted_add(x) * 2)

    def calls(n, times):
        for _ in range(times):
            x = torch.randn(n, device="cuda")
            torch.testing.assert_close(f(x), (x + 1) * 2)
    calls(4, 4)
    assert _BODY_RUNS[0] == 2                     # warmup and recording; replays run no Python
    calls(6, 3)
    assert _BODY_RUNS[0] == 4                     # a new shape: warmup and recording again
    calls(4, 2)
    calls(6, 2)
    assert _BODY_RUNS[0] == 4


def test_dynamic_shapes_backward_matches_eager():
    def fn(x):
        y = torch.cat([x, x])
        return torch.addmm(y, y, y).relu(), y.size(0)
    with torch._dynamo.config.patch(assume_static_by_default=False):
        f = torch.compile(fn, backend="mini_inductor")
        for shape in [(2, 4), (2, 4), (3, 6), (3, 6)]:
            x = torch.randn(*shape, device="cuda", requires_grad=True)
            x_ref = x.detach().clone().requires_grad_()
            out, n = f(x)
            want, want_n = fn(x_ref)
            assert n == want_n
            torch.testing.assert_close(out, want, atol=1e-3, rtol=1e-3)
            out.sum().backward()
            want.sum().backward()
            torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-3, rtol=1e-3)


def test_each_shape_of_a_graph_with_a_cpu_op_records_one_graph_per_gpu_partition():
    def fn(x):
        a = x.sin()
        b = (a.cpu() * 2).cuda()
        return (b + a).cos()
    f = compiled(fn)
    for n in (3, 3, 3, 4, 4, 4, 3):
        x = torch.randn(n, n, device="cuda")
        torch.testing.assert_close(f(x), fn(x))
    assert graphed_partitions() >= 4                    # two shapes, the CPU op cuts each in two
    assert stats()["recordings"] == graphed_partitions()


def test_one_symbolic_compile_records_once_per_size_and_replays_each():
    import mini_inductor

    def fn(x, w):
        return torch.softmax(x @ w, -1) * 2 + x.sum(-1, keepdim=True)
    f = torch.compile(fn, backend="mini_inductor", dynamic=True, options={"dynamic_shapes": "symbolic"})
    w = torch.randn(16, 16, device="cuda")
    for n in (4, 4, 4, 7, 7, 7, 4, 4, 7):
        x = torch.randn(n, 16, device="cuda")
        torch.testing.assert_close(f(x, w), fn(x, w), atol=1e-4, rtol=1e-4)
    (record,) = mini_inductor.metrics.compiled_graphs
    assert record.dynamic_symbols and record.dynamic_fallback is None and record.ran_eagerly is None
    s = stats()
    assert s["recordings"] == 2 and s["warmups"] == 2, s   # the graph is one partition: once per size
    assert s["replays"] == 5, s                            # the calls after each size's first two


def test_kernels_after_nonzero_record_once_per_row_count_and_nonzero_stays_outside():
    # nonzero's row count is an unbacked symbol: the call that defines it runs outside CUDA graphs,
    # the partition after it takes the count as a size and is recorded once per count (0 included:
    # its kernels launch no blocks)
    import mini_inductor

    def fn(x):
        idx = torch.nonzero(x > 0)
        return (idx.float() * 2).sum(0), x.relu() + 1
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        f = torch.compile(fn, backend="mini_inductor", fullgraph=True)
        rows = [[1.0, -1.0, 2.0, -2.0], [-1.0, -1.0, -1.0, -1.0], [1.0, -1.0, 2.0, -2.0], [3.0, 1.0, 2.0, -2.0]]
        for values in rows * 2:
            x = torch.tensor(values, device="cuda")
            for a, e in zip(f(x), fn(x)):
                torch.testing.assert_close(a, e)
    (record,) = mini_inductor.metrics.compiled_graphs
    assert record.ran_eagerly is None and "u0" in record.dynamic_symbols and record.num_kernels >= 2
    s = stats()
    # three distinct counts (2, 0, 3) of the partition after nonzero, one size for the one before it
    assert s["recordings"] == 1 + 3, s
