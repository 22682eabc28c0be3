"""Matmul templates loading through TMA descriptors (option matmul_tma): which layouts qualify, the
kernels' numerics against eager in Triton's interpreter (which runs tensor descriptors), the pointer-load
twin at unaligned addresses, max-autotune's TMA candidates, and the sm_90 compile. The GPU tests at the
end run them for real."""
import dataclasses
import re

import pytest
import torch
import torch.nn.functional as F

from common import check, generated_sources as sources
from mini_inductor import config
from sm90 import compile_all, launches


@pytest.fixture
def tma():
    with config.patch(matmul_templates="always", matmul_tma=True):
        yield


def descriptors() -> list[str]:
    """The descriptor lines of the launched templates: `a_desc = ...shape=[...]...`."""
    return re.findall(r"(\w)_desc = tl\.make_tensor_descriptor\(\w+(?: \+ \d+)?, shape=(\[\d+, \d+\])", sources())


DTYPES = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_linear_layer_with_bias_and_gelu_reads_both_operands_through_descriptors(tma, dtype):
    # the weight (N, K) is B = W.T: read as W's [BLOCK_N, BLOCK_K] tiles and transposed in the kernel;
    # M, N and K are no multiples of the blocks (TMA reads zeros past each edge)
    x, w, b = torch.randn(100, 80, dtype=dtype), torch.randn(72, 80, dtype=dtype) * 0.1, torch.randn(72, dtype=dtype)
    check(lambda x, w, b: F.gelu(F.linear(x, w, b)), x, w, b, kernels=1)
    assert sorted(descriptors()) == [("a", "[100, 80]"), ("b", "[72, 80]")]
    assert "b_desc.load([pid_n * BLOCK_N, k]).T" in sources() and "a_ptrs" not in sources().split("_unaligned")[0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_major_b_and_transposed_a_read_through_descriptors_of_their_own_orientation(tma, dtype):
    # A = x.T (M contiguous): a descriptor over [K, M]; B (K, N) row-major: over [K, N]
    x, y = torch.randn(48, 64, dtype=dtype), torch.randn(48, 40, dtype=dtype)
    check(lambda x, y: torch.mm(x.t(), y) * 2, x, y, kernels=1)
    assert sorted(descriptors()) == [("a", "[48, 64]"), ("b", "[48, 40]")]
    assert "a_desc.load([k, pid_m * BLOCK_M]).T" in sources() and "b_desc.load([k, pid_n * BLOCK_N])" in sources()


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_residual_add_into_a_tma_template_trains(tma, dtype):
    x, w, r = torch.randn(40, 64, dtype=dtype), torch.randn(32, 64, dtype=dtype) * 0.1, torch.randn(40, 32, dtype=dtype)
    check(lambda x, w, r: F.linear(x, w) + r, x, w, r, grad=True)
    assert descriptors()


def test_layouts_tma_cannot_read_keep_pointer_loads(tma):
    # K = 7 in fp16: a row is 14 bytes, not a multiple of 16; float32 operands; a slice at an odd offset
    cases = [(lambda x, w: x @ w, torch.randn(16, 7, dtype=torch.float16), torch.randn(7, 24, dtype=torch.float16)),
             (lambda x, w: x @ w, torch.randn(16, 32), torch.randn(32, 24)),
             (lambda x, w: x[:, 1:] @ w, torch.randn(16, 33, dtype=torch.float16), torch.randn(32, 24, dtype=torch.float16)),
             # a broadcast operand (stride 0): TMA with a zero stride is not tried on a GPU yet
             (lambda v, w: v.expand(16, 32) @ w, torch.randn(1, 32, dtype=torch.float16), torch.randn(32, 24, dtype=torch.float16))]
    for fn, x, w in cases:
        torch._dynamo.reset()
        check(fn, x, w, kernels=1, atol=1e-2, rtol=1e-2)
        assert not descriptors(), sources()
        assert "_unaligned" not in sources()


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_operand_at_an_unaligned_address_runs_the_pointer_twin(tma, dtype):
    x = torch.randn(40 * 64 + 1, dtype=dtype)[1:].view(40, 64)   # 2 bytes past an aligned address
    w = torch.randn(32, 64, dtype=dtype) * 0.1
    assert x.data_ptr() % 16
    fn = lambda x, w: torch.relu(F.linear(x, w))   # noqa: E731
    with launches() as seen:
        check(fn, x, w, kernels=1)
    names = {f.__name__ for f, _, _ in seen}
    assert any(n.endswith("_unaligned") for n in names), names
    torch._dynamo.reset()
    with launches() as seen:
        check(fn, x.clone(), w, kernels=1)   # aligned: the TMA kernel itself
    names = {f.__name__ for f, _, _ in seen}
    assert not any(n.endswith("_unaligned") for n in names), names


def test_the_debug_dump_of_a_tma_template_writes_its_kernel_script_and_not_the_twins(tma, tmp_path):
    # the twin's launch line matched the dump's kernel-script pattern, which looked it up among the
    # kernels: KeyError, and no kernel scripts for the graph (review, session 30)
    x, w = torch.randn(40, 64, dtype=torch.float16), torch.randn(48, 64, dtype=torch.float16)
    with config.patch(debug_dir=str(tmp_path)):
        check(lambda x, w: F.linear(x, w) * 2, x, w, kernels=1)
    scripts = sorted(p.name for p in tmp_path.rglob("kernels/*.py"))
    assert len(scripts) == 1 and scripts[0].startswith("triton_tem_") and "_unaligned" not in scripts[0], scripts


def test_scratch_allocator_is_set_where_none_is_and_a_users_is_kept():
    import threading

    from triton.runtime import _allocation

    from mini_inductor.runtime import scratch
    seen = []

    def in_a_new_thread(users=None):
        if users is not None:
            _allocation._allocator.set(users)
        scratch.scratch_allocator()
        seen.append(_allocation._allocator.get())
    mine = lambda size, align, stream: None   # noqa: E731
    for users in (None, mine):
        t = threading.Thread(target=in_a_new_thread, args=(users,))
        t.start()
        t.join()
    assert seen == [scratch._scratch, mine]


def test_max_autotune_times_each_config_with_and_without_tma(monkeypatch, tmp_path):
    from mini_inductor.codegen import matmul_autotune
    from mini_inductor.scheduler import matmul_choice

    timed = []

    def fake_time(fn):
        fn()
        timed.append(fn)
        return {4: 0.1}.get(len(timed), 1.0)   # the fourth: the persistent config with TMA loads

    monkeypatch.setattr(matmul_choice, "MEASURE_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(matmul_autotune, "time_ms", fake_time)
    configs = [matmul_autotune.MatmulConfig(16, 16, 16, 8, 4, 1),
               matmul_autotune.MatmulConfig(32, 16, 16, 4, 4, 1, persistent=True)]
    monkeypatch.setattr(matmul_autotune, "matmul_configs", lambda m, n, k, dtype, batched, tma=False: configs + (
        [dataclasses.replace(c, tma=True) for c in configs] if tma else []))
    monkeypatch.setattr("mini_inductor.lowering.matmul_lowerings.template_refusal", lambda *a: None)
    x, w = torch.randn(9, 16, dtype=torch.float16), torch.randn(40, 16, dtype=torch.float16)
    with config.patch(max_autotune=True, matmul_templates="auto", matmul_tma=True, cache_dir=str(tmp_path)), \
            launches() as seen:
        check(lambda x, w: F.silu(F.linear(x, w)), x, w, kernels=1)
    assert len(timed) == 5                          # four configs, then cuBLAS + the epilogue kernel
    # each loop structure timed with its own kernel (the default's, TMA here, under the plain name)
    measured = {f.__name__ for f, _, _ in seen if f.__name__.startswith("triton_tem_measured")}
    assert measured == {"triton_tem_measured", "triton_tem_measured_pointers", "triton_tem_measured_persistent_tma",
                        "triton_tem_measured_persistent_pointers"}, measured
    text = sources()
    assert "NUM_PROGRAMS=2" in text and "b_desc = tl.make_tensor_descriptor" in text
    assert "for tile in range(tl.program_id(0)" in text
    files = list((tmp_path / "autotune").rglob("*.json"))
    assert files and '"tma": 1' in files[0].read_text()


def test_the_matmul_configs_offer_tma_variants_only_when_asked():
    from mini_inductor.codegen.matmul_template import matmul_configs
    plain = matmul_configs(2048, 768, 3072, torch.float16)
    both = matmul_configs(2048, 768, 3072, torch.float16, tma=True)
    assert not any(c.tma for c in plain)
    assert [c for c in both if not c.tma] == plain and [c for c in both if c.tma] == [
        c.__class__(**{**c.__dict__, "tma": True}) for c in plain]


@pytest.mark.skipif(torch.cuda.is_available(), reason="compiled for sm_90 on the CPU (tests/sm90.py)")
def test_tma_templates_compile_for_sm90_plain_and_persistent(tma, monkeypatch):
    from mini_inductor.codegen import matmul_template
    x, w, b = torch.randn(100, 80, dtype=torch.float16), torch.randn(72, 80, dtype=torch.float16), torch.randn(72, dtype=torch.float16)
    with launches() as seen:
        check(lambda x, w, b: F.gelu(F.linear(x, w, b)), x, w, b, kernels=1)
        torch._dynamo.reset()
        monkeypatch.setattr(matmul_template, "default_config", lambda m, n, k, dtype: matmul_template.MatmulConfig(
            32, 32, 32, 8, 4, 2, persistent=True))
        check(lambda x, w, b: F.linear(x, w, b) * 3, x, w, b, kernels=1)
    assert "for tile in range(tl.program_id(0)" in sources()
    names = compile_all(seen)
    assert len([n for n in names if n.startswith("triton_tem_")]) == 2, names


# ── on the GPU ────────────────────────────────────────────────────────────────────────────────────

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_tma_templates_match_eager_in_cuda_graphs_at_transformer_sizes(dtype):
    x = torch.randn(2048, 768, device="cuda", dtype=dtype)
    w = torch.randn(3072, 768, device="cuda", dtype=dtype) * 768 ** -0.5
    b = torch.randn(3072, device="cuda", dtype=dtype)
    with config.patch(matmul_templates="always", matmul_tma=True):
        check(lambda x, w, b: F.gelu(F.linear(x, w, b)), x, w, b, kernels=1)
        assert len(descriptors()) == 2
        torch._dynamo.reset()
        unaligned = torch.randn(2048 * 768 + 8, device="cuda", dtype=dtype)[1:2048 * 768 + 1].view(2048, 768)
        check(lambda x, w, b: F.gelu(F.linear(x, w, b)), unaligned, w, b, kernels=1)


@pytest.mark.gpu
def test_gpu_max_autotune_with_tma_candidates_runs_and_matches_eager(tmp_path):
    x = torch.randn(4096, 768, device="cuda", dtype=torch.float16)
    w = torch.randn(3072, 768, device="cuda", dtype=torch.float16) * 768 ** -0.5
    r = torch.randn(4096, 3072, device="cuda", dtype=torch.float16)
    with config.patch(max_autotune=True, matmul_tma=True, cache_dir=str(tmp_path)):
        check(lambda x, w, r: F.linear(x, w) + r, x, w, r)
    files = list((tmp_path / "autotune").rglob("*.json"))
    assert files and any(" tma" in f.read_text() for f in files)   # TMA configs were timed
