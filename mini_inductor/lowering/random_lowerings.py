"""Random ops as generated code: Philox streams from one seed per graph and device.

    seed   = torch.randint(0, 2**63 - 1, [1], device=d)     one extern call per call of the graph,
                                                            drawn from d's default generator
    node k = tl.rand(seed, base_k + linear index)           base_k: elements of the random nodes
                                                            lowered before node k (int64)

Every element of every random node of a graph gets its own Philox counter, so two nodes are
independent streams, and a body evaluated twice (inlined into two kernels, or the mask that
native_dropout returns next to its output) gives the same values both times. `torch.manual_seed(s)`
fixes the seed draw, so a compiled model is reproducible run to run; values differ from eager's
(eager's generator walks its own Philox/Mersenne sequence), as with Inductor.

Activation checkpointing recomputes a random op in the backward and must get the forward's numbers.
aot_autograd then hands the forward and the backward graph one generator each per such op (the two
start equal and advance alike, and it restores the backward's when backwards run out of order) and
wraps the op in `graphsafe_run_with_rng_state(op, *args, rng_state=generator)`. Such an op gets its
own stream: its seed is that graph input, offsets counted from 0, so the forward and its recompute
compute the same numbers from equal seeds. The runtime (runtime/__init__.py) replaces the generator
argument by a seed drawn from it at each call, so under CUDA graphs the seed is an input copied in
at every replay, never a value baked in at recording.

Where aot_autograd wraps the forward's op in `run_and_save_rng_state(op, *args)` instead, which also
returns the default generator's state (saved for the backward), and the backward's in
`run_with_rng_state(state, op, *args)` (on the CPU, and on CUDA when we trace: backend.py
`_rng_saved_in_the_graph`, since aot_autograd's generators, seeded once, ignore `torch.manual_seed`),
the op gets its own stream too, offsets from 0:
  * on the CPU from a seed that the wrapper draws from a generator set to that state (runtime/rng.py
    `seed_from_rng_state`), equal in the forward and the recompute; these wrapper calls stay outside
    CUDA graphs;
  * on a GPU from a seed the forward draws from the device's generator inside the graph, as the
    graph's own seed is drawn. That seed is the "state" the forward returns and the backward reads
    (`rng_state_metas` gives both graphs an int64 [1] tensor on the device there), so the recompute
    costs no call outside the graph (runtime/rng.py `seed_state_inputs`, `as_seed`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import operator
from typing import Callable, Iterator, Sequence

import sympy
import torch

from ..runtime.rng import (GRAPHSAFE_RNG, RUN_AND_SAVE_RNG, RUN_WITH_RNG, SEED_HIGH, SEEDED_OPS, checkpointed_op,
                           op_device, rng_state, seed_from_rng_state)
from .ir import IRNode, Layout, Pointwise, current_graph
from .lowerings import LOWERINGS, broadcast_loader, broadcast_sizes, clone, full_like, register_lowering
from .sizevars import Expr, contiguous_strides, product, strided_index, sympify_seq
from .virtualized import ops

aten = torch.ops.aten



@dataclasses.dataclass
class RandomStreams:
    """A graph's seed buffers (one per device) and the next free Philox offset.

    GraphLowering owns one; `stream` hands each random node its seed and its range of offsets.
    """

    seeds: dict[str, str] = dataclasses.field(default_factory=dict)   # device → seed buffer name
    next_offset: Expr = 0      # an int, or an expression of a dynamic graph's size symbols
    scope: list | None = None    # [seed buffer name, next offset] inside `scoped`

    @contextlib.contextmanager
    def scoped(self, seed_name: str) -> Iterator[None]:
        """Random nodes lowered inside draw from `seed_name` (an int64 [1] buffer), offsets from 0."""
        saved, self.scope = self.scope, [seed_name, 0]
        try:
            yield
        finally:
            self.scope = saved

    def stream(self, device: torch.device, size: Sequence[Expr]) -> Callable:
        """A function of an index of `size` → (seed, int64 offset) values: this node's stream."""
        # a symbolic size takes a symbolic range of offsets: later nodes' bases are expressions too
        count = product(sympify_seq(size)) if size else 1
        count = int(count) if getattr(count, "is_Integer", False) else count
        if self.scope is not None:
            seed_name, base = self.scope
            self.scope[1] += count
        else:
            key = str(device)
            if key not in self.seeds:
                self.seeds[key] = drawn_seed(device).realize().name
            seed_name = self.seeds[key]
            base = self.next_offset
            self.next_offset += count
        strides = contiguous_strides(sympify_seq(size))

        def load(idx):
            seed = ops.load(seed_name, sympy.Integer(0))
            if isinstance(base, int):
                offset = ops.index_expr(strided_index(idx, strides), torch.int64)
                if base:
                    offset = ops.add(offset, ops.constant(base, torch.int64))
            else:
                offset = ops.index_expr(strided_index(idx, strides) + base, torch.int64)
            return seed, offset
        return load


def drawn_seed(device: torch.device) -> IRNode:
    """An int64 [1] seed drawn from `device`'s default generator at each call of the graph (an ATen
    call, captured by a CUDA graph, whose replays draw anew)."""
    return current_graph().make_extern(aten.randint.low, (0, SEED_HIGH, [1]), {"dtype": torch.int64, "device": device},
                                       Layout.contiguous(device, torch.int64, [1]))


def _uniform_loader(device: torch.device, size: Sequence[Expr]) -> Callable:
    """Loader of float32 values uniform in [0, 1), one Philox counter per element."""
    stream = current_graph().random_streams.stream(device, size)
    return lambda idx: ops.rand(*stream(idx))


def _random(kind: str, size, dtype, device) -> IRNode:
    dtype = dtype or torch.get_default_dtype()
    if not dtype.is_floating_point:
        raise NotImplementedError(f"{kind} of dtype {dtype}")
    device = torch.device(device) if device is not None else torch.device("cpu")
    size = sympify_seq(size)
    stream = current_graph().random_streams.stream(device, size)
    below_one = 1.0 - torch.finfo(dtype).eps / 2  # the largest value under 1 in a low-precision dtype

    def inner_fn(idx):
        value = getattr(ops, kind)(*stream(idx))
        if kind == "rand" and dtype.itemsize < 4:
            # rounding to nearest could reach 1.0 (eager's values stay below it); clamped to a
            # value the dtype holds exactly, it rounds to at most that value
            value = ops.minimum(value, ops.constant(below_one, torch.float32))
        return value if dtype == torch.float32 else ops.to_dtype(value, dtype)
    return Pointwise.create(device, dtype, inner_fn, size)


def _factory(kind: str):
    def lowering(size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
        if generator is not None:
            raise NotImplementedError("an explicit generator runs in ATen")
        return _random(kind, size, dtype, device)
    return lowering


def _like(kind: str):
    def lowering(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return _random(kind, x.get_size(), dtype or x.get_dtype(), device or x.get_device())
    return lowering


for _kind in ("rand", "randn"):
    register_lowering(getattr(aten, _kind).default, getattr(aten, _kind).generator)(_factory(_kind))
    register_lowering(getattr(aten, f"{_kind}_like").default)(_like(_kind))


def _bernoulli(x: IRNode, p) -> IRNode:
    """1 where a uniform draw falls below the probability `p` (a float or a tensor broadcast to x), else 0."""
    size = x.get_size()
    dtype = x.get_dtype()
    uniform = _uniform_loader(x.get_device(), size)
    p_load = broadcast_loader(p, size) if isinstance(p, IRNode) else None

    def inner_fn(idx):
        if p_load is None:
            prob = ops.constant(float(p), torch.float32)
        else:
            prob = p_load(idx)
            if p.get_dtype() != torch.float32:
                prob = ops.to_dtype(prob, torch.float32)
        return ops.to_dtype(ops.lt(uniform(idx), prob), dtype)
    return Pointwise.create(x.get_device(), dtype, inner_fn, size)


@register_lowering(aten.bernoulli.default)
def bernoulli(x, *, generator=None):
    if generator is not None:
        raise NotImplementedError("an explicit generator runs in ATen")
    return _bernoulli(x, x)


@register_lowering(aten.bernoulli.p, aten.bernoulli.Tensor)
def bernoulli_p(x, p=0.5, *, generator=None):
    if generator is not None:
        raise NotImplementedError("an explicit generator runs in ATen")
    if isinstance(p, IRNode) and broadcast_sizes(x.get_size(), p.get_size()) != list(x.get_size()):
        raise NotImplementedError("bernoulli with p larger than the input")
    return _bernoulli(x, p)


@register_lowering(aten.native_dropout.default)
def native_dropout(x, p, train=True):
    """(x * mask / (1 - p), mask): an element is kept with probability 1 - p."""
    if train is False:
        return clone(x), full_like(x, True, dtype=torch.bool)
    size, dtype = x.get_size(), x.get_dtype()
    uniform = _uniform_loader(x.get_device(), size)
    load_x = x.make_loader()
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)  # p = 1 drops everything (and must not make 0 * inf)

    def keep(idx):
        return ops.ge(uniform(idx), ops.constant(float(p), torch.float32))

    def out_fn(idx):
        return ops.where(keep(idx), _scaled(load_x(idx), scale, dtype), ops.constant(0.0, dtype))
    out = Pointwise.create(x.get_device(), dtype, out_fn, size)
    mask = Pointwise.create(x.get_device(), torch.bool, keep, size)
    return out, mask


@register_lowering(aten.native_dropout_backward.default)
def native_dropout_backward(grad, mask, scale):
    size, dtype = grad.get_size(), grad.get_dtype()
    load_grad, load_mask = grad.make_loader(), broadcast_loader(mask, size)

    def inner_fn(idx):
        kept = load_mask(idx)
        if mask.get_dtype() != torch.bool:
            kept = ops.to_dtype(kept, torch.bool)
        return ops.where(kept, _scaled(load_grad(idx), float(scale), dtype), ops.constant(0.0, dtype))
    return Pointwise.create(grad.get_device(), dtype, inner_fn, size)


def _scaled(value, scale: float, dtype: torch.dtype):
    """value * scale, computed in fp32 for fp16/bf16 (as the other pointwise ops are)."""
    if dtype.is_floating_point and dtype.itemsize < 4:
        product_ = ops.mul(ops.to_dtype(value, torch.float32), ops.constant(scale, torch.float32))
        return ops.to_dtype(product_, dtype)
    return ops.mul(value, ops.constant(scale, dtype))


def graphsafe_rng_supported(op) -> bool:
    """Whether `graphsafe_run_with_rng_state(op, ...)` is lowered here (random ops only: the others run
    their graph eagerly)."""
    return op in LOWERINGS and op in SEEDED_OPS


def checkpointed_random_lowered(node) -> bool:
    """Whether `node` is a random op of an activation-checkpointed region that is lowered here: under
    `graphsafe_run_with_rng_state`, or under `run_and_save_rng_state`/`run_with_rng_state` on one device."""
    op = checkpointed_op(node)
    if not graphsafe_rng_supported(op):
        return False
    if node.target is GRAPHSAFE_RNG:
        return True
    return op_device(node) is not None


def _graphsafe_run_with_rng_state(op, *args, rng_state=None, **kwargs):
    """`op` with its random numbers from the seed input that stands for its generator (see the top)."""
    if not graphsafe_rng_supported(op) or not isinstance(rng_state, IRNode):
        raise RuntimeError(f"random op {op} under activation checkpointing has no lowering with its own seed")
    seed = rng_state.realize()
    with current_graph().random_streams.scoped(seed.name):
        return LOWERINGS[op](*args, **kwargs)


def _op_device(op, args, kwargs) -> torch.device:
    """The one device of a checkpointed random op's tensors (the CPU for a factory with none)."""
    if not graphsafe_rng_supported(op):
        raise NotImplementedError(f"random op {op} under activation checkpointing has no lowering with its own seed")
    devices = {a.get_device() for a in (*args, *kwargs.values()) if isinstance(a, IRNode)}
    if kwargs.get("device") is not None:
        devices.add(torch.device(kwargs["device"]))
    devices = {d for d in devices if d.type != "cpu"} or devices   # (a CPU scalar beside GPU tensors)
    if len(devices) > 1:
        raise NotImplementedError(f"random op {op} under activation checkpointing on {sorted(map(str, devices))}")
    return devices.pop() if devices else torch.device("cpu")


def _seed_from_state(state: IRNode, device: torch.device, *, advance: bool) -> str:
    """An int64 [1] seed on `device` drawn from a generator set to `state` (the wrapper's call, kept out
    of CUDA graphs)."""
    box = current_graph().make_extern(seed_from_rng_state, (state,), {"advance": advance, "device": device},
                                      Layout.contiguous(device, torch.int64, [1]))
    box.data.cudagraph_unsafe = True
    return box.realize().name


def _run_and_save_rng_state(op, *args, **kwargs):
    """The forward of a checkpointed random op: (the generator's state, `op` with its own seed); on a
    GPU the state is the seed itself, drawn inside the graph (see the top)."""
    device = _op_device(op, args, kwargs)
    if device.type != "cpu":
        seed = drawn_seed(device)
        with current_graph().random_streams.scoped(seed.realize().name):
            return seed, LOWERINGS[op](*args, **kwargs)
    layout = Layout.contiguous(torch.device("cpu"), torch.uint8, [rng_state(device).numel()])
    state = current_graph().make_extern(rng_state, (), {"device": device}, layout)
    state.data.cudagraph_unsafe = True
    with current_graph().random_streams.scoped(_seed_from_state(state, device, advance=True)):
        return state, LOWERINGS[op](*args, **kwargs)


def rng_state_metas(graph: torch.fx.Graph) -> None:
    """The FakeTensors of the generator states that `run_and_save_rng_state` returns and
    `run_with_rng_state` reads, as the generated code has them: on the CPU a state of constant size
    (aot_autograd's may hold a symbol, s29, even in a static graph, which no input gives a value);
    on a GPU the int64 [1] seed on the device that stands for it (see the top)."""
    for node in graph.find_nodes(op="call_function", target=RUN_AND_SAVE_RNG) if RUN_AND_SAVE_RNG else ():
        device = op_device(node)
        for user in node.users:
            val = user.meta.get("val")
            if device is not None and user.target is operator.getitem and user.args[1] == 0 \
                    and isinstance(val, torch.Tensor):
                with val.fake_mode:
                    user.meta["val"] = _state_meta(device, val.dtype)
    for node in graph.find_nodes(op="call_function", target=RUN_WITH_RNG) if RUN_WITH_RNG else ():
        device, state = op_device(node), node.args[0] if node.args else None
        if not isinstance(state, torch.fx.Node) or state.op != "placeholder":
            continue
        val = state.meta.get("val")
        if device is not None and device.type != "cpu" and isinstance(val, torch.Tensor):
            with val.fake_mode:
                state.meta["val"] = _state_meta(device, val.dtype)


def _state_meta(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    if device.type == "cpu":
        return torch.empty(rng_state(device).numel(), dtype=dtype)
    return torch.empty(1, dtype=torch.int64, device=device)


def _run_with_rng_state(state, op, *args, **kwargs):
    """The backward's recompute of a checkpointed random op, from the state the forward saved (on a
    GPU, the seed it drew)."""
    device = _op_device(op, args, kwargs)
    seed = state.realize().name if device.type != "cpu" else _seed_from_state(state, device, advance=False)
    with current_graph().random_streams.scoped(seed):
        return LOWERINGS[op](*args, **kwargs)


if GRAPHSAFE_RNG is not None:
    register_lowering(GRAPHSAFE_RNG)(_graphsafe_run_with_rng_state)
if RUN_AND_SAVE_RNG is not None:
    register_lowering(RUN_AND_SAVE_RNG)(_run_and_save_rng_state)
    register_lowering(RUN_WITH_RNG)(_run_with_rng_state)
