"""The seeds of random ops in compiled graphs, as generated code and the runtime both see them.

A random op that activation checkpointing recomputes reaches the graph wrapped in torch's
`graphsafe_run_with_rng_state`; its generator becomes an int64 [1] seed input that the runtime draws
once per call (`draw_seed`) and the kernels expand with Philox (lowering/random_lowerings.py).
Where the forward saves the generator's state for the backward instead, it comes wrapped in
`run_and_save_rng_state` and the backward's recompute in `run_with_rng_state`. That is always so on
the CPU, and on CUDA too when we trace (backend.py `_rng_saved_in_the_graph`), so that the seed
follows the device's default generator and `torch.manual_seed` repeats a checkpointed region's
numbers as eager and Inductor do. On the CPU the generated wrapper calls `rng_state` and
`seed_from_rng_state`. On a GPU the forward draws the op's seed inside the graph (a CUDA graph's
replay draws a new one) and saves that seed, an int64 [1] tensor on the device, where the graph says
a generator state: `seed_state_inputs` are the backward's inputs that take it. A graph of the pair
that runs eagerly takes or gives a real state; `as_seed` and `as_state` convert at the border.
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


def default_generator(device: torch.device | str) -> torch.Generator:
    """The default generator of `device` (the CPU's, or a GPU's by its index, the current one if none)."""
    device = torch.device(device)
    if device.type == "cpu":
        return torch.default_generator
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.cuda.default_generators[index]


def rng_state(device: torch.device | str = "cpu") -> torch.Tensor:
    """The default generator's state of `device` (a CPU uint8 copy, as `torch.get_rng_state()` and
    `torch.cuda.get_rng_state()` give it): what the forward of a checkpointed random op saves for the
    backward's recompute."""
    return default_generator(device).get_state()


def seed_from_rng_state(state: torch.Tensor, *, advance: bool, device: torch.device | str = "cpu") -> torch.Tensor:
    """The seed of a checkpointed random op on `device`: drawn from a generator set to the saved
    `state`, so the forward and the backward's recompute draw the same seed. `advance` (the forward):
    the default generator also moves on by one draw, so the next call gets another seed, as eager's
    op moves it."""
    if advance:
        draw_seed(default_generator(device))
    generator = torch.Generator(device=device)
    generator.set_state(state)
    return draw_seed(generator)


def as_seed(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A compiled backward's seed input: the seed a compiled forward saved, or one drawn from the state
    that an eagerly run forward saved (its ATen numbers differ from ours anyway: EagerGraph warns)."""
    return value if value.device.type != "cpu" else seed_from_rng_state(value, advance=False, device=device)


def as_state(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """An eagerly run backward's generator state: the one an eagerly run forward saved, or a state made
    from the seed a compiled forward saved."""
    if value.device.type == "cpu":
        return value
    generator = torch.Generator(device=device)
    generator.manual_seed(int(value.item()) & (2**63 - 1))
    return generator.get_state()


def op_device(node: torch.fx.Node) -> torch.device | None:
    """The device of a checkpointed random op's node: of its tensors other than CPU ones (a CPU scalar
    beside GPU tensors; the saved state), or its device argument; the CPU if it has neither; None for
    several GPUs."""
    vals = [a.meta.get("val") for a in node.all_input_nodes]
    devices = {v.device for v in vals if isinstance(v, torch.Tensor) and v.device.type != "cpu"}
    if node.kwargs.get("device") is not None:
        devices.add(torch.device(node.kwargs["device"]))
    devices = {d for d in devices if d.type != "cpu"}
    if len(devices) > 1:
        return None
    return devices.pop() if devices else torch.device("cpu")


def seed_state_inputs(gm: torch.fx.GraphModule) -> tuple[tuple[int, torch.device], ...]:
    """(position, device) of the graph's inputs that are the saved state of a checkpointed random op
    on a GPU (a backward's): a seed where the forward was compiled (see the top)."""
    if RUN_WITH_RNG is None:
        return ()
    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    found = {}
    for node in gm.graph.find_nodes(op="call_function", target=RUN_WITH_RNG):
        device = op_device(node)
        state = node.args[0] if node.args else None
        if device is not None and device.type != "cpu" and state in placeholders:
            found[placeholders[state]] = device
    return tuple(sorted(found.items()))


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
