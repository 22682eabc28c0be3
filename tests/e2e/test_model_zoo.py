"""The model zoo: whole models, built here with random weights, compiled against eager.

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
resnet18. `python benchmarks/model_zoo_report.py` prints each model's kernels and fallbacks.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from typing import Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from common import COUNTS_KERNELS, compile_fn

# ─── models ─────────────────────────────────────────────────────────────────────────────────────


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, widths=(8, 16), blocks=1, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            for j in range(blocks):
                layers.append(BasicBlock(cin, w, 2 if i > 0 and j == 0 else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))


class SelfAttention(nn.Module):
    """Multi-head self-attention: through SDPA, or written out with a causal or an additive mask."""

    def __init__(self, dim, heads, kind="sdpa"):
        super().__init__()
        self.heads, self.kind = heads, kind
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, bias=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.kind == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
            if self.kind == "causal":
                causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
                scores = scores.masked_fill(~causal, float("-inf"))
            if bias is not None:
                scores = scores + bias
            out = scores.softmax(-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class PreNormBlock(nn.Module):
    """x + attn(ln(x)), then x + mlp(ln(x)): the ViT and GPT-2 block."""

    def __init__(self, dim, heads, kind, gelu_approximate="none"):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, kind)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.approximate = gelu_approximate

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=self.approximate))


class ViT(nn.Module):
    def __init__(self, image=16, patch=4, dim=32, heads=2, depth=2, classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[PreNormBlock(dim, heads, "sdpa") for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


class GPT2(nn.Module):
    def __init__(self, vocab=64, context=16, dim=32, heads=2, depth=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[PreNormBlock(dim, heads, "causal", "tanh") for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        return self.lm_head(self.ln_f(self.blocks(self.wte(tokens) + self.wpe(pos))))


class BertLayer(nn.Module):
    """Post-norm: x = ln(x + attn(x)); x = ln(x + mlp(x))."""

    def __init__(self, dim, heads):
        super().__init__()
        self.attn = SelfAttention(dim, heads, "masked")
        self.ln1, self.ln2 = nn.LayerNorm(dim, eps=1e-12), nn.LayerNorm(dim, eps=1e-12)
        self.intermediate, self.output = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x, bias):
        x = self.ln1(x + self.attn(x, bias))
        return self.ln2(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self, vocab=64, context=16, dim=32, heads=2, depth=2, classes=3):
        super().__init__()
        self.word, self.position = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.token_type = nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(dim, heads) for _ in range(depth))
        self.pooler = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, classes)

    def forward(self, tokens, token_types, attention_mask):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.ln(self.word(tokens) + self.position(pos) + self.token_type(token_types))
        # padding positions get a large negative bias before the softmax
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(pooled)


class MixerBlock(nn.Module):
    def __init__(self, tokens, dim, token_hidden, channel_hidden):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens))
        self.channel_mlp = nn.Sequential(nn.Linear(dim, channel_hidden), nn.GELU(), nn.Linear(channel_hidden, dim))

    def forward(self, x):
        x = x + self.token_mlp(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.ln2(x))


class MLPMixer(nn.Module):
    def __init__(self, image=16, patch=4, dim=32, depth=2, classes=10):
        super().__init__()
        tokens = (image // patch) ** 2
        self.stem = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.Sequential(*[MixerBlock(tokens, dim, 2 * tokens, 4 * dim) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.ln(self.blocks(x)).mean(1))


# ─── the zoo: builders, inputs, losses ──────────────────────────────────────────────────────────

@dataclasses.dataclass
class ZooModel:
    name: str
    build: Callable[[bool], nn.Module]                    # build(real_size) -> model
    inputs: Callable[[bool, str], tuple]                  # inputs(real_size, device) -> forward args
    loss: Callable[[torch.Tensor, tuple], torch.Tensor]   # loss(output, inputs) -> scalar


def _images(batch, size):
    return lambda real, device: (torch.randn(batch[real], 3, size[real], size[real], device=device),)


def _classification(out, inputs):
    target = torch.arange(out.shape[0], device=out.device) % out.shape[-1]
    return F.cross_entropy(out, target)


def _next_token(out, inputs):
    (tokens,) = inputs
    return F.cross_entropy(out[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def _gpt2_inputs(real, device):
    vocab, t = (512, 128) if real else (64, 16)
    return (torch.randint(0, vocab, (8 if real else 2, t), device=device),)


def _bert_inputs(real, device):
    vocab, t, b = (512, 128, 8) if real else (64, 16, 2)
    tokens = torch.randint(0, vocab, (b, t), device=device)
    token_types = (torch.arange(t, device=device) >= t // 2).long().expand(b, t).contiguous()
    lengths = torch.tensor([t - 3 * i for i in range(b)], device=device)
    attention_mask = (torch.arange(t, device=device)[None, :] < lengths[:, None]).long()
    return tokens, token_types, attention_mask


ZOO = {
    "resnet": ZooModel("resnet", lambda real: ResNet((64, 128, 256), 2) if real else ResNet(),
                       _images({False: 2, True: 8}, {False: 16, True: 32}), _classification),
    "vit": ZooModel("vit", lambda real: ViT(32, 4, 192, 3, 4) if real else ViT(),
                    _images({False: 2, True: 8}, {False: 16, True: 32}), _classification),
    "gpt2": ZooModel("gpt2", lambda real: GPT2(512, 128, 256, 4, 4) if real else GPT2(),
                     _gpt2_inputs, _next_token),
    "bert": ZooModel("bert", lambda real: Bert(512, 128, 256, 4, 4) if real else Bert(),
                     _bert_inputs, _classification),
    "mlp_mixer": ZooModel("mlp_mixer", lambda real: MLPMixer(32, 4, 256, 4) if real else MLPMixer(),
                          _images({False: 2, True: 8}, {False: 16, True: 32}), _classification),
}

# ATen ops that may run as fallbacks (ATen calls, not errors) in each model's graphs; any other
# fallback fails the test. None today: embedding_dense_backward's index_put (accumulate=True) is a
# generated scatter with atomic adds.
FALLBACKS: dict[str, set[str]] = {name: set() for name in ZOO}


def build(name: str, real: bool, device) -> tuple[nn.Module, tuple]:
    """The model and its inputs, from a fixed seed (the caller's random state is left as it was)."""
    zoo = ZOO[name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = zoo.build(real)
        inputs = zoo.inputs(real, "cpu")
    return model.to(device), tuple(x.to(device) for x in inputs)


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
    model, inputs = build(name, real, device)
    model = model.eval()
    with torch.no_grad():
        expected = model(*inputs)
        actual = compile_fn(model)(*inputs)
    _close(actual, expected, f"{name} output", atol, rtol)
    assert_compiled_cleanly(name)


def check_training_step(name: str, real: bool, device, atol=1e-4, rtol=1e-4):
    eager, inputs = build(name, real, device)
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
    model, inputs = build(name, True, "cuda")
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
    expected = _classification(eager(*inputs), inputs)
    expected.backward()
    actual = compile_fn(lambda x: _classification(compiled(x), (x,)))(*inputs)
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
