"""Built-in example models for the demo, the CLI and tests.

    from mini_inductor.examples import EXAMPLES
    model, inputs = EXAMPLES["mlp"].build("cuda", torch.float16)
    torch.compile(model, backend="mini_inductor")(*inputs)

Each builder takes a device and a dtype and returns (model, example_inputs). Sizes are small on the
CPU (where Triton's interpreter runs one program instance at a time) and GPU-sized on CUDA.
Weights and inputs are drawn from a fixed seed on the CPU, so every call gives the same values,
and the caller's random state is left untouched.
"""
from __future__ import annotations

import dataclasses
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
