"""The benchmark suite's models. Each builder returns a `Workload` on the given device and dtype."""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


def _examples_module():
    """mini_inductor/examples.py (plain torch modules), loaded from its file. Importing it through the
    package would import mini_inductor, whose import starts a thread that sets Triton up: in eager's
    and Inductor's workers too, where that thread would take CPU from (or hash Triton for) the
    compiler being measured."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mini_inductor", "examples.py")
    spec = importlib.util.spec_from_file_location("_benchmark_examples", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module       # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


TransformerBlock = _examples_module().TransformerBlock


@dataclasses.dataclass
class Workload:
    name: str
    model: nn.Module
    inputs: list[torch.Tensor]
    train: bool = False          # one step = forward + backward of the sum of the output

    def step(self, fn: Callable):
        if not self.train:
            with torch.no_grad():
                return fn(*self.inputs)
        for p in self.model.parameters():
            p.grad = None
        out = fn(*self.inputs)
        out.float().sum().backward()
        return [out.detach()] + [p.grad for p in self.model.parameters()]


class DecoderStack(nn.Module):
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
    def __init__(self, dim, hidden, layers):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(),
                                                  nn.Linear(hidden, dim)) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x


def _seeded(build):
    torch.manual_seed(0)
    return build()


def decoder(device, dtype):
    m = _seeded(lambda: DecoderStack(768, 12, 4)).to(device, dtype).eval()
    return Workload("decoder_4x768", m, [torch.randn(8, 512, 768, device=device, dtype=dtype)])


def mlp_norm(device, dtype):
    m = _seeded(lambda: MLPWithNorm(1024, 4096, 4)).to(device, dtype).eval()
    return Workload("mlp_norm_4x1024", m, [torch.randn(4096, 1024, device=device, dtype=dtype)])


def norm_heavy(device, dtype):
    m = _seeded(lambda: NormHeavy(4096)).to(device, dtype).eval()
    return Workload("norm_heavy_8192x4096", m, [torch.randn(8192, 4096, device=device, dtype=dtype)])


def resnet(device, dtype):
    import torchvision
    m = _seeded(lambda: torchvision.models.resnet18()).to(device, dtype).eval()
    return Workload("resnet18_b32", m, [torch.randn(32, 3, 224, 224, device=device, dtype=dtype)])


def launch_bound(device, dtype):
    def build():
        layers = []
        for _ in range(12):
            layers += [nn.Linear(256, 256), nn.SiLU()]
        return nn.Sequential(*layers)
    m = _seeded(build).to(device, dtype).eval()
    return Workload("launch_bound_mlp_b8", m, [torch.randn(8, 256, device=device, dtype=dtype)])


def train_step(device, dtype):
    m = _seeded(lambda: MLPWithNorm(1024, 4096, 2)).to(device, dtype).train()
    return Workload("train_mlp_norm_2x1024", m, [torch.randn(2048, 1024, device=device, dtype=dtype)], train=True)


MODELS = {f.__name__: f for f in (decoder, mlp_norm, norm_heavy, resnet, launch_bound, train_step)}
