"""The seeds of random ops in compiled graphs, as generated code and the runtime both see them.

A random op that activation checkpointing recomputes reaches the graph wrapped in torch's
`graphsafe_run_with_rng_state`; its generator becomes an int64 [1] seed input that the runtime draws
once per call (`draw_seed`) and the kernels expand with Philox (lowering/random_lowerings.py).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

SEED_HIGH = 2**63 - 1  # seeds are drawn from [0, SEED_HIGH)

# aot_autograd's wrapper of a random op recomputed by activation checkpointing (torch 2.5 and later)
try:
    from torch._prims.rng_prims import graphsafe_run_with_rng_state as GRAPHSAFE_RNG
except ImportError:
    GRAPHSAFE_RNG = None

# the random ops that generated code computes from a seed input when checkpointing wraps them
SEEDED_OPS = frozenset({aten.rand.default, aten.randn.default, aten.rand_like.default, aten.randn_like.default,
                        aten.bernoulli.default, aten.bernoulli.p, aten.bernoulli.Tensor, aten.native_dropout.default})


def draw_seed(generator: torch.Generator, out: torch.Tensor | None = None) -> torch.Tensor:
    """The seed of a checkpointed random op for this call: an int64 [1] tensor on the generator's
    device drawn from it, so the generator advances by one draw per call."""
    if out is None:
        out = torch.empty(1, dtype=torch.int64, device=generator.device)
    return torch.randint(0, SEED_HIGH, (1,), generator=generator, out=out)


def checkpointed_random_ops(gm: torch.fx.GraphModule) -> list[str]:
    """Names of `gm`'s nodes that run a seeded random op under activation checkpointing."""
    return [n.name for n in gm.graph.nodes if n.target is GRAPHSAFE_RNG and n.args and n.args[0] in SEEDED_OPS]
