"""The benchmark suite's models at their benchmark sizes. Each builder returns a `Workload` on the given
device and dtype; the modules are the package catalog's (mini_inductor/examples.py)."""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn as nn

from . import package_files


# the model definitions are the package catalog's (mini_inductor/examples.py); this module sets sizes
_catalog = package_files.examples
TransformerBlock = _catalog.TransformerBlock
DecoderStack, NormHeavy, MLPWithNorm = _catalog.DecoderStack, _catalog.NormHeavy, _catalog.MLPWithNorm


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


def _seeded(build):
    torch.manual_seed(0)
    return build()


def decoder(device, dtype):
    m = _seeded(lambda: DecoderStack(768, 12, 4)).to(device, dtype).eval()
    return Workload("decoder_4x768", m, [torch.randn(8, 512, 768, device=device, dtype=dtype)])


def _gpt2(attention):
    def build(device, dtype):
        # GPT-2 small's widths, 4 layers, one sequence of 512 tokens: the attention written out
        m = _seeded(lambda: _catalog.GPT2(50257, 1024, 768, 12, 4, attention)).to(device, dtype).eval()
        tokens = torch.randint(0, 50257, (1, 512), device=device, generator=None)
        return Workload(f"gpt2_4x768_{attention}", m, [tokens])
    build.__name__ = f"gpt2_{attention}"
    return build


gpt2_causal, gpt2_hf_causal = _gpt2("causal"), _gpt2("hf_causal")


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
    m = _seeded(lambda: _catalog.linear_silu_stack(256, 12)).to(device, dtype).eval()
    return Workload("launch_bound_mlp_b8", m, [torch.randn(8, 256, device=device, dtype=dtype)])


def train_step(device, dtype):
    m = _seeded(lambda: MLPWithNorm(1024, 4096, 2)).to(device, dtype).train()
    return Workload("train_mlp_norm_2x1024", m, [torch.randn(2048, 1024, device=device, dtype=dtype)], train=True)


MODELS = {f.__name__: f for f in (decoder, mlp_norm, norm_heavy, resnet, launch_bound, train_step, gpt2_causal,
                                  gpt2_hf_causal)}
