"""Two gloo ranks on this machine, a tiny transformer, and a training loop to compare.

    result = on_two_ranks(job, *args)   # job(rank, *args) runs in two spawned processes; rank 0's return value
    result = on_two_ranks(job, *args, backend="nccl")   # one GPU a rank (cuda:0, cuda:1)

The ranks are fresh Python processes (torch.multiprocessing spawn): they inherit this process's
environment (TRITON_INTERPRET=1, the test's private MINI_INDUCTOR_CACHE_DIR) and import this module
by name. A failure on either rank fails the test with that rank's traceback.
"""
from __future__ import annotations

import os
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

WORLD = 2
VOCAB, DIM, HEADS, SEQ, BATCH = 32, 16, 2, 8, 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, port: int, out: str, job, args, backend: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=WORLD)
    try:
        result = job(rank, *args)
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def on_two_ranks(job, *args, backend: str = "gloo"):
    """Run `job(rank, *args)` on two ranks of a `backend` process group; return what rank 0 returned."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "rank0.pt")
        mp.spawn(_entry, args=(free_port(), out, job, args, backend), nprocs=WORLD, join=True)
        return torch.load(out, weights_only=False)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    """A GPT-style model: token and position embeddings, `layers` pre-norm blocks, a tied-free head."""

    def __init__(self, vocab: int = VOCAB, dim: int = DIM, heads: int = HEADS, layers: int = 2, seq: int = SEQ):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def batches(rank: int, steps: int, device="cpu", batch: int = BATCH, seq: int = SEQ, vocab: int = VOCAB):
    """Each rank's own data, the same in every run."""
    gen = torch.Generator().manual_seed(1000 + rank)
    data = torch.randint(0, vocab, (steps, batch, seq + 1), generator=gen)
    return [(d[:, :-1].to(device), d[:, 1:].to(device)) for d in data]


def train(model, params, data, backward=None, lr: float = 0.1) -> list[float]:
    """SGD with momentum over `data`; the loss of every step. `backward(loss)` replaces loss.backward()."""
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9)
    losses = []
    for idx, targets in data:
        loss = model(idx, targets)
        (backward or torch.Tensor.backward)(loss)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().item())
    return losses


def full_params(model) -> dict[str, torch.Tensor]:
    """Every parameter in full (a sharded DTensor gathered), on the CPU."""
    out = {}
    for name, p in model.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name.replace("_orig_mod.", "").replace("module.", "")] = t.detach().cpu().clone()
    return out


def compiled_graph_counts() -> dict:
    """mini_inductor's graphs of this process: how many of each kind, and the ops in them."""
    from mini_inductor import metrics
    kinds: dict[str, int] = {}
    externs: dict[str, int] = {}
    fallbacks: dict[str, int] = {}
    for r in metrics.compiled_graphs:
        kind = r.name.rsplit("_", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
        for op in r.extern_calls:
            externs[op] = externs.get(op, 0) + 1
        for op, n in r.fallback_ops.items():
            fallbacks[op] = fallbacks.get(op, 0) + n
    eager = [r.name for r in metrics.compiled_graphs if r.ran_eagerly]
    return {"kinds": kinds, "externs": externs, "fallbacks": fallbacks, "eager": eager}


class GatheredParameters(nn.Module):
    """FSDP written with DTensor (the SimpleFSDP way): every parameter of `module` is kept as a shard
    (Shard(0) over `mesh`) and all-gathered in the forward; its gradient is reduce-scattered in the
    backward. Unlike fully_shard's hooks, both collectives are ops of the traced graphs.

    The loss is divided by the world size, so that the summed gradient shards are eager FSDP2's mean."""

    def __init__(self, module: nn.Module, mesh):
        super().__init__()
        from torch.distributed.tensor import Shard, distribute_tensor
        self.module = module
        self.names = [name for name, _ in module.named_parameters()]
        self.shards = nn.ParameterList(nn.Parameter(distribute_tensor(p.detach(), mesh, [Shard(0)]))
                                       for _, p in module.named_parameters())
        self.world = mesh.size()

    def forward(self, *args):
        from torch.distributed.tensor import Partial, Replicate
        full = {name: p.redistribute(placements=[Replicate()]).to_local(grad_placements=[Partial()])
                for name, p in zip(self.names, self.shards)}
        return torch.func.functional_call(self.module, full, args) / self.world


def assert_same_training(result, reference, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """A run's losses and parameters ({"losses", "params"}) equal a reference run's."""
    torch.testing.assert_close(result["losses"], reference["losses"], rtol=rtol, atol=atol)
    assert result["params"].keys() == reference["params"].keys()
    for name, p in result["params"].items():
        torch.testing.assert_close(p, reference["params"][name], rtol=rtol, atol=atol, msg=name)
