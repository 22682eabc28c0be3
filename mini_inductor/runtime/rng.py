"""The seeds of random ops in compiled graphs, as generated code and the runtime both see them.

A random op that activation checkpointing recomputes reaches the graph wrapped in torch's
`graphsafe_run_with_rng_state`; its generator becomes an int64 [1] seed input that the runtime draws
once per call (`draw_seed`) and the kernels expand with Philox (lowering/random_lowerings.py).
On the CPU it comes wrapped in `run_and_save_rng_state` (the forward saves the generator's state for
the backward) and `run_with_rng_state` (the backward's recompute from that state): the generated
wrapper calls `cpu_rng_state` and `seed_from_rng_state` for them.
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
# its CPU counterparts: the forward's op returns the generator's state too, the backward's runs from it
try:
    from torch._prims.rng_prims import run_and_save_rng_state as RUN_AND_SAVE_RNG
    from torch._prims.rng_prims import run_with_rng_state as RUN_WITH_RNG
except ImportError:
    RUN_AND_SAVE_RNG = RUN_WITH_RNG = None

# the random ops that generated code computes from a seed input when checkpointing wraps them
SEEDED_OPS = frozenset({aten.rand.default, aten.randn.default, aten.rand_like.default, aten.randn_like.default,
                        aten.bernoulli.default, aten.bernoulli.p, aten.bernoulli.Tensor, aten.native_dropout.default})


def draw_seed(generator: torch.Generator, out: torch.Tensor | None = None) -> torch.Tensor:
    """The seed of a checkpointed random op for this call: an int64 [1] tensor on the generator's
    device drawn from it, so the generator advances by one draw per call."""
    if out is None:
        out = torch.empty(1, dtype=torch.int64, device=generator.device)
    return torch.randint(0, SEED_HIGH, (1,), generator=generator, out=out)


def cpu_rng_state() -> torch.Tensor:
    """The CPU default generator's state (a uint8 copy, `torch.get_rng_state()`): what the forward of a
    checkpointed random op saves for the backward's recompute."""
    return torch.get_rng_state()


def seed_from_rng_state(state: torch.Tensor, *, advance: bool) -> torch.Tensor:
    """The seed of a checkpointed CPU random op: drawn from a generator set to the saved `state`, so
    the forward and the backward's recompute draw the same seed. `advance` (the forward): the default
    generator also moves on by one draw, so the next call gets another seed, as eager's op moves it."""
    if advance:
        draw_seed(torch.default_generator)
    generator = torch.Generator()
    generator.set_state(state)
    return draw_seed(generator)


def checkpointed_op(node: torch.fx.Node):
    """The op that `node` runs under activation checkpointing's random-state wrappers, else None."""
    if node.op != "call_function" or node.target is None:
        return None
    if node.target in (GRAPHSAFE_RNG, RUN_AND_SAVE_RNG) and node.args:
        return node.args[0]
    if node.target is RUN_WITH_RNG and len(node.args) > 1:
        return node.args[1]
    return None


def checkpointed_random_ops(gm: torch.fx.GraphModule) -> list[str]:
    """Names of `gm`'s nodes that run a seeded random op under activation checkpointing."""
    return [n.name for n in gm.graph.nodes if checkpointed_op(n) in SEEDED_OPS]
