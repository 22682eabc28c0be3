"""The matcher and the flash-attention kernel together: attention written out in a model, found in
Dynamo's graph and computed by the generated Triton kernel (the interpreter on the CPU), forward and
backward, against eager. test_match.py checks the matcher with a plain-torch stand-in of the op;
here nothing stands in."""
import math

import pytest
import torch

from mini_inductor import metrics

B, H, L, E = 2, 2, 8, 4
SCALE = 1 / math.sqrt(E)
FLASH_OPS = {"mini_inductor.flash_attention_forward.default", "mini_inductor.flash_attention_backward.default"}


def _qkv(requires_grad):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, L, E, generator=g, device="cpu").to(torch.get_default_device()).requires_grad_(requires_grad) for _ in range(3)]


def _causal_finite_fill(q, k, v):   # (a fill exp does not take to 0: not SDPA's causal attention)
    s = q @ k.transpose(-2, -1) * SCALE
    keep = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    return s.masked_fill(~keep, -30.0).softmax(-1) @ v


def _alibi(q, k, v):
    pos = torch.arange(L, device=q.device)
    slopes = torch.tensor([0.5, 0.25], device=q.device).view(H, 1, 1)
    return (q @ k.transpose(-2, -1) * SCALE + slopes * (pos[None, :] - pos[:, None])).softmax(-1) @ v


def _softcap(q, k, v):
    return (torch.tanh(q @ k.transpose(-2, -1) * SCALE / 5.0) * 5.0).softmax(-1) @ v


def _sliding_window(q, k, v):
    i = torch.arange(L, device=q.device)
    rel = i[:, None] - i[None, :]
    s = (q @ k.transpose(-2, -1) * SCALE).masked_fill(~((rel >= 0) & (rel < 3)), float("-inf"))
    return s.softmax(-1) @ v


def _padding_all_masked_row(q, k, v):
    keep = torch.ones(B, L, dtype=torch.bool, device=q.device)
    keep[1] = False                      # batch 1: every key masked, so eager's rows are NaN
    s = q @ k.transpose(-2, -1) * SCALE
    return s.masked_fill(~keep[:, None, None, :], float("-inf")).softmax(-1) @ v


def _einsum_bias(q, k, v):
    bias = torch.linspace(-1, 1, L * L, device=q.device).view(1, 1, L, L)
    p = torch.softmax(torch.einsum("bhld,bhsd->bhls", q, k) * SCALE + bias, dim=-1)
    return torch.einsum("bhls,bhsd->bhld", p, v)


@pytest.mark.parametrize("fn, mod_part", [
    (_causal_finite_fill, "j <= i"), (_alibi, "(j - i)"), (_softcap, "tanh"), (_sliding_window, "i - j < 3"),
    (_padding_all_masked_row, "~t0"), (_einsum_bias, "+ t0")])
@pytest.mark.parametrize("backward", [False, True])
def test_written_out_attention_runs_the_flash_kernel_as_eager_does(fn, mod_part, backward, monkeypatch):
    # On a GPU machine these run with CUDA tensors (tests/conftest.py), where float32 attention this
    # small is left as written (match.py float32_left_as_written, a measured policy tested in
    # test_match.py): the test is of the float32 kernel against eager, so the policy is off here, as
    # in test_match.py
    if torch.cuda.is_available():
        from mini_inductor.attention import match
        monkeypatch.setattr(match, "float32_left_as_written", lambda *args: None)
    args, ref_args = _qkv(backward), _qkv(backward)
    got = torch.compile(fn, backend="mini_inductor")(*args)
    want = fn(*ref_args)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, equal_nan=True)
    assert got.stride() == want.stride()
    (record,) = metrics.attention
    assert record.target == "flash" and mod_part in record.mod, record.describe()
    if backward:
        weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), device="cpu").to(want.device)
        (got.nan_to_num() * weights).sum().backward()
        (want.nan_to_num() * weights).sum().backward()
        for a, r in zip(args, ref_args):
            torch.testing.assert_close(a.grad, r.grad, atol=1e-4, rtol=1e-4, equal_nan=True)
    # the kernels ran as extern calls of the compiled graphs (the backward's, compiled at its first run)
    externs = {op for r in metrics.compiled_graphs for op in r.extern_calls}
    assert not [op for r in metrics.compiled_graphs for op in r.fallback_ops if op in FLASH_OPS]
    assert externs & FLASH_OPS == (FLASH_OPS if backward else {"mini_inductor.flash_attention_forward.default"})


class _LearnedBias(torch.nn.Module):
    """Attention with a learned relative-position bias table (Swin's, T5's: a parameter per head and
    offset, gathered to [H, L, L]) or learned ALiBi slopes."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        g = torch.Generator().manual_seed(2)
        shape = (H, 2 * L - 1) if kind == "table" else (H, 1, 1)
        self.param = torch.nn.Parameter(torch.randn(shape, generator=g, device="cpu").to(torch.get_default_device()))

    def forward(self, q, k, v):
        pos = torch.arange(L, device=q.device)
        offset = pos[None, :] - pos[:, None]
        bias = self.param[:, offset + L - 1] if self.kind == "table" else self.param * offset
        return (q @ k.transpose(-2, -1) * SCALE + bias).softmax(-1) @ v


@pytest.mark.parametrize("kind", ["table", "slopes"])
def test_a_learned_bias_gets_eagers_gradient_from_the_flash_op(kind, monkeypatch):
    # the bias is an extra tensor that requires grad: the op's extra-gradient kernel gives its gradient
    # (attention/extra_grads.py); before, such attention was left as written (a near miss)
    if torch.cuda.is_available():
        from mini_inductor.attention import match
        monkeypatch.setattr(match, "float32_left_as_written", lambda *args: None)
    model, ref = _LearnedBias(kind), _LearnedBias(kind)
    args, ref_args = _qkv(True), _qkv(True)
    got = torch.compile(model, backend="mini_inductor")(*args)
    want = ref(*ref_args)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    (record,) = metrics.attention
    assert record.target == "flash", record.describe()
    weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), device="cpu").to(want.device)
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    for a, r in zip([*args, model.param], [*ref_args, ref.param]):
        torch.testing.assert_close(a.grad, r.grad, atol=1e-4, rtol=1e-4)
    externs = {op for r in metrics.compiled_graphs for op in r.extern_calls}
    assert "mini_inductor.flash_attention_extra_backward.default" in externs, externs


@pytest.mark.gpu
@pytest.mark.parametrize("backward", [False, True])
def test_gpu_sliding_window_runs_in_cuda_graph_trees_call_after_call(backward):
    # The window's block table (which key blocks each query block visits) is built at the first call,
    # inside the tree's warm-up run, and cached for the process. It was allocated in the tree's pool:
    # "live storage data ptrs are in the cudagraph pool but not accounted for" at the recording
    # (benchmarks/attention_sweep.py, window, on the H100).
    n, window = 512, 100

    def fn(q, k, v):
        i = torch.arange(n, device=q.device)
        rel = i[:, None] - i[None, :]
        s = (q @ k.transpose(-2, -1) * 0.125).masked_fill(~((rel >= 0) & (rel < window)), float("-inf"))
        return s.softmax(-1) @ v

    gen = torch.Generator(device="cuda").manual_seed(0)
    qkv = [torch.randn(2, 4, n, 64, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3)]
    compiled = torch.compile(fn, backend="mini_inductor")
    for call in range(4):             # warm-up, recording, replays
        args = [t.detach().clone().requires_grad_(backward) for t in qkv]
        ref_args = [t.detach().clone().requires_grad_(backward) for t in qkv]
        got, want = compiled(*args), fn(*ref_args)
        torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
        if backward:
            upstream = torch.randn(want.shape, device="cuda", dtype=want.dtype, generator=gen)
            got.backward(upstream)
            want.backward(upstream)
            for a, r in zip(args, ref_args):
                torch.testing.assert_close(a.grad, r.grad, atol=2e-2, rtol=2e-2)
    (record,) = {r.target for r in metrics.attention}
    assert record == "flash"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("backward", [False, True])
def test_an_alibi_bias_cast_to_the_inputs_dtype_is_computed_in_the_kernel(dtype, backward):
    # (slopes * (j - i)).to(q.dtype): the cast rounds a float32 value, written f16(...) or bf16(...)
    # in the modification, so the bias is computed from the slopes, not read as a [B, H, L, S] tensor
    def alibi(q, k, v, slopes):
        pos = torch.arange(L, device=q.device)
        bias = (slopes[None, :, None, None] * (pos[None, :] - pos[:, None])).to(q.dtype)
        return ((q @ k.transpose(-2, -1)) * SCALE + bias).softmax(-1) @ v

    slopes = torch.tensor([0.5, 0.0625]) * 37.0    # large enough that the rounding shows
    args = [t.to(dtype).detach().requires_grad_(backward) for t in _qkv(False)]
    ref_args = [t.detach().clone().requires_grad_(backward) for t in args]
    got = torch.compile(alibi, backend="mini_inductor")(*args, slopes)
    want = alibi(*ref_args, slopes)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.float16 else dict(atol=8e-2, rtol=5e-2)
    torch.testing.assert_close(got, want, **tol)
    (record,) = metrics.attention
    name = "f16" if dtype == torch.float16 else "bf16"
    assert record.target == "flash" and f"{name}(t0 * (j - i))" in record.mod, record.describe()
    if backward:
        upstream = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), device="cpu").to(want.device, dtype)
        got.backward(upstream)
        want.backward(upstream)
        for a, r in zip(args, ref_args):
            torch.testing.assert_close(a.grad, r.grad, **tol)


@pytest.mark.gpu
def test_gpu_a_causal_buffer_runs_as_sdpa_in_cuda_graph_trees_until_it_changes():
    # GPT-2's registered `bias`: read as causal by its data (SDPA's causal kernel), guarded on the tensor,
    # through the trees' warm-up, recording and replays; a write above the diagonal sends the graph to
    # eager, which the tree does not see (the guard sits outside it)
    n = 256

    class Causal(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("bias", torch.ones(1024, 1024, dtype=torch.bool).tril()[None, None])

        def forward(self, q, k, v):
            t = q.shape[-2]
            s = torch.where(self.bias[:, :, :t, :t], q @ k.transpose(-2, -1) * 0.125, torch.finfo(q.dtype).min)
            return s.softmax(-1) @ v

    gen = torch.Generator(device="cuda").manual_seed(0)
    m = Causal().cuda()
    q, k, v = (torch.randn(2, 4, n, 64, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3))
    compiled = torch.compile(m, backend="mini_inductor")
    for _ in range(4):
        torch.testing.assert_close(compiled(q, k, v), m(q, k, v), atol=2e-3, rtol=2e-3)
    assert [r.target for r in metrics.attention] == ["sdpa"] and "holds a causal mask" in metrics.attention[0].data
    with torch.no_grad():
        m.bias[0, 0, 3, 200] = True
    for _ in range(2):
        torch.testing.assert_close(compiled(q, k, v), m(q, k, v), atol=2e-3, rtol=2e-3)
    assert all("held a causal mask" in (g.ran_eagerly or "") for g in metrics.compiled_graphs)
