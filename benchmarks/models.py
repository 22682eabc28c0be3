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
HFOutput = _catalog.HFOutput


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


def resnet_b16(device, dtype):
    import torchvision
    m = _seeded(lambda: torchvision.models.resnet18()).to(device, dtype).eval()
    return Workload("resnet18_b16", m, [torch.randn(16, 3, 224, 224, device=device, dtype=dtype)])


def _hf_eager(model):
    # the attention written out (matmul, mask, softmax, matmul), not SDPA: what a compiler has to fuse
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    return model


def _token_ids(vocab, shape, device):
    # drawn on the CPU from their own generator: the same tokens on every device
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(0)).to(device)


def hf_gpt2(device, dtype):
    from transformers import GPT2Config, GPT2LMHeadModel
    # GPT-2 small's widths, 4 layers, one sequence of 512 tokens, Hugging Face's eager attention
    config = GPT2Config(n_layer=4, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257,
                        use_cache=False, attn_implementation="eager")
    m = _seeded(lambda: HFOutput(_hf_eager(GPT2LMHeadModel(config)), ["input_ids"], "logits", use_cache=False))
    m = m.to(device, dtype).eval()
    return Workload("hf_gpt2_4x768", m, [_token_ids(50257, (1, 512), device)])


def hf_bert(device, dtype):
    from transformers import BertConfig, BertModel
    # bert-base (12 layers, 768 wide, 12 heads), batch 8 of 512 tokens, row i padded after 512 - 32 i
    config = BertConfig(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                        attn_implementation="eager")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    m = _seeded(lambda: HFOutput(_hf_eager(BertModel(config, add_pooling_layer=False)), names,
                                  "last_hidden_state"))
    m = m.to(device, dtype).eval()
    b, t = 8, 512
    mask = (torch.arange(t)[None, :] < torch.tensor([t - 32 * i for i in range(b)])[:, None]).long()
    ids = _token_ids(config.vocab_size, (b, t), "cpu") * mask + config.pad_token_id * (1 - mask)
    types = (torch.arange(t) >= t // 2).long().expand(b, t).contiguous()
    return Workload("hf_bert_12x768_b8", m, [ids.to(device), mask.to(device), types.to(device)])


def hf_vit(device, dtype):
    from transformers import ViTConfig, ViTModel
    # ViT-B/16 at 224, batch 16
    config = ViTConfig(attn_implementation="eager")
    m = _seeded(lambda: HFOutput(_hf_eager(ViTModel(config, add_pooling_layer=False)), ["pixel_values"],
                                  "last_hidden_state"))
    m = m.to(device, dtype).eval()
    return Workload("hf_vit_b16_224_b16", m, [torch.randn(16, 3, 224, 224, device=device, dtype=dtype)])


def launch_bound(device, dtype):
    m = _seeded(lambda: _catalog.linear_silu_stack(256, 12)).to(device, dtype).eval()
    return Workload("launch_bound_mlp_b8", m, [torch.randn(8, 256, device=device, dtype=dtype)])


def train_step(device, dtype):
    m = _seeded(lambda: MLPWithNorm(1024, 4096, 2)).to(device, dtype).train()
    return Workload("train_mlp_norm_2x1024", m, [torch.randn(2048, 1024, device=device, dtype=dtype)], train=True)


MODELS = {f.__name__: f for f in (decoder, mlp_norm, norm_heavy, resnet, launch_bound, train_step, gpt2_causal,
                                  gpt2_hf_causal, resnet_b16, hf_gpt2, hf_bert, hf_vit)}
