"""The front cache's training entries: a Dynamo graph whose inputs require grad → its compiled forward
and backward graphs, served at a warm start without AOT autograd's trace and partition. Also the
inference entries whose runtime wrapper has work to do (`inference_function`).

An inference entry (front_cache.py) only has to call one compiled graph. A training graph needs the
autograd.Function that AOT autograd wraps around its forward and backward: what the forward saves for
the backward, which outputs are differentiable, how tangents are coerced to the traced layouts, the
version checks of saved tensors, double backward's error. That is torch's code, built from AOT
autograd's metadata of the graph (`ViewAndMutationMeta`) by `AOTDispatchAutograd.post_compile`; an
entry keeps that metadata (pickled, as torch's own AOTAutogradCache keeps it) and the two compiled
graphs' ATen-graph entries, and a hit calls the same `post_compile` with them:

    part, reason = observe(kind, gm, compiled)    # front_cache.Front.watch, per graph AOT compiled
    TrainingEntry(forward, backward, ..., pack_metadata(meta))   # Front._store_training, once both are seen
    fn = autograd_function(fw, bw, unpack_metadata(entry.metadata), ...)   # a hit (front_cache._serve_training)
    as_dynamo_callable(fn, params)                # what Dynamo gets

An entry is made only where the metadata leaves nothing else to AOT autograd's wrappers
(front_cache.runtime_wrapping with `by_torch`: inputs whose data the graph mutates and outputs that
alias inputs or intermediates are torch's wrappers' to handle, as after a trace; no metadata mutation,
RNG functionalization, tokens or subclasses); both graphs must be
CompiledGraphs without generator or saved-seed inputs (constants are kept: constant_values.py). The backward is compiled at the first
backward (AOT autograd's lazy backward), so the entry is written then.

A hit builds a backward that torch's compiled autograd cannot trace (it needs the backward's FX graph,
which an entry does not hold): with compiled autograd on, the graph gets no key and goes through AOT
autograd; turned on after a hit, its backward raises naming the option that turns this level off.
"""
from __future__ import annotations

import base64
import dataclasses
import inspect
import io
import json
import pickle
from typing import Any, Callable

import sympy
import torch
from torch._dynamo import disable

from ..runtime import CompiledGraph
from . import constant_values, shape_guards

KIND = "training"
FORMAT = 1


@dataclasses.dataclass(frozen=True)
class GraphPart:
    """One compiled graph of a training entry: its ATen-graph entry and what rebuilds it."""

    graph_key: str                     # graph_cache's key of the entry holding the generated module
    graph: str                         # the name it was compiled under, e.g. "forward_0"
    num_fx_nodes: int
    static_input_idxs: tuple[int, ...]
    param_grad_idxs: tuple[int, ...]
    constants: dict = dataclasses.field(default_factory=dict)   # their values (constant_values.py)

    @classmethod
    def from_dict(cls, data: dict) -> "GraphPart":
        part = cls(str(data["graph_key"]), str(data["graph"]), int(data["num_fx_nodes"]),
                   tuple(int(i) for i in data["static_input_idxs"]), tuple(int(i) for i in data["param_grad_idxs"]),
                   dict(data.get("constants", {})))
        constant_values.check(part.constants)
        if len(part.graph_key) != 64 or any(c not in "0123456789abcdef" for c in part.graph_key):
            raise ValueError(f"graph_key {part.graph_key!r} is not a graph_cache key")
        return part


@dataclasses.dataclass(frozen=True)
class TrainingEntry:
    forward: GraphPart
    backward: GraphPart
    num_saved_sizes: int               # SymInts the forward saves for the backward (dynamic shapes)
    num_inputs: int                    # the graph module's parameters and buffers, then Dynamo's inputs
    num_outputs: int
    inputs_to_detach: tuple[int, ...]  # AOT autograd's indices_of_inps_to_detach
    metadata: str                      # base64 of the pickled ViewAndMutationMeta (made runtime-safe)
    guards: tuple = ()                 # added to the ShapeEnv after the key (front_cache, shape_guards.py)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "kind": KIND, **dataclasses.asdict(self)})

    @classmethod
    def from_dict(cls, data: dict) -> "TrainingEntry":
        if data.get("format") != FORMAT:
            raise ValueError(f"training entry format {data.get('format')!r}, expected {FORMAT}")
        entry = cls(GraphPart.from_dict(data["forward"]), GraphPart.from_dict(data["backward"]),
                    int(data["num_saved_sizes"]), int(data["num_inputs"]), int(data["num_outputs"]),
                    tuple(int(i) for i in data["inputs_to_detach"]), str(data["metadata"]),
                    shape_guards.of_entry(data))
        base64.b64decode(entry.metadata, validate=True)
        if any(not 0 <= i < entry.num_inputs for i in (*entry.forward.static_input_idxs, *entry.inputs_to_detach)):
            raise ValueError(f"input indices out of {entry.num_inputs} inputs")
        return entry


def observe(kind: str, gm: torch.fx.GraphModule, compiled) -> tuple[GraphPart | None, str | None]:
    """The part of a training entry for a forward or backward graph AOT autograd handed us, or why
    there is none."""
    if type(compiled) is not CompiledGraph:
        return None, f"the {kind} graph became a {type(compiled).__name__}"
    if compiled.generator_idxs or compiled.seed_state_idxs or compiled.sizes_key is not None:
        return None, f"the {kind} graph has generator or saved-seed inputs, or capture sizes"
    if not getattr(compiled, "graph_key", None):
        return None, f"the {kind} graph has no compiled-graph cache key"
    try:
        constants = constant_values.pack(compiled.constants)
    except ValueError as e:
        return None, f"the {kind} graph's constants are not kept ({e})"
    part = GraphPart(compiled.graph_key, compiled.name, sum(1 for n in gm.graph.nodes if n.op == "call_function"),
                     tuple(compiled.static_input_idxs), tuple(compiled.param_grad_idxs), constants)
    return part, None


def inputs_to_detach(backward_gm: torch.fx.GraphModule, meta) -> tuple[int, ...]:
    """AOT autograd's rule for the inputs its runtime wrapper detaches: a non-leaf input that requires
    grad and gets no gradient (its exception, an input whose metadata the graph mutates, has no entry)."""
    output = next(n for n in reversed(backward_gm.graph.nodes) if n.op == "output")
    grads = output.args[0]
    if len(grads) != len(meta.input_info):
        raise ValueError(f"the backward returns {len(grads)} gradients for {len(meta.input_info)} inputs")
    return tuple(i for i, (g, info) in enumerate(zip(grads, meta.input_info))
                 if g is None and info.requires_grad and not info.is_leaf)


def saved_sizes(forward_gm: torch.fx.GraphModule, meta) -> int:
    """How many symbolic numbers the forward saves for the backward (AOT autograd's
    `num_symints_saved_for_bw` counts SymInts, SymFloats and SymBools alike: a float argument's value,
    a size's true quotient): its outputs after what it returns (mutated inputs' new values, the user's
    outputs, intermediate bases)."""
    output = next(n for n in reversed(forward_gm.graph.nodes) if n.op == "output")
    saved = output.args[0][meta.num_forward_returns:]
    return sum(1 for n in saved if isinstance(n, torch.fx.Node)
               and isinstance(n.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)))


def metadata_reason(meta) -> str | None:
    """Why this training metadata cannot make an entry (beyond front_cache.runtime_wrapping), or None."""
    if hasattr(meta, "traced_tangent_metas") and meta.traced_tangent_metas is None:
        return "the metadata was not made runtime-safe"
    if getattr(meta, "bw_donated_idxs", None):
        return "the backward has donated buffers"
    return None


def pack_metadata(meta) -> str:
    """The metadata as an entry keeps it, once it reads back as `unpack_metadata` reads it (raises where
    it does not: a view replayed on a dynamic graph's output keeps sympy expressions of sizes, not
    values). AOT autograd's backward marks saved tensors it may donate to the backward's buffers;
    mini_inductor's backward never writes into its inputs, so none are donated (backend.py clears the
    list at compile, and so it is stored)."""
    out = io.BytesIO()
    _SizesAsTrees(out, protocol=pickle.HIGHEST_PROTOCOL).dump(meta)
    text = base64.b64encode(out.getvalue()).decode("ascii")
    unpack_metadata(text)
    return text


class _SizesAsTrees(pickle.Pickler):
    """Sympy expressions (a dynamic graph's sizes in the metadata) are written as shape_guards' JSON
    trees, not as pickles of sympy's classes (see _TorchOnly)."""

    def persistent_id(self, obj):
        if isinstance(obj, sympy.Basic):
            return json.dumps(shape_guards.encode(obj))
        return None


class _TorchOnly(pickle.Unpickler):
    """Metadata comes back only as the classes AOT autograd's metadata is made of and plain builtins:
    nothing else is looked up. Pickle calls a class it names with the arguments the file gives, so every
    class allowed must be harmless to call with any of them: torch's are looked up in the modules the
    metadata's classes come from only, and sympy's never (sizes come back from shape_guards' trees,
    `persistent_load`): sympy's functions, torch's FloorDiv among them, parse a string argument as an
    expression and evaluate it (session 48: a file that called FloorDiv with a string ran its code)."""

    _BUILTINS = frozenset({"set", "frozenset", "list", "dict", "tuple", "int", "float", "bool", "str",
                           "slice"})

    _FUNCTIONS = frozenset({("torch.serialization", "_get_layout")})   # a layout by its name, from a table

    _TORCH_MODULES = ("torch._functorch._aot_autograd.", "torch._C._functionalization", "torch._subclasses.",
                      "torch._utils", "torch.fx.experimental.symbolic_shapes")

    def find_class(self, module: str, name: str):
        if module == "builtins" and name in self._BUILTINS or (module, name) in self._FUNCTIONS:
            return super().find_class(module, name)
        if module == "torch" or module.startswith(self._TORCH_MODULES):
            found = super().find_class(module, name)
            if isinstance(found, (torch.dtype, torch.memory_format)) or \
                    isinstance(found, type) and not issubclass(found, sympy.Basic):
                return found
        raise pickle.UnpicklingError(f"the metadata names {module}.{name}, which is not one of the classes "
                                     "AOT autograd's metadata is made of")

    def persistent_load(self, pid):
        if not isinstance(pid, str):
            raise pickle.UnpicklingError("the metadata holds a size that is not a tree of JSON")
        return shape_guards.decode(json.loads(pid))


def unpack_metadata(text: str):
    from torch._functorch._aot_autograd.schemas import ViewAndMutationMeta

    meta = _TorchOnly(io.BytesIO(base64.b64decode(text, validate=True))).load()
    if not isinstance(meta, ViewAndMutationMeta):
        raise ValueError(f"the metadata is a {type(meta).__name__}, not a ViewAndMutationMeta")
    return meta


def autograd_function(fw: CompiledGraph, bw: CompiledGraph, meta, inputs_detached: tuple[int, ...],
                      num_params: int, static_input_idxs: tuple[int, ...], num_saved_sizes: int) -> Callable:
    """AOT autograd's runtime for a forward and backward compiled graph (boxed: takes the argument
    list), built by torch's `AOTDispatchAutograd.post_compile` as AOT autograd builds it after a trace."""
    from torch._functorch import aot_autograd
    from torch._functorch._aot_autograd import runtime_wrappers
    from torch._functorch._aot_autograd.schemas import AOTConfig

    config = AOTConfig(fw_compiler=None, bw_compiler=None, partition_fn=None, decompositions=None,
                       num_params_buffers=num_params, aot_id=next(aot_autograd.AOT_COUNTER),
                       keep_inference_input_mutations=False, static_input_indices=list(static_input_idxs))
    backward = disable(bw, reason="mini_inductor's generated backward")
    values = dict(compiled_fw_func=fw, compiled_bw_func=backward, maybe_subclass_meta=None,
                  num_symints_saved_for_bw=num_saved_sizes, backward_state_indices=[], disable_amp=False,
                  indices_of_inps_to_detach=list(inputs_detached), lazy_backward_info=_no_fx_backward(),
                  bw_compiler=None,
                  aot_config=config, fw_metadata=meta, try_save_cache_entry=None)
    spec_type = getattr(runtime_wrappers, "AOTDispatchAutogradCompileSpec", None)
    post_compile = runtime_wrappers.AOTDispatchAutograd.post_compile
    if spec_type is not None:   # torch 2.13: one spec object
        fields = {f.name for f in dataclasses.fields(spec_type)}
        return post_compile(spec_type(**{k: v for k, v in values.items() if k in fields}))
    # older torch: the same values as parameters (num_symints_saved_for_bw_ there and then)
    params = inspect.signature(post_compile).parameters
    kwargs = {name: values[name.rstrip("_")] for name in params if name.rstrip("_") in values}
    return post_compile(**kwargs)


def inference_function(compiled: CompiledGraph, meta, num_params: int) -> Callable:
    """AOT autograd's inference runtime around a compiled graph (boxed), built by torch's RuntimeWrapper
    from the metadata, as after a trace: for an inference entry whose wrapper writes mutated inputs'
    new values back or rebuilds outputs that alias inputs or intermediates."""
    from torch._functorch import aot_autograd
    from torch._functorch._aot_autograd import runtime_wrappers
    from torch._functorch._aot_autograd.schemas import AOTConfig

    config = AOTConfig(fw_compiler=None, bw_compiler=None, partition_fn=None, decompositions=None,
                       num_params_buffers=num_params, aot_id=next(aot_autograd.AOT_COUNTER),
                       keep_inference_input_mutations=False,
                       static_input_indices=list(getattr(meta, "static_input_indices", None) or []))
    wrapper = runtime_wrappers.RuntimeWrapper(indices_of_inps_to_detach=[], trace_joint=False, disable_amp=False)
    return wrapper.post_compile(compiled, config, runtime_metadata=meta)


def _no_fx_backward():
    """What compiled autograd reads the backward's FX graph from, for a served graph that has none: a
    clear error naming the way out, where torch's own would blame its AOTAutogradCache."""
    from torch._functorch._aot_autograd import runtime_wrappers

    info = getattr(runtime_wrappers, "CachedAutogradLazyBackwardCompileInfo", None)
    if info is None:
        return None

    def refuse():
        raise RuntimeError("mini_inductor: this graph's backward was served from the front cache, which keeps "
                           "no FX graph of it for compiled autograd to trace; compile with "
                           "options={'front_cache': False} (or MINI_INDUCTOR_FRONT_CACHE=0) to use compiled "
                           "autograd on it")
    return info(refuse)


def compiled_autograd_on() -> bool:
    from torch._dynamo import compiled_autograd

    return bool(getattr(compiled_autograd, "compiled_autograd_enabled", False)
                or getattr(compiled_autograd, "in_compiled_autograd_region", False))


def inlined_saved_tensor_hooks() -> bool:
    """Saved-tensor hooks are active that AOT autograd traces into the forward and backward graphs
    (torch's traceable hooks): what a compile under them produced is not in the key."""
    from torch._functorch._aot_autograd import utils

    top = getattr(utils, "top_saved_tensors_hooks", None)
    inlineable = getattr(utils, "saved_tensors_hooks_are_inlineable", None)
    return bool(top and inlineable and inlineable(top()))


def as_dynamo_callable(fn: Callable, params: list[torch.Tensor]) -> Callable:
    """What aot_module_simplified returns around `fn`: the graph module's parameters and buffers before
    Dynamo's inputs, one boxed call."""
    def forward(*args: Any):
        return fn([*params, *args])
    return disable(forward, reason="mini_inductor's generated graph")
