"""Forward-mode AD (torch.autograd.forward_ad) through a compiled function: while a dual level is open
the graph runs as Dynamo traced it, eagerly, so tangents come out as eager's
(runtime/forward_ad.py); generated kernels would compute the primal alone and return no tangent."""
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import mini_inductor  # noqa: F401  registers the backend
from common import kernels_generated


def _primal_and_tangent(fn, x, t):
    with fwAD.dual_level():
        out = fn(fwAD.make_dual(x, t))
        primal, tangent = fwAD.unpack_dual(out)
    return primal, tangent


def _f(x):
    return torch.sin(x) * 2 + x.sum()


@pytest.mark.parametrize("plain_call_first", [True, False])
def test_a_dual_input_gets_eager_tangent_whether_or_not_the_plain_call_compiled_first(plain_call_first):
    torch._dynamo.reset()
    x, t = torch.randn(4, 5), torch.randn(4, 5)
    compiled = torch.compile(_f, backend="mini_inductor")
    if plain_call_first:
        torch.testing.assert_close(compiled(x), _f(x))
    want = _primal_and_tangent(_f, x, t)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _primal_and_tangent(compiled, x, t)
    assert got[1] is not None, "the tangent was dropped"
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert any("forward-mode AD" in str(w.message) for w in caught), [str(w.message) for w in caught]
    # the dual level closed: the compiled graph serves again
    torch.testing.assert_close(compiled(x), _f(x))


def test_the_plain_call_after_a_dual_one_still_runs_generated_kernels():
    torch._dynamo.reset()
    from mini_inductor import metrics
    x, t = torch.randn(8), torch.randn(8)
    compiled = torch.compile(lambda x: torch.relu(x) * 3, backend="mini_inductor")
    _primal_and_tangent(compiled, x, t)
    assert metrics.compiled_graphs, "nothing was compiled"
    if kernels_generated() is not None:
        assert kernels_generated() >= 1
    torch.testing.assert_close(compiled(x), torch.relu(x) * 3)


def test_forward_over_a_training_graph_and_written_out_attention():
    # a training graph (a parameter requires grad) and attention that the backend rewrites to one call:
    # the dual run uses the graph as traced, before the rewrite
    torch._dynamo.reset()
    # (float32 attention on a GPU is left as written: match.float32_left_as_written; float16 is rewritten)
    dtype = torch.float16 if torch.cuda.is_available() else torch.float32
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.float16 else {}
    w = torch.randn(6, 6, dtype=dtype, requires_grad=True)

    def attn(x):
        q = x @ w
        scores = (q @ x.transpose(-1, -2)) / 6 ** 0.5
        return torch.softmax(scores, -1) @ x

    from mini_inductor import metrics
    x, t = torch.randn(2, 5, 6, dtype=dtype), torch.randn(2, 5, 6, dtype=dtype)
    compiled = torch.compile(attn, backend="mini_inductor")
    want = _primal_and_tangent(attn, x, t)
    metrics.attention.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _primal_and_tangent(compiled, x, t)
    assert [r.target for r in metrics.attention] == ["sdpa"], "the attention was not rewritten"
    torch.testing.assert_close(got[0], want[0], **tol)
    torch.testing.assert_close(got[1], want[1], **tol)
    got[0].sum().backward()   # reverse mode through the same eager run still reaches the parameter
    assert w.grad is not None and torch.isfinite(w.grad).all()
