"""adaptive_avg_pool2d and its backward, lowered whole (pooling_lowerings.py), against eager.

Under dynamic=True one forward and one backward graph serve every length (issue 23): torch's
decomposition, which the graphs were traced with before, branches on `n % m == 0` and unrolls the
longest window, guards that made Dynamo compile again for each new n // m (Inductor's own lowering
specializes every length). Static graphs take the same lowering: no op runs in ATen, windows of any
length included (a 32 x 32 window was an avg_pool2d past MAX_WINDOW, an ATen call).
"""
import pytest
import torch
import torch.nn.functional as F

from common import COUNTS_KERNELS, assert_no_fallbacks, assert_same_tensor, check

import mini_inductor  # noqa: F401  registers the backend
from mini_inductor import metrics

SYMBOLIC = {"dynamic_shapes": "symbolic"}


@pytest.fixture(autouse=True)
def on_device(device):
    torch.set_default_device(device)
    yield
    torch.set_default_device(None)


@pytest.mark.parametrize("output_size", [(3, 4), (7, 9), (5, 2), 4])
def test_adaptive_avg_pool_over_dynamic_lengths_trains_in_one_compile(output_size):
    # lengths that are multiples of the output and not, with n // m from 0 to 4, and shorter than it.
    # (A module's output size is a constant to Dynamo; a closure's ints, under dynamic=True, are symbols)
    pool = torch.nn.AdaptiveAvgPool2d(output_size)
    compiled = torch.compile(pool, backend="mini_inductor", dynamic=True, fullgraph=True, options=SYMBOLIC)
    for n in (9, 12, 15, 10, 7, 4, 13):
        x = torch.randn(2, 3, n, n + 3)
        ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, ref = compiled(ours), pool(theirs)
        assert_same_tensor(out, ref, f"n={n}")
        w = torch.randn(ref.shape)
        (out * w).sum().backward()
        (ref * w).sum().backward()
        assert_same_tensor(ours.grad, theirs.grad, f"n={n} grad")
    records = metrics.compiled_graphs
    assert [r.name.split("_")[0] for r in records] == ["forward", "backward"], [r.summary() for r in records]
    for r in records:
        assert r.dynamic_symbols and r.dynamic_fallback is None and not r.fallback_ops, r.summary()


def test_an_output_size_that_is_a_symbol_is_generated_forward_and_aten_backward():
    # Dynamo makes a closure's int a symbol under dynamic=True: the windows holding a position are then
    # unbounded in number, and the backward is an ATen call; the forward is generated
    size = 3
    pool = lambda x: F.adaptive_avg_pool2d(x, (size, 4))  # noqa: E731
    compiled = torch.compile(pool, backend="mini_inductor", dynamic=True, fullgraph=True, options=SYMBOLIC)
    for n in (9, 10, 7):
        x = torch.randn(2, 3, n, n + 3)
        ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, ref = compiled(ours), pool(theirs)
        assert_same_tensor(out, ref, f"n={n}")
        out.sum().backward()
        ref.sum().backward()
        assert_same_tensor(ours.grad, theirs.grad, f"n={n} grad")
    forward, backward = metrics.compiled_graphs
    assert forward.dynamic_fallback is None and not forward.fallback_ops, forward.summary()
    assert backward.dynamic_fallback is None and set(backward.fallback_ops) == {
        "aten._adaptive_avg_pool2d_backward.default"}, backward.summary()


def test_an_unbatched_input_over_dynamic_lengths_compiles_once():
    pool = lambda x: F.adaptive_avg_pool2d(x, (3, 5)).sin()  # noqa: E731
    compiled = torch.compile(pool, backend="mini_inductor", dynamic=True, fullgraph=True, options=SYMBOLIC)
    for n in (6, 8, 11):
        x = torch.randn(4, n, 2 * n)
        assert_same_tensor(compiled(x), pool(x), f"n={n}")
    (record,) = metrics.compiled_graphs
    assert record.dynamic_symbols and record.dynamic_fallback is None and not record.fallback_ops, record.summary()


@pytest.mark.parametrize("shape,output_size", [((1, 2, 5, 7), (2, 3)), ((2, 3, 12, 8), (4, 4)),
                                               ((2, 3, 4, 6), (7, 9)), ((3, 9, 10), (4, 3)),
                                               ((1, 2, 64, 64), (2, 2))])
def test_static_adaptive_avg_pool_and_its_backward_are_generated(shape, output_size):
    check(lambda x: F.adaptive_avg_pool2d(x, output_size), torch.randn(shape), grad=True)
    assert_no_fallbacks()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_adaptive_avg_pool_dtypes_and_channels_last(dtype):
    check(lambda x: F.adaptive_avg_pool2d(x, (4, 3)), torch.randn(2, 3, 9, 7, dtype=dtype), grad=True)
    x = torch.randn(2, 4, 9, 7, dtype=dtype).to(memory_format=torch.channels_last)
    check(lambda x: F.adaptive_avg_pool2d(x, (4, 3)), x, grad=True)
    assert_no_fallbacks()


def test_integer_input_raises_as_eager():
    x = torch.arange(2 * 5 * 7, dtype=torch.int64).view(1, 2, 5, 7)
    compiled = torch.compile(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), backend="mini_inductor")
    with pytest.raises(Exception, match="not implemented for 'Long'"):
        F.adaptive_avg_pool2d(x, (2, 3))
    with pytest.raises(Exception, match="not implemented for 'Long'"):
        compiled(x)


@pytest.mark.skipif(not COUNTS_KERNELS, reason="counts mini_inductor's kernels")
def test_pool_then_relu_is_one_kernel_with_a_reduction_over_the_window():
    x = torch.randn(2, 3, 10, 9)
    compiled = torch.compile(lambda x: F.adaptive_avg_pool2d(x, (4, 4)).relu(), backend="mini_inductor")
    assert_same_tensor(compiled(x), F.adaptive_avg_pool2d(x, (4, 4)).relu(), "pool then relu")
    (record,) = metrics.compiled_graphs
    assert record.num_kernels == 1 and not record.fallback_ops, record.summary()
