"""Index code without redundant div/mod, and loads with eviction hints where they help."""
import random
import re

import sympy
import torch
import torch.nn.functional as F

from common import check
from mini_inductor import config, metrics
from mini_inductor.lowering.sizevars import FloorDiv, ModularIndexing, simplify

X = sympy.Symbol("xindex", integer=True, nonnegative=True)


def kernel_sources() -> list[str]:
    out = []
    for rec in metrics.compiled_graphs:
        with open(rec.source_path) as f:
            out += re.findall(r"@triton\.jit\ndef (?:.|\n)*?(?=\n\n)", f.read())
    return out


def loads(src: str) -> list[str]:
    return [ln.strip() for ln in src.splitlines() if "tl.load(" in ln]


# ── index expressions ────────────────────────────────────────────────────────────────────────────

def test_division_and_modulo_by_a_size_symbol_drop_what_the_ranges_allow():
    # a dynamic row of s elements: row x's element r is at r + x*s; (r + x*s) // s is x and
    # (r + x*s) % s is r where r < s, as with a number
    from mini_inductor.lowering.sizevars import simplify_index
    s = sympy.Symbol("s0", integer=True, positive=True)
    r = sympy.Symbol("rindex", integer=True, nonnegative=True)
    assert FloorDiv(r + X * s, s) == X + FloorDiv(r, s)
    assert ModularIndexing(r + X * s, 1, s) == ModularIndexing(r, 1, s)
    ranges = {X: sympy.Integer(8), r: s}
    assert simplify_index(FloorDiv(r + X * s, s) + 2 * ModularIndexing(r + X * s, 1, s), ranges) == X + 2 * r
    # without the range (r up to 2*s) neither may go
    assert simplify_index(FloorDiv(r + X * s, s), {X: sympy.Integer(8), r: 2 * s}) == X + FloorDiv(r, s)


def test_nested_modulo_by_a_divisor_folds_into_one():
    assert ModularIndexing(ModularIndexing(X, 1, 50), 1, 5) == ModularIndexing(X, 1, 5)
    assert ModularIndexing(ModularIndexing(X, 1, 6), 1, 8) == ModularIndexing(X, 1, 6)
    assert ModularIndexing(ModularIndexing(X, 2, 24), 3, 4) == ModularIndexing(X, 6, 4)


def test_nested_div_mod_rules_agree_with_integer_arithmetic():
    rng = random.Random(0)
    for _ in range(300):
        d, m, q, n = (rng.randint(1, 12) for _ in range(4))
        e = ModularIndexing(ModularIndexing(X, d, m), q, n)
        for v in range(0, 200, 7):
            assert int(e.subs(X, v)) == ((v // d) % m) // q % n, (d, m, q, n, v, e)


def test_split_and_recombined_index_simplifies_to_the_flat_one():
    e = 5 * FloorDiv(X, 5) + ModularIndexing(ModularIndexing(X, 1, 50), 1, 5)
    assert simplify(e, {X: sympy.Integer(250)}) == X


def test_range_bounds_drop_div_and_mod_of_nested_terms():
    inner = ModularIndexing(X, 1, 7) + 8 * FloorDiv(X, 7)
    assert simplify(FloorDiv(inner, 64), {X: sympy.Integer(56)}) == 0


def test_broadcast_clamp_stores_at_the_plain_index():
    x, lo, hi = torch.randn(5, 10, 5), torch.randn(10, 5) - 1, torch.randn(10, 5) + 1
    check(lambda x, lo, hi: torch.clamp(x, lo, hi), x, lo, hi, kernels=1)
    (src,) = kernel_sources()
    assert "tl.store(out_ptr0 + xindex, " in src, src


def test_generated_index_code_has_no_redundant_div_or_mod():
    x = torch.randn(4, 6, 10)
    check(lambda x: (x.permute(1, 0, 2).reshape(6, 40) + 1, x.reshape(24, 10)[::2] * 2,
                     x.flatten()[:120].view(10, 12).t() - 1), x)
    for src in kernel_sources():
        assert not re.search(r"// 1\b|% 1\b", src), src
        assert not re.search(r"% \d+\) % \d+", src), src  # a modulo of a modulo
        assert "((xindex))" not in src and "((yindex))" not in src, src


# ── eviction hints ───────────────────────────────────────────────────────────────────────────────

def test_layer_norm_keeps_its_weights_in_cache_and_streams_nothing_else():
    x, w, b = torch.randn(8, 64), torch.randn(64), torch.randn(64)
    check(lambda x, w, b: F.layer_norm(x, (64,), w, b), x, w, b, kernels=1, atol=1e-5)
    (src,) = kernel_sources()
    hinted = [ln for ln in loads(src) if "evict_last" in ln]
    assert len(hinted) == 2 and all("+ tl.zeros_like(xindex)" in ln for ln in hinted), loads(src)


def test_looped_softmax_keeps_the_row_for_the_next_loop_and_streams_the_last_read():
    with config.patch(persistent_reduction_limit=4096):   # rows of 5000 then loop
        check(lambda x: torch.softmax(x, -1), torch.randn(2, 5000), kernels=1)
    (src,) = kernel_sources()
    ls = loads(src)
    assert "evict_last" in ls[0] and "evict_first" in ls[-1], ls


def test_bias_over_rows_is_kept_and_contiguous_loads_have_no_hint():
    check(lambda x, b: x * 2 + b[:, None], torch.randn(16, 24), torch.randn(16), kernels=1)
    (src,) = kernel_sources()
    (x_load,) = [ln for ln in loads(src) if "eviction_policy" not in ln]
    (b_load,) = [ln for ln in loads(src) if "evict_last" in ln]
    assert "xindex // 24" in b_load and "xindex // 24" not in x_load
