"""Every codegen path's kernels compile for an H100 (sm_90), checked on the CPU.

The other CPU tests run the generated kernels in Triton's interpreter, which accepts programs that
Triton's compiler refuses: the block-table kernel (attention/kernels.py block_ranges) bound one name
to vectors of two lengths in the branches of an `if`, passed every CPU test, and failed on the GPU
(session 26). Here the kernels a workload launches are compiled for sm_90 by the real compiler in a
process of its own (tests/sm90.py), with the argument types and constexprs of their launches.
"""
import dataclasses
import inspect

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mini_inductor  # noqa: F401  (the backend)
from mini_inductor import config
from mini_inductor.attention import flash, score_mod, tables
from sm90 import compile_all, launches, libdevice_links

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="on the GPU the kernels compile where they run")

FILL = torch.finfo(torch.float32).min


def test_block_tables_from_mask_data_compile_with_fewer_query_blocks_than_key_blocks():
    # 2 query blocks, 4 key blocks: block_ranges' two branches hold vectors of lengths 4 and 2
    pad = torch.zeros(2, 1, 1, 60, dtype=torch.bool)
    pad[0, ..., 30:] = True
    keep = torch.ones(52, 60, dtype=torch.bool).tril()
    with launches() as seen:
        for mod, extra in (("where(t0, -inf, s * 0.125)", [pad]), (f"where(t0, s, {FILL!r})", [keep])):
            for q_block_m in (32, 64):   # dk/dv's query blocks as dq's, and twice as tall
                tables._data_block_ranges(score_mod.parse(mod), 52, 60, 32, 16, torch.device("cpu"), True, extra,
                                         q_block_m)
    names = compile_all(seen)
    assert {n.split()[0] for n in names} == {"block_flags", "dead_rows", "block_ranges"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_flash_attention_kernels_compile_forward_and_backward(dtype, monkeypatch):
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=gen).to(dtype).requires_grad_() for _ in range(3))
    pad = torch.zeros(1, 1, 1, 40, dtype=torch.bool)
    pad[..., 33:] = True
    with launches() as seen:
        for mod, extra in (("where(j <= i, s * 0.25, -inf)", []), ("where(t0, -inf, s * 0.25)", [pad])):
            out = torch.ops.mini_inductor.flash_attention(q, k, v, extra, mod)
            out.sum().backward()
    names = {n.split()[0] for n in compile_all(seen)}
    assert {"flash_fwd", "flash_bwd_delta", "flash_bwd_dkdv", "flash_bwd_dq", "block_ranges"} <= names


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_extra_tensor_gradient_kernels_compile(dtype, monkeypatch):
    # flash_bwd_dt<n> for a bias along queries and keys (atomics of a tile), along keys (of a row),
    # along queries and along neither (summed in registers, one atomic add of a vector, of a scalar)
    monkeypatch.setattr(flash, "DATA_SKIP_MIN_SCORES", 0)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=gen).to(dtype) for _ in range(3))
    mod = "where(j <= i, s * 0.25 + t0 + t1 * (j - i) + t2 + t3, -inf)"
    extra = [torch.randn(shape, generator=gen).to(dtype).requires_grad_()
             for shape in ((2, 40, 40), (1, 2, 1, 1), (40,), (40, 1))]
    with launches() as seen:
        out = torch.ops.mini_inductor.flash_attention(q, k, v, extra, mod)
        out.float().sum().backward()
    names = {n.split()[0] for n in compile_all(seen)}
    assert {"flash_bwd_dt0", "flash_bwd_dt1", "flash_bwd_dt2", "flash_bwd_dt3"} <= names, names


@pytest.mark.parametrize("mod, narrow, bias, taller", [
    ("where(j <= i, s * 0.125 + t0, -inf)", True, (24,), False),      # skips, a narrow band
    ("where(j <= i, s * 0.125 + t0, -inf)", False, (24,), True),      # ... a triangle: dk/dv's taller blocks
    ("s * 0.125 + t0", False, (24,), True),                           # none skipped: taller too
    ("where(j <= i, s * 0.125 + t0, -inf)", False, (24, 24), False),  # a bias per score: flash.PER_SCORE_DKDV
    ("s * 0.125 + t0[i - j + 23]", False, (47,), False)])             # ... read at a computed index
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_flash_attention_kernels_compile_with_the_gpus_configs(dtype, mod, narrow, bias, taller, monkeypatch):
    # on a GPU the plan differs: block sizes, warps and stages for the GPU, tl.dot in bfloat16 (the
    # interpreter's in float32) and TF32 for float32; the interpreter runs those launches here
    # (their numerics are not checked) so that their kernels compile as the GPU would
    original = flash._plan
    monkeypatch.setattr(flash, "_plan", lambda mod, kinds, E, Ev, dt, on_gpu, tf32, *rest:
                        original(mod, kinds, E, Ev, dt, True, True, *rest))
    monkeypatch.setattr(flash, "narrow_band", lambda *a: narrow)   # at L 24 any mask is a narrow band
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 24, 64, generator=gen).to(dtype).requires_grad_() for _ in range(3))
    bias = torch.randn(bias, generator=gen)
    with launches() as seen:
        out = torch.ops.mini_inductor.flash_attention(q, k, v, [bias], mod)
        out.float().sum().backward()
    names = compile_all(seen)
    meta = next(kw for fn, _, kw in seen if fn.__name__ == "flash_fwd")
    assert meta["num_stages"] > 1 and (meta["PRECISION"] == "tf32" or dtype != torch.float32), meta
    assert len(names) >= 4
    dkdv = next(kw for fn, _, kw in seen if fn.__name__ == "flash_bwd_dkdv")
    if dtype != torch.float32:
        assert dkdv["BLOCK_M"] == (128 if taller else 64), dkdv


class Block(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.down(F.gelu(self.up(self.norm(x))))
        return torch.softmax(x + h, dim=-1).cumsum(-1) + x.var(-1, keepdim=True)


@pytest.mark.parametrize("templates", ["off", "always"])
def test_a_compiled_training_step_compiles_its_kernels(templates):
    # pointwise, persistent and looped reductions, var (Welford), softmax, the backward's kernels and,
    # with templates, the matmul templates with their epilogues
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(4, 8, 32, requires_grad=True)
    with config.patch(matmul_templates=templates), launches() as seen:
        compiled = torch.compile(model, backend="mini_inductor")
        compiled(x).square().mean().backward()
        y = torch.randn(4, 8, 1024)   # a row longer than a persistent reduction takes: looped
        torch.compile(lambda t: torch.softmax(t, -1) * t.var(-1, keepdim=True), backend="mini_inductor")(y)
    names = compile_all(seen)
    assert len(names) >= 6
    if templates == "always":
        assert any(n.startswith("triton_tem_") for n in names), names


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matmul_templates_compile_in_every_config_max_autotune_times(dtype, persistent, monkeypatch):
    # the GPU's choices the CPU never makes: its configs (H100_CONFIGS, fitted), the persistent
    # variant, TF32 for float32 (the operands rounded by triton_helpers.round_tf32)
    from mini_inductor.codegen import matmul_template as mt
    interpreted = mt.default_config(64, 64, 64, dtype)
    monkeypatch.setattr(mt, "default_config", lambda m, n, k, dt: dataclasses.replace(interpreted, persistent=persistent))
    precision = mt.MatmulTemplateKernel._precision
    monkeypatch.setattr(mt.MatmulTemplateKernel, "_precision",
                        lambda self: mt.TF32 if self.template.a.get_dtype() == torch.float32 else precision(self))
    x, w, b = torch.randn(64, 48, dtype=dtype), torch.randn(40, 48, dtype=dtype), torch.randn(40, dtype=dtype)
    with config.patch(matmul_templates="always"), launches() as seen:
        torch.compile(lambda x, w, b: F.gelu(F.linear(x, w, b)) + 1, backend="mini_inductor")(x, w, b)
    fn, args, kwargs = next(launch for launch in seen if launch[0].__name__.startswith("triton_tem_"))
    assert ("NUM_PROGRAMS" in kwargs) == persistent
    if dtype == torch.float32:
        assert "round_tf32" in inspect.getsource(fn)
    m, n, k = 4096, 4096, 1024
    variants = [(fn, args, {**kwargs, **c.meta(k, 132), "num_warps": c.num_warps, "num_stages": c.num_stages})
                for c in mt.matmul_configs(m, n, k, dtype) if c.persistent == persistent]
    assert len(variants) >= 3
    compile_all(variants)


def test_a_dynamic_graph_compiles_its_kernels():
    with launches() as seen:
        f = torch.compile(lambda t: torch.softmax(t * 2, -1).sum(0), backend="mini_inductor", dynamic=True)
        for n in (5, 9):
            f(torch.randn(n, 3, 70))
    assert compile_all(seen)


def test_kernels_that_floor_divide_int_inputs_and_sizes_of_either_sign_compile():
    # the flooring helpers on scalar arguments, a constant dividend, and inside a block's index
    with launches() as seen:
        for fn in (lambda x, k: x[:, : (k // 3) + 8] * 2, lambda x, k: F.pad(x, (0, (8 - k % 8) % 8)) + 1,
                   lambda x, k: x * ((-k) % 4) + x[:, :1] * (k // -3)):
            compiled = torch.compile(fn, backend="mini_inductor")
            for k in (5, 7, -4):
                compiled(torch.randn(4, 20), k)
        compiled = torch.compile(lambda x: x * (7 // -x.shape[1]) + (-x.shape[0] * 3) // x.shape[1],
                                 backend="mini_inductor", dynamic=True)
        for n in (3, 5):
            compiled(torch.randn(n, n + 1))
    sources = {inspect.getsource(fn) for fn, _, _ in seen}
    assert any("triton_helpers.div_floor_integer(" in src for src in sources)
    assert any("triton_helpers.remainder_integer(" in src for src in sources)
    assert compile_all(seen)


@pytest.mark.parametrize("dynamic", [False, True])
def test_pooling_backward_adaptive_max_pool_and_index_fill_kernels_compile(dynamic):
    # avg-pool and adaptive max-pool backward gathers, unrolled and reduced adaptive windows (bfloat16
    # compared in float32), index_fill's compares and its int32 count buffer of atomic adds
    def pools(x):
        a = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        b, i = F.adaptive_max_pool2d(x, (4, 3), return_indices=True)
        c, j = F.adaptive_max_pool2d(x, 1, return_indices=True)
        return a.sum() + b.float().sum() + c.float().sum(), i, j

    def fills(x, short, long):
        return x.index_fill(1, short, 2.5), x.index_fill(-1, long, -1.0)
    with launches() as seen:
        p = torch.compile(pools, backend="mini_inductor", dynamic=dynamic)
        f = torch.compile(fills, backend="mini_inductor", dynamic=dynamic)
        for n in (9, 12):
            x = torch.randn(2, 3, n, n - 1, dtype=torch.bfloat16, requires_grad=True)
            p(x)[0].backward()
            f(torch.randn(3, n, 20), torch.tensor([0, -1, 2]), torch.randint(-20, 20, (11,)))
    assert any("tl.atomic_add(" in inspect.getsource(fn) for fn, _, _ in seen)
    assert compile_all(seen)


def test_a_kernel_that_does_not_compile_fails_with_the_compilers_message():
    with launches() as seen:
        tables._data_block_ranges(score_mod.parse("where(t0, -inf, s)"), 52, 60, 32, 16, torch.device("cpu"), False,
                                 [torch.zeros(1, 1, 1, 60, dtype=torch.bool)])
    fn, args, kwargs = next(launch for launch in seen if launch[0].__name__ == "block_ranges")
    with pytest.raises(AssertionError, match="block_ranges .* does not compile for sm_90:\n(?s:.*)arange's arguments"):
        compile_all([(fn, args, {**kwargs, "N_M": "not a size"})])


@pytest.mark.parametrize("dtype,width", [(torch.float16, "v4"), (torch.bfloat16, "v4"), (torch.float32, "v4")])
def test_a_pointwise_kernel_moves_16_bytes_a_thread(dtype, width):
    # 2-byte types: blocks of 2048 at 4 warps, 16 elements a thread; 4-byte ones: 1024 at 8 warps, 4.
    # At 1024 and 8 warps the fp16 GELU kernel's accesses were 8 bytes (ld.global.v2.b32), and it ran
    # slower than ATen's and Inductor's on an H200 (codegen/heuristics.py pick_config)
    from sm90 import ptx_of
    x = torch.randn(8192, dtype=dtype)
    with launches() as seen:
        torch.compile(lambda x: F.gelu(x), backend="mini_inductor", dynamic=False)(x)
    (ptx,) = ptx_of(seen)
    loads = [line for line in ptx.splitlines() if "ld.global" in line]
    stores = [line for line in ptx.splitlines() if "st.global" in line]
    assert loads and stores and all(f"ld.global.{width}." in line for line in loads), loads
    assert all(f"st.global.{width}." in line for line in stores), stores


def test_norms_and_softmax_over_wide_rows_compile_at_one_row_a_program():
    # rows of 1024 or more: XBLOCK 1 and 8 warps (codegen/heuristics.py pick_config, session 32)
    gen = torch.Generator().manual_seed(0)
    x, r = (torch.randn(3, 768, generator=gen) for _ in range(2))
    w, b = torch.randn(768, generator=gen), torch.randn(768, generator=gen)
    s = torch.randn(2, 1500, generator=gen).half()
    with launches() as seen:
        torch.compile(lambda x, r, w, b: F.layer_norm(x + r, (768,), w, b), backend="mini_inductor",
                      dynamic=False)(x, r, w, b)
        torch.compile(lambda s: s.softmax(-1), backend="mini_inductor", dynamic=False)(s)
    assert [kw.get("XBLOCK") for _, _, kw in seen] == [1, 1], [kw for _, _, kw in seen]
    assert [kw.get("num_warps") for _, _, kw in seen] == [8, 8], [kw for _, _, kw in seen]
    assert len(compile_all(seen)) == 2


def test_scan_kernels_compile_persistent_looped_and_dynamic():
    # tl.cumsum / tl.cumprod over a whole row, block by block with a loop-carried [XBLOCK, 1] carry
    # (rows past the persistent limit, a scan over a leading dim, a symbolic length), in float32
    # (from float16), float64 and int64 (from bool); rows of up to 32768 in registers
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(3, 700, generator=gen) + 0.5
    with launches() as seen:
        torch.compile(lambda x: (x.half().cumsum(1), x.cumprod(1)), backend="mini_inductor", dynamic=False)(x)
        torch.compile(lambda x: x.double().cumsum(0), backend="mini_inductor", dynamic=False)(x.t().contiguous())
        torch.compile(lambda x: (x > 1).cumsum(1), backend="mini_inductor", dynamic=False)(
            torch.rand(2, 40_000, generator=gen) + 0.5)
        # a persistent row of 32768 (32 warps), and a length the ShapeEnv bounds (persistent, int32)
        torch.compile(lambda x: x.cumsum(1), backend="mini_inductor", dynamic=False)(torch.rand(2, 30_000, generator=gen))
        y = torch.rand(3, 900, generator=gen)
        torch._dynamo.mark_dynamic(y, 1, min=2, max=4096)
        torch.compile(lambda y: y.cumprod(1), backend="mini_inductor")(y)
        dyn = torch.compile(lambda x: (torch.cumsum(x * 2, 1) + 1, torch.cumprod(x, 1)), backend="mini_inductor",
                            dynamic=True)
        for n in (300, 1000):
            dyn(torch.rand(3, n, generator=gen) + 0.5)
    names = compile_all(seen)
    assert len(names) >= 4 and all("cum" in n for n in names), names
    assert any("_red_" in n for n in names) and any("_per_" in n for n in names), names


def test_logcumsumexp_cummax_and_cummin_scans_compile_persistent_looped_and_dynamic():
    # tl.associative_scan over triton_helpers' combine functions (log-add-exp, (value, index) pairs),
    # and looped, their carries combined by the same functions: float32 (from float16), float64, int32
    # and bool (compared as int8) values, int64 indices
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 700, generator=gen)

    def scans(x):
        return torch.logcumsumexp(x, 1), torch.cummax(x, 1), torch.cummin(x, 1)
    with launches() as seen:
        torch.compile(scans, backend="mini_inductor", dynamic=False)(x.half())
        torch.compile(lambda x: torch.logcumsumexp(x.double(), 0), backend="mini_inductor", dynamic=False)(x.t())
        torch.compile(lambda x: (torch.cummax(x.int(), 1), torch.cummin(x > 0, 1)), backend="mini_inductor",
                      dynamic=False)(x)
        with config.patch(persistent_reduction_limit=256):
            torch.compile(scans, backend="mini_inductor", dynamic=False)(x)
        dyn = torch.compile(scans, backend="mini_inductor", dynamic=True)
        for n in (300, 1000):
            dyn(torch.randn(3, n, generator=gen))
    names = compile_all(seen)
    assert len(names) >= 5, names
    assert any("_red_" in n for n in names) and any("_per_" in n for n in names), names


def test_sort_and_topk_kernels_compile_for_every_dtype_block_and_a_dynamic_length():
    # the bitonic network over (value, index) pairs (triton_helpers.sort_with_index) at rows of 8 (many
    # rows a block) to 1024 (one), float32 (from float16 and bfloat16), float64, int32, int8 (bool)
    # values, both directions; softmax fused before a topk; a length bounded by mark_dynamic
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 1024, generator=gen)

    def sorts(x):
        return torch.sort(x, dim=-1, stable=True), torch.sort(x, 0, descending=True), torch.argsort(x, -1)
    with launches() as seen:
        torch.compile(sorts, backend="mini_inductor", dynamic=False)(x[:, :8])
        torch.compile(sorts, backend="mini_inductor", dynamic=False)(x)
        torch.compile(sorts, backend="mini_inductor", dynamic=False)(x[:, :100].half())
        torch.compile(sorts, backend="mini_inductor", dynamic=False)(x[:, :100].bfloat16())
        torch.compile(lambda x: (sorts(x.double()), sorts(x.int()), sorts(x > 0)), backend="mini_inductor",
                      dynamic=False)(x[:, :30])
        torch.compile(lambda x: torch.topk(x.softmax(-1), 2), backend="mini_inductor", dynamic=False)(x[:, :64])
        dyn = x[:, :40].clone()
        torch._dynamo.mark_dynamic(dyn, 1, min=3, max=64)
        torch.compile(lambda x: torch.topk(x, 3, largest=False), backend="mini_inductor")(dyn)
    names = compile_all(seen)
    assert len(names) >= 8 and all("_per_" in n or "_poi_" in n for n in names), names


def test_norms_gelus_softmax_and_rounding_kernels_compile_without_linking_libdevice():
    # triton_helpers' float32 exp2, rsqrt, sqrt, floor, ceil, trunc, round and isinf are PTX
    # instructions: a kernel made of them has no libdevice parsed and linked into it (57 ms of its
    # compile on the H200 machine, with the GIL held). log1p is libdevice's own: linked.
    def f(x, w, b, h):
        n = F.layer_norm(x, (64,), w, b)
        return (F.gelu(n, approximate="tanh"), F.gelu(n), torch.softmax(x, -1), torch.rsqrt(x.abs() + 1),
                torch.sqrt(x.abs()) + torch.exp2(x), torch.floor(x) + torch.ceil(x) + torch.trunc(x) + torch.round(x),
                torch.isinf(x / x.abs().amax()), F.layer_norm(h.float(), (64,)).half())

    def g(x):
        return torch.log1p(x.abs()) * 3
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=gen)
    args = (x, torch.randn(64, generator=gen), torch.randn(64, generator=gen), x.half())
    found = {}
    for fn, fn_args in ((f, args), (g, (x,))):
        with launches() as seen:
            torch._dynamo.reset()
            got = torch.compile(fn, backend="mini_inductor")(*fn_args)
        for a, e in zip(got if isinstance(got, tuple) else [got], fn(*fn_args) if fn is f else [fn(*fn_args)]):
            torch.testing.assert_close(a, e, atol=2e-3, rtol=2e-3)
        found[fn.__name__] = libdevice_links(seen)
    assert len(found["f"]) >= 2 and all(n == 0 for _, n in found["f"]), found["f"]
    assert found["g"] and all(n == 1 for _, n in found["g"]), found["g"]


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_looped_any_over_a_bool_padded_with_true_compiles(dynamic):
    # fuzz seed 4512 (--autograd --dynamic), program 88: the pad's `other` was the literal 1, which
    # turned the bool into int32 and the looped reduction's bool accumulator with it; Triton refuses a
    # loop-carried variable that changes type (the interpreter ran it)
    def f(x):
        return F.pad(torch.isnan(x) | (x > 0), (2, 0, 1, 0), value=True).any(0)
    x = torch.randn(3000, 5)
    x[::7] = float("nan")
    with launches() as seen:
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="mini_inductor", dynamic=dynamic)
        for rows in (3000, 2500):
            torch.testing.assert_close(compiled(x[:rows]), f(x[:rows]))
    names = compile_all(seen)
    assert any("red" in n for n in names), names
