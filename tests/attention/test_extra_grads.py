"""Gradients of the flash-attention op's float extra tensors (attention/extra_grads.py) against eager
autograd through the materialized scores: a bias varying along queries and keys, along one of them,
along neither (a slope per head, a value per batch and head), beside a mask given as data, under
grouped-query heads, with rows that have nothing live, in 16-bit types, and with the LSE read."""
import pytest
import torch

from mini_inductor.attention import flash, score_mod
from mini_inductor.attention.extra_grads import reference_extra_backward

NEG_INF = float("-inf")
GRAD_TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=2e-2, rtol=2e-2),
            torch.bfloat16: dict(atol=8e-2, rtol=5e-2)}


def _eager(q, k, v, extra, mod, empty_rows_zero):
    """The op's contract written out with torch: scores, the modification, softmax, the output."""
    Hq, L, S = q.shape[1], q.shape[2], k.shape[2]
    group = Hq // k.shape[1]
    s = q.float() @ k.float().repeat_interleave(group, 1).transpose(-1, -2)
    env = {"s": s, "L": L, "S": S, "b": torch.arange(q.shape[0], device=q.device).view(-1, 1, 1, 1),
           "h": torch.arange(Hq, device=q.device).view(-1, 1, 1), "i": torch.arange(L, device=q.device)[:, None],
           "j": torch.arange(S, device=q.device)[None, :], **{f"t{n}": t for n, t in enumerate(extra)}}
    score = score_mod.evaluate(score_mod.parse(mod).tree, env).float()
    p = torch.softmax(score, -1)
    if empty_rows_zero:
        p = torch.where((score == NEG_INF).all(-1, keepdim=True), 0.0, p)
    return (p @ v.float().repeat_interleave(group, 1)).to(q.dtype)


def _data(device, shape, seed, kind=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, device="cpu").to(device=device, dtype=kind)


CASES = {
    # name: (mod, [(extra shape, its dtype or None for q's, requires grad)], L, S, Hq, Hkv, empty_rows_zero)
    "full_bias": ("s * 0.25 + t0", [((2, 40, 36), None, True)], 40, 36, 2, 2, False),
    "slope_causal": ("where(j <= i, s * 0.25 + t0 * (j - i), -inf)", [((1, 2, 1, 1), None, True)], 40, 40, 2, 2, False),
    "per_row": ("s * 0.25 + t0", [((40, 1), None, True)], 40, 36, 2, 2, False),
    "per_key_scale": ("s * 0.25 * t0", [((36,), None, True)], 40, 36, 2, 2, False),
    "batch_head_tanh": ("tanh(s * 0.25 + t0) * 2.0", [((2, 2, 1, 1), None, True)], 40, 36, 2, 2, False),
    "gqa_bias": ("where(j <= i, s * 0.25 + t0, -inf)", [((4, 40, 40), None, True)], 40, 40, 4, 2, False),
    "data_mask_and_bias": ("where(t0, -inf, s * 0.25 + t1)", [((2, 1, 1, 36), torch.bool, False),
                                                             ((2, 40, 36), None, True)], 40, 36, 2, 2, False),
    "empty_rows": ("where(j <= i - 20, s * 0.25 + t0, -inf)", [((2, 40, 40), None, True)], 40, 40, 2, 2, True),
    "two_learned": ("s * t1 + t0", [((40, 36), None, True), ((2, 1, 1), None, True)], 40, 36, 2, 2, False),
    # read at a computed index (score_mod.Gather): a relative-position table, per head and per (b, h)
    # row, a learned table beside a bool one that masks, both at indices the atomic adds collide on
    "relative_bias": ("s * 0.25 + t0[i - j + 35]", [((75,), None, True)], 40, 36, 2, 2, False),
    "head_relative_causal": ("where(j <= i, s * 0.25 + t0[h, i - j + 39], -inf)", [((2, 79), None, True)],
                             40, 40, 2, 2, False),
    "batch_head_rows": ("s * 0.25 + t0[b * 3 + h, i - j + 35]", [((5, 75), None, True)], 40, 36, 2, 2, False),
    "gathered_mask": ("where(t1[i - j + 35], -inf, s * 0.25 + t0[h, 2 * j - i + 40])",
                      [((2, 111), None, True), ((75,), torch.bool, False)], 40, 36, 2, 2, True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_extra_tensor_gradients_match_eager(device, case, dtype, monkeypatch):
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0)   # small sizes still use the data table
    mod, specs, L, S, Hq, Hkv, empty_rows_zero = CASES[case]
    q, k, v = (_data(device, (2, h, n, 16), seed, dtype) for seed, (h, n) in enumerate([(Hq, L), (Hkv, S), (Hkv, S)]))
    extra = []
    for n, (shape, kind, grad) in enumerate(specs):
        t = _data(device, shape, 10 + n) > 0.7 if kind is torch.bool else _data(device, shape, 10 + n, dtype).abs()
        extra.append(t.requires_grad_(grad))
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)] + [t for t in extra if t.requires_grad]
    out = torch.ops.mini_inductor.flash_attention(*leaves[:3], extra, mod, empty_rows_zero)
    ref_extra = [t.detach().clone().requires_grad_(t.requires_grad) for t in extra]
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)] + [t for t in ref_extra if t.requires_grad]
    want = _eager(*ref_leaves[:3], ref_extra, mod, empty_rows_zero)
    upstream = _data(device, want.shape, 99, dtype)
    grads = torch.autograd.grad(out, leaves, upstream)
    expected = torch.autograd.grad(want, ref_leaves, upstream)
    for n, (g, e) in enumerate(zip(grads, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype, (n, g.shape, e.shape, g.dtype, e.dtype)
        torch.testing.assert_close(g.float(), e.float(), msg=lambda m: f"leaf {n}: {m}", **GRAD_TOL[dtype])


def test_the_lse_gradient_reaches_the_extra_tensors_gradient(device):
    # flex attention's return_lse: the LSE's gradient takes part in dS, so in the bias's gradient too
    q, k, v = (_data(device, (1, 2, 24, 8), seed) for seed in range(3))
    bias = _data(device, (2, 24, 24), 5).requires_grad_()
    mod = "s * 0.25 + t0"
    out, lse = torch.ops.mini_inductor.flash_attention_forward(q, k, v, [bias], mod)
    loss = (out * _data(device, out.shape, 6)).sum() + (flash.base2_lse(lse, mod) * _data(device, (1, 2, 24), 7)).sum()
    (got,) = torch.autograd.grad(loss, [bias])
    ref = bias.detach().clone().requires_grad_()
    s = (q @ k.transpose(-1, -2)) * 0.25 + ref
    want_out = torch.softmax(s, -1) @ v
    want_lse = torch.logsumexp(s, -1) / torch.log(torch.tensor(2.0))
    loss = (want_out * _data(device, out.shape, 6)).sum() + (want_lse * _data(device, (1, 2, 24), 7)).sum()
    (want,) = torch.autograd.grad(loss, [ref])
    torch.testing.assert_close(got, want, **GRAD_TOL[torch.float32])


def test_the_reference_formula_matches_the_kernel(device):
    # the torch reference (CPU without the interpreter) and the generated kernel agree
    q, k, v = (_data(device, (2, 2, 20, 8), seed) for seed in range(3))
    slopes = _data(device, (1, 2, 1, 1), 4)
    mod = "where(j <= i, s * 0.25 + t0 * (j - i), -inf)"
    out, lse = torch.ops.mini_inductor.flash_attention_forward(q, k, v, [slopes], mod)
    dout = _data(device, out.shape, 8)
    got = torch.ops.mini_inductor.flash_attention_extra_backward(dout, q, k, v, out, lse, [slopes], mod, 0)
    want = reference_extra_backward(dout, q, k, v, [slopes], mod, 0)
    assert got.shape == slopes.shape
    torch.testing.assert_close(got, want, **GRAD_TOL[torch.float32])
