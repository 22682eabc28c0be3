"""Matmul templates (option matmul_templates): mm, addmm and bmm as Triton kernels with their pointwise
epilogues fused in, against eager; the scheduler's legality and the auto rule; max-autotune's cache.

On the CPU the templates run in Triton's interpreter with matmul_templates="always" (the `templates`
fixture); the GPU tests at the end check real sizes and the timing path."""
import re

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from common import check, generated_sources as sources
from mini_inductor import config, metrics
from mini_inductor.caching.memory import PROCESS
from mini_inductor.runtime import triton_helpers
from mini_inductor.scheduler.matmul_choice import prefer_template


@pytest.fixture
def templates():
    with config.patch(matmul_templates="always"):
        yield


def template_kernels() -> list[str]:
    return re.findall(r"@triton\.jit\ndef triton_tem_(?:.|\n)*?(?=\n\n)", sources())


def kernel_names() -> list[str]:
    return [n for rec in metrics.compiled_graphs for n in rec.kernel_names]


def extern_calls() -> list[str]:
    return [c for rec in metrics.compiled_graphs for c in rec.extern_calls]


# ── mm, addmm, bmm against eager ─────────────────────────────────────────────────────────────────

def test_mm_of_odd_sizes_is_one_template(templates, device):
    a, b = torch.randn(33, 29, device=device), torch.randn(29, 47, device=device)
    check(lambda a, b: a @ b, a, b, kernels=1, atol=1e-4, rtol=1e-4)
    assert all(n.startswith("triton_tem_") for n in kernel_names())
    assert not any("mm" in c for c in extern_calls())


def test_a_1_by_1_product_with_an_epilogue_loads_it_as_a_tile(templates, device):
    # the epilogue's index of a 1 x 1 output is the constant 0: its pointer must still be a
    # [BLOCK_M, BLOCK_N] block (found by the fuzzer with matmul_templates='always', seed 45)
    a, b = torch.randn(1, 1, device=device), torch.randn(1, 1, device=device)
    check(lambda a, b: torch.mm(a, b) * 2, a, b, atol=1e-5, rtol=1e-5)
    assert template_kernels()


def test_a_cat_prologue_indexes_with_blocks_not_scalars(templates, device):
    # cat as the weight's prologue compares the tile's column with a size: on a GPU tl.full takes a
    # scalar only, and the column is a block (the interpreter accepted it; found on the H100 by
    # test_accumulation_of_gradients_sharing_one_buffer_matches_eager)
    x, w1, w2 = torch.randn(5, 8, device=device), torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    check(lambda x, w1, w2: F.linear(x, torch.cat([w1, w2])).relu(), x, w1, w2, atol=1e-4, rtol=1e-4)
    (src,) = template_kernels()
    assert re.search(r"tl\.full\(\[1\], [ab]_(row|col)", src) is None, src


def test_a_constant_prologue_fills_the_whole_tile(templates, device):
    # the backward of (x @ w).fill_(c) multiplies a constant gradient: the prologue's value depends on
    # neither the row nor the column, and it was a [1, BLOCK_K] block where tl.dot takes the tile
    # (found by the fuzzer with matmul_templates='always', --autograd seed 61)
    w = torch.randn(5, 1, device=device)
    x, x_ref = (torch.randn(2, 5, generator=torch.Generator().manual_seed(0), device="cpu").to(device)
                .requires_grad_() for _ in range(2))
    def f(x, w):
        return (x @ w).fill_(0.5)
    got = torch.compile(f, backend="mini_inductor")(x, w)
    got.sum().backward()
    f(x_ref, w).sum().backward()
    torch.testing.assert_close(got, f(x_ref.detach(), w))
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert template_kernels()


def test_a_template_whose_output_is_then_changed_in_place(templates, device):
    # the scheduler asks every node what it mutates besides its own output (found by the fuzzer with
    # matmul_templates='always', seed 46: the template had no answer)
    x, a, b = (torch.randn(4, 4, device=device) for _ in range(3))
    check(lambda x, a, b: torch.addmm(x, a, b, beta=0.5).zero_().add_(b), x, a, b, atol=1e-5, rtol=1e-5)


def test_mm_of_transposed_and_offset_inputs(templates, device):
    a, b = torch.randn(29, 40, device=device), torch.randn(50, 29, device=device)
    check(lambda a, b: a[:, 3:36].t() @ b[2:31].t().t().t().t(), a, b.t().contiguous().t(), kernels=1,
          atol=1e-4, rtol=1e-4)


def test_linear_with_bias_is_addmm_template_with_transposed_weight(templates, device):
    x, w, bias = torch.randn(17, 24, device=device), torch.randn(40, 24, device=device), torch.randn(40, device=device)
    check(lambda x, w, b: F.linear(x, w, b), x, w, bias, kernels=1, atol=1e-4, rtol=1e-4)
    (src,) = template_kernels()
    assert "acc + " in src     # the bias added to the accumulator


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_addmm(templates, device, dtype):
    x, w, bias = (torch.randn(s, device=device, dtype=dtype) for s in [(33, 48), (48, 20), (33, 20)])
    check(lambda b, x, w: torch.addmm(b, x, w), bias, x, w, kernels=1, atol=2e-2, rtol=2e-2)


def test_addmm_with_alpha_and_beta_scales_in_the_epilogue(templates, device):
    bias, x, w = torch.randn(8, 12, device=device), torch.randn(8, 16, device=device), torch.randn(16, 12, device=device)
    check(lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0), bias, x, w, kernels=1, atol=1e-4, rtol=1e-4)


def test_bmm_of_odd_sizes_with_a_transposed_input(templates, device):
    a, b = torch.randn(3, 17, 21, device=device), torch.randn(3, 19, 21, device=device)
    check(lambda a, b: torch.bmm(a, b.transpose(1, 2)) * 0.5, a, b, kernels=1, atol=1e-4, rtol=1e-4)
    (src,) = template_kernels()
    assert "tl.program_id(1)" in src


def test_fp32_respects_allow_tf32(templates, device):
    a, b = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device)
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        check(lambda a, b: a @ b, a, b, kernels=1, atol=1e-4, rtol=1e-4)
        assert 'input_precision="ieee"' in template_kernels()[0]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def test_tf32_operands_are_rounded_to_nearest_as_cublas_rounds_them(templates, device):
    # 1 + 3·2**-12 lies past half of TF32's ulp (2**-10) above 1: rounded to nearest it is 1 + 2**-10,
    # its low bits dropped (what tensor cores do with float32 bits) it is 1. With TF32 allowed a
    # 64-term dot product of it with ones is 64·(1 + 2**-10) exactly, as cuBLAS gives, not 64. On
    # the CPU eager has no TF32, nor has the template: the product is exact
    a = torch.full((32, 64), 1 + 3 * 2 ** -12, device=device)
    b = torch.ones(64, 32, device=device)
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        got = torch.compile(lambda a, b: a @ b, backend="mini_inductor")(a, b)
        on_cuda = device == "cuda"
        assert f'input_precision="{"tf32" if on_cuda else "ieee"}"' in template_kernels()[0]
        assert torch.equal(got, torch.full_like(got, 64 * (1 + 2 ** -10) if on_cuda else 64 * (1 + 3 * 2 ** -12)))
        assert torch.equal(got, a @ b)   # eager: cuBLAS's TF32, or the CPU's float32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def test_round_tf32_rounds_to_nearest_ties_away_and_keeps_specials(device):
    @triton.jit
    def kernel(x_ptr, y_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(y_ptr + i, triton_helpers.round_tf32(tl.load(x_ptr + i)))

    ulp = 2 ** -10
    values = [1 + 0.49 * ulp, 1 + 0.5 * ulp, 1 + 0.51 * ulp, -(1 + 0.5 * ulp), -(1 + 0.49 * ulp), 3.0, 0.0, -0.0,
              float("inf"), float("-inf"), float("nan"), 2.0 ** -140, 3.4028234663852886e38, 1e-3]
    x = torch.tensor(values + [0.0] * (16 - len(values)), device=device)
    y = torch.empty_like(x)
    kernel[(1,)](x, y, N=16)
    bits = x.view(torch.int32).long() & 0xFFFFFFFF      # the reference: round the magnitude's bits
    ref = (((bits + 0x1000) >> 13) << 13).to(torch.int64)
    ref = torch.where(ref >= 2 ** 31, ref - 2 ** 32, ref).to(torch.int32).view(torch.float32)
    ref = torch.where(x.isfinite(), ref, x)
    assert torch.equal(y[:3].cpu(), torch.tensor([1.0, 1 + ulp, 1 + ulp]))
    assert torch.equal(y[3:5].cpu(), torch.tensor([-(1 + ulp), -1.0]))
    assert y[8] == float("inf") and y[9] == float("-inf") and y[10].isnan()
    assert y[12] == float("inf")     # past TF32's largest value: rounds up to infinity, as cvt.rna does
    torch.testing.assert_close(y, ref, rtol=0, atol=0, equal_nan=True)


# ── epilogues ────────────────────────────────────────────────────────────────────────────────────

EPILOGUES = {
    "bias_gelu": (lambda y, r, b: F.gelu(y + b), "triton_helpers.erf32"),
    "silu": (lambda y, r, b: F.silu(y), "tl.sigmoid"),
    "relu": (lambda y, r, b: torch.relu(y), "tl.where"),
    "tanh": (lambda y, r, b: torch.tanh(y), "tanh"),
    "residual": (lambda y, r, b: y + r, "tl.load"),
    "scale": (lambda y, r, b: y * 0.125, "0.125"),
    "cast": (lambda y, r, b: y.to(torch.float16), "tl.float16"),
}


@pytest.mark.parametrize("kind", sorted(EPILOGUES))
def test_epilogue_fuses_into_the_template(templates, device, kind):
    epilogue, marker = EPILOGUES[kind]
    x, w = torch.randn(19, 24, device=device), torch.randn(24, 33, device=device)
    r, b = torch.randn(19, 33, device=device), torch.randn(33, device=device)
    check(lambda x, w, r, b: epilogue(x @ w, r, b), x, w, r, b, kernels=1, atol=1e-3, rtol=1e-3)
    (src,) = template_kernels()
    assert marker in src.split("mask_mn =")[1]


def test_output_read_elsewhere_is_still_stored(templates, device):
    x, w = torch.randn(9, 16, device=device), torch.randn(16, 20, device=device)
    check(lambda x, w: (lambda y: (y, torch.relu(y) + 1))(x @ w), x, w, kernels=1, atol=1e-4, rtol=1e-4)
    (src,) = template_kernels()
    assert src.count("tl.store(") == 2


def test_reduction_of_the_product_is_not_an_epilogue(templates, device):
    x, w = torch.randn(9, 16, device=device), torch.randn(16, 20, device=device)
    check(lambda x, w: (x @ w).sum(-1), x, w, kernels=2, atol=1e-4, rtol=1e-4)


def test_transposed_read_of_the_product_is_not_an_epilogue(templates, device):
    x, w, r = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device), torch.randn(16, 16, device=device)
    check(lambda x, w, r: (x @ w).t() + r, x, w, r, kernels=2, atol=1e-4, rtol=1e-4)


def test_linear_bias_gelu_is_one_kernel(templates, device):
    lin = torch.nn.Linear(24, 40).to(device)
    check(lambda x: F.gelu(lin(x)), torch.randn(2, 9, 24, device=device), kernels=1, atol=1e-4, rtol=1e-4)


def test_linear_plus_residual_is_one_kernel(templates, device):
    lin = torch.nn.Linear(24, 24).to(device)
    check(lambda x: x + lin(x), torch.randn(13, 24, device=device), kernels=1, atol=1e-4, rtol=1e-4)


def test_swiglu_is_two_templates_with_the_mul_fused(templates, device):
    x, w1, w2 = torch.randn(11, 24, device=device), torch.randn(24, 40, device=device), torch.randn(24, 40, device=device)
    check(lambda x, w1, w2: F.silu(x @ w1) * (x @ w2), x, w1, w2, kernels=2, atol=1e-4, rtol=1e-4)
    assert all(n.startswith("triton_tem_") for n in kernel_names())


def test_training_step_with_templates(templates, device):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.GELU(), torch.nn.Linear(20, 6)).to(device)
    check(lambda x: mlp(x), torch.randn(7, 12, device=device), grad=True, atol=1e-4, rtol=1e-4)
    assert any(n.startswith("triton_tem_") for n in kernel_names())


# ── off, auto ────────────────────────────────────────────────────────────────────────────────────

def test_off_leaves_cublas_calls(device):
    x, w, b = torch.randn(8, 16, device=device), torch.randn(16, 12, device=device), torch.randn(12, device=device)
    with config.patch(matmul_templates="off"):
        check(lambda x, w, b: torch.relu(x @ w + b), x, w, b, kernels=1, atol=1e-4, rtol=1e-4)
    assert "aten.mm.default" in extern_calls()
    assert not any(n.startswith("triton_tem_") for n in kernel_names())


def test_auto_keeps_cublas_on_the_cpu():
    x, w, b = torch.randn(8, 16), torch.randn(16, 12), torch.randn(12)
    with config.patch(matmul_templates="auto"):
        check(lambda x, w, b: torch.relu(x @ w + b), x, w, b, kernels=1, atol=1e-4, rtol=1e-4)
    assert "aten.mm.default" in extern_calls()


def test_auto_rule_prefers_templates_for_small_k_with_an_epilogue():
    # a linear layer's up-projection (K = 768) with a residual add fused: the template (H100, session
    # 23: 0.091 ms against cuBLAS + epilogue 0.119)
    assert prefer_template(1, 8192, 3072, 768, torch.float16, True)[0]
    # with GELU instead the template paid for its erf: cuBLAS (0.118 against 0.110 ms)
    assert not prefer_template(1, 8192, 3072, 768, torch.float16, True, transcendental=True)[0]
    # its down-projection (K = 3072): cuBLAS's main loop wins
    assert not prefer_template(1, 8192, 768, 3072, torch.float16, True)[0]
    # nothing to fuse: cuBLAS
    assert not prefer_template(1, 8192, 3072, 768, torch.float16, False)[0]


def test_auto_rule_charges_a_template_for_the_sms_its_tiles_leave_idle():
    # 256 tokens: the up-projection with a residual add has 36 default tiles for 132 SMs, the
    # down-projection 12. Measured on an H200 (session 27, fp16, GPU time): the templates took
    # 0.008 and 0.018 ms against cuBLAS plus the epilogue's 0.007 and 0.009, where the model without
    # the idle SMs had the templates ahead (2.3 against 4.5 µs for the down-projection)
    assert not prefer_template(1, 256, 2304, 768, torch.float16, True)[0]
    assert not prefer_template(1, 256, 768, 3072, torch.float16, True)[0]
    # with tiles for every SM the rule is as before
    assert prefer_template(1, 8192, 3072, 768, torch.float16, True)[0]
    from mini_inductor.codegen.matmul_template import gpu_default_config
    from mini_inductor.scheduler.matmul_choice import default_tile
    for m, n in ((256, 768), (100, 3072), (8192, 64)):   # the model counts the tiles codegen launches
        c = gpu_default_config(m, n, 3072, torch.float16)
        bm, bn = default_tile(m, n)
        assert c.tiles(m, n) == -(-m // bm) * -(-n // bn)


def test_auto_rule_charges_a_template_for_its_last_wave():
    # 2048 tokens, N 2304, K 768: 288 tiles, 2.2 waves of 132 SMs run as 3. On an H200 (session 28,
    # fp16) the template with bias+GELU took 0.028 ms against cuBLAS plus the epilogue's 0.022, and
    # with a residual add 0.020 against 0.019, where the model counting whole SMs only chose the template
    assert not prefer_template(1, 2048, 2304, 768, torch.float16, True, transcendental=True)[0]
    assert not prefer_template(1, 2048, 2304, 768, torch.float16, True)[0]
    # full waves or nearly (384 and 2304 tiles): the residual add's template was 0.022 against 0.024
    # and 0.124 against 0.145 ms, and is still chosen
    assert prefer_template(1, 2048, 3072, 768, torch.float16, True)[0]
    assert prefer_template(1, 16384, 2304, 768, torch.float16, True)[0]


def test_auto_rule_counts_nothing_for_an_epilogue_its_readers_would_compute():
    # GPT-2's scores in float32 (12 x 512 x 512 x 64) with a causal mask: fused in the template, or a
    # kernel of its own after cuBLAS, the template wins; but the softmax after it computes the mask at
    # no cost, and then cuBLAS wins (H100, session 24: template 31.5 µs, cuBLAS 21.5 µs). At batch 4
    # (48 heads): 768 tiles, full waves; at batch 1 (192 tiles, 1.5 waves) the model had the two level
    assert prefer_template(48, 512, 512, 64, torch.float32, True)[0]
    assert not prefer_template(48, 512, 512, 64, torch.float32, True, separate_passes=0)[0]


# ── max-autotune: timed at compile time, kept on disk ────────────────────────────────────────────

def test_max_autotune_times_the_choice_once_and_reuses_it_from_disk(monkeypatch, tmp_path):
    """The timing path in the interpreter with a fake timer (every candidate launched once): cuBLAS
    made the fastest, then a warm start reads the choice back without timing anything."""
    from mini_inductor.codegen import matmul_autotune
    from mini_inductor.scheduler import matmul_choice

    timed = []

    def fake_time(fn):
        fn()
        timed.append(fn)
        return 0.5 if len(timed) == 3 else 1.0   # the third candidate (cuBLAS + epilogue) wins

    monkeypatch.setattr(matmul_choice, "MEASURE_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(matmul_autotune, "time_ms", fake_time)
    monkeypatch.setattr(matmul_autotune, "matmul_configs", lambda m, n, k, dtype, batched, **_: [
        matmul_autotune.MatmulConfig(16, 16, 16, 8, 4, 1), matmul_autotune.MatmulConfig(32, 32, 16, 8, 4, 1)])
    x, w, b = torch.randn(9, 16), torch.randn(16, 20), torch.randn(20)
    fn = lambda x, w, b: torch.relu(x @ w + b)   # noqa: E731
    with config.patch(max_autotune=True, matmul_templates="auto", cache_dir=str(tmp_path)):
        # auto on the CPU makes no templates: "always" would not time; force the template here
        monkeypatch.setattr("mini_inductor.lowering.matmul_lowerings.template_refusal", lambda *a: None)
        check(fn, x, w, b, atol=1e-4, rtol=1e-4)
        assert len(timed) == 3                      # two configs, then cuBLAS + the epilogue kernel
        assert "aten.mm.default" in extern_calls()  # cuBLAS won
        torch._dynamo.reset()
        PROCESS.clear()
        with config.patch(graph_cache=False):   # compiled again, not served whole from the graph cache
            check(fn, x, w, b, atol=1e-4, rtol=1e-4)
        assert len(timed) == 3                      # read back from disk
    files = list((tmp_path / "autotune").rglob("*.json"))
    assert files and '"choice": "cublas"' in files[0].read_text()


def test_max_autotune_precompiles_every_candidate_side_by_side_and_a_failure_loses_nothing():
    # on a GPU the configs compile in threads (JITFunction.warmup) before they are timed; here the
    # kernels are stand-ins that record their thread: Triton cannot compile for a GPU without one
    import threading
    import time

    from mini_inductor.codegen import matmul_autotune

    seen = []

    class Kernel:
        def __init__(self, fails):
            self.fails = fails

        def warmup(self, *args, grid, **kwargs):
            time.sleep(0.05)     # a compile's length: the threads overlap
            seen.append((threading.get_ident(), args, grid, kwargs))
            if self.fails:
                raise RuntimeError("out of resource: shared memory")
    items = [(Kernel(fails=j == 1), (j, 1, 1), (j,), {"BLOCK_M": 16 * j, "num_warps": 4}) for j in range(4)]
    matmul_autotune.precompile(items)
    assert sorted(a for _, a, _, _ in seen) == [(0,), (1,), (2,), (3,)]   # the failing one did not stop the rest
    assert all(g == (a[0], 1, 1) and kw["BLOCK_M"] == 16 * a[0] for _, a, g, kw in seen)
    assert len({t for t, *_ in seen}) > 1


def test_max_autotune_picks_the_template_when_it_is_faster(monkeypatch, tmp_path):
    from mini_inductor.codegen import matmul_autotune
    from mini_inductor.scheduler import matmul_choice

    calls = []

    def fake_time(fn):
        fn()
        calls.append(fn)
        return {1: 2.0, 2: 0.25}.get(len(calls), 3.0)   # the second config wins

    monkeypatch.setattr(matmul_choice, "MEASURE_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(matmul_autotune, "time_ms", fake_time)
    monkeypatch.setattr(matmul_autotune, "matmul_configs", lambda m, n, k, dtype, batched, **_: [
        matmul_autotune.MatmulConfig(16, 16, 16, 8, 4, 1),
        matmul_autotune.MatmulConfig(32, 16, 16, 4, 4, 1, persistent=True)])
    monkeypatch.setattr("mini_inductor.lowering.matmul_lowerings.template_refusal", lambda *a: None)
    x, w = torch.randn(9, 16), torch.randn(16, 40)
    with config.patch(max_autotune=True, matmul_templates="auto", cache_dir=str(tmp_path)):
        check(lambda x, w: F.silu(x @ w), x, w, kernels=1, atol=1e-4, rtol=1e-4)
    assert "BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, GROUP_M=4, EVEN_K=1, NUM_PROGRAMS=2" in sources()
    assert "for tile in range(tl.program_id(0)" in template_kernels()[0]


@pytest.mark.parametrize("template_ms, chosen", [(0.98, "aten.mm.default"), (0.9, None)])
def test_max_autotune_keeps_cublas_unless_a_template_is_three_percent_faster(monkeypatch, tmp_path, template_ms,
                                                                            chosen):
    # closer than 3%, the two trade places from one timing to the next (TEMPLATE_MARGIN): cuBLAS stays
    from mini_inductor.codegen import matmul_autotune
    from mini_inductor.scheduler import matmul_choice

    calls = []

    def fake_time(fn):
        fn()
        calls.append(fn)
        return template_ms if len(calls) == 1 else 1.0   # the one config, then cuBLAS + the epilogue

    monkeypatch.setattr(matmul_choice, "MEASURE_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(matmul_autotune, "time_ms", fake_time)
    monkeypatch.setattr(matmul_autotune, "matmul_configs", lambda m, n, k, dtype, batched, **_: [
        matmul_autotune.MatmulConfig(16, 16, 16, 8, 4, 1)])
    monkeypatch.setattr("mini_inductor.lowering.matmul_lowerings.template_refusal", lambda *a: None)
    import mini_inductor
    with config.patch(max_autotune=True, matmul_templates="auto", cache_dir=str(tmp_path)):
        check(lambda x, w: F.silu(x @ w), torch.randn(9, 16), torch.randn(16, 40), atol=1e-4, rtol=1e-4)
        assert len(calls) == 2
        assert extern_calls() == ([chosen] if chosen else [])
        text = str(mini_inductor.explain(lambda x, w: F.silu(x @ w), torch.randn(9, 16), torch.randn(16, 40)))
    if chosen:   # the reason says why the faster template lost
        assert "the fastest template, template 16x16x16" in text and "within 3% of it" in text, text


def test_max_autotune_times_cublaslt_with_its_activation_as_the_cublas_candidate(monkeypatch, tmp_path):
    # with option cublaslt_activations, cuBLAS's candidate is the one _addmm_activation call that codegen
    # makes of a ReLU after an addmm, not the addmm and a kernel after it
    from mini_inductor.codegen import matmul_autotune
    from mini_inductor.scheduler import matmul_choice

    timed_ops = []
    real_op = torch.ops.aten._addmm_activation.default

    def fake_time(fn):
        fn()
        timed_ops.append(fn)
        return 1.0 if len(timed_ops) == 1 else 0.5   # cuBLAS wins

    monkeypatch.setattr(matmul_choice, "MEASURE_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(matmul_autotune, "time_ms", fake_time)
    monkeypatch.setattr(matmul_autotune, "matmul_configs", lambda m, n, k, dtype, batched, **_: [
        matmul_autotune.MatmulConfig(16, 16, 16, 8, 4, 1)])
    monkeypatch.setattr("mini_inductor.lowering.matmul_lowerings.template_refusal", lambda *a: None)
    lin = torch.nn.Linear(16, 20)
    import mini_inductor
    with config.patch(max_autotune=True, matmul_templates="auto", cache_dir=str(tmp_path),
                      cublaslt_activations=True), torch.no_grad():
        check(lambda x: torch.relu(lin(x)), torch.randn(9, 16), kernels=0, atol=1e-5, rtol=1e-5)
        assert extern_calls() == [str(real_op)]
        text = str(mini_inductor.explain(lambda x: torch.relu(lin(x)), torch.randn(9, 16)))
    assert "measured: template 16x16x16" in text and "cuBLAS with ReLU in cuBLASLt's epilogue (aten._addmm_activation) 0.5000 ms" in text, text


def test_auto_hands_a_cublaslt_activation_to_cublas_even_where_the_model_prefers_a_template(auto_on_the_cpu,
                                                                                           monkeypatch):
    # measured on an H200: cuBLASLt's own ReLU and tanh-GELU beat the template's epilogue; anything
    # more in the epilogue (here a scale) leaves the choice to the model
    from mini_inductor.scheduler import matmul_choice

    monkeypatch.setattr(matmul_choice, "MODEL_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(matmul_choice, "prefer_template", lambda *a, **k: (True, "model"))
    lin = torch.nn.Linear(16, 20)
    with config.patch(cublaslt_activations=True), torch.no_grad():
        check(lambda x: torch.relu(lin(x)), torch.randn(9, 16), kernels=0, atol=1e-5, rtol=1e-5)
        assert extern_calls() == ["aten._addmm_activation.default"]
        metrics.reset()
        torch._dynamo.reset()
        check(lambda x: torch.relu(lin(x)) * 2, torch.randn(9, 16), kernels=1, atol=1e-5, rtol=1e-5)
        assert extern_calls() == [] and template_kernels()


# ── reporting ────────────────────────────────────────────────────────────────────────────────────

def test_explain_names_templates_and_what_fused(templates):
    import mini_inductor

    x, w, b = torch.randn(9, 16), torch.randn(16, 20), torch.randn(20)
    text = str(mini_inductor.explain(lambda x, w, b: F.gelu(x @ w + b), x, w, b))
    assert re.search(r"matmul buf\d+: aten\.mm\.default 9 x 20 x 16 torch\.float32: Triton template "
                     r"\(fused: add, .*\)", text), text


def test_explain_says_why_a_matmul_stayed_cublas():
    import mini_inductor

    x, w = torch.randn(9, 16), torch.randn(16, 20)
    with config.patch(matmul_templates="off"):
        text = str(mini_inductor.explain(lambda x, w: x @ w, x, w))
    assert "aten.mm 9x16 x 16x20 torch.float32: ATen (matmul_templates='off')" in text, text


def test_explain_says_how_a_cpu_matmul_could_become_a_template():
    import mini_inductor

    x, w = torch.randn(9, 16), torch.randn(16, 20)
    with config.patch(matmul_templates="auto"):
        text = str(mini_inductor.explain(lambda x, w: x @ w, x, w))
    assert ("aten.mm 9x16 x 16x20 torch.float32: ATen (a CPU matmul becomes a Triton template only with "
            "matmul_templates='always' and TRITON_INTERPRET=1)") in text, text


# ── auto: the cost model's choice, and cuBLAS with the epilogue split off ─────────────────────────

@pytest.fixture
def auto_on_the_cpu(monkeypatch):
    """matmul_templates="auto" as on CUDA: templates made at lowering, the choice left to the model."""
    monkeypatch.setattr("mini_inductor.lowering.matmul_lowerings.template_refusal", lambda *a: None)
    with config.patch(matmul_templates="auto"):
        yield


def test_auto_without_an_epilogue_is_cublas(auto_on_the_cpu):
    check(lambda x, w: x @ w, torch.randn(9, 16), torch.randn(16, 20), kernels=0, atol=1e-4, rtol=1e-4)
    assert extern_calls() == ["aten.mm.default"]


def test_auto_with_an_epilogue_on_a_small_problem_is_a_template(auto_on_the_cpu):
    check(lambda x, w: torch.relu(x @ w), torch.randn(9, 16), torch.randn(16, 20), kernels=1, atol=1e-4, rtol=1e-4)
    assert kernel_names()[0].startswith("triton_tem_") and not extern_calls()


def test_cublas_choice_splits_the_epilogue_into_a_kernel_after_it(auto_on_the_cpu, monkeypatch):
    monkeypatch.setattr("mini_inductor.scheduler.matmul_choice.prefer_template", lambda *a: (False, "model"))
    x, w, r = torch.randn(9, 16), torch.randn(16, 20), torch.randn(9, 20)
    check(lambda x, w, r: torch.relu(x @ w) + r, x, w, r, kernels=1, atol=1e-4, rtol=1e-4)
    assert extern_calls() == ["aten.mm.default"]
    assert kernel_names()[0].startswith("triton_poi_")


def test_cublas_choice_keeps_addmm_whole(auto_on_the_cpu, monkeypatch):
    monkeypatch.setattr("mini_inductor.scheduler.matmul_choice.prefer_template", lambda *a: (False, "model"))
    lin = torch.nn.Linear(16, 20)
    check(lambda x: F.gelu(lin(x)), torch.randn(9, 16), kernels=1, atol=1e-4, rtol=1e-4)
    assert extern_calls() == ["aten.addmm.default"]


# ── cuBLASLt's own activation epilogues (scheduler/matmul_activation.py) ─────────────────────────────

@pytest.fixture
def cublas_chosen(auto_on_the_cpu, monkeypatch):
    monkeypatch.setattr("mini_inductor.scheduler.matmul_choice.prefer_template", lambda *a: (False, "model"))
    with config.patch(cublaslt_activations=True):
        yield


def test_relu_after_a_cublas_addmm_is_one_addmm_activation_call(cublas_chosen):
    import mini_inductor

    lin = torch.nn.Linear(16, 20)
    with torch.no_grad():
        check(lambda x: torch.relu(lin(x)), torch.randn(9, 16), kernels=0, atol=1e-5, rtol=1e-5)
        assert extern_calls() == ["aten._addmm_activation.default"]
        text = str(mini_inductor.explain(lambda x: torch.relu(lin(x)), torch.randn(9, 16)))
    assert "cuBLAS with ReLU in cuBLASLt's epilogue (aten._addmm_activation)" in text, text
    assert "2 nodes → 1 group: 0 Triton kernels, 1 extern call" in text, text
    metrics.reset()
    torch._dynamo.reset()
    with config.patch(cublaslt_activations=False), torch.no_grad():   # the option off: addmm and a kernel
        check(lambda x: torch.relu(lin(x)), torch.randn(9, 16), kernels=1, atol=1e-5, rtol=1e-5)
        assert extern_calls() == ["aten.addmm.default"]
        text = str(mini_inductor.explain(lambda x: torch.relu(lin(x)), torch.randn(9, 16)))
    assert "2 nodes → 1 group: 1 Triton kernel, 1 extern call" in text, text


@pytest.mark.parametrize("case", ["scaled", "product_returned", "exact_gelu", "tanh_gelu_on_the_cpu", "mm_without_bias"])
def test_what_is_not_an_addmm_activation(cublas_chosen, case):
    # an epilogue that is more than the activation, a product something else reads, a function that
    # is not cuBLASLt's (exact GELU; on the CPU aten._addmm_activation's GELU is the exact one, so
    # tanh-GELU stays apart there), no bias to fold
    lin = torch.nn.Linear(16, 20)
    fns = {"scaled": lambda x: torch.relu(lin(x)) * 2,
           "product_returned": lambda x: (lambda y: (torch.relu(y), y))(lin(x)),
           "exact_gelu": lambda x: F.gelu(lin(x)),
           "tanh_gelu_on_the_cpu": lambda x: F.gelu(lin(x), approximate="tanh"),
           "mm_without_bias": lambda x: torch.relu(x @ lin.weight.t())}
    with torch.no_grad():
        check(fns[case], torch.randn(9, 16), atol=1e-5, rtol=1e-5)
    assert "aten._addmm_activation.default" not in extern_calls()


def test_the_probe_tells_tanh_gelu_from_exact_gelu_and_relu(cublas_chosen, monkeypatch):
    # what the body computes, found by running it in float64 on probes: tanh-GELU is matched (as on
    # CUDA), exact GELU, whose values differ by at most 5e-4, is not
    from mini_inductor.scheduler import matmul_activation

    found = []
    real = matmul_activation.activation_of
    monkeypatch.setattr(matmul_activation, "activation_of", lambda *a: found.append(real(*a)) or None)
    lin = torch.nn.Linear(16, 20)
    with torch.no_grad():
        for fn in (lambda x: F.gelu(lin(x), approximate="tanh"), lambda x: F.gelu(lin(x)), lambda x: torch.relu(lin(x)),
                   lambda x: torch.clamp_min(lin(x), 0.0), lambda x: torch.tanh(lin(x)),
                   lambda x: (lambda y: torch.where(y > 0, y, 0.0))(lin(x)),
                   lambda x: (lambda y: torch.where(y > 0, y, y * 0.01))(lin(x)),
           # not ReLU at a NaN or -inf product, or after a rounding to bfloat16 (review of session 29)
           lambda x: (lambda y: y * (y > 0))(lin(x)), lambda x: torch.relu(lin(x).bfloat16().float())):
            torch._dynamo.reset()
            check(fn, torch.randn(9, 16), atol=1e-5, rtol=1e-5)
        half = lin.to(torch.float16)   # through the float32 upcast, a buffer of its own
        for fn in (lambda x: F.gelu(half(x), approximate="tanh"), lambda x: F.gelu(half(x))):
            torch._dynamo.reset()
            check(fn, torch.randn(9, 16).half(), atol=1e-2, rtol=1e-2)
    # where(y > 0, y, 0) is 0 at a NaN product, where relu (and cuBLASLt) give NaN: not taken
    assert found == ["gelu", None, "relu", "relu", None, None, None, None, None, "gelu", None]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_tanh_gelu_through_its_upcast_is_one_addmm_activation(cublas_chosen, monkeypatch, dtype):
    # a 2-byte GELU decomposes into two nodes (the float32 upcast of the product is a buffer of its
    # own): the fusion check, as it runs on CUDA, must keep both with the addmm, and codegen must make
    # them one call that stores neither (H200 run of session 29: a kernel was left after the addmm).
    # On the CPU aten._addmm_activation's GELU is the exact one, 5e-4 from the tanh form at most,
    # within the dtype's tolerance: device_computes is patched to let the CPU stand in for CUDA here.
    from mini_inductor.scheduler import matmul_activation, matmul_choice

    monkeypatch.setattr(matmul_choice, "MODEL_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(matmul_activation, "device_computes", lambda act, device: True)
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=gen).to(dtype) for s in ((24, 32), (40, 32), (40,)))
    check(lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"), x, w, b, kernels=0, atol=2e-2, rtol=2e-2)
    assert extern_calls() == ["aten._addmm_activation.default"]
    metrics.reset()
    torch._dynamo.reset()   # the product also returned: the upcast stays a kernel after a plain addmm
    check(lambda x, w, b: (lambda y: (F.gelu(y, approximate="tanh"), y))(F.linear(x, w, b)), x, w, b,
          atol=2e-2, rtol=2e-2)
    assert extern_calls() == ["aten.addmm.default"]


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["relu", "gelu_tanh"])
def test_gpu_addmm_activation_matches_eager(cublas_chosen, act):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(512, 768, device="cuda", dtype=torch.float16, generator=gen)
    w = torch.randn(3072, 768, device="cuda", dtype=torch.float16, generator=gen) * 768 ** -0.5
    b = torch.randn(3072, device="cuda", dtype=torch.float16, generator=gen)
    fn = (lambda x, w, b: torch.relu(F.linear(x, w, b))) if act == "relu" else \
        (lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"))
    check(fn, x, w, b, kernels=0, atol=2e-2, rtol=2e-2)
    assert extern_calls() == ["aten._addmm_activation.default"]


def test_persistent_variant_loops_over_tiles(templates, device, monkeypatch):
    from mini_inductor.codegen import matmul_template

    def persistent(m, n, k, dtype):
        return matmul_template.MatmulConfig(16, 16, 16, 2, 4, 1, persistent=True)
    monkeypatch.setattr(matmul_template, "default_config", persistent)
    x, w, r = torch.randn(37, 24, device=device), torch.randn(24, 45, device=device), torch.randn(37, 45, device=device)
    check(lambda x, w, r: torch.tanh(x @ w) + r, x, w, r, kernels=1, atol=1e-4, rtol=1e-4)
    (src,) = template_kernels()
    assert "for tile in range(tl.program_id(0)" in src


# ── GPU: real sizes, auto's choice on CUDA, max-autotune's timings ───────────────────────────────

def _linear_gelu(m, n, k, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
    w = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) * k ** -0.5
    b = torch.randn(n, device="cuda", dtype=dtype, generator=gen)
    return (lambda x, w, b: F.gelu(F.linear(x, w, b))), (x, w, b)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(8192, 3072, 768), (8192, 768, 3072)])
def test_gpu_transformer_linear_bias_gelu_fp16(templates, m, n, k):
    fn, args = _linear_gelu(m, n, k, torch.float16)
    check(fn, *args, kernels=1, atol=2e-2, rtol=2e-2)
    assert kernel_names()[0].startswith("triton_tem_")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_bmm_and_residual(templates, dtype):
    a = torch.randn(12, 257, 64, device="cuda", dtype=dtype)
    b = torch.randn(12, 64, 255, device="cuda", dtype=dtype)
    r = torch.randn(12, 257, 255, device="cuda", dtype=dtype)
    tol = 3e-2 if dtype == torch.bfloat16 else 2e-2   # fp32: TF32 by default on both sides
    check(lambda a, b, r: torch.bmm(a, b) * 0.125 + r, a, b, r, kernels=1, atol=tol, rtol=tol)


@pytest.mark.gpu
def test_gpu_auto_makes_a_residual_linear_a_template_and_leaves_bias_gelu_to_cublas(monkeypatch):
    # The H100's timings at these shapes (benchmarks/matmul_templates.py, session 24): with a residual
    # add the template beat cuBLAS and its epilogue (0.073 against 0.089 ms); with bias and GELU cuBLAS
    # won (0.081 against 0.093 ms), the GELU's erf being costly in the template's epilogue.
    monkeypatch.setattr(config, "matmul_templates", "auto")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(8192, 768, device="cuda", dtype=torch.float16, generator=gen)
    w = torch.randn(2304, 768, device="cuda", dtype=torch.float16, generator=gen) * 768 ** -0.5
    r = torch.randn(8192, 2304, device="cuda", dtype=torch.float16, generator=gen)
    check(lambda x, w, r: F.linear(x, w) + r, x, w, r, kernels=1, atol=2e-2, rtol=2e-2)
    assert kernel_names()[0].startswith("triton_tem_") and not extern_calls()
    metrics.reset()
    torch._dynamo.reset()
    fn, args = _linear_gelu(8192, 2304, 768, torch.float16)
    check(fn, *args, kernels=1, atol=2e-2, rtol=2e-2)
    assert extern_calls() == ["aten.addmm.default"]


@pytest.mark.gpu
def test_gpu_float32_scores_leave_their_mask_to_the_softmax(monkeypatch):
    monkeypatch.setattr(config, "matmul_templates", "auto")
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(1, 12, 512, 64, device="cuda", generator=gen) for _ in range(2))
    keep = torch.ones(512, 512, dtype=torch.bool, device="cuda").tril()
    check(lambda q, k, keep: (q @ k.transpose(-1, -2) * 0.125).masked_fill(~keep, -1e4).softmax(-1), q, k, keep,
          kernels=1, atol=1e-4, rtol=1e-4)
    assert not [n for n in kernel_names() if n.startswith("triton_tem_")] and extern_calls() == ["aten.bmm.default"]


@pytest.mark.gpu
def test_gpu_float32_linear_with_pointwise_uses_adds_its_bias_in_their_kernel(monkeypatch):
    # cuBLASLt's fp32 addmm of a down-projection took twice the plain mm's time on the H100
    monkeypatch.setattr(config, "matmul_templates", "auto")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 256, 3072, device="cuda", generator=gen)
    w = torch.randn(768, 3072, device="cuda", generator=gen) * 3072 ** -0.5
    b, r = torch.randn(768, device="cuda", generator=gen), torch.randn(2, 256, 768, device="cuda", generator=gen)
    check(lambda x, w, b, r: F.linear(x, w, b) + r, x, w, b, r, kernels=1, atol=1e-4, rtol=1e-4)
    assert extern_calls() == ["aten.mm.default"]
    metrics.reset()
    torch._dynamo.reset()
    # the split into heads of q, k, v is views then a copy: the bias goes into the copy's kernel
    check(lambda x, w, b: F.linear(x, w, b).view(2, 256, 12, 64).transpose(1, 2).contiguous(), x, w, b,
          kernels=1, atol=1e-4, rtol=1e-4)
    assert extern_calls() == ["aten.mm.default"]
    metrics.reset()
    torch._dynamo.reset()
    # a use after the views that is not pointwise (a reduction) keeps addmm
    check(lambda x, w, b: F.linear(x, w, b).view(2, 256, 12, 64).transpose(1, 2).sum(-1), x, w, b,
          atol=1e-3, rtol=1e-4)
    assert extern_calls() == ["aten.addmm.default"]


@pytest.mark.parametrize("case, split", [
    ("heads", True),       # view → transpose → clone: the bias goes into the copy
    ("residual", True),
    ("swiglu", False),     # chunk: the add would be realized once for both halves
    ("reduction", False),  # a sum after the views
    ("output", False),     # a view of the product is returned
])
def test_float32_addmm_split_reads_through_single_consumer_views_only(case, split):
    # the CUDA-only decision of lowering/extern_lowerings.py, on the graphs these functions trace to
    from torch.fx.experimental.proxy_tensor import make_fx

    from mini_inductor.lowering.extern_lowerings import _pointwise_uses
    fns = {"heads": lambda x, w, b: F.linear(x, w, b).view(2, 8, 3, 4).transpose(1, 2).contiguous(),
           "residual": lambda x, w, b: F.linear(x, w, b) + x[..., :12],
           "swiglu": lambda x, w, b: (lambda a, g: F.silu(a) * g)(*F.linear(x, w, b).chunk(2, -1)),
           "reduction": lambda x, w, b: F.linear(x, w, b).view(2, 8, 3, 4).transpose(1, 2).sum(-1),
           "output": lambda x, w, b: (F.linear(x, w, b).view(16, 12).t(), F.linear(x, w, b).relu())}
    graph = make_fx(fns[case])(torch.randn(2, 8, 16), torch.randn(12, 16), torch.randn(12)).graph
    addmms = [n for n in graph.nodes if n.target is torch.ops.aten.addmm.default]
    assert addmms and all(_pointwise_uses(n) == split for n in addmms[:1]), [str(n.target) for n in graph.nodes]


@pytest.mark.gpu
def test_gpu_max_autotune_times_templates_against_cublas_and_keeps_the_choice(tmp_path, monkeypatch):
    from mini_inductor.codegen import matmul_autotune

    timed = []
    real = matmul_autotune.time_ms
    monkeypatch.setattr(matmul_autotune, "time_ms", lambda fn: timed.append(1) or real(fn))
    fn, args = _linear_gelu(4096, 3072, 768, torch.float16)
    with config.patch(max_autotune=True, matmul_templates="auto", cache_dir=str(tmp_path)):
        check(fn, *args, atol=2e-2, rtol=2e-2)
        first = len(timed)
        assert first >= 3            # several template configs and cuBLAS + the epilogue kernel
        text = [f.read_text() for f in (tmp_path / "autotune").rglob("*.json") if "matmul choice" not in f.name]
        assert any('"choice"' in t for t in text)
        torch._dynamo.reset()
        PROCESS.clear()
        with config.patch(graph_cache=False):
            check(fn, *args, atol=2e-2, rtol=2e-2)
        assert len(timed) == first   # the choice came back from disk


def test_report_lists_a_cublas_matmul_as_an_extern_call_and_templates_as_kernels(auto_on_the_cpu):
    import mini_inductor

    x, w1, w2 = torch.randn(9, 16), torch.randn(16, 20), torch.randn(16, 20)
    report = mini_inductor.explain(lambda x, w1, w2: (torch.relu(x @ w1), x @ w2, torch.sin(x)), x, w1, w2)
    (graph,) = report.graphs
    kinds = {k["name"]: k["kind"] for k in graph["kernels"]}
    assert sorted(kinds.values()) == ["pointwise", "template"], kinds
    assert all(name.startswith("triton_tem_") == (kind == "template") for name, kind in kinds.items())
    assert [e["op"] for e in graph["externs"]] == ["aten.mm.default"]
    assert "<svg" in report.html_page()


# ── prologues: a cast or scale of an input computed where the template loads it ─────────────────

def test_cast_of_an_input_is_a_prologue(templates, device):
    x, w = torch.randn(21, 24, device=device), torch.randn(24, 19, device=device, dtype=torch.float16)
    check(lambda x, w: torch.relu(x.half() @ w), x, w, kernels=1, atol=1e-2, rtol=1e-2)
    (src,) = template_kernels()
    assert "a_row = rows_a[:, None]" in src and ".to(tl.float16)" in src.split("for k in")[1]


def test_scale_of_the_weight_is_a_prologue(templates, device):
    x, w = torch.randn(21, 24, device=device), torch.randn(30, 24, device=device)
    check(lambda x, w: F.linear(x, w * 0.5), x, w, kernels=1, atol=1e-4, rtol=1e-4)
    assert "b_row = (k + offs_k)[:, None]" in template_kernels()[0]


def test_an_input_read_elsewhere_is_not_a_prologue(templates, device):
    x, w = torch.randn(21, 24, device=device), torch.randn(24, 19, device=device)
    check(lambda x, w: (lambda y: (y @ w, y + 1))(x * 2), x, w, kernels=2, atol=1e-4, rtol=1e-4)
    assert "a_row" not in template_kernels()[0]


def test_cublas_choice_runs_the_prologue_as_a_kernel_before_it(auto_on_the_cpu, monkeypatch):
    monkeypatch.setattr("mini_inductor.scheduler.matmul_choice.prefer_template", lambda *a: (False, "model"))
    x, w = torch.randn(9, 16), torch.randn(16, 20)
    check(lambda x, w: torch.relu((x * 2) @ w), x, w, kernels=2, atol=1e-4, rtol=1e-4)
    assert extern_calls() == ["aten.mm.default"]


def test_training_step_with_a_prologue(templates, device):
    torch.manual_seed(0)
    lin = torch.nn.Linear(12, 20).to(device)
    check(lambda x: F.gelu(lin(x * 0.5)), torch.randn(7, 12, device=device), grad=True, atol=1e-4, rtol=1e-4)


def test_max_autotune_times_cublas_with_the_prologue_and_epilogue_kernels(monkeypatch, tmp_path):
    from mini_inductor.codegen import matmul_autotune
    from mini_inductor.scheduler import matmul_choice

    timed = []

    def fake_time(fn):
        fn()
        timed.append(fn)
        return 0.5 if len(timed) == 2 else 1.0   # the second candidate (cuBLAS and its kernels) wins

    monkeypatch.setattr(matmul_choice, "MEASURE_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(matmul_autotune, "time_ms", fake_time)
    monkeypatch.setattr(matmul_autotune, "matmul_configs",
                        lambda m, n, k, dtype, batched, **_: [matmul_autotune.MatmulConfig(16, 16, 16, 8, 4, 1)])
    monkeypatch.setattr("mini_inductor.lowering.matmul_lowerings.template_refusal", lambda *a: None)
    x, w = torch.randn(9, 16), torch.randn(16, 20)
    with config.patch(max_autotune=True, matmul_templates="auto", cache_dir=str(tmp_path)):
        check(lambda x, w: torch.sigmoid((x * 3) @ w), x, w, kernels=2, atol=1e-4, rtol=1e-4)
    assert len(timed) == 2 and extern_calls() == ["aten.mm.default"]   # the prologue and epilogue: 2 kernels


def test_always_under_max_autotune_times_only_template_configs(monkeypatch, tmp_path):
    from mini_inductor.codegen import matmul_autotune
    from mini_inductor.scheduler import matmul_choice

    timed = []

    def fake_time(fn):
        fn()
        timed.append(fn)
        return 1.0 / len(timed)   # the later the faster: the second config wins

    monkeypatch.setattr(matmul_choice, "MEASURE_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(matmul_autotune, "time_ms", fake_time)
    monkeypatch.setattr(matmul_autotune, "matmul_configs", lambda m, n, k, dtype, batched, **_: [
        matmul_autotune.MatmulConfig(16, 16, 16, 8, 4, 1), matmul_autotune.MatmulConfig(16, 32, 16, 8, 4, 1)])
    x, w = torch.randn(9, 16), torch.randn(16, 20)
    with config.patch(max_autotune=True, matmul_templates="always", cache_dir=str(tmp_path)):
        check(lambda x, w: x @ w, x, w, kernels=1, atol=1e-4, rtol=1e-4)
    assert len(timed) == 2 and not extern_calls()
    assert "BLOCK_M=16, BLOCK_N=32" in sources()


def test_changing_allow_tf32_compiles_the_graph_again(templates):
    from mini_inductor.caching.graph_cache import compiler_key_parts

    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        off = compiler_key_parts(config.current())
        torch.backends.cuda.matmul.allow_tf32 = True
        assert compiler_key_parts(config.current()) != off
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def test_a_matmul_listed_as_cudagraph_unsafe_stays_the_aten_call(templates):
    x, w = torch.randn(9, 16), torch.randn(16, 20)
    with config.patch(cudagraph_unsafe_ops="aten.mm"):
        check(lambda x, w: torch.relu(x @ w), x, w, kernels=1, atol=1e-4, rtol=1e-4)
    assert extern_calls() == ["aten.mm.default"]


def test_an_epilogue_reading_a_size_symbol_makes_a_dynamic_graphs_matmul_cublas(templates):
    # the template kernel takes no size arguments: an epilogue whose code reads one (the wrap of a
    # negative index into a dynamic dim) raised NameError 's4' at its launch (fuzz seed 136)
    def f(a, b, c, idx):
        return a.view(3, 4) @ b.view(4, 5) + c[idx]

    compiled = torch.compile(f, backend="mini_inductor", dynamic=True, options={"dynamic_shapes": "symbolic"})
    a, b, idx = torch.randn(12), torch.randn(20), torch.tensor([0, -1, 2])
    for rows in (7, 9):
        c = torch.randn(rows, 5)
        torch.testing.assert_close(compiled(a, b, c, idx), f(a, b, c, idx), atol=1e-5, rtol=1e-5)
    assert extern_calls() == ["aten.mm.default"] and not [n for n in kernel_names() if n.startswith("triton_tem_")]
