"""The model zoo: whole models with random weights (mini_inductor/examples.py ZOO), compiled against eager.

    ResNet        basic blocks, batch norm, relu, max pool, adaptive avg pool, fc
    ViT           patch-embedding conv, cls token, position embedding, pre-norm encoder blocks
                  (scaled_dot_product_attention, layer norm, gelu)
    GPT-2         token + position embeddings, causal self-attention written out (masked_fill,
                  softmax), tanh-gelu MLP, head tied to the token embedding
    BERT          word + position + token-type embeddings, padding mask as an additive bias,
                  post-norm encoder layers, tanh pooler
    MLP-Mixer     patch embedding, token-mixing and channel-mixing MLPs

For each: inference matches eager, one training step gives eager's loss, parameter gradients (and
batch-norm running statistics), and every graph compiles with no error fallback; the ATen ops that
may fall back are listed per model in FALLBACKS. On the CPU the sizes are tiny (the
interpreter is slow); the tests marked gpu use real-ish sizes, fp16/bf16 inference and torchvision's
resnet18. `python -m benchmarks model_zoo_report` prints each model's kernels and fallbacks.
"""
from __future__ import annotations

import copy

import pytest
import torch

from common import COUNTS_KERNELS, compile_fn
from mini_inductor.examples import ZOO, build_zoo_model, classification_loss

# ATen ops that may run as fallbacks (ATen calls, not errors) in each model's graphs; any other
# fallback fails the test. None today: embedding_dense_backward's index_put (accumulate=True) is a
# generated scatter with atomic adds.
FALLBACKS: dict[str, set[str]] = {name: set() for name in ZOO}


# ─── checks ─────────────────────────────────────────────────────────────────────────────────────

def assert_compiled_cleanly(name: str) -> None:
    """No graph ran eagerly (an error fallback or an unsupported graph); fallback ops as FALLBACKS lists."""
    if not COUNTS_KERNELS:
        return
    from mini_inductor import metrics
    records = metrics.compiled_graphs
    assert records, f"{name}: nothing was compiled"
    for r in records:
        assert r.ran_eagerly is None, f"{name}: graph {r.name} ran eagerly: {r.ran_eagerly}"
        assert r.num_kernels > 0 or r.cache_hit, f"{name}: graph {r.name} generated no kernel"
    unexpected = set(metrics.total_fallbacks()) - FALLBACKS[name]
    assert not unexpected, f"{name}: new fallback ops {sorted(unexpected)} (FALLBACKS lists {sorted(FALLBACKS[name])})"


@pytest.fixture(autouse=True)
def _no_tf32():
    """cuDNN convolutions default to TF32 (10-bit mantissa): two runs that sum in another order then
    differ far beyond an fp32 tolerance, so the comparison runs both sides in full fp32."""
    cudnn, saved = torch.backends.cudnn, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    # the context manager: OpInfo's test helpers forbid setting cuDNN flags directly
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                     allow_tf32=False):
        yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def _close(actual, expected, what, atol, rtol):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


def check_inference(name: str, real: bool, device, dtype=torch.float32, atol=1e-4, rtol=1e-4):
    model, inputs = build_zoo_model(name, real, device)
    model = model.eval()
    with torch.no_grad():
        expected = model(*inputs)
        actual = compile_fn(model)(*inputs)
    _close(actual, expected, f"{name} output", atol, rtol)
    assert_compiled_cleanly(name)


def check_training_step(name: str, real: bool, device, atol=1e-4, rtol=1e-4):
    eager, inputs = build_zoo_model(name, real, device)
    compiled = copy.deepcopy(eager)
    loss_fn = ZOO[name].loss
    expected = loss_fn(eager(*inputs), inputs)
    expected.backward()
    actual = compile_fn(lambda *xs: loss_fn(compiled(*xs), xs))(*inputs)
    actual.backward()
    _close(actual, expected, f"{name} loss", atol, rtol)
    for (pname, p_eager), (_, p_compiled) in zip(eager.named_parameters(), compiled.named_parameters()):
        assert p_compiled.grad is not None, f"{name}: {pname} got no gradient"
        _close(p_compiled.grad, p_eager.grad, f"{name} grad of {pname}", atol, rtol)
    for (bname, b_eager), (_, b_compiled) in zip(eager.named_buffers(), compiled.named_buffers()):
        _close(b_compiled, b_eager, f"{name} buffer {bname} after the step", atol, rtol)
    assert_compiled_cleanly(name)


# ─── CPU: tiny sizes ────────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("name", list(ZOO))
def test_inference_matches_eager(name, device):
    check_inference(name, False, device)


@pytest.mark.parametrize("name", list(ZOO))
def test_training_step_matches_eager(name, device):
    check_training_step(name, False, device)


# ─── GPU: real-ish sizes, half precision, torchvision ───────────────────────────────────────────

@pytest.mark.gpu
@pytest.mark.parametrize("name", list(ZOO))
def test_real_size_inference_matches_eager_on_gpu(name):
    check_inference(name, True, "cuda", atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(ZOO))
def test_real_size_training_step_matches_eager_on_gpu(name):
    # TF32 is off by default for matmuls; the remaining differences are summation order in reductions
    check_training_step(name, True, "cuda", atol=2e-3, rtol=2e-3)


def assert_half_precision_close(model, inputs, dtype, what):
    """Compiled fp16/bf16 output is as close to the fp32 result as eager's fp16/bf16 output is (up to 3x).

    Eager rounds every intermediate to the low-precision dtype and the compiled kernels compute in fp32
    and round once, so the two differ from each other by about eager's own rounding error.
    """
    with torch.no_grad():
        reference = model(*inputs).float()
        low = copy.deepcopy(model).to(dtype)
        low_inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
        eager = low(*low_inputs)
        compiled = compile_fn(low)(*low_inputs)
    assert compiled.dtype == dtype, f"{what}: dtype {compiled.dtype}"
    assert torch.isfinite(compiled).all(), f"{what}: non-finite outputs"
    eager_err = (eager.float() - reference).abs().max().item()
    compiled_err = (compiled.float() - reference).abs().max().item()
    scale = reference.abs().max().item()
    assert compiled_err <= 3 * eager_err + 1e-3 * scale, (
        f"{what}: max error against fp32 {compiled_err:.4g}, eager {dtype}'s {eager_err:.4g} (output scale {scale:.3g})")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(ZOO))
def test_half_precision_inference_on_gpu(name, dtype):
    model, inputs = build_zoo_model(name, True, "cuda")
    assert_half_precision_close(model.eval(), inputs, dtype, f"{name} {dtype}")
    assert_compiled_cleanly(name)


def _torchvision_resnet18():
    torchvision = pytest.importorskip("torchvision")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torchvision.models.resnet18(weights=None, num_classes=100)
        images = torch.randn(8, 3, 64, 64)
    return model.cuda(), (images.cuda(),)


@pytest.mark.gpu
def test_torchvision_resnet18_inference_matches_eager():
    model, inputs = _torchvision_resnet18()
    with torch.no_grad():
        model.eval()
        _close(compile_fn(model)(*inputs), model(*inputs), "resnet18 output", 1e-3, 1e-3)
    assert_compiled_cleanly("resnet")


@pytest.mark.gpu
def test_torchvision_resnet18_training_step_matches_eager():
    eager, inputs = _torchvision_resnet18()
    compiled = copy.deepcopy(eager)
    expected = classification_loss(eager(*inputs), inputs)
    expected.backward()
    actual = compile_fn(lambda x: classification_loss(compiled(x), (x,)))(*inputs)
    actual.backward()
    _close(actual, expected, "resnet18 loss", 2e-3, 2e-3)
    for (pname, p_eager), (_, p_compiled) in zip(eager.named_parameters(), compiled.named_parameters()):
        _close(p_compiled.grad, p_eager.grad, f"resnet18 grad of {pname}", 2e-3, 2e-3)
    assert_compiled_cleanly("resnet")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_torchvision_resnet18_half_precision_inference(dtype):
    model, inputs = _torchvision_resnet18()
    assert_half_precision_close(model.eval(), inputs, dtype, f"resnet18 {dtype}")
    assert_compiled_cleanly("resnet")
