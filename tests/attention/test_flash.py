"""torch.ops.mini_inductor.flash_attention computes eager's attention (softmax of the modified float32
scores, then @ v), forward and backward, NaN where eager has NaN; its modification compiler refuses what
the contract does not allow, by name; a compiled graph calls the ops as extern kernels, not fallbacks.

Without a GPU the kernels run in Triton's interpreter: tensors stay tiny (L, S ≤ 40, 16-wide blocks, so
that every case crosses block edges). Tests marked gpu check fp16 at real sizes against SDPA.
"""
import math

import pytest
import torch

import mini_inductor  # noqa: F401  (the backend)
from mini_inductor import metrics
from mini_inductor.attention import flash, score_mod, tables

# the interpreter computes 0/0 and log2(0) of fully masked (and padding) rows in numpy, which warns
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NEG_INF = float("-inf")
TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
       torch.float16: dict(atol=5e-3, rtol=5e-3)}
GRAD_TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=8e-2, rtol=5e-2),
            torch.float16: dict(atol=2e-2, rtol=2e-2)}


def eager_attention(q, k, v, modify):
    """Eager's math: scores in float32, modify(s, i, j), softmax over keys, @ v; key heads repeated."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q.float() @ k.float().transpose(-1, -2)
    i = torch.arange(s.shape[-2], device=s.device)[:, None]
    j = torch.arange(s.shape[-1], device=s.device)[None, :]
    return (torch.softmax(modify(s, i, j), dim=-1) @ v.float()).to(q.dtype)


def inputs(device, dtype, B=2, Hq=2, Hkv=None, L=40, S=None, E=16, Ev=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    Hkv, S, Ev = Hkv or Hq, S or L, Ev or E
    make = lambda *shape: torch.randn(*shape, generator=gen, device="cpu").to(device=device, dtype=dtype)  # noqa: E731
    return make(B, Hq, L, E), make(B, Hkv, S, E), make(B, Hkv, S, Ev)


def check_against_eager(q, k, v, extra, mod, modify, *, equal_nan=False):
    """Forward and backward (dq, dk, dv for one random upstream gradient) of the op against eager."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = torch.ops.mini_inductor.flash_attention(*leaves, list(extra), mod)
    assert out.shape == (q.shape[0], q.shape[1], q.shape[2], v.shape[3]) and out.is_contiguous()
    assert out.dtype == q.dtype
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    expected = eager_attention(*ref_leaves, modify)
    torch.testing.assert_close(out, expected, equal_nan=equal_nan, **TOL[q.dtype])
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), device="cpu").to(out)
    grads = torch.autograd.grad(out, leaves, upstream)
    expected_grads = torch.autograd.grad(expected, ref_leaves, upstream)
    for name, g, e in zip("qkv", grads, expected_grads):
        assert g.shape == e.shape, name
        torch.testing.assert_close(g, e, equal_nan=equal_nan, msg=lambda m: f"d{name}: {m}", **GRAD_TOL[q.dtype])
    return out, grads


# ---------------------------------------------------------------------------------------------------
# what it computes

CASES = {
    "plain": ("s * 0.25", lambda s, i, j: s * 0.25),
    "causal": ("where(j <= i, s * 0.25, -inf)", lambda s, i, j: torch.where(j <= i, s * 0.25, NEG_INF)),
    "softcap": ("tanh(s * 0.25 / 2.0) * 2.0", lambda s, i, j: torch.tanh(s * 0.25 / 2.0) * 2.0),
    "sliding_window": ("where((j <= i) & (i - j < 30), s * 0.25, -inf)",   # all three forward loops run
                       lambda s, i, j: torch.where((j <= i) & (i - j < 30), s * 0.25, NEG_INF)),
    "functions": ("maximum(s * 0.25, -1.0) + sqrt(abs(s) + 1.0) * 0.1 - log(1.0 + exp(s * 0.1)) + (i % 3) - j // 4",
                  lambda s, i, j: (torch.maximum(s * 0.25, torch.tensor(-1.0, device=s.device))
                                   + torch.sqrt(s.abs() + 1.0) * 0.1 - torch.log(1.0 + torch.exp(s * 0.1))
                                   + i % 3 - j // 4)),
    "relative_bias": ("s * 0.25 - 0.5 * abs(i - j) / S + sigmoid(s)",
                      lambda s, i, j: s * 0.25 - 0.5 * (i - j).abs() / s.shape[-1] + torch.sigmoid(s)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_modifications_of_i_and_j_match_eager_forward_and_backward(device, case):
    mod, modify = CASES[case]
    check_against_eager(*inputs(device, torch.float32), [], mod, modify)


@pytest.mark.parametrize("case", ["causal", "sliding_window", "plain", "padding", "gqa"])
def test_dq_with_blocks_of_its_own_matches_eager(device, case, monkeypatch):
    # the dq kernel steps over keys, dk/dv over queries: each takes its own blocks (flash.dq_config),
    # and one table serves both, its query ranges in dk/dv's taller blocks; here dk/dv's blocks are
    # 32 (64 on the GPU) x 16 and dq's 16 x 16, as the GPU's 128 x 64 and 64 x 64 in 16-bit types
    if device == "cuda":
        monkeypatch.setattr(flash, "backward_config", lambda *a: (64, 32, 4, 2))
        monkeypatch.setattr(flash, "dq_config", lambda *a: (32, 32, 4, 2))
    else:
        monkeypatch.setattr(flash, "backward_config", lambda *a: (32, 16, 1, 1))
        monkeypatch.setattr(flash, "dq_config", lambda *a: (16, 16, 1, 1))
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0)
    flash._plan.cache_clear()
    plan_dq = []
    original = flash._plan_for
    monkeypatch.setattr(flash, "_plan_for", lambda *a, **kw: plan_dq.append(original(*a, **kw)) or plan_dq[-1])
    try:
        if case == "padding":
            q, k, v = inputs(device, torch.float32, L=52, S=70)
            pad = torch.zeros(2, 1, 1, 70, dtype=torch.bool, device=device)
            pad[0, ..., 40:] = True
            check_against_eager(q, k, v, [pad], "where(t0, -inf, s * 0.25)",
                                lambda s, i, j: s.masked_fill(pad, NEG_INF) * 0.25)
        elif case == "gqa":
            mod, modify = CASES["causal"]
            check_against_eager(*inputs(device, torch.float32, Hq=4, Hkv=2, L=50), [], mod, modify)
        else:
            mod, modify = CASES[case]
            check_against_eager(*inputs(device, torch.float32, L=70), [], mod, modify)
    finally:
        flash._plan.cache_clear()
    backward = [p for p in plan_dq if p.dq is not None]
    assert backward and all((p.block_m, p.block_n) != p.dq[:2] for p in backward)


@pytest.mark.parametrize("case", ["plain", "causal"])
def test_bfloat16_matches_eager_loosely(device, case):
    mod, modify = CASES[case]
    check_against_eager(*inputs(device, torch.bfloat16, B=1), [], mod, modify)


def test_padding_mask_of_bool_broadcast_over_heads_and_rows(device):
    q, k, v = inputs(device, torch.float32)
    keep = torch.rand(2, 1, 1, 40, generator=torch.Generator().manual_seed(3), device="cpu").to(device) > 0.4
    keep[..., 0] = True   # every row keeps a key: no NaN here
    check_against_eager(q, k, v, [keep], "where(t0, s * 0.25, -inf)",
                        lambda s, i, j: torch.where(keep, s * 0.25, NEG_INF))


def test_additive_float_bias_per_head(device):
    q, k, v = inputs(device, torch.float32)
    bias = torch.randn(1, 2, 40, 40, generator=torch.Generator().manual_seed(4), device="cpu").to(device)
    check_against_eager(q, k, v, [bias], "s * 0.25 + t0", lambda s, i, j: s * 0.25 + bias)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_alibi_slopes_per_head(device, dtype):
    q, k, v = inputs(device, dtype, Hq=4, B=1)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], device=device).view(1, 4, 1, 1)
    check_against_eager(q, k, v, [slopes], "where(j <= i, s * 0.25 + t0 * (j - i), -inf)",
                        lambda s, i, j: torch.where(j <= i, s * 0.25 + slopes * (j - i), NEG_INF))


def test_grouped_query_heads_sum_dk_dv_over_their_group(device):
    q, k, v = inputs(device, torch.float32, Hq=4, Hkv=2, B=1)
    check_against_eager(q, k, v, [], *CASES["causal"])


def test_value_head_dim_differs_and_head_dim_is_not_a_power_of_two(device):
    q, k, v = inputs(device, torch.float32, B=1, E=24, Ev=16)
    check_against_eager(q, k, v, [], *CASES["causal"])


@pytest.mark.parametrize("L,S", [(24, 40), (40, 17)])
def test_query_and_key_lengths_differ(device, L, S):
    q, k, v = inputs(device, torch.float32, B=1, L=L, S=S)
    # bottom-right causal: with L > S the first L - S rows see no key (NaN, as in eager)
    check_against_eager(q, k, v, [], "where(j <= i + S - L, s * 0.25, -inf)",
                        lambda s, i, j: torch.where(j <= i + S - L, s * 0.25, NEG_INF), equal_nan=True)


def test_transposed_views_of_q_k_v(device):
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 40, 2, 16, generator=gen, device="cpu").to(device).transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    check_against_eager(q, k, v, [], *CASES["causal"])


def test_fully_masked_rows_are_nan_forward_and_backward_as_in_eager(device):
    # rows 0..3 see no key: eager's softmax of all -inf is NaN; its dv is then NaN for every key,
    # while dq and dk stay finite (where passes 0 to the masked branch)
    out, (dq, dk, dv) = check_against_eager(
        *inputs(device, torch.float32, B=1), [], "where(j <= i - 4, s * 0.25, -inf)",
        lambda s, i, j: torch.where(j <= i - 4, s * 0.25, NEG_INF), equal_nan=True)
    assert out[:, :, :4].isnan().all() and not out[:, :, 4:].isnan().any()
    assert dv.isnan().all() and not dq.isnan().any()


def test_a_row_masked_by_an_additive_bias_is_nan_through_dq_and_dk_too(device):
    q, k, v = inputs(device, torch.float32, B=1)
    bias = torch.zeros(1, 1, 40, 40, device=device)
    bias[..., 7, :] = NEG_INF
    out, (dq, dk, dv) = check_against_eager(q, k, v, [bias], "s * 0.25 + t0", lambda s, i, j: s * 0.25 + bias,
                                            equal_nan=True)
    assert dq[:, :, 7].isnan().all() and dk.isnan().all()


def _zero_rows_expected(q, k, v, modify):
    """Eager flex attention's answer: softmax of the modified scores, 0 where a row is all -inf."""
    s = q.float() @ k.float().transpose(-1, -2)
    i = torch.arange(s.shape[-2], device=s.device)[:, None]
    j = torch.arange(s.shape[-1], device=s.device)[None, :]
    score = modify(s, i, j)
    p = torch.where((score == NEG_INF).all(-1, keepdim=True), 0.0, torch.softmax(score, -1))
    return (p @ v.float()).to(q.dtype)


@pytest.mark.parametrize("shift", [4, 20])
@pytest.mark.parametrize("path", ["kernels", "reference", "data_table"])
def test_empty_rows_zero_gives_zero_and_zero_gradients_for_rows_with_nothing_live(device, path, shift, monkeypatch):
    # rows 0..shift-1 see no key by an index mask, row 9 none by a padding tensor: 0 and no NaN
    # anywhere, forward and backward, by the kernels (with their block tables), and by the torch
    # reference; with shift 20 the first query block has no live score at all. Such rows have no
    # gradient, so the backward's table skips as the forward's does (no fully-masked-row rule)
    if path == "reference":
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        device = "cpu"
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0)
    q, k, v = inputs(device, torch.float32, B=2, Hq=2, L=40, E=8)
    dead = torch.zeros(1, 1, 40, 1, dtype=torch.bool, device=device)
    dead[..., 9, :] = True
    if path == "data_table":
        mod, extra = f"where(t0, -inf, where(j <= i - {shift}, s * 0.25, -inf))", [dead]
    else:
        mod, extra = f"where(j <= i - {shift}, s * 0.25 + t0, -inf)", [torch.where(dead, NEG_INF, 0.0)]

    def modify(s, i, j):
        return torch.where(j <= i - shift, s * 0.25, NEG_INF).masked_fill(dead, NEG_INF)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = torch.ops.mini_inductor.flash_attention(*leaves, extra, mod, True)
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = _zero_rows_expected(*ref_leaves, modify)
    torch.testing.assert_close(out, expected, **TOL[torch.float32])
    assert (out[:, :, :shift] == 0).all() and (out[:, :, 9] == 0).all()
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), device="cpu").to(device)
    grads = torch.autograd.grad(out, leaves, upstream)
    for name, g, e in zip("qkv", grads, torch.autograd.grad(expected, ref_leaves, upstream)):
        assert not g.isnan().any(), name
        torch.testing.assert_close(g, e, msg=lambda m: f"d{name}: {m}", **GRAD_TOL[torch.float32])
    assert (grads[0][:, :, :shift] == 0).all() and (grads[0][:, :, 9] == 0).all()
    if path != "reference":
        table = tables.block_ranges(score_mod.parse(mod), 40, 40, 16, 16, torch.device(device), True, extra,
                                   empty_rows_zero=True)
        assert table.kv_hi.reshape(-1, 3)[0].tolist()[0] < 3, table   # not widened to every key block


def test_float32_respects_allow_tf32(device):
    q, k, v = inputs(device, torch.float32, B=1, L=16)
    sm = score_mod.parse("s * 0.25")
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert flash._plan_for(q, v, [], sm, backward=False).meta["PRECISION"] == "ieee"
        torch.backends.cuda.matmul.allow_tf32 = True
        # eager's CPU matmuls never use TF32, nor does the interpreter's kernel
        assert flash._plan_for(q, v, [], sm, backward=True).meta["PRECISION"] == ("tf32" if device == "cuda" else "ieee")
        assert str(flash._plan_for(q.half(), v.half(), [], sm, backward=False).meta["DOT"]) == "fp16"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def test_float32_operands_under_tf32_are_rounded_to_nearest_forward_and_backward(device):
    # every score is equal (k is ones), so the output is v's mean: v is 1 + 3·2**-12, which TF32
    # rounds to nearest as 1 + 2**-10 (cuBLAS) and truncates to 1 (tensor cores given float32 bits).
    # On the CPU there is no TF32 (as in eager): the output is v itself
    odd = 1 + 3 * 2 ** -12
    want = 1 + 2 ** -10 if device == "cuda" else odd
    q = torch.full((1, 1, 32, 16), odd, device=device, requires_grad=True)
    k = torch.ones(1, 1, 32, 16, device=device, requires_grad=True)
    v = torch.full((1, 1, 32, 16), odd, device=device, requires_grad=True)
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        out = torch.ops.mini_inductor.flash_attention(q, k, v, [], "s * 0.25")
        if device == "cuda":
            # compiled, the kernel's p is exp2 of an FMA-contracted (s * c - max), which leaves a rounding
            # residue: p is 1 within 2**-22, not 1, so out is want within a few ulps (the other
            # candidates, 1 and odd, are 2**-10 and 2**-12 away)
            torch.testing.assert_close(out, torch.full_like(out, want), rtol=2 ** -20, atol=0)
        else:
            assert torch.equal(out, torch.full_like(out, want))
        # dv = pᵀ·dO with p = 1/32 (exact) and dO = odd: each of the 32 rows adds odd rounded / 32
        out.backward(torch.full_like(out, odd))
        torch.testing.assert_close(v.grad, torch.full_like(v, want), rtol=2 ** -20, atol=0)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def test_the_convenience_wrapper_scales_by_one_over_sqrt_head_dim(device):
    q, k, v = inputs(device, torch.float32, B=1, L=20)
    out = flash.flash_attention(q, k, v, mod="where(j <= i, s * scale, -inf)")
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                               **TOL[torch.float32])


@pytest.mark.parametrize("mod,modify", [CASES["softcap"], ("where(j <= i - 4, s * 0.25, -inf)",
                                                           lambda s, i, j: torch.where(j <= i - 4, s * 0.25, NEG_INF))])
def test_without_triton_the_cpu_runs_the_torch_reference(monkeypatch, mod, modify):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v = inputs("cpu", torch.float32, B=1, Hq=4, Hkv=2, L=20)
    check_against_eager(q, k, v, [], mod, modify, equal_nan=True)


# ---------------------------------------------------------------------------------------------------
# block skipping

def ranges(mod, L=64, S=64, backward=False):
    table = tables.block_ranges(score_mod.parse(mod), L, S, 16, 16, torch.device("cpu"), backward)
    return {name: getattr(table, name).tolist() for name in ("kv_lo", "kv_hi", "full_lo", "full_hi", "q_lo", "q_hi")}


def test_a_static_table_gives_query_ranges_in_taller_blocks_and_every_config_allows_one_table():
    # a backward's one table: dq's key ranges in its blocks, dk/dv's query ranges in its taller ones
    sm = score_mod.parse("where(j <= i, s * 0.125, -inf)")
    table = tables.block_ranges(sm, 64, 64, 16, 16, torch.device("cpu"), True, q_block_m=32)
    assert table.kv_hi.tolist() == [1, 2, 3, 4] and table.q_lo.tolist() == [0, 0, 1, 1]
    assert table.qfull_lo.tolist() == [1, 1, 2, 2] and table.qfull_hi.tolist() == [2, 2, 2, 2]
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for E in (16, 64, 100, 128, 256):
            for skip in (False, True):
                for on_gpu in (False, True):   # _plan asserts dk/dv's blocks are whole numbers of dq's
                    flash._plan("where(j <= i, s, -inf)", (), E, E, dtype, on_gpu, False, True, skip, ())


def test_a_window_is_a_narrow_band_and_a_causal_triangle_is_not():
    # dk/dv's taller query blocks pay off over a triangle, not a band (flash.backward_config)
    window, causal = "where((j <= i) & (i - j < 256), s, -inf)", "where(j <= i, s * 0.125 + (j - i) * 0.5, -inf)"
    assert flash.narrow_band(window, 4096, 4096) and flash.narrow_band(window, 1024, 1024)
    assert not flash.narrow_band(causal, 4096, 4096) and not flash.narrow_band(causal, 1024, 1024)
    assert flash.narrow_band(causal, 256, 256)   # 4 query blocks in all
    assert flash.backward_config(64, torch.float16, True, True)[:2] == (64, 64)
    assert flash.backward_config(64, torch.float16, True, False)[:2] == (128, 64)


def test_a_causal_mask_visits_only_the_lower_triangle_of_blocks_and_masks_only_its_diagonal():
    assert score_mod.parse("where(j <= i, s * 0.125, -inf)").skips_blocks
    table = ranges("where(j <= i, s * 0.125, -inf)")
    assert table["kv_lo"] == [0, 0, 0, 0] and table["kv_hi"] == [1, 2, 3, 4]
    # whole blocks below the diagonal run unmasked (block 0 has none: its empty run sits at kv_hi)
    assert table["full_lo"] == [1, 0, 0, 0] and table["full_hi"] == [1, 1, 2, 3]
    assert table["q_lo"] == [0, 1, 2, 3] and table["q_hi"] == [4, 4, 4, 4]


def test_a_sliding_window_visits_the_blocks_of_its_band():
    table = ranges("where((j <= i) & (i - j < 16), s, -inf)")
    assert table["kv_lo"] == [0, 0, 1, 2] and table["kv_hi"] == [1, 2, 3, 4]
    assert table["full_hi"] == table["full_lo"] == table["kv_hi"]   # no block is whole: one masked loop
    table = ranges("where((j <= i) & (i - j < 40), s, -inf)", L=96, S=96)
    assert table["kv_lo"] == [0, 0, 0, 0, 1, 2] and table["kv_hi"] == [1, 2, 3, 4, 5, 6]
    assert table["full_lo"] == [1, 0, 1, 2, 3, 4] and table["full_hi"] == [1, 1, 2, 3, 4, 5]   # m - 1 only


def test_fully_masked_rows_make_the_backward_visit_every_block():
    fwd, bwd = ranges("where(j <= i - 20, s, -inf)"), ranges("where(j <= i - 20, s, -inf)", backward=True)
    assert fwd["kv_lo"] == [0, 0, 0, 0] and fwd["kv_hi"] == [0, 1, 2, 3]   # block 0: nothing live
    assert bwd["kv_lo"] == [0] * 4 and bwd["kv_hi"] == [4] * 4 and bwd["q_hi"] == [4] * 4


@pytest.mark.parametrize("mod", ["s * 0.125 + t0", "where(h > 0, s, -inf)", "s * 0.125",
                                 "where(j <= i, s, 0.0)", "exp(s) + where(j <= i, 0.0, -inf)"])
def test_no_skipping_where_blocks_cannot_be_known_dead(mod):
    sm = score_mod.parse(mod)
    if sm.skips_blocks:   # only the last may: it skips, but marks nothing dead (exp may be +inf)
        table = ranges(mod, 32, 32)
        assert table["kv_lo"] == [0, 0] and table["kv_hi"] == [2, 2]


def test_an_additive_mask_written_in_the_modification_is_skipped():
    assert ranges("s * 0.125 + where(j <= i, 0.0, -inf)", 32, 32)["kv_hi"] == [1, 2]


FILL32 = torch.finfo(torch.float32).min


def data_ranges(mod, extra, device, L=64, S=64, backward=False):
    # built by the table kernels on `device` (interpreted on the CPU, compiled on the GPU)
    table = tables.block_ranges(score_mod.parse(mod), L, S, 16, 16, torch.device(device), backward, extra)
    return {name: getattr(table, name).tolist() for name in ("kv_lo", "kv_hi", "full_lo", "full_hi", "q_lo", "q_hi")}


def test_a_causal_mask_kept_as_a_bool_buffer_skips_as_the_written_one(device):
    # HuggingFace's GPT-2: a tril buffer, sliced, and where(mask, scores, finfo.min)
    mod = f"where(t0, s * 0.125, {FILL32!r})"
    sm = score_mod.parse(mod)
    assert sm.skips_blocks and sm.dead_reads_tensors and sm.finite_fill
    buffer = torch.ones(80, 80, dtype=torch.bool, device=device).tril()[None, None, :64, :64]
    forward = FORWARD_RANGES
    assert {n: data_ranges(mod, [buffer], device)[n] for n in forward} == \
        {n: ranges("where(j <= i, s * 0.125, -inf)")[n] for n in forward}
    assert data_ranges(mod, [buffer], device, backward=True) == ranges("where(j <= i, s * 0.125, -inf)", backward=True)


def test_a_padding_mask_skips_each_batchs_own_padding(device):
    pad = torch.zeros(2, 1, 1, 64, dtype=torch.bool, device=device)
    pad[0, ..., 40:] = True
    pad[1, ..., 48:] = True
    table = tables.block_ranges(score_mod.parse("where(t0, -inf, s * 0.125)"), 64, 64, 16, 16, torch.device(device),
                               False, [pad])
    assert (table.tab_b, table.tab_h) == (1, 0)          # a table per batch, shared by the heads
    assert table.kv_lo.tolist() == [[0] * 4] * 2
    assert table.kv_hi.tolist() == [[3] * 4, [3] * 4]    # batch 0: keys 40-47 live in block 2; block 3 skipped
    assert table.full_lo.tolist() == [[0] * 4] * 2
    assert table.full_hi.tolist() == [[2] * 4, [3] * 4]  # block 2 is masked in batch 0 only
    table = data_ranges("where(t0, -inf, s * 0.125)", [pad], device, backward=True)
    assert table["q_lo"] == [[0] * 4] * 2 and table["q_hi"] == [[4, 4, 4, 0], [4, 4, 4, 0]]
    pad[1, ..., 32:] = True                              # batch 1 pads blocks 2 and 3
    table = data_ranges("where(t0, -inf, s * 0.125)", [pad], device)
    assert table["kv_hi"] == [[3] * 4, [2] * 4] and table["full_hi"] == [[2] * 4, [2] * 4]


FORWARD_RANGES = ("kv_lo", "kv_hi", "full_lo", "full_hi")


@pytest.mark.parametrize("backward", [False, True])
def test_the_table_kernel_gives_the_table_torch_computes_from_the_whole_grid(device, backward):
    gen = torch.Generator(device="cpu").manual_seed(0)
    rand = lambda *shape: torch.rand(*shape, generator=gen, device="cpu").to(device)     # noqa: E731
    pad = torch.zeros(2, 1, 1, 60, dtype=torch.bool, device=device)
    pad[0, ..., 30:] = True
    pad[1, ..., 45:] = True
    keep = torch.ones(52, 60, dtype=torch.bool, device=device).tril()
    keep[5] = False                                   # a row with nothing live
    cases = [(f"where(t0, s * 0.125, {FILL32!r})",
              [torch.ones(64, 64, dtype=torch.bool, device=device).tril()[None, None, :52, :60]]),
             ("where(t0, -inf, s)", [pad]), (f"where(t0, {FILL32!r}, s)", [pad]),
             ("where(t0 & t1, s, -inf)", [~pad, rand(2, 2, 52, 60) > 0.2]),
             (f"where(t0, s, {FILL32!r})", [keep]), ("where(t0, s, -inf)", [keep]),
             ("where(t1, where(j <= i, s + t0, -inf), -inf)",
              [torch.randn(52, 60, generator=gen, device="cpu").to(device), rand(2, 1, 52, 1) > 0.1]),
             # the same for every key (its flags computed for the first key block only), rows all dead
             ("where(t0, s, -inf)", [rand(2, 1, 52, 1) > 0.3]), (f"where(t0, s, {FILL32!r})", [rand(52, 1) > 0.3]),
             ("where(t0, s, -inf)", [rand(2, 1, 52, 1) > -1.0])]
    for mod, extra in cases:
        sm = score_mod.parse(mod)
        # (16, 16) with q ranges in blocks of 32 and 64: dk/dv's taller query blocks read from dq's table
        for bm, bn, q_bm in ((16, 16, 16), (32, 16, 32), (16, 16, 32), (16, 16, 64)):
            want = tables._block_ranges(sm, 52, 60, bm, bn, torch.device(device), backward, extra)
            want_q = tables._block_ranges(sm, 52, 60, q_bm, bn, torch.device(device), backward, extra)
            got = tables._data_block_ranges(sm, 52, 60, bm, bn, torch.device(device), backward, extra, q_bm)
            for name in FORWARD_RANGES:
                assert getattr(got, name).tolist() == getattr(want, name).tolist(), (mod, bm, bn, name)
            for name in ("q_lo", "q_hi", "qfull_lo", "qfull_hi") if backward else ():
                assert getattr(got, name).tolist() == getattr(want_q, name).tolist(), (mod, bm, bn, q_bm, name)


def test_a_row_of_finite_fills_only_makes_the_forward_visit_every_block(device):
    # eager's softmax of a row of finfo.min is the average over every key, not -inf's NaN
    keep = torch.ones(64, 64, dtype=torch.bool, device=device).tril()
    keep[5] = False
    mod = f"where(t0, s, {FILL32!r})"
    assert data_ranges(mod, [keep], device)["kv_hi"] == [4] * 4
    assert data_ranges("where(t0, s, -inf)", [keep], device)["kv_hi"] == [1, 2, 3, 4]


def test_a_static_mask_with_a_finite_fill_skips_unless_a_row_is_all_fill():
    assert ranges(f"where(j <= i, s, {FILL32!r})")["kv_hi"] == [1, 2, 3, 4]
    assert ranges(f"where(j <= i - 20, s, {FILL32!r})")["kv_hi"] == [4] * 4   # rows 0-19: eager's average
    q, k, v = inputs("cpu", torch.float32, L=40, E=8)
    check_against_eager(q, k, v, [], f"where(j <= i - 20, s * 0.25, {FILL32!r})",
                        lambda s, i, j: torch.where(j <= i - 20, s * 0.25, FILL32))


def test_a_mask_of_a_float_tensor_compared_and_an_index_condition_matches_eager(device):
    # (t0 == 0.0) & (j <= i) with a float per head: in the interpreter a float comparison's handle held
    # float data, which numpy's bitwise_and refused (runtime/interpreter.py _patch_float_comparisons)
    q, k, v = inputs(device, torch.float32, L=20)
    gate = torch.tensor([0.0, 1.0], device=device).view(1, 2, 1, 1)
    check_against_eager(q, k, v, [gate], "where((t0 == 0.0) & (j <= i), s * 0.25, -inf)",
                        lambda s, i, j: torch.where((gate == 0.0) & (j <= i), s * 0.25, NEG_INF), equal_nan=True)


def test_a_tensor_outside_the_mask_keeps_the_table_static():
    sm = score_mod.parse("where(j <= i, s + t0 * (j - i), -inf)")   # ALiBi under a causal mask
    assert sm.skips_blocks and not sm.dead_reads_tensors and not sm.finite_fill
    assert not score_mod.parse("s * 0.125 + t0").skips_blocks       # an additive mask is not read


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("case", ["hf_causal", "padding", "padding_finite", "two_masks", "alibi_causal"])
def test_masks_given_as_data_skip_blocks_and_match_eager(device, case, skip, monkeypatch):
    # skip: from every size (the table built from the tensors); else as below DATA_SKIP_MIN_SCORES
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0 if skip else flash.DATA_SKIP_MIN_SCORES)
    q, k, v = inputs(device, torch.float32, B=2, Hq=2, L=52, S=60, E=8)
    i, j = torch.arange(52, device=device)[:, None], torch.arange(60, device=device)[None, :]
    pad = torch.zeros(2, 1, 1, 60, dtype=torch.bool, device=device)
    pad[0, ..., 30:] = True
    pad[1, ..., 45:] = True
    slopes = torch.tensor([0.5, 0.25], device=device).view(1, 2, 1, 1)
    mod, extra, modify = {
        "hf_causal": (f"where(t0, s * 0.25, {FILL32!r})",
                      [torch.ones(64, 64, dtype=torch.bool, device=device).tril()[:52, :60]],
                      lambda s, i_, j_: torch.where(j <= i, s * 0.25, FILL32)),
        "padding": ("where(t0, -inf, s * 0.25)", [pad], lambda s, i_, j_: s.masked_fill(pad, NEG_INF) * 0.25),
        "padding_finite": (f"where(t0, {FILL32!r}, s * 0.25)", [pad], lambda s, i_, j_: torch.where(pad, FILL32, s * 0.25)),
        "two_masks": ("where(t0 & t1, s * 0.25, -inf)", [pad.logical_not(), j <= i],
                      lambda s, i_, j_: torch.where(~pad & (j <= i), s * 0.25, NEG_INF)),
        "alibi_causal": ("where(j <= i, s * 0.25 + t0 * (j - i), -inf)", [slopes],
                         lambda s, i_, j_: torch.where(j <= i, s * 0.25 + slopes * (j - i), NEG_INF)),
    }[case]
    sm = score_mod.parse(mod)
    assert sm.skips_blocks and flash._plan_for(q, v, extra, sm, False).skip == (skip or not sm.dead_reads_tensors)
    check_against_eager(q, k, v, extra, mod, modify)


@pytest.mark.parametrize("dead_row", [False, True])
def test_a_mask_per_batch_and_head_under_grouped_query_heads_matches_eager(device, dead_row, monkeypatch):
    # a table per (batch, query head); dk/dv sums the query heads of a group, each over its own ranges
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0)
    q, k, v = inputs(device, torch.float32, B=2, Hq=4, Hkv=2, L=52, S=60, E=8)
    i, j = torch.arange(52, device=device)[:, None], torch.arange(60, device=device)[None, :]
    width = torch.tensor([4, 9, 17, 60, 30, 2, 11, 25], device=device).view(2, 4, 1, 1)
    keep = (j <= i) & (i - j < width)                 # a causal window of its own width per batch and head
    if dead_row:
        keep = keep.clone()
        keep[1, 2, 7] = False                         # batch 1, head 2: a row with nothing live (NaN, as eager)
    table = tables.block_ranges(score_mod.parse("where(t0, s * 0.25, -inf)"), 52, 60, 16, 16, torch.device(device),
                               False, [keep])
    assert (table.tab_b, table.tab_h) == (4, 1) and table.kv_lo.shape == (8, 4)
    assert table.kv_lo[0].tolist() == [0, 0, 1, 2] and table.kv_lo[3].tolist() == [0] * 4   # width 4 and 60
    check_against_eager(q, k, v, [keep], "where(t0, s * 0.25, -inf)",
                        lambda s, i_, j_: torch.where(keep, s * 0.25, NEG_INF), equal_nan=dead_row)


@pytest.mark.parametrize("mod,live", [
    ("where(j <= i, s * 0.125, -inf)", "(s * 0.125)"),
    ("s * 0.125 + where(j <= i, 0.0, -inf)", "((s * 0.125) + 0.0)"),
    ("where((j <= i) & (i - j < 8), tanh(s), -inf) * 2.0", "(tanh(s) * 2.0)"),
    ("where(s > 0.0, s, -inf)", "where((s > 0.0), s, -inf)"),        # a condition on s decides per score
    ("exp(where(j <= i, s, -inf))", "exp(where((j <= i), s, -inf))"),  # exp(-inf) is 0, not a masked score
])
def test_the_unmasked_interior_drops_only_the_masking_dead_mask_reads(mod, live):
    assert str(score_mod.assume_live(score_mod.parse(mod).tree)) == live


# ---------------------------------------------------------------------------------------------------
# the modification compiler

@pytest.mark.parametrize("mod,piece", [
    ("s * 0.125 + foo", "'foo'"), ("pow(s, 2.0)", "'pow'"), ("s ** 2", "'s ** 2'"),
    ("s if j <= i else -inf", "where(c, x, y)"), ("(j <= i) and s", "& and |"), ("s.exp()", "'s.exp'"),
    ("__import__('os')", "'__import__'"), ("where(j <= i, s)", "3 positional"), ("s *", "not a Python expression"),
    ("j <= i", "a bool"), ("where(s, s, 0.0)", "not a bool"), ("tanh(x=s)", "1 positional"),
    ("s * 'a'", "literals"), ("s * True", "literals"), ("s[0]", "other than an extra tensor"),
    ("s + t0[i * j]", "'i * j' is not an index"), ("s + t0[i / 2]", "'i / 2' is not an index"),
    ("s + t0[t1]", "'t1' is not an index"), ("s + t0[0:4]", "Slice"), ("s + t0[i] + t0", "with and without"),
    ("s + t0[i] + t0[j]", "two different indices"),
])
def test_a_modification_outside_the_contract_is_a_value_error_naming_the_piece(mod, piece):
    with pytest.raises(ValueError, match=None) as info:
        score_mod.parse(mod)
    assert piece in str(info.value), str(info.value)


def test_a_missing_or_unbroadcastable_extra_tensor_is_a_value_error():
    q, k, v = inputs("cpu", torch.float32, B=1, L=8)
    with pytest.raises(ValueError, match="reads t1"):
        torch.ops.mini_inductor.flash_attention(q, k, v, [torch.zeros(1, device="cpu")], "s + t0 + t1")
    with pytest.raises(ValueError, match="does not broadcast"):
        torch.ops.mini_inductor.flash_attention(q, k, v, [torch.zeros(3, 8, device="cpu")], "s + t0")
    with pytest.raises(ValueError, match="not a bool"):
        torch.ops.mini_inductor.flash_attention(q, k, v, [torch.zeros(8, device="cpu")], "where(t0, s, -inf)")


def test_the_gradient_selects_through_where_and_folds_the_scale():
    grad = score_mod.gradient(score_mod.parse("where(j <= i, s * 0.125, -inf)").tree)
    assert str(grad) == "(where((j <= i), g, 0.0) * 0.125)"
    assert score_mod.gradient(score_mod.parse("where(j <= i, 0.0, -inf)").tree) is None


def test_exp2_folds_log2e_into_the_scale():
    scaled = score_mod.log2_scaled(score_mod.parse("where(j <= i, s * 0.125, -inf)").tree)
    assert str(scaled) == f"where((j <= i), (s * {0.125 * math.log2(math.e)!r}), -inf)"


def test_a_float16_rounded_bias_needs_no_clamp_and_a_data_mask_keeps_it():
    # ALiBi's bias rounded to float16 is within ±65504: times log2(e) it cannot leave float32's range.
    # An additive mask tensor may hold finfo(float32).min, which times log2(e) must stay finite
    alibi = score_mod.log2_scaled(score_mod.parse("s / 8.0 + f16(t0 * (j - i))").tree)
    assert str(alibi) == f"(((s / 8.0) + f16((t0 * (j - i)))) * {math.log2(math.e)!r})"
    masked = str(score_mod.log2_scaled(score_mod.parse("s / 8.0 + t0").tree))
    assert "maximum" in masked and "-inf" in masked
    assert "maximum" in str(score_mod.log2_scaled(score_mod.parse("s + bf16(t0)").tree))   # bf16 reaches 3.4e38
    assert "maximum" in str(score_mod.log2_scaled(score_mod.parse("s + f16(t0) * t0").tree))


def test_extra_tensors_are_loaded_in_the_shape_they_vary_in_and_match_eager(device):
    # per (batch, head) as ALiBi's slopes, per key as a padding mask, per query, and per score
    q, k, v = inputs(device, torch.float32, B=2, Hq=2, L=20, S=24, E=8)
    gen = torch.Generator(device="cpu").manual_seed(3)
    t = [torch.randn(shape, generator=gen, device="cpu").to(device)
         for shape in ((1, 2, 1, 1), (2, 1, 1, 24), (20, 1), (2, 2, 20, 24))]
    mod = "s * 0.25 + t0 * (j - i) + t1 + t2 + t3"
    check_against_eager(q, k, v, t, mod, lambda s, i, j: s * 0.25 + t[0] * (j - i) + t[1] + t[2] + t[3])
    sm = score_mod.parse(mod)
    assert [tables.axes_of(x.expand(2, 2, 20, 24).stride(), 20, 24) for x in t] == ["", "j", "i", "ij"]
    from mini_inductor.attention.kernels import kernel_source
    source = kernel_source(sm, ("float",) * 4, False, tensor_axes=("", "j", "i", "ij"))
    assert "t0 = tl.load(T0 + bid.to(tl.int64) * st0_b + hid.to(tl.int64) * st0_h)" in source
    assert "t1 = tl.load(T1 + bid.to(tl.int64) * st1_b + hid.to(tl.int64) * st1_h + col * st1_j, mask=(col < len_k)" in source
    assert "+ row * st2_i, mask=(row < len_q), other=0)" in source
    assert "+ row * st3_i + col * st3_j, mask=(row < len_q) & (col < len_k)" in source
    wide = kernel_source(sm, ("float",) * 4, False, tensor_axes=("", "jw", "iw", "ijw"))
    assert "+ row.to(tl.int64) * st3_i + col.to(tl.int64) * st3_j, mask=" in wide
    assert "+ col.to(tl.int64) * st1_j, mask=(col < len_k)" in wide


def test_a_causal_kernel_source_reads_its_block_table_and_a_plain_one_does_not():
    from mini_inductor.attention.kernels import kernel_source
    causal = kernel_source(score_mod.parse("where(j <= i, s * 0.125, -inf)"), (), True)
    plain = kernel_source(score_mod.parse("s * 0.125"), (), False)
    assert "tl.load(RANGE_LO" in causal and "tl.load(RANGE_LO" not in plain
    assert "libdevice.tanh" in kernel_source(score_mod.parse("tanh(s / 50.0) * 50.0"), (), False)


# ---------------------------------------------------------------------------------------------------
# in a compiled graph

def test_compiled_forward_and_backward_call_the_ops_as_extern_kernels(device):
    q, k, v = inputs(device, torch.float32, B=1, L=20)
    keep = torch.ones(1, 1, 1, 20, dtype=torch.bool, device=device)
    keep[..., 5:9] = False

    def attend(q, k, v, keep):
        out = torch.ops.mini_inductor.flash_attention(q, k, v, [keep], "where(t0 & (j <= i), s * 0.25, -inf)")
        return (out * 2.0).sum()

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    loss = torch.compile(attend, backend="mini_inductor")(*leaves, keep)
    grads = torch.autograd.grad(loss, leaves)
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = (eager_attention(*ref_leaves, lambda s, i, j: torch.where(keep & (j <= i), s * 0.25, NEG_INF))
                * 2.0).sum()
    torch.testing.assert_close(loss, expected, **TOL[torch.float32])
    for g, e in zip(grads, torch.autograd.grad(expected, ref_leaves)):
        torch.testing.assert_close(g, e, **GRAD_TOL[torch.float32])
    records = {r.name.split("_")[0]: r for r in metrics.compiled_graphs}
    assert records["forward"].extern_calls == ["mini_inductor.flash_attention_forward.default"]
    assert records["backward"].extern_calls == ["mini_inductor.flash_attention_backward.default"]
    assert not any(r.fallback_ops for r in metrics.compiled_graphs), [dict(r.fallback_ops)
                                                                      for r in metrics.compiled_graphs]


def test_a_dynamic_compile_runs_two_lengths_with_one_graph_inference_and_training(device):
    def attend(q, k, v, bias):
        return torch.ops.mini_inductor.flash_attention(q, k, v, [bias], "where(j <= i, s * 0.25 + t0, -inf)")

    compiled = torch.compile(attend, backend="mini_inductor", dynamic=True)
    for L in (20, 33):
        q, k, v = inputs(device, torch.float32, B=1, L=L, seed=L)
        bias = torch.randn(1, 2, 1, L, device=device)
        with torch.no_grad():
            torch.testing.assert_close(compiled(q, k, v, bias), attend(q, k, v, bias), **TOL[torch.float32])
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        grads = torch.autograd.grad(compiled(*leaves, bias).sum(), leaves)
        for g, e in zip(grads, torch.autograd.grad(attend(*ref_leaves, bias).sum(), ref_leaves)):
            torch.testing.assert_close(g, e, **GRAD_TOL[torch.float32])
    kinds = sorted(r.name.split("_")[0] for r in metrics.compiled_graphs)
    assert kinds == ["backward", "forward", "inference"], kinds   # one graph each, for both lengths
    assert all(r.dynamic_symbols and not r.fallback_ops for r in metrics.compiled_graphs)


# ---------------------------------------------------------------------------------------------------
# on the GPU (run by the lead on the H100)

def _sdpa_check(q, k, v, **sdpa_kwargs):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    scale = 1.0 / math.sqrt(q.shape[-1])
    mod = f"where(j <= i, s * {scale!r}, -inf)" if sdpa_kwargs.get("is_causal") else f"s * {scale!r}"
    out = torch.ops.mini_inductor.flash_attention(*leaves, [], mod)
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    expected = torch.nn.functional.scaled_dot_product_attention(*ref_leaves, **sdpa_kwargs)
    torch.testing.assert_close(out, expected, atol=2e-3, rtol=2e-3)
    upstream = torch.randn_like(out)
    for g, e in zip(torch.autograd.grad(out, leaves, upstream), torch.autograd.grad(expected, ref_leaves, upstream)):
        torch.testing.assert_close(g, e, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_fp16_causal_1024_matches_sdpa(head_dim):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 8, 1024, head_dim, device="cuda", dtype=torch.float16, generator=gen)
               for _ in range(3))
    _sdpa_check(q, k, v, is_causal=True)


@pytest.mark.gpu
def test_gpu_bf16_alibi_matches_eager():
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 8, 512, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    slopes = (2.0 ** -torch.arange(1, 9, device="cuda", dtype=torch.float32)).view(1, 8, 1, 1)
    check_against_eager(q, k, v, [slopes], "where(j <= i, s * 0.125 + t0 * (j - i), -inf)",
                        lambda s, i, j: torch.where(j <= i, s * 0.125 + slopes * (j - i), NEG_INF))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["hf_causal", "padding"])
def test_gpu_fp16_masks_given_as_data_with_block_tables_match_eager(case, monkeypatch):
    # the table kernels (block_flags, dead_rows, block_ranges) compiled by Triton, not interpreted
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0)
    q, k, v = inputs("cuda", torch.float16, B=2, Hq=4, L=1024, E=64)
    pad = torch.zeros(2, 1, 1, 1024, dtype=torch.bool, device="cuda")
    pad[0, ..., 700:] = True
    pad[1, ..., 900:] = True
    i, j = torch.arange(1024, device="cuda")[:, None], torch.arange(1024, device="cuda")[None, :]
    fill = torch.finfo(torch.float16).min
    mod, extra, modify = {
        "hf_causal": (f"where(t0, s * 0.125, {fill!r})", [torch.ones(1024, 1024, dtype=torch.bool, device="cuda").tril()],
                      lambda s, i_, j_: torch.where(j <= i, s * 0.125, fill)),
        "padding": ("where(t0, -inf, s * 0.125)", [pad], lambda s, i_, j_: s.masked_fill(pad, NEG_INF) * 0.125),
    }[case]
    assert flash._plan_for(q, v, extra, score_mod.parse(mod), False).skip
    check_against_eager(q, k, v, extra, mod, modify)


FLOAT32_MIN = torch.finfo(torch.float32).min


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_a_row_all_filled_with_finfo_min_is_uniform_as_in_eager(device):
    # finfo.min times log2(e) is -inf in float32: a row whose every score is the fill gave NaN, where
    # eager's finite fill gives uniform weights (found by the fuzzer's attention family, seed 71).
    # One key: the backward's saved log-sum-exp is exact too.
    q, k, v = inputs(device, torch.float32, L=6, S=1, E=4)
    keep = torch.tensor([True, False], device=device).view(2, 1, 1, 1)
    check_against_eager(q, k, v, [keep], f"where(~t0, {FLOAT32_MIN!r}, s * 0.5)",
                        lambda s, i, j: torch.where(~keep, FLOAT32_MIN, s * 0.5))
    # several keys, the fill through a where and as an additive mask (a data tensor times log2(e)):
    # uniform on the filled rows, and the backward too (m + log2(5) in one float was m: P was 1, not 1/5)
    q, k, v = inputs(device, torch.float32, L=6, S=5, E=4)
    keep = (torch.arange(6, device=device) % 3 != 0).view(1, 1, 6, 1).expand(2, 1, 6, 5)
    bias = torch.where(keep, 0.0, FLOAT32_MIN)
    for mod, extra, modify in ((f"where(t0, s * 0.5, {FLOAT32_MIN!r})", keep, lambda s, i, j: torch.where(keep, s * 0.5, FLOAT32_MIN)),
                               ("s * 0.5 + t0", bias, lambda s, i, j: s * 0.5 + bias)):
        out, _ = check_against_eager(q, k, v, [extra], mod, modify)
        torch.testing.assert_close(out[:, :, ::3], v.mean(-2, keepdim=True).expand(2, 2, 2, 4), **TOL[torch.float32])


def test_a_constant_condition_is_its_branch():
    # a causal mask over one query and one key reaches the op as ~(0 <= 0): Python's ~True is -2,
    # which where() refused as a condition (found by the fuzzer, --dynamic seed 72)
    assert score_mod.parse("where(~(0 <= 0), -inf, s * 0.5)").tree == score_mod.parse("s * 0.5").tree
    assert score_mod.parse("where((1 < 0) | (j <= i), s, -inf)").tree == score_mod.parse("where(j <= i, s, -inf)").tree
    q, k, v = inputs("cpu", torch.float32, L=1, S=1, E=4)
    check_against_eager(q, k, v, [], "where(~(0 <= 0), -inf, s * 0.5)", lambda s, i, j: s * 0.5)


def test_a_rounding_to_a_half_type_is_computed_as_eager_casts(device):
    sm = score_mod.parse("s * 0.25 + f16(t0 * (j - i))")
    assert score_mod.kind(sm.tree, {"t0": "float"}) == "float"
    x = torch.tensor([1.0 + 2 ** -12, 3000.3, 70000.0], device=device)
    assert score_mod.evaluate(score_mod.parse("f16(t0)").tree, {"t0": x}).tolist() == x.half().float().tolist()
    assert score_mod.evaluate(score_mod.parse("bf16(t0)").tree, {"t0": x}).tolist() == x.bfloat16().float().tolist()
    assert score_mod.gradient(score_mod.parse("f16(s) * 2.0").tree) is not None
    slopes = torch.tensor([0.5, 3.3], device=device).view(1, 2, 1, 1)
    q, k, v = inputs(device, torch.float32, L=20, E=8)
    check_against_eager(q, k, v, [slopes], "s * 0.25 + f16(t0 * (j - i))",
                        lambda s, i, j: s * 0.25 + (slopes * (j - i)).half().float())


@pytest.mark.parametrize("mod,shape,message", [
    ("s + t0[i - j + 18]", (39,), "t0's index 0 runs from -1 to 37"),          # below 0 at i 0, j 19
    ("s + t0[i - j + 19]", (38,), "t0's index 0 runs from 0 to 38"),           # past the end at i 19, j 0
    ("s + t0[h, i - j + 19]", (39,), "t0 has 1 dims but is indexed by 2"),
    ("s + t0[2 * b + h, i]", (3, 20), "t0's index 0 runs from 0 to 3"),      # B 2, Hq 2
])
def test_a_computed_index_leaving_its_tensor_is_an_index_error(device, mod, shape, message):
    q, k, v = (torch.randn(2, 2, 20, 8, device=device) for _ in range(3))
    with pytest.raises(IndexError, match=None) as info:
        torch.ops.mini_inductor.flash_attention(q, k, v, [torch.randn(shape, device=device)], mod, False)
    assert message in str(info.value) and mod in str(info.value), str(info.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_gathered_int_table_masks_through_the_data_block_table(device, dtype, monkeypatch):
    # an int tensor read at a computed index decides which scores are dead: the block table is built
    # from its values (by the generated table kernel, which reads it through the same strides)
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0)
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, 40, 8, generator=gen).to(device=device, dtype=dtype) for _ in range(3))
    band = (torch.arange(79) - 39).abs().to(device)      # |i - j|, read at i - j + 39
    mod = "where(t0[i - j + 39] < 12, s * 0.3, -inf)"
    got = torch.ops.mini_inductor.flash_attention(q, k, v, [band], mod, False)
    i, j = torch.arange(40, device=device)[:, None], torch.arange(40, device=device)[None, :]
    dense = ((i - j).abs() < 12)
    want = torch.softmax((q.float() @ k.float().transpose(-1, -2) * 0.3).masked_fill(~dense, -math.inf), -1) @ v.float()
    torch.testing.assert_close(got.float(), want, **({"atol": 2e-5, "rtol": 2e-5} if dtype == torch.float32 else
                                                     {"atol": 5e-3, "rtol": 5e-3}))
    sm = score_mod.parse(mod)
    assert sm.dead_reads_tensors and flash._plan_for(q, v, [band], sm, False).skip


def test_a_modification_of_a_gathered_table_alone_is_broadcast_to_the_block(device):
    # no s, and a table that does not vary along its index (stride 0): the score is the loaded value,
    # a scalar per program, which must still be a [BLOCK_M, BLOCK_N] block where S fills whole blocks
    # (the review's repro: the index's i and j were taken as loaded along i and j)
    L, S = 20, 32
    q, k, v = (torch.randn(1, 1, n, 8, device=device) for n in (L, S, S))
    table = torch.randn(1, device=device).expand(L + S - 1)
    i, j = torch.arange(L, device=device)[:, None], torch.arange(S, device=device)[None, :]
    want = torch.softmax(table[i - j + S - 1].expand(L, S), -1) @ v
    got = torch.ops.mini_inductor.flash_attention(q, k, v, [table], "t0[i - j + S - 1]", False)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("empty_rows_zero", [False, True])
def test_no_keys_gives_zeros_as_eager_softmax_does(device, empty_rows_zero):
    q = torch.randn(2, 2, 5, 8, device=device, requires_grad=True)
    k, v = (torch.randn(2, 2, 0, 8, device=device, requires_grad=True) for _ in range(2))
    out = torch.ops.mini_inductor.flash_attention(q, k, v, [], "s * 0.3", empty_rows_zero)
    want = torch.softmax(q @ k.transpose(-1, -2) * 0.3, -1) @ v
    torch.testing.assert_close(out, want)
    grads = torch.autograd.grad(out.sum(), [q, k, v])
    for g, e in zip(grads, torch.autograd.grad(want.sum(), [q, k, v])):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("mod,shapes", [
    ("s * 0.25 + t0", [(2, 40, 36)]),                                   # a bias per score
    ("where(t0, -inf, s * 0.25 + t1[h, i - j + 35])", [(2, 1, 40, 36), (2, 75)]),   # a mask from data, a table
])
def test_offsets_past_2_31_are_computed_in_int64(device, mod, shapes, monkeypatch):
    # a [B, 1, L, S] mask at L = S = 46341 has offsets row * S past 2**31: int32 would wrap. The
    # threshold lowered, the int64 code runs here (forward, block table, dq, dk/dv, the table's gradient)
    monkeypatch.setattr(tables, "WIDE_OFFSETS_FROM", 1)
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0)
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 2, n, 8, generator=gen).to(device).requires_grad_() for n in (40, 36, 36))
    extra = [(torch.rand(s, generator=gen) > 0.8).to(device) if len(s) == 4 else
             torch.randn(s, generator=gen).to(device).requires_grad_() for s in shapes]
    assert tables.axes_of(extra[0].expand(2, 2, 40, 36).stride(), 40, 36).endswith("w")
    out = torch.ops.mini_inductor.flash_attention(q, k, v, extra, mod, True)
    leaves = [q, k, v] + [t for t in extra if t.requires_grad]
    ref_leaves = [t.detach().clone().requires_grad_() for t in leaves]
    ref_extra = [ref_leaves[3] if t.requires_grad else t for t in extra]
    env = {"s": ref_leaves[0] @ ref_leaves[1].transpose(-1, -2), "L": 40, "S": 36,
           "b": torch.arange(2, device=device).view(2, 1, 1, 1), "h": torch.arange(2, device=device).view(1, 2, 1, 1),
           "i": torch.arange(40, device=device).view(40, 1), "j": torch.arange(36, device=device).view(1, 36),
           **{f"t{n}": t for n, t in enumerate(ref_extra)}}
    score = score_mod.evaluate(score_mod.parse(mod).tree, env)
    p = torch.softmax(score, -1)
    want = torch.where((score == -math.inf).all(-1, keepdim=True), 0.0, p) @ ref_leaves[2]
    torch.testing.assert_close(out, want, atol=2e-5, rtol=2e-5)
    upstream = torch.randn(want.shape, generator=gen).to(device)
    for g, e in zip(torch.autograd.grad(out, leaves, upstream), torch.autograd.grad(want, ref_leaves, upstream)):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
