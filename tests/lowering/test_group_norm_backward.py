"""Group norm's gradients (our decomposition of native_group_norm_backward, lowering/decompositions.py)
against eager: the zero-variance case torch's decomposition gets wrong (groups of one element, fuzz
seed 168 prog 394), ordinary inputs in float32, float64 and bfloat16, no affine parameters, one
spatial position, and a batch of symbolic size."""
import pytest
import torch
import torch.nn.functional as F

from common import assert_same_tensor, check

import mini_inductor  # noqa: F401  registers the backend
from mini_inductor import metrics


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def _grads(fn, inputs, loss_weight, compiled: bool):
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    run = torch.compile(fn, backend="mini_inductor", fullgraph=True) if compiled else fn
    out = run(*leaves)
    (out * loss_weight.to(out.dtype)).sum().backward()
    return out.detach(), [t.grad for t in leaves]


def _backward_graphs_have_no_fallbacks():
    # the forward's native_group_norm runs in ATen; its gradient must be our kernels
    backward = [r for r in metrics.compiled_graphs if r.name.startswith("backward")]
    assert backward, [r.name for r in metrics.compiled_graphs]
    assert all(not r.fallback_ops for r in backward), [r.summary() for r in backward]


def _gn_then_ln_of_constant(x, w, b, w2):
    # every group holds one element: its variance is 0 and its output is the bias, which the layer
    # norm (over the whole tensor, a constant) also normalizes at zero variance; x does not change
    # the output, so its gradient is 0
    y = F.group_norm(x, x.shape[1], w, b)
    return F.layer_norm(y, tuple(y.shape), w2, None)


def _f32(*hex_values):
    return torch.tensor([float.fromhex(h) for h in hex_values], dtype=torch.float32)


def test_zero_variance_groups_give_eagers_zero_input_gradient():
    # fuzz seed 168 prog 394's inputs, exactly: there eager's input gradient is 0 and torch's
    # decomposition gave 2**-10 (rstd**3 = 3.2e7 times the float32 rounding of c2*x + c3)
    x = _f32("0x1.1f0be0p-1", "-0x1.faec14p+0").reshape(2, 1)
    w, b = _f32("0x1.fbc852p-1"), _f32("0x1.7e9df0p+0")
    w2 = _f32("0x1.00080ap-1", "0x1.16b3f4p+0").reshape(2, 1)
    loss_weight = _f32("0x1.41f424p+0", "0x1.8f01d6p-1").reshape(2, 1)
    eager_out, eager = _grads(_gn_then_ln_of_constant, (x, w, b, w2), loss_weight, compiled=False)
    ours_out, ours = _grads(_gn_then_ln_of_constant, (x, w, b, w2), loss_weight, compiled=True)
    assert_same_tensor(ours_out, eager_out, "output", atol=1e-4, rtol=1e-4)
    assert torch.equal(eager[0], torch.zeros_like(x)), eager[0]
    assert ours[0].abs().max() <= 1e-6, f"input gradient {ours[0].flatten().tolist()}, eager's is 0"
    # nor does the group norm's weight (it scales xhat = 0): eager gives 1e-3 there, its dgamma being
    # (ds - db * mean) * rstd; ours sums dy * xhat, exactly 0
    assert ours[1].abs().max() <= 1e-6, f"weight gradient {ours[1].tolist()}, exactly 0"
    for i in (2, 3):
        assert_same_tensor(ours[i], eager[i], f"grad of input {i}", atol=1e-4, rtol=1e-4, check_stride=False)
    _backward_graphs_have_no_fallbacks()


@pytest.mark.parametrize("shape", [(4, 1), (2, 3, 1), (3, 2, 1, 1)])
def test_zero_variance_groups_give_the_exact_input_gradient(shape):
    # the same at other sizes, where eager's float32 kernel (c1*dy + c2*x + c3 too) is itself off
    # by up to 2**-5: compared with eager in float64 instead, which gives 0 up to 1e-10
    x = torch.rand(shape) * 4 - 2
    c = shape[1]
    w, b = torch.rand(c) + 0.5, torch.full((c,), 1.375)        # one bias: the groups' output is a constant
    w2 = torch.rand(shape) + 0.5
    loss_weight = torch.rand(shape) + 0.5
    _, exact = _grads(_gn_then_ln_of_constant, [t.double() for t in (x, w, b, w2)], loss_weight, compiled=False)
    _, ours = _grads(_gn_then_ln_of_constant, (x, w, b, w2), loss_weight, compiled=True)
    assert exact[0].abs().max() <= 1e-9, exact[0]
    assert ours[0].abs().max() <= 1e-6, f"input gradient {ours[0].flatten().tolist()}, exactly 0"
    assert ours[1].abs().max() <= 1e-6, f"weight gradient {ours[1].tolist()}, exactly 0"
    torch.testing.assert_close(ours[2], exact[2].float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_gradients_match_eager(dtype):
    x = (torch.randn(2, 6, 3, 4) * 2 + 0.5).to(dtype)
    w, b = torch.randn(6).to(dtype), torch.randn(6).to(dtype)
    tol = {torch.float32: 1e-4, torch.float64: 1e-7, torch.bfloat16: 5e-2}[dtype]
    check(lambda x, w, b: F.group_norm(x, 3, w, b), x, w, b, grad=True, atol=tol, rtol=tol)
    _backward_graphs_have_no_fallbacks()


def test_gradients_with_float32_parameters_of_a_bfloat16_input():
    # mixed types: the parameters' gradients are float32, the input's bfloat16
    x = torch.randn(2, 4, 5).to(torch.bfloat16)
    w, b = torch.randn(4), torch.randn(4)
    check(lambda x, w, b: F.group_norm(x, 2, w, b), x, w, b, grad=True, atol=5e-2, rtol=5e-2)


def test_gradients_without_affine_parameters():
    x = torch.randn(3, 8, 5) * 3 - 1
    check(lambda x: F.group_norm(x, 4), x, grad=True, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("groups", [1, 2, 3])   # groups of one element: the zero-variance tests
def test_gradients_with_one_spatial_position(groups):
    x = torch.randn(4, 6, 1)
    w, b = torch.randn(6), torch.randn(6)
    check(lambda x, w, b: F.group_norm(x, groups, w, b), x, w, b, grad=True, atol=1e-4, rtol=1e-4)


def test_gradients_of_a_2d_input():
    # (N, C): no spatial dims at all
    x = torch.randn(5, 6)
    w, b = torch.randn(6), torch.randn(6)
    check(lambda x, w, b: F.group_norm(x, 3, w, b), x, w, b, grad=True, atol=1e-4, rtol=1e-4)


def test_gradients_of_a_symbolic_batch():
    w, b = torch.randn(6), torch.randn(6)

    def fn(x, w, b):
        return F.group_norm(x, 3, w, b)

    compiled = torch.compile(fn, backend="mini_inductor", dynamic=True, fullgraph=True)
    graphs_after_first = None
    for n in (5, 9, 7):   # sizes unlike the others (one symbol each) and unlike 0 and 1
        x = torch.randn(n, 6, 3, 4)
        loss_weight = torch.randn(n, 6, 3, 4)
        eager_in = [t.clone().requires_grad_() for t in (x, w, b)]
        ours_in = [t.clone().requires_grad_() for t in (x, w, b)]
        (fn(*eager_in) * loss_weight).sum().backward()
        out = compiled(*ours_in)
        (out * loss_weight).sum().backward()
        for i, (a, e) in enumerate(zip(ours_in, eager_in)):
            assert_same_tensor(a.grad, e.grad, f"batch {n} grad of input {i}", atol=1e-4, rtol=1e-4,
                               check_stride=False)
        if graphs_after_first is None:
            graphs_after_first = len(metrics.compiled_graphs)
    records = list(metrics.compiled_graphs)
    assert len(records) == graphs_after_first, "a batch size after the first compiled again"
    assert records and all(r.dynamic_symbols for r in records), [r.summary() for r in records]
    assert all(r.ran_eagerly is None for r in records), [r.summary() for r in records]


@pytest.mark.parametrize("shape", [(1, 2, 0), (0, 2, 3)], ids=["no_positions", "no_samples"])
def test_gradients_of_an_empty_input(shape):
    # no positions: the groups are empty, rstd is NaN, and eager's weight gradient is NaN (rstd times
    # an empty sum, fuzz seed 171 prog 136 with --dynamic); no samples: every gradient sums nothing, 0
    x = torch.randn(shape)
    w, b = torch.rand(2) + 0.5, torch.randn(2)
    check(lambda x, w, b: F.group_norm(x, 1, w, b), x, w, b, grad=True)
