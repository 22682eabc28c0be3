"""attention/match.py: attention written out in a model, whatever its spelling, becomes one call.

Each test compiles a small attention, checks what the matcher recorded (the call: SDPA or the
flash-attention op, and the modification as the contract's `mod`) and compares the compiled result
with eager's. The flash-attention route runs through `flash_reference.OP`, a plain-torch stand-in of
torch.ops.mini_inductor.flash_attention registered under another name (tests/attention/flash_reference.py).
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mini_inductor
from mini_inductor import metrics
from mini_inductor.attention.match import render, sdpa_form, use_flash_op
from mini_inductor.examples import GPT2, SelfAttention

from flash_reference import OP, evaluate

B, H, L, E = 2, 2, 8, 4
SCALE = 1 / math.sqrt(E)


@pytest.fixture(autouse=True)
def _float32_matched_on_a_gpu_too(request, monkeypatch):
    """On a GPU machine these tests run with CUDA tensors (tests/conftest.py), where float32 attention
    is left as written below 256 MiB of scores (a measured policy, tested by itself below): the tests
    are of what the matcher finds, so the policy is off for them."""
    if torch.cuda.is_available() and "float32_on_a_gpu" not in request.node.name:
        from mini_inductor.attention import match
        monkeypatch.setattr(match, "float32_left_as_written", lambda *args: None)


def qkv(*shape, requires_grad=False):
    shape = shape or (B, H, L, E)
    return [torch.randn(*shape, requires_grad=requires_grad) for _ in range(3)]


def compiled_like_eager(fn, *args, backward=False, options=None, dynamic=None):
    """fn compiled (with the stand-in flash op) and run on args; checks value, shape and strides against
    eager (and the inputs' gradients with `backward`); returns the attention records."""
    with use_flash_op(OP):
        compiled = torch.compile(fn, backend="mini_inductor", options=options, dynamic=dynamic)
        got = compiled(*args)
    want = fn(*args)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert got.shape == want.shape and got.stride() == want.stride()
    if backward:
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        with use_flash_op(OP):
            grads = torch.autograd.grad(got.square().sum(), leaves)
        expected = torch.autograd.grad(want.square().sum(), leaves)
        for g, e in zip(grads, expected):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    return list(metrics.attention)


def only_match(records, target, mod=None):
    assert [r.target for r in records] == [target], [r.describe() for r in records]
    if mod is not None:
        assert records[0].mod == mod
    return records[0]


# ── spellings of the two matmuls and the softmax ─────────────────────────────────────────────────
def test_matmul_with_transpose_scaled_by_division_is_sdpa():
    def attention(q, k, v):
        return torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(E), dim=-1) @ v
    only_match(compiled_like_eager(attention, *qkv()), "sdpa", "s / 2.0")


def test_bmm_on_folded_heads_from_a_projection_is_sdpa():
    proj = nn.Linear(E * H, 3 * E * H)

    def attention(x):
        q, k, v = proj(x).split(E * H, dim=-1)
        q, k, v = (t.reshape(B, L, H, E).transpose(1, 2).reshape(B * H, L, E) for t in (q, k, v))
        p = torch.bmm(q * SCALE, k.transpose(1, 2)).softmax(-1)
        return p.bmm(v).reshape(B, H, L, E).transpose(1, 2).reshape(B, L, H * E)
    record = only_match(compiled_like_eager(attention, torch.randn(B, L, E * H)), "sdpa", "s")
    assert record.shapes == f"q [{B * H}, {L}, {E}], k [{B * H}, {L}, {E}], v [{B * H}, {L}, {E}]"


def test_einsum_both_matmuls_with_an_additive_bias_is_flash():
    bias = torch.randn(L, L)

    def attention(q, k, v):
        s = torch.einsum("bhld,bhsd->bhls", q, k) * SCALE + bias
        return torch.einsum("bhls,bhsd->bhld", F.softmax(s, dim=-1), v)
    only_match(compiled_like_eager(attention, *qkv()), "flash", "s * 0.5 + t0")


def test_matmul_operator_with_mT_and_tensor_softmax_with_dtype():
    def attention(q, k, v):
        return (q @ k.mT * SCALE).softmax(dim=3, dtype=torch.float32) @ v
    only_match(compiled_like_eager(attention, *qkv()), "sdpa", "s * 0.5")


def test_written_out_softmax_is_found():
    def attention(q, k, v):
        s = q @ k.transpose(-1, -2) * SCALE
        e = torch.exp(s - s.amax(dim=-1, keepdim=True))
        return (e / e.sum(dim=-1, keepdim=True)) @ v
    only_match(compiled_like_eager(attention, *qkv()), "sdpa", "s * 0.5")


def test_scale_by_a_zero_dim_tensor_is_an_extra_tensor():
    scale = torch.tensor(SCALE)

    def attention(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) * scale, -1) @ v
    only_match(compiled_like_eager(attention, *qkv()), "flash", "s * t0")


# ── masks ───────────────────────────────────────────────────────────────────────────────────────
def test_causal_tril_of_ones_in_forward_is_sdpa_is_causal():
    def attention(q, k, v):
        s = q @ k.transpose(-2, -1) * SCALE
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        return s.masked_fill(~causal, float("-inf")).softmax(-1) @ v
    record = only_match(compiled_like_eager(attention, *qkv(requires_grad=True), backward=True), "sdpa")
    assert sdpa_form(_parsed(record.mod)) == (0.5, True)


def test_causal_from_an_arange_comparison_is_sdpa_is_causal():
    def attention(q, k, v):
        i = torch.arange(q.shape[-2], device=q.device)
        s = torch.where(i[None, :] <= i[:, None], q @ k.transpose(-2, -1), float("-inf")) * SCALE
        return torch.softmax(s, dim=-1) @ v
    only_match(compiled_like_eager(attention, *qkv()), "sdpa", "where(j <= i, s, -inf) * 0.5")


class BufferCausal(nn.Module):
    """The registered `tril` buffer of nanoGPT (float ones) or GPT-2 (bool), sliced to the sequence length."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16).to(dtype))

    def forward(self, q, k, v):
        t = q.shape[-2]
        s = q @ k.transpose(-2, -1) * SCALE
        if self.bias.dtype == torch.bool:
            s = torch.where(self.bias[:, :, :t, :t], s, torch.finfo(s.dtype).min)
        else:
            s = s.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        return F.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_a_registered_tril_buffer_is_read_as_causal_by_its_data_under_a_guard(dtype):
    # the buffer is data (it could change): read as `j <= i` because it holds a lower triangle of ones
    # when compiled, and the compiled graph checks the tensor (same object, same version) on each call
    from mini_inductor.attention.match import DataGuard

    m = BufferCausal(dtype)
    record = only_match(compiled_like_eager(m, *qkv()), "sdpa")
    assert "j <= i" in record.mod and record.data.endswith("bias_ holds a causal mask (guarded on it)"), record
    assert "holds a causal mask" in record.describe()
    torch._dynamo.reset()
    text = str(mini_inductor.explain(m, *qkv()))
    assert "holds a causal mask (guarded on it)" in text, text
    torch._dynamo.reset()
    metrics.reset()
    compiled = torch.compile(m, backend="mini_inductor")
    q, k, v = qkv()
    torch.testing.assert_close(compiled(q, k, v), m(q, k, v), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        m.bias[0, 0, 2, :2] = 1          # written in place: a version bump, the same data
    torch.testing.assert_close(compiled(q, k, v), m(q, k, v), atol=1e-5, rtol=1e-5)
    assert all(g.ran_eagerly is None for g in metrics.compiled_graphs)
    with torch.no_grad():
        m.bias[0, 0, 2, 5] = 1           # no longer causal: row 2 now sees key 5
    want = m(q, k, v)
    got = compiled(q, k, v)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert metrics.compiled_graphs and all("held a causal mask" in (g.ran_eagerly or "")
                                           for g in metrics.compiled_graphs), [(g.name, g.ran_eagerly) for g in metrics.compiled_graphs]
    assert not torch.allclose(want[:, :, 2], F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=SCALE)[:, :, 2])
    assert DataGuard.__name__   # (the guard is what served the last call: the eager graph, as traced)


def test_a_causal_buffer_replaced_through_data_is_seen():
    # `t.data = other` keeps the tensor object and its version but moves its memory: read again
    m = BufferCausal(torch.bool)
    compiled = torch.compile(m, backend="mini_inductor")
    q, k, v = qkv()
    compiled(q, k, v)
    m.bias.data = torch.ones_like(m.bias)            # every key visible
    torch.testing.assert_close(compiled(q, k, v), m(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", ["not_a_triangle", "option_off", "written_in_the_graph"])
def test_a_mask_buffer_stays_data(case):
    # a buffer that is not a lower triangle; the option off; a graph that writes in place (a write
    # through an alias of the mask could change it after the check)
    class Written(BufferCausal):
        def forward(self, q, k, v):
            out = super().forward(q, k, v)
            w = torch.ones_like(out)
            w.mul_(2.0)
            return out * w / 2
    m = Written() if case == "written_in_the_graph" else BufferCausal()
    if case == "not_a_triangle":
        with torch.no_grad():
            m.bias[0, 0, 1, 4] = 1
    options = {"attention_data_masks": False} if case == "option_off" else None
    record = only_match(compiled_like_eager(m, *qkv(), options=options), "flash")
    # torch 2.13's Dynamo keeps `bias == 0` in the graph; 2.11's hands over its result as one tensor
    assert record.mod in ("where(t0 == 0, -inf, s * 0.5)", "where(t0, -inf, s * 0.5)"), record.mod
    assert not record.data


def test_eight_bit_arithmetic_in_a_mask_is_data():
    # uint8 0 - 1 is 255 in eager: the modification's numbers would not wrap, so it stays a tensor
    mask = torch.ones(L, L, dtype=torch.uint8).tril()

    def attention(q, k, v, mask):
        return (q @ k.transpose(-2, -1) * SCALE + (mask - 1)).softmax(-1) @ v
    record = only_match(compiled_like_eager(attention, *qkv(), mask), "flash")
    assert record.mod == "s * 0.5 + t0", record.mod


def test_a_causal_buffer_in_training_gives_eager_gradients():
    q, k, v = qkv(requires_grad=True)
    only_match(compiled_like_eager(BufferCausal(torch.bool), q, k, v, backward=True), "sdpa")


def test_padding_mask_filled_with_minus_inf_is_flash():
    keep = torch.arange(L)[None, :] < torch.tensor([L, L - 3])[:, None]        # [B, S]

    def attention(q, k, v, keep):
        s = q @ k.transpose(-2, -1) * SCALE
        return s.masked_fill(~keep[:, None, None, :], float("-inf")).softmax(-1) @ v
    only_match(compiled_like_eager(attention, *qkv(), keep), "flash", "where(~t0, -inf, s * 0.5)")


def test_under_a_default_device_mode_the_operators_are_read_the_same():
    # torch.set_default_device installs a TorchFunctionMode, and Dynamo then writes ~m as
    # m.__invert__() and a <= b as a.__le__(b): the masks were data and the causal case lost SDPA
    # (found with the tests run on the H100, where the default device is CUDA)
    previous = torch.get_default_device()   # (cuda under the GPU machine's conftest, else no mode: None)
    previous = previous if previous.type != "cpu" else None
    torch.set_default_device("cpu")
    try:
        def tril(q, k, v):
            causal = torch.ones(L, L, dtype=torch.bool).tril()
            return (q @ k.transpose(-2, -1) * SCALE).masked_fill(~causal, float("-inf")).softmax(-1) @ v

        def compare(q, k, v):
            i = torch.arange(L)
            s = q @ k.transpose(-2, -1) * SCALE
            return torch.where(i[None, :] <= i[:, None], s, float("-inf")).softmax(-1) @ v
        for attention in (tril, compare):
            metrics.reset()
            only_match(compiled_like_eager(attention, *qkv()), "sdpa")
    finally:
        torch.set_default_device(previous)


def test_causal_filled_with_finfo_min_is_sdpa_but_a_fill_softmax_keeps_is_flash():
    # a finite fill differs from -inf only on a row whose every score is masked, and a causal mask
    # keeps key 0 on every row: finfo.min (Hugging Face's fill) is SDPA's causal attention. A fill
    # that exp does not take to 0 (-1000, or finfo.min scaled down past float16's lowest) is not.
    def attention(q, k, v, fill, after=1.0):
        s = q @ k.transpose(-2, -1) * SCALE
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        s = s.masked_fill(~causal, fill)
        return (s if after == 1.0 else s * after).softmax(-1) @ v
    only_match(compiled_like_eager(lambda q, k, v: attention(q, k, v, torch.finfo(torch.float32).min), *qkv()),
               "sdpa", "where(~(j <= i), -3.4028234663852886e+38, s * 0.5)")
    metrics.reset()
    only_match(compiled_like_eager(lambda q, k, v: attention(q, k, v, -65504.0, 0.5), *qkv()), "flash")
    metrics.reset()
    only_match(compiled_like_eager(lambda q, k, v: attention(q, k, v, -1000.0), *qkv()), "flash",
               "where(~(j <= i), -1000.0, s * 0.5)")


def test_additive_bias_input_with_backward_through_q_k_v():
    def attention(q, k, v, bias):
        return torch.softmax(q @ k.transpose(-2, -1) * SCALE + bias, -1) @ v
    bias = torch.randn(B, 1, L, L)
    records = compiled_like_eager(attention, *qkv(requires_grad=True), bias, backward=True)
    only_match(records, "flash", "s * 0.5 + t0")


def test_alibi_bias_is_an_index_expression_times_the_slopes():
    slopes = torch.tensor([0.5, 0.25]).view(H, 1, 1)

    def attention(q, k, v):
        pos = torch.arange(L, device=q.device)
        distance = pos[None, :] - pos[:, None]
        s = q @ k.transpose(-2, -1) * SCALE + slopes * distance
        return s.softmax(-1) @ v
    only_match(compiled_like_eager(attention, *qkv()), "flash", "s * 0.5 + t0 * (j - i)")


def test_tanh_softcap():
    def attention(q, k, v):
        s = torch.tanh(q @ k.transpose(-2, -1) * SCALE / 5.0) * 5.0
        return s.softmax(-1) @ v
    only_match(compiled_like_eager(attention, *qkv(requires_grad=True), backward=True), "flash",
               "tanh(s * 0.5 / 5.0) * 5.0")


def test_sliding_window_causal_mask():
    def attention(q, k, v):
        i = torch.arange(L, device=q.device)
        rel = i[:, None] - i[None, :]
        window = (rel >= 0) & (rel < 3)
        s = (q @ k.transpose(-2, -1) * SCALE).masked_fill(~window, float("-inf"))
        return s.softmax(-1) @ v
    only_match(compiled_like_eager(attention, *qkv()), "flash", "where(~((i - j >= 0) & (i - j < 3)), -inf, s * 0.5)")


def test_grouped_query_heads_from_repeat_interleave_pass_the_unrepeated_heads():
    def attention(q, k, v):
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        return torch.softmax(q @ k.transpose(-2, -1) * SCALE, -1) @ v
    q = torch.randn(B, 4, L, E, requires_grad=True)
    k, v = (torch.randn(B, 2, L, E, requires_grad=True) for _ in range(2))
    record = only_match(compiled_like_eager(attention, q, k, v, backward=True), "sdpa")
    assert record.shapes == f"q [{B}, 4, {L}, {E}], k [{B}, 2, {L}, {E}], v [{B}, 2, {L}, {E}]"


def test_grouped_query_heads_with_a_bias_go_to_flash_unrepeated():
    def attention(q, k, v, bias):
        k = k[:, :, None, :, :].expand(B, 2, 2, L, E).reshape(B, 4, L, E)
        v = v[:, :, None, :, :].expand(B, 2, 2, L, E).reshape(B, 4, L, E)
        return torch.softmax(q @ k.transpose(-2, -1) * SCALE + bias, -1) @ v
    q, k, v = torch.randn(B, 4, L, E), torch.randn(B, 2, L, E), torch.randn(B, 2, L, E)
    record = only_match(compiled_like_eager(attention, q, k, v, torch.randn(L, L)), "flash", "s * 0.5 + t0")
    assert "k [2, 2, 8, 4]" in record.shapes


class GPT2EagerAttention(nn.Module):
    """The structure of Hugging Face's GPT-2 eager attention (transformers is not installed here):
    a registered bool tril buffer, a finfo.min mask value tensor, an additive attention mask, dropout."""

    def __init__(self, context=16):
        super().__init__()
        causal = torch.tril(torch.ones(context, context, dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, context, context))
        self.attn_dropout = nn.Dropout(0.1)

    def forward(self, query, key, value, attention_mask):
        w = torch.matmul(query, key.transpose(-1, -2))
        w = w / torch.full([], value.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        q_len, k_len = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, k_len - q_len:k_len, :k_len]
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
        w = torch.where(causal_mask, w.to(w.dtype), mask_value)
        w = w + attention_mask
        w = nn.functional.softmax(w, dim=-1).type(value.dtype)
        w = self.attn_dropout(w)
        return torch.matmul(w, value)


def test_hugging_face_gpt2_eager_attention_in_eval():
    module = GPT2EagerAttention().eval()
    mask = torch.zeros(B, 1, 1, L)
    mask[1, ..., -2:] = torch.finfo(torch.float32).min
    # its causal `bias` buffer holds a lower triangle: read as `j <= i` (guarded on the tensor); the
    # padding mask stays data
    record = only_match(compiled_like_eager(module, *qkv(), mask), "flash",
                        "where(j <= i, s / 2.0, -3.4028234663852886e+38) + t0")
    assert record.data.endswith("bias_ holds a causal mask (guarded on it)"), record.data


def test_the_examples_written_out_attention_causal_and_masked():
    torch.manual_seed(0)
    causal = SelfAttention(8, 2, "causal")
    records = compiled_like_eager(causal, torch.randn(2, 8, 8))
    assert records[0].mod == "where(~(j <= i), -inf, s / 2.0)"
    metrics.reset()
    masked = SelfAttention(8, 2, "masked")
    bias = torch.zeros(2, 1, 1, 8)
    bias[0, ..., -3:] = torch.finfo(torch.float32).min
    only_match(compiled_like_eager(masked, torch.randn(2, 8, 8), bias), "flash", "s / 2.0 + t0")


def test_zoo_gpt2_trains_through_sdpa_causal():
    torch.manual_seed(0)
    model = GPT2()
    tokens = torch.randint(0, 64, (2, 16))
    with use_flash_op(OP):
        compiled = torch.compile(model, backend="mini_inductor")
        got = compiled(tokens)
        got.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    assert [r.target for r in metrics.attention] == ["sdpa", "sdpa"]
    model.zero_grad()
    want = model(tokens)
    want.sum().backward()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, atol=1e-4, rtol=1e-4)


# ── dropout ─────────────────────────────────────────────────────────────────────────────────────
def test_dropout_in_eval_or_with_p_zero_is_dropped():
    def attention(q, k, v):
        p = torch.softmax(q @ k.transpose(-2, -1) * SCALE, -1)
        return F.dropout(F.dropout(p, 0.0, training=True), 0.3, training=False) @ v
    only_match(compiled_like_eager(attention, *qkv()), "sdpa")


def test_dropout_in_training_goes_to_sdpa_with_dropout_p():
    def attention(q, k, v):
        return F.dropout(torch.softmax(q @ k.transpose(-2, -1) * SCALE, -1), 0.25, training=True) @ v
    with use_flash_op(OP):
        out = torch.compile(attention, backend="mini_inductor")(*qkv())
    assert out.shape == (B, H, L, E) and torch.isfinite(out).all()
    only_match(metrics.attention, "sdpa")


def test_dropout_in_training_after_a_bias_is_a_near_miss():
    bias = torch.randn(L, L)

    def attention(q, k, v):
        return F.dropout(torch.softmax(q @ k.transpose(-2, -1) + bias, -1), 0.25, training=True) @ v
    with use_flash_op(OP):
        torch.compile(attention, backend="mini_inductor")(*qkv())
    (record,) = metrics.attention
    assert not record.target and "dropout" in record.reason


def test_a_dropout_rate_passed_in_as_an_argument_is_a_near_miss_with_its_reason():
    # Dynamo makes a float argument a graph value at its second value: the matcher compared the FX
    # node with 0 and recorded an internal error (review, session 33)
    def attention(q, k, v, p):
        return F.dropout(torch.softmax(q @ k.transpose(-2, -1) * 0.5, -1), p, training=True) @ v
    q, k, v = qkv()
    with use_flash_op(OP):
        got = torch.compile(attention, backend="mini_inductor", dynamic=True)(q, k, v, 0.0)
    torch.testing.assert_close(got, attention(q, k, v, 0.0), atol=1e-5, rtol=1e-5)
    reasons = [r.reason for r in metrics.attention]
    assert any("value of the graph" in r for r in reasons) and not any("internal error" in r for r in reasons), reasons


# ── near misses ─────────────────────────────────────────────────────────────────────────────────
def test_returned_attention_weights_are_a_near_miss():
    def attention(q, k, v):
        p = torch.softmax(q @ k.transpose(-2, -1) * SCALE, -1)
        return p @ v, p
    with use_flash_op(OP):
        torch.compile(attention, backend="mini_inductor")(*qkv())
    (record,) = metrics.attention
    assert record.target == "" and record.reason == "the attention weights are used elsewhere"


def test_softmax_over_the_query_dim_is_a_near_miss():
    def attention(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1), dim=-2) @ v
    compiled_like_eager(attention, *qkv())
    (record,) = metrics.attention
    assert record.target == "" and "not the key dim" in record.reason


def test_an_extra_tensor_requiring_grad_is_matched():
    # the flash op gives it its gradient (attention/extra_grads.py; checked against eager in
    # test_extra_grads.py and test_match_to_flash.py); before, a near miss
    bias = nn.Parameter(torch.randn(L, L))

    def attention(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) + bias, -1) @ v
    only_match(compiled_like_eager(attention, *qkv()), "flash", "s + t0")


def test_attention_without_batch_dims_and_an_untransposed_key():
    def attention(x, w, v):
        return torch.softmax(x @ w, -1) @ v         # [L, E] @ [E, S]: k is wᵀ, one batch and one head
    record = only_match(compiled_like_eager(attention, torch.randn(4, 8), torch.randn(8, 6), torch.randn(6, 3)),
                        "sdpa", "s")
    assert record.shapes == "q [4, 8], k [6, 8], v [6, 3]"


def test_attention_fusion_off_leaves_the_graph_alone():
    def attention(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) * SCALE, -1) @ v
    compiled_like_eager(attention, *qkv(), options={"attention_fusion": "off"})
    assert metrics.attention == []


def test_the_option_takes_only_auto_or_off():
    with pytest.raises(mini_inductor.config.OptionError, match="attention_fusion"):
        mini_inductor.config.current().replace(attention_fusion="on")


# ── symbolic sizes ──────────────────────────────────────────────────────────────────────────────
def test_dynamic_sequence_length_causal():
    def attention(q, k, v):
        t = q.shape[-2]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        s = (q @ k.transpose(-2, -1) * 0.5).masked_fill(~causal, float("-inf"))
        return s.softmax(-1) @ v + 0
    with use_flash_op(OP):
        compiled = torch.compile(attention, backend="mini_inductor", dynamic=True)
        for length in (6, 8):
            args = qkv(B, H, length, E)
            torch.testing.assert_close(compiled(*args), attention(*args), atol=1e-5, rtol=1e-5)
    assert {r.target for r in metrics.attention} == {"sdpa"}, [r.describe() for r in metrics.attention]
    assert "s0" in metrics.attention[0].shapes          # one graph for every length


def test_a_scale_made_of_the_dynamic_head_dim_is_taken_at_its_value_and_guarded():
    """nanoGPT's `1 / math.sqrt(k.size(-1))` under dynamic=True is a SymFloat: the match takes its
    value and guards on it, so new sequence lengths reuse the graph and a new head dim recompiles."""
    def attention(q, k, v):
        t = q.shape[-2]
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        return s.softmax(-1) @ v
    compiled = torch.compile(attention, backend="mini_inductor", dynamic=True)
    graphs = []
    for length, dim in ((6, 8), (9, 8), (7, 16), (5, 16)):
        args = qkv(B, H, length, dim)
        torch.testing.assert_close(compiled(*args), attention(*args), atol=1e-5, rtol=1e-5)
        graphs.append(len(metrics.compiled_graphs))
    assert graphs == [1, 1, 2, 2], graphs    # a new length reuses the graph; a new head dim does not
    assert [(r.target, r.mod) for r in metrics.attention] == [
        ("sdpa", f"where(~(j <= i), -inf, s * {1 / math.sqrt(8)})"), ("sdpa", "where(~(j <= i), -inf, s * 0.25)")], \
        [r.describe() for r in metrics.attention]
    assert "taken as 0.353553 (guarded on it)" in metrics.attention[0].data


def test_a_float_dynamo_makes_an_input_is_an_extra_tensor():
    # with dynamic=True Dynamo passes a Python float as a 0-dim tensor and reads it with .item()
    def attention(q, k, v):
        return (q @ k.transpose(-2, -1) * SCALE).softmax(-1) @ v
    with use_flash_op(OP):
        compiled = torch.compile(attention, backend="mini_inductor", dynamic=True)
        args = qkv()
        torch.testing.assert_close(compiled(*args), attention(*args), atol=1e-5, rtol=1e-5)
    # (Dynamo may trace it once more with the float as a constant: then "s * 0.5" goes to SDPA)
    first, *rest = metrics.attention
    assert first.target == "flash" and first.mod == "s * t0" and all(r.target for r in rest)


# ── reports ─────────────────────────────────────────────────────────────────────────────────────
def test_explain_lists_matches_and_near_misses():
    def attention(q, k, v):
        p = torch.softmax(q @ k.transpose(-2, -1) * SCALE, -1)
        w = torch.softmax(k @ q.transpose(-2, -1) * SCALE, -1)
        return p @ v, w @ v, w
    with use_flash_op(OP):
        report = mini_inductor.explain(attention, *qkv())
    text = str(report)
    assert "attention: 1 matched (flash: 0, sdpa: 1), near misses: 1" in text
    assert "the attention weights are used elsewhere" in text
    assert [a["target"] for a in report.attention] == ["sdpa", ""]
    assert 'id="attention"' in report.html_page()


# ── the expression language ─────────────────────────────────────────────────────────────────────
def _parsed(mod):
    """A mod text back to the matcher's expression tree (for sdpa_form), through the stand-in's reader."""
    import ast
    ops = {ast.Mult: "*", ast.Div: "/", ast.Add: "+", ast.Sub: "-", ast.LtE: "<=", ast.Lt: "<", ast.Gt: ">",
           ast.GtE: ">=", ast.BitAnd: "&", ast.BitOr: "|"}

    def tree(n):
        if isinstance(n, ast.Name):
            return {"s": ("s",), "inf": ("num", math.inf)}.get(n.id, ("idx", n.id))
        if isinstance(n, ast.Constant):
            return ("num", n.value)
        if isinstance(n, ast.UnaryOp):
            inner = tree(n.operand)
            if isinstance(n.op, ast.Invert):
                return ("not", inner)
            return ("num", -inner[1]) if inner[0] == "num" else ("neg", inner)
        if isinstance(n, ast.BinOp):
            return ("bin", ops[type(n.op)], tree(n.left), tree(n.right))
        if isinstance(n, ast.Compare):
            return ("bin", ops[type(n.ops[0])], tree(n.left), tree(n.comparators[0]))
        return ("call", n.func.id, tuple(tree(a) for a in n.args))
    return tree(ast.parse(mod, mode="eval").body)


@pytest.mark.parametrize("mod", ["s * 0.125", "where(j <= i, s * 0.125, -inf)", "tanh(s * 0.125 / 50.0) * 50.0",
                                 "s * 0.125 + t0", "where((j <= i) & (i - j < 256), s * 0.125, -inf)",
                                 "s * 0.125 - 0.5 * (i - j)", "where(~(j <= i), -inf, s / 2.0)"])
def test_render_writes_back_what_it_reads(mod):
    assert render(_parsed(mod)) == mod


@pytest.mark.parametrize("mod, form", [("s", (1.0, False)), ("s * 0.125", (0.125, False)), ("s / 4.0", (0.25, False)),
                                       ("where(j <= i, s * 0.5, -inf)", (0.5, True)),
                                       ("where(~(j <= i), -inf, s * 0.5)", (0.5, True)),
                                       ("where(j <= i, s, -inf) * 0.5", (0.5, True)),
                                       ("where(j <= i, s * 0.5, -1e9)", (0.5, True)),
                                       ("where(j <= i, s * 0.5, -1e3)", None), ("where(j < i, s, -inf)", None),
                                       ("s * 0.5 + t0", None)])
def test_sdpa_form_is_only_what_sdpa_computes(mod, form):
    assert sdpa_form(_parsed(mod)) == form


def test_the_stand_in_reads_the_contracts_examples():
    s = torch.randn(1, 1, 3, 3)
    names = {"s": s, "i": torch.arange(3)[:, None], "j": torch.arange(3), "t0": torch.zeros(3, 3)}
    out = evaluate("where(j <= i, s * 0.125, -inf) + t0", names)
    assert torch.isinf(out[0, 0, 0, 1]) and out[0, 0, 1, 0] == s[0, 0, 1, 0] * 0.125


# ── whole models and other dtypes ───────────────────────────────────────────────────────────────
def test_zoo_bert_trains_through_the_flash_op_with_its_padding_bias():
    from mini_inductor.examples import ZOO

    torch.manual_seed(0)
    zoo = ZOO["bert"]
    model, inputs = zoo.build(False), zoo.inputs(False, torch.get_default_device().type)
    with use_flash_op(OP):
        got = torch.compile(model, backend="mini_inductor")(*inputs)
        zoo.loss(got, inputs).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    assert [r.target for r in metrics.attention] == ["flash", "flash"], [r.describe() for r in metrics.attention]
    # the padding bias as an expression of the mask, or (on the H200, session 37) the mask's complement
    # already computed by the graph, the extra tensor: the same scores either way
    assert metrics.attention[0].mod in ("s / 4.0 + (1.0 - t0) * -3.4028234663852886e+38",
                                        "s / 4.0 + t0 * -3.4028234663852886e+38"), metrics.attention[0].mod
    model.zero_grad()
    want = model(*inputs)
    zoo.loss(want, inputs).backward()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_causal_and_biased(dtype):
    bias = torch.randn(L, L, dtype=dtype)

    def attention(q, k, v):
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        s = (q @ k.transpose(-2, -1) * SCALE).masked_fill(~causal, float("-inf"))
        return s.softmax(-1) @ v, (q @ k.transpose(-2, -1) * SCALE + bias).softmax(-1) @ v
    args = [t.to(dtype) for t in qkv()]
    with use_flash_op(OP):
        got = torch.compile(attention, backend="mini_inductor")(*args)
    assert [r.target for r in metrics.attention] == ["sdpa", "flash"]
    for g, w in zip(got, attention(*args)):
        assert g.dtype == dtype
        torch.testing.assert_close(g, w, atol=2e-2, rtol=2e-2)


def repeat_kv(x, n_rep):
    """Hugging Face's repeat_kv: each key/value head repeated for its group of query heads."""
    b, hkv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, hkv, n_rep, s, d).reshape(b, hkv * n_rep, s, d)


def llama_eager_attention(query, key, value, attention_mask, scaling, dropout=0.0, training=False):
    """The structure of Hugging Face's eager_attention_forward (Llama and most decoders since 2025)."""
    key_states, value_states = repeat_kv(key, 2), repeat_kv(value, 2)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
    attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=training)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output.transpose(1, 2).contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hugging_face_llama_eager_attention_with_grouped_heads(dtype):
    q = torch.randn(B, 4, L, E, dtype=dtype)
    k, v = (torch.randn(B, 2, L, E, dtype=dtype) for _ in range(2))
    mask = torch.full((L, L + 2), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None].expand(B, 1, L, L + 2)

    def attention(q, k, v, mask):
        return llama_eager_attention(q, k, v, mask, SCALE)
    with use_flash_op(OP):
        got = torch.compile(attention, backend="mini_inductor")(q, k, v, mask)
    record = only_match(metrics.attention, "flash", "s * 0.5 + t0")
    assert record.shapes == f"q [{B}, 4, {L}, {E}], k [{B}, 2, {L}, {E}], v [{B}, 2, {L}, {E}]"
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, attention(q, k, v, mask), atol=tol, rtol=tol)


def test_a_mask_changed_in_place_after_it_was_built_is_data_not_structure():
    # ones(...) then `keep[1] = False`: the mask is not all-true (it once became plain SDPA: a wrong answer)
    def attention(q, k, v):
        keep = torch.ones(B, L, dtype=torch.bool)
        keep[1, 2:] = False
        s = q @ k.transpose(-2, -1) * SCALE
        return s.masked_fill(~keep[:, None, None, :], float("-inf")).softmax(-1) @ v
    record = only_match(compiled_like_eager(attention, *qkv()), "flash")
    assert "t0" in record.mod


def test_scores_changed_in_place_are_a_near_miss():
    def attention(q, k, v):
        s = q @ k.transpose(-2, -1) * SCALE
        s.masked_fill_(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
        return s.softmax(-1) @ v
    records = compiled_like_eager(attention, *qkv())
    assert [r.target for r in records] == [""] and "used elsewhere" in records[0].reason, [r.describe() for r in records]


def test_float32_on_a_gpu_stays_written_out_until_its_scores_are_large():
    # measured slower fused on the H100 (match.py); past 256 MiB of scores the memory decides
    from torch._subclasses.fake_tensor import FakeTensorMode
    from mini_inductor.attention.match import float32_left_as_written
    with FakeTensorMode():
        q32, q16 = torch.empty(1, 12, 512, 64, device="cuda"), torch.empty(1, 12, 512, 64, device="cuda", dtype=torch.float16)
    reason = float32_left_as_written(q32, (1, 12, 512, 512))
    assert reason and reason.startswith("float32 on the GPU with 12.0 MiB of scores: left as written")
    assert float32_left_as_written(q32, (8, 16, 4096, 4096)) is None      # 8 GiB of scores: fused
    assert float32_left_as_written(q16, (1, 12, 512, 512)) is None        # half precision: fused
    assert float32_left_as_written(torch.empty(1, 12, 512, 64, device="cpu"), (1, 12, 512, 512)) is None   # the CPU



def test_an_attention_output_changed_in_place_stays_as_written():
    # SDPA and the flash op keep their output for the backward, the written-out matmul does not: an
    # in-place change of the output broke the backward (found by the fuzzer's attention family, seed 71)
    def attention(q, k, v):
        out = (q @ k.transpose(-2, -1) * SCALE).softmax(-1) @ v
        out[:, :1].mul_(2)
        return out
    (record,) = compiled_like_eager(attention, *qkv(requires_grad=True), backward=True)
    assert record.target == "" and "changed in place" in record.reason, record.describe()


def test_an_extra_tensor_changed_in_place_after_the_attention_stays_as_written():
    # the flash op reads its extra tensors again in the backward; eager's add did not keep the bias
    # (found by the fuzzer's attention family, --autograd seed 88). Changed before, it is just data.
    def attention(q, k, v, bias):
        out = (q @ k.transpose(-2, -1) * SCALE + bias).softmax(-1) @ v
        bias.mul_(2)
        return out
    bias = torch.randn(B, 1, 1, L)
    ref_bias = bias.clone()
    left_as_written_like_eager(attention, [bias], [ref_bias], "changed in place after the attention")
    torch.testing.assert_close(bias, ref_bias)


def left_as_written_like_eager(attention, extra, ref_extra, reason):
    """`attention(q, k, v, *extra)` compiled against eager, with the gradients of q, k and v: equal, and
    the attention left as written for `reason`."""
    q, k, v = qkv(requires_grad=True)
    refs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    got = torch.compile(attention, backend="mini_inductor")(q, k, v, *extra)
    want = attention(*refs, *ref_extra)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    for a, r in zip((q, k, v), refs):
        torch.testing.assert_close(a.grad, r.grad, atol=1e-5, rtol=1e-5)
    (record,) = metrics.attention
    assert record.target == "" and reason in record.reason, record.describe()


def test_a_key_whose_base_is_changed_in_place_after_the_attention_stays_as_written():
    # k is a transpose of an input that a slice of it changes in place afterwards: views share their
    # base's version counter, and SDPA and the flash op keep k for the backward, which eager's matmul
    # does not when only v requires grad (found by the fuzzer, --autograd seed 98)
    def attention(q, kt, v):
        out = (q @ kt.transpose(-2, -1) * SCALE).softmax(-1) @ v
        kt[:1].sigmoid_()
        return out
    q, k, v = qkv()
    v.requires_grad_()
    refs = [q.clone(), k.clone(), v.detach().clone().requires_grad_()]
    got = torch.compile(attention, backend="mini_inductor")(q, k, v)
    want = attention(*refs)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(k, refs[1])
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(v.grad, refs[2].grad, atol=1e-5, rtol=1e-5)
    (record,) = metrics.attention
    assert record.target == "" and "changed in place" in record.reason, record.describe()


@pytest.mark.parametrize("through", ["contiguous", "to", "reshape_as", "diagonal"])
def test_an_output_changed_through_an_op_that_may_alias_it_stays_as_written(through):
    # .contiguous() of a contiguous tensor, a .to() that changes nothing, reshape_as and diagonal return
    # the tensor itself or a view of it: zero_() through them changed the attention's output, which the
    # flash op saves for its backward (found by the fuzzer, seeds 132 and 137)
    alias = {"contiguous": lambda o: o.contiguous(), "to": lambda o: o.to(o.dtype),
             "reshape_as": lambda o: o.reshape_as(o), "diagonal": lambda o: o.diagonal(0, -2, -1)}[through]

    def attention(q, k, v, m):
        out = (q @ k.transpose(-2, -1) * SCALE).masked_fill(m, -1.0).softmax(-1) @ v
        alias(out).zero_()
        return out
    m = torch.rand(L, L, generator=torch.Generator().manual_seed(0), device="cpu").to(torch.get_default_device()) > 0.7
    left_as_written_like_eager(attention, [m], [m], "changed in place")
