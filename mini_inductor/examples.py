"""The model catalog: the examples of the demo and the CLI, the benchmark suite's models, the zoo.

    from mini_inductor.examples import EXAMPLES
    model, inputs = EXAMPLES["mlp"].build("cuda", torch.float16)
    torch.compile(model, backend="mini_inductor")(*inputs)

    EXAMPLES     named builders for the CLI and the demo (below)
    DecoderStack, NormHeavy, MLPWithNorm, linear_silu_stack
                 the benchmark suite's models; benchmarks/models.py sets their sizes
    ZOO          whole models (ResNet, ViT, GPT-2, BERT, MLP-Mixer) at a tiny and a GPU size, with
                 their inputs and training losses; build_zoo_model(name, real, device)

This module imports only torch (never the package): the benchmarks load it from its file in
processes that must not import mini_inductor (benchmarks/package_files.py).

Each example builder takes a device and a dtype and returns (model, example_inputs). Sizes are small on the
CPU (where Triton's interpreter runs one program instance at a time) and GPU-sized on CUDA.
Weights and inputs are drawn from a fixed seed on the CPU, so every call gives the same values,
and the caller's random state is left untouched.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

ExampleInputs = tuple[torch.Tensor, ...]


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class TransformerBlock(nn.Module):
    """Pre-norm GPT block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class MLP(nn.Module):
    """A stack of Linear → LayerNorm → GELU layers."""

    def __init__(self, dim: int, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim), nn.GELU()) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class SoftmaxChain(nn.Module):
    """Pointwise ops around a softmax: one reduction with a prologue and an epilogue to fuse."""

    def __init__(self, cols: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.softmax(x * 0.5 + self.bias, dim=-1)
        return y * torch.sigmoid(x) + 1.0


def _on_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def _seeded(make_model: Callable[[], nn.Module], input_shapes: list[tuple[int, ...]],
            device: str | torch.device, dtype: torch.dtype) -> tuple[nn.Module, ExampleInputs]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = make_model().eval()
        inputs = tuple(torch.randn(shape) for shape in input_shapes)
    model = model.to(device=device, dtype=dtype)
    return model, tuple(t.to(device=device, dtype=dtype) for t in inputs)


def transformer_block(device: str | torch.device = "cpu",
                      dtype: torch.dtype = torch.float32) -> tuple[nn.Module, ExampleInputs]:
    """Input (batch, seq, dim): (2, 16, 64) with 4 heads on CPU, (8, 512, 768) with 12 heads on CUDA."""
    batch, seq, dim, heads = (8, 512, 768, 12) if _on_cuda(device) else (2, 16, 64, 4)
    return _seeded(lambda: TransformerBlock(dim, heads), [(batch, seq, dim)], device, dtype)


def mlp(device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32) -> tuple[nn.Module, ExampleInputs]:
    """Input (batch, dim): (8, 64) with 3 layers on CPU, (4096, 1024) with 4 layers on CUDA."""
    batch, dim, depth = (4096, 1024, 4) if _on_cuda(device) else (8, 64, 3)
    return _seeded(lambda: MLP(dim, depth), [(batch, dim)], device, dtype)


def softmax_chain(device: str | torch.device = "cpu",
                  dtype: torch.dtype = torch.float32) -> tuple[nn.Module, ExampleInputs]:
    """Input (rows, cols): (8, 32) on CPU, (8192, 1024) on CUDA."""
    rows, cols = (8192, 1024) if _on_cuda(device) else (8, 32)
    return _seeded(lambda: SoftmaxChain(cols), [(rows, cols)], device, dtype)


@dataclasses.dataclass(frozen=True)
class Example:
    """A named builder; calling it builds the model and its inputs."""

    name: str
    description: str
    build: Callable[..., tuple[nn.Module, ExampleInputs]]

    def __call__(self, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32) -> tuple[nn.Module, ExampleInputs]:
        return self.build(device, dtype)


EXAMPLES: dict[str, Example] = {e.name: e for e in [
    Example("transformer_block", "pre-norm GPT block: LayerNorm, causal SDPA attention, GELU MLP",
            transformer_block),
    Example("mlp", "stack of Linear → LayerNorm → GELU layers", mlp),
    Example("softmax_chain", "pointwise ops around a softmax; the smallest example",
            softmax_chain),
]}

DEFAULT_EXAMPLE = "transformer_block"


# ─── the benchmark suite's models (benchmarks/models.py gives them their sizes) ──────────────────

class DecoderStack(nn.Module):
    """`layers` TransformerBlocks and a final LayerNorm."""

    def __init__(self, dim, heads, layers):
        super().__init__()
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.norm(x)


class NormHeavy(nn.Module):
    """Memory-bound: softmax, layer norm, RMS norm and pointwise ops on a large activation."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        y = torch.softmax(x * 0.125, dim=-1) * x
        y = self.ln(y + x)
        rms = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return F.gelu(rms) + torch.sigmoid(x)


class MLPWithNorm(nn.Module):
    """Residual pre-norm MLP layers: x + Linear(GELU(Linear(LayerNorm(x))))."""

    def __init__(self, dim, hidden, layers):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(),
                                                  nn.Linear(hidden, dim)) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x


class HFOutput(nn.Module):
    """A Hugging Face model (benchmarks/models.py builds them where transformers is installed) called
    with its positional inputs as the keyword arguments `names` (and `extra`), returning the tensor
    `field` of its ModelOutput: the benchmark suite compares tensors."""

    def __init__(self, model: nn.Module, names, field: str, **extra):
        super().__init__()
        self.model, self.names, self.field, self.extra = model, tuple(names), field, extra

    def forward(self, *inputs):
        return getattr(self.model(**dict(zip(self.names, inputs)), **self.extra), self.field)


def linear_silu_stack(width: int, depth: int) -> nn.Sequential:
    """`depth` small Linear → SiLU pairs: at a small batch, launch-bound."""
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.SiLU()]
    return nn.Sequential(*layers)


# ─── the model zoo: whole models (tests/e2e/test_model_zoo.py, benchmarks/model_zoo_report.py) ────

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
    """Multi-head self-attention: through SDPA, or written out with a causal or an additive mask.
    kind "hf_causal" writes the causal mask as Hugging Face's GPT-2 eager attention does: a registered
    bool tril buffer (`context` rows), sliced, and torch.where with finfo.min."""

    def __init__(self, dim, heads, kind="sdpa", context=None):
        super().__init__()
        self.heads, self.kind = heads, kind
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        if kind == "hf_causal":
            self.register_buffer("bias", torch.ones(context, context, dtype=torch.bool).tril()[None, None],
                                 persistent=False)

    def forward(self, x, bias=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.kind == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v)
        elif self.kind == "hf_causal":
            w = torch.matmul(q, k.transpose(-1, -2))
            w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
            mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
            w = torch.where(self.bias[:, :, :t, :t], w, mask_value)
            out = torch.matmul(w.softmax(-1).type(v.dtype), v)
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

    def __init__(self, dim, heads, kind, gelu_approximate="none", context=None):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, kind, context)
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
    """`attention`: "causal" (the mask written out with -inf) or "hf_causal" (as Hugging Face's eager
    attention writes it: SelfAttention)."""

    def __init__(self, vocab=64, context=16, dim=32, heads=2, depth=2, attention="causal"):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[PreNormBlock(dim, heads, attention, "tanh", context) for _ in range(depth)])
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


@dataclasses.dataclass
class ZooModel:
    """A whole model at two sizes: tiny (the CPU tests, Triton's interpreter) and real-ish (GPU)."""

    name: str
    build: Callable[[bool], nn.Module]                    # build(real_size) -> model
    inputs: Callable[[bool, str], tuple]                  # inputs(real_size, device) -> forward args
    loss: Callable[[torch.Tensor, tuple], torch.Tensor]   # loss(output, inputs) -> scalar


def _images(batch, size):
    return lambda real, device: (torch.randn(batch[real], 3, size[real], size[real], device=device),)


def classification_loss(out, inputs):
    target = torch.arange(out.shape[0], device=out.device) % out.shape[-1]
    return F.cross_entropy(out, target)


def next_token_loss(out, inputs):
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
                       _images({False: 2, True: 8}, {False: 16, True: 32}), classification_loss),
    "vit": ZooModel("vit", lambda real: ViT(32, 4, 192, 3, 4) if real else ViT(),
                    _images({False: 2, True: 8}, {False: 16, True: 32}), classification_loss),
    "gpt2": ZooModel("gpt2", lambda real: GPT2(512, 128, 256, 4, 4) if real else GPT2(),
                     _gpt2_inputs, next_token_loss),
    "bert": ZooModel("bert", lambda real: Bert(512, 128, 256, 4, 4) if real else Bert(),
                     _bert_inputs, classification_loss),
    "mlp_mixer": ZooModel("mlp_mixer", lambda real: MLPMixer(32, 4, 256, 4) if real else MLPMixer(),
                          _images({False: 2, True: 8}, {False: 16, True: 32}), classification_loss),
}


def build_zoo_model(name: str, real: bool, device) -> tuple[nn.Module, tuple]:
    """ZOO[name]'s model and inputs (real: the GPU size), from a fixed seed (the caller's random
    state is left as it was)."""
    zoo = ZOO[name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = zoo.build(real)
        inputs = zoo.inputs(real, "cpu")
    return model.to(device), tuple(x.to(device) for x in inputs)
