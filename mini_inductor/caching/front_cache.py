"""The second level of the on-disk cache: a Dynamo graph → its compiled graphs, no AOT autograd.

graph_cache.py keys a compiled graph on the ATen graph, which only AOT autograd (fake-tensor tracing,
functionalization, decompositions) can produce: a warm start still pays for AOT autograd. This level
keys on the graph the backend receives from Dynamo, so that a hit calls no AOT autograd at all:

    front = Front(gm, example_inputs, cfg)     # the key, or `front.reason` why this graph gets none
    forward = front.load()                     # a hit: the callable Dynamo gets; None: a miss
    compilers = {kind: front.watch(kind, compiler) ...}   # sees what AOT autograd compiles
    front.store()                              # after AOT autograd: an entry, when one is safe

A training graph (grad mode on and an input that requires grad) gets a training entry: its forward and
backward graphs and AOT autograd's metadata, from which a hit builds AOT autograd's autograd.Function
with torch's own code (front_autograd.py). It is written at the first backward, when AOT autograd
compiles the backward graph.

A graph that takes a Python number as a 0-d tensor is keyed as a dynamic graph (below): the number's
value is a symbol of the ShapeEnv, which AOT autograd may specialize on with a guard, kept in the entry
and added again by a hit. An entry is written only when AOT autograd made exactly one
inference graph, compiled by us into a CompiledGraph (its constants kept: constant_values.py), and its metadata leaves the
runtime wrapper nothing to do (no input mutation, only plain non-aliased outputs, no intermediate
bases, effect tokens, subclasses or functionalized RNG; `runtime_wrapping` lists the checks). A hit then needs only what AOT's wrapper
does in that case (`_aot_runtime`: a dynamic graph's outputs are also marked with the dims Dynamo is
to treat as dynamic). Anything else keeps going through AOT autograd as before.

A dynamic graph (sizes of the ShapeEnv's symbols, SymInt inputs) is keyed on its placeholders'
symbolic sizes, the symbols' ranges and every guard the ShapeEnv holds. The guards AOT autograd or our
compile added after the key was made are kept in the entry (shape_guards.py): a hit checks that they
hold at its sizes (else it is a miss) and adds them to the ShapeEnv, for Dynamo to check as after a
compile. One entry then serves every size the guards let through, in a new process too.

The key hashes the Dynamo graph's code, its placeholders' static-input marks (AOT autograd derives
the static input indices from them) and sizes, every input's sizes, strides, offset, dtype, device,
requires_grad and class (Parameter or not), the graph module's own parameters and buffers, grad,
inference and autocast modes, torch._functorch's config and what graph_cache.compiler_key_parts
hashes (versions, options). The entry names the ATen-graph entry (graph_cache.py), which holds the
generated module:

    cache_dir/front/ab/ab12….json  →  {"graph_key": …, "static_input_idxs": […], "num_outputs": …}
                                      or {"kind": "training", "forward": {…}, "backward": {…}, "metadata": …}
                                      (behind a content hash line: files.py)
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import logging
import os
import time
from typing import Any, Callable

import torch
from torch._dynamo import disable

from .. import metrics
from ..config import Config
from ..debug import trace as debug_trace
from ..debug import wants_debug_files
from ..runtime import CompiledGraph
from ..runtime.interpreter import install as install_interpreter_shims
from . import constant_values, files, front_autograd, graph_cache, lookup, shape_guards

log = logging.getLogger("mini_inductor")
schedule_log = logging.getLogger("mini_inductor.schedule")

FORMAT = 1
LABEL = "disk (before AOT)"       # GraphRecord.cache of a graph served by this level
_COMPILED_FOR_REAL = "debug folders and explain compile for real"
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
# ATen's, and ours (the flash-attention ops: torch.library custom ops that mutate nothing and return new
# tensors, registered at import): the runtime wrapper's first-call aliasing check of a custom op has
# nothing to find in them
_OWN_NAMESPACES = ("aten", "prims", "mini_inductor")


@dataclasses.dataclass(frozen=True)
class FrontEntry:
    """What rebuilds the CompiledGraph that AOT autograd's inference compile produced, and its record."""

    graph_key: str                     # the ATen-graph entry (graph_cache.load) holding the module
    graph: str                         # the name it was compiled under, e.g. "inference_0"
    num_fx_nodes: int                  # call_function nodes of the ATen graph (for the record)
    num_inputs: int                    # the graph module's parameters and buffers, then Dynamo's inputs
    num_outputs: int
    static_input_idxs: tuple[int, ...]  # what AOT autograd reported (CUDA graphs read them in place)
    # a dynamic graph's outputs' dims that AOT autograd's wrapper marks as dynamic for Dynamo (per output,
    # None where it marks nothing); empty: none marked
    dynamic_dims: tuple[tuple[int, ...] | None, ...] = ()
    # where AOT autograd's runtime wrapper has work to do (inputs the graph mutates, outputs that alias
    # inputs or intermediates): its metadata, base64 of the pickle, from which a hit builds torch's own
    # wrapper (front_autograd.inference_function); "": nothing to do (`_aot_runtime`)
    metadata: str = ""
    # the guards the compile added to a dynamic graph's ShapeEnv after the key (shape_guards.py)
    guards: tuple = ()
    # made with grad on and an input that requires grad, where no output needs it: AOT autograd made an
    # inference graph (a training key; other entries never serve one)
    under_grad: bool = False
    # the graph's constants' values (constant_values.py): a hit has no ATen graph to read them from
    constants: dict = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **dataclasses.asdict(self)})

    @classmethod
    def from_json(cls, text: str) -> "FrontEntry":
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format') if isinstance(data, dict) else None!r}, expected {FORMAT}")
        dims = tuple(None if d is None else tuple(int(i) for i in d) for d in data.get("dynamic_dims", ()))
        entry = cls(str(data["graph_key"]), str(data["graph"]), int(data["num_fx_nodes"]), int(data["num_inputs"]),
                    int(data["num_outputs"]), tuple(int(i) for i in data["static_input_idxs"]), dims,
                    str(data.get("metadata", "")), shape_guards.of_entry(data), bool(data.get("under_grad", False)),
                    dict(data.get("constants", {})))
        constant_values.check(entry.constants)   # (a damaged entry is refused whole)
        if dims and len(dims) != entry.num_outputs:
            raise ValueError(f"dynamic dims for {len(dims)} outputs, expected {entry.num_outputs}")
        if len(entry.graph_key) != 64 or any(c not in "0123456789abcdef" for c in entry.graph_key):
            raise ValueError(f"graph_key {entry.graph_key!r} is not a graph_cache key")
        if any(not 0 <= i < entry.num_inputs for i in entry.static_input_idxs):
            raise ValueError(f"static input indices {entry.static_input_idxs} out of {entry.num_inputs} inputs")
        return entry


@dataclasses.dataclass
class _Compiled:
    """One graph AOT autograd handed to our compilers under a Front."""

    kind: str
    reason: str | None = None          # why it cannot have a front entry; None: it can
    entry: FrontEntry | None = None
    part: front_autograd.GraphPart | None = None   # a training graph's (forward or backward)
    meta: Any = None                   # a forward's AOT autograd metadata
    inputs_to_detach: tuple[int, ...] = ()   # a backward's
    saved_sizes: int = 0               # a forward's SymInts saved for the backward


class Front:
    """One backend call's side of the front cache: `key` (None when the graph gets no entry, and
    `reason` says why), what AOT autograd compiled under it (`watch`), the entry (`load`, `store`)."""

    def __init__(self, gm, example_inputs, cfg: Config):
        self.cfg = cfg
        self.began = time.perf_counter()
        self.key: str | None = None
        self.reason: str | None = None
        self.params: list[torch.Tensor] = []    # the gm's own parameters and buffers, before the inputs
        self.num_inputs = self.num_outputs = 0   # as AOT autograd counts them: parameters and buffers first
        self.compiled: list[_Compiled] = []
        self.training = False                    # grad mode on and an input requires grad: a training entry
        self.shape_env = None                    # a dynamic graph's ShapeEnv, and its guards when keyed
        self.guards_at_key = 0
        self.stored = False                      # store() ran (a training entry is written at the backward)
        self.names: list[str] = []               # the graphs compiled under this Dynamo graph (their records')
        self.first_record = len(metrics.compiled_graphs)   # theirs are among the records from here on
        if not (cfg.graph_cache and cfg.front_cache):
            self.reason = "off"
            return
        if wants_debug_files(cfg) or debug_trace.capturing():
            self.reason = _COMPILED_FOR_REAL
        else:
            try:
                self.reason = self._key(gm, list(example_inputs))
            except Exception as e:  # noqa: BLE001  (a cache never fails a compile)
                log.warning("mini_inductor: cannot compute the front cache key (%s: %s); going through AOT "
                            "autograd", type(e).__name__, e)
                self.key, self.reason = None, f"{type(e).__name__}: {e}"
        if self.key is None:
            schedule_log.info("no front cache key for this Dynamo graph (%s): through AOT autograd", self.reason)

    # ── the key ──────────────────────────────────────────────────────────────────────────────
    def _key(self, gm, example_inputs: list) -> str | None:
        """Set self.key (and self.params, self.num_outputs); the reason there is none, or None."""
        if not isinstance(gm, torch.fx.GraphModule):
            return f"a {type(gm).__name__}, not a GraphModule"
        if torch._C._is_any_autocast_enabled():
            return "autocast is on"
        ctx = torch._guards.TracingContext.try_get()
        if ctx is not None and getattr(ctx, "fakify_first_call", False):
            return "the first call returns fake outputs (fakify_first_call)"
        params = dict(gm.named_parameters(remove_duplicate=False))
        buffers = dict(gm.named_buffers(remove_duplicate=False))
        parts = [f"front format {FORMAT}", *graph_cache.compiler_key_parts(self.cfg),
                 repr(sorted(torch._functorch.config.get_config_copy().items())),
                 f"grad {torch.is_grad_enabled()} inference {torch.is_inference_mode_enabled()} autocast off",
                 gm.code]
        placeholders, symbolic = [], []
        for node in gm.graph.nodes:
            if node.op == "call_module":
                return f"it calls submodule {node.target}"
            if node.op == "get_attr" and node.target not in params and node.target not in buffers:
                return f"it reads attribute {node.target} (a constant or a subgraph), whose value the key cannot hold"
            if node.op == "placeholder":
                placeholders.append(node)
                value = node.meta.get("example_value")
                if isinstance(value, torch.SymInt):   # a size Dynamo passes (dynamic shapes)
                    symbolic.append(value.node.expr)
                    parts.append(f"{node.name} size {value.node.expr}")
                    continue
                if not isinstance(value, torch.Tensor):
                    return f"input {node.name} is a {type(value).__name__}, not a tensor or a size"
                if getattr(node.meta.get("grapharg"), "pass_arg_as_tensor", False):
                    # a Python number Dynamo passes as a 0-d tensor: its value is a ShapeEnv symbol (zf0),
                    # which AOT autograd may specialize on where an op needs a number (clamp's bound) with
                    # a guard Dynamo checks, kept with the entry like any guard added after the key (a hit
                    # without it served a = 1.5 the graph of a = 0.75's bound; review, session 34)
                    memo = getattr(value, "item_memo", None)
                    if not isinstance(memo, (torch.SymFloat, torch.SymInt)):
                        return (f"input {node.name} is a Python number passed as a tensor, whose value has no "
                                "symbol to guard on")
                    symbolic.append(memo.node.expr)
                    parts.append(f"{node.name} number {memo.node.expr}")
                sizes = [*value.shape, *value.stride(), value.storage_offset()]
                symbolic += [s.node.expr for s in sizes if isinstance(s, torch.SymInt)]
                static = (node.meta.get("tensor_dict") or {}).get("_dynamo_static_input_type")
                parts.append(f"{node.name} static={static!r} {graph_cache.tensor_meta(value)}")
            if node.op == "output":
                outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
                for out in outs:
                    value = out.meta.get("example_value") if isinstance(out, torch.fx.Node) else out
                    if not isinstance(value, torch.Tensor) or type(value).__name__ != "FakeTensor":
                        return f"output {out} is not a plain tensor"
                self.num_outputs = len(outs)
        if len(placeholders) != len(example_inputs):
            return f"{len(placeholders)} placeholders for {len(example_inputs)} inputs"
        reason = self._shape_facts(ctx, symbolic, parts)
        if reason is not None:
            return reason
        named = [*params.items(), *buffers.items(), *((f"input {i}", x) for i, x in enumerate(example_inputs))]
        seen: set[int] = set()
        storages: dict[int, str] = {}
        for name, x in named:
            if isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool):
                continue     # a size: keyed by its placeholder's expression above
            if type(x) not in _PLAIN_TENSORS:
                return f"{name} is a {type(x).__name__}, not a plain tensor"
            if x.layout != torch.strided:
                return f"{name} has layout {x.layout}"
            if id(x) in seen:
                return f"{name} is passed twice"
            seen.add(id(x))
            # inputs sharing memory (two views of one tensor): AOT autograd traces them as such (a mutation
            # through one shows in the other); an entry made for separate tensors must not serve them
            storage = x.untyped_storage()._cdata
            if storage in storages:
                return f"{name} shares memory with {storages[storage]}"
            storages[storage] = name
            dynamic_input = self.shape_env is not None and name.startswith("input ")   # keyed by its placeholder's sizes
            shown = "" if dynamic_input else graph_cache.tensor_meta(x)
            parts.append(f"{name}: {type(x).__name__} {shown} requires_grad={x.requires_grad} "
                         f"leaf={x.is_leaf} conj={x.is_conj()} neg={x.is_neg()} inference={x.is_inference()}")
        self.training = torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                                         for _, x in named)
        if self.training and front_autograd.compiled_autograd_on():
            return "compiled autograd is on (it traces the backward's FX graph, which an entry does not hold)"
        if self.training and front_autograd.inlined_saved_tensor_hooks():
            return "saved-tensor hooks AOT autograd inlines into the graphs are active"
        self.params = [*params.values(), *buffers.values()]
        self.num_inputs = len(named)
        self.key = hashlib.sha256("\n".join(parts).encode()).hexdigest()
        return None

    def _shape_facts(self, ctx, symbolic: list, parts: list) -> str | None:
        """A dynamic graph's key holds what its ShapeEnv knows of its sizes' symbols (their ranges) and
        every guard it holds: a compile under other facts may decide otherwise. The guards' count is
        kept, so that a compile that adds any (AOT autograd or ours) writes no entry: a hit would not
        add them for Dynamo to check. A static graph: nothing."""
        if not symbolic:
            return None
        env = getattr(getattr(ctx, "fake_mode", None), "shape_env", None) if ctx is not None else None
        if env is None:
            return "symbolic sizes without a ShapeEnv"
        names = {s for e in symbolic for s in getattr(e, "free_symbols", ())}
        parts += sorted(f"range {s} {r.lower} {r.upper}" for s, r in env.var_to_range.items() if s in names)
        guards = list(getattr(env, "guards", ()))
        parts += [f"guard {getattr(g, 'expr', g)}" for g in guards]
        self.shape_env, self.guards_at_key = env, len(guards)
        return None

    def guards_added(self) -> tuple[tuple, str | None]:
        """(the guards the compile added to a dynamic graph's ShapeEnv after the key, for the entry; why
        they cannot be kept, or None)."""
        trees, reason = shape_guards.pack(self.shape_env, self.guards_at_key)
        return tuple(trees), reason

    def static_inference_key(self) -> str | None:
        """The key, for Dynamo's cache (dynamo_cache.py), which keeps static inference graphs only."""
        return self.key if not self.training and self.shape_env is None else None

    # ── a hit ────────────────────────────────────────────────────────────────────────────────
    def load(self) -> Callable | None:
        """The callable Dynamo gets, from the entry and the ATen-graph entry it names; None on a miss."""
        if self.key is None:
            return None
        return serve(self.cfg, self.key, self.num_inputs, self.params, self.began, training=self.training,
                     shape_env=self.shape_env)

    # ── a miss: watch AOT autograd, then write ────────────────────────────────────────────────
    def watch(self, kind: str, compiler: Callable) -> Callable:
        """`compiler` (compile_graph for `kind`), noting what it compiled for `store`."""
        if self.key is None:
            if self.reason == "off" or self.reason == _COMPILED_FOR_REAL:
                return compiler

            def unkeyed(gm, example_inputs, *args, **kwargs):   # its record says why a warm start traces it
                compiled = compiler(gm, example_inputs, *args, **kwargs)
                self.names.append(getattr(compiled, "name", ""))
                self._refused(f"no front cache key ({self.reason})", say=False)   # (said above)
                return compiled
            return unkeyed

        def watched(gm, example_inputs, *args, **kwargs):
            compiled = compiler(gm, example_inputs, *args, **kwargs)
            self.names.append(getattr(compiled, "name", ""))
            try:
                self.compiled.append(self._observe(kind, gm, example_inputs, compiled))
                if kind == "backward" and self.stored:   # AOT autograd's lazy backward: after store()
                    self._store_training()
            except Exception as e:  # noqa: BLE001  (a cache never fails a compile)
                self.compiled.append(_Compiled(kind, f"cannot inspect it ({type(e).__name__}: {e})"))
            return compiled
        return watched

    def _observe(self, kind: str, gm, example_inputs, compiled) -> _Compiled:
        if kind != "inference":
            return self._observe_training(kind, gm, compiled)
        if type(compiled) is not CompiledGraph:
            return _Compiled(kind, f"the inference graph became a {type(compiled).__name__}")
        if compiled.generator_idxs or compiled.sizes_key is not None:
            return _Compiled(kind, "the inference graph has generator inputs or capture sizes")
        meta, reason = self._metadata(by_torch=True)
        reason = _aten_graph_reason(gm) or reason
        try:
            constants = constant_values.pack(compiled.constants)
        except ValueError as e:
            reason = reason or f"its constants are not kept ({e})"
        if reason is not None:
            return _Compiled(kind, reason)
        wrapped = runtime_wrapping(meta) is not None   # the wrapper has work: torch's, from the metadata
        # the key the graph was compiled under: a pass before it (layout_opt.py) may have changed the graph
        graph_key = getattr(compiled, "graph_key", None) or graph_cache.graph_key(gm, example_inputs, self.cfg)
        dims = tuple(None if o.dynamic_dims is None else tuple(sorted(o.dynamic_dims)) for o in meta.output_info) \
            if meta.dynamic_outputs else ()
        entry = FrontEntry(graph_key, compiled.name,
                           sum(1 for n in gm.graph.nodes if n.op == "call_function"),
                           self.num_inputs, self.num_outputs,
                           tuple(compiled.static_input_idxs), dims, constants=constants)
        return _Compiled(kind, None, entry, meta=meta if wrapped else None)

    def _observe_training(self, kind: str, gm, compiled) -> _Compiled:
        if not self.training:
            return _Compiled(kind, f"AOT autograd made a {kind} graph for a graph compiled without autograd")
        part, reason = front_autograd.observe(kind, gm, compiled)
        reason = reason or _aten_graph_reason(gm)
        if reason is not None:
            return _Compiled(kind, reason)
        if kind == "backward":   # the forward's metadata (the lazy backward compiles under the forward's context)
            forward = next((c for c in self.compiled if c.kind == "forward"), None)
            if forward is None or forward.meta is None:
                return _Compiled(kind, "no forward graph with metadata before it")
            return _Compiled(kind, None, part=part, inputs_to_detach=front_autograd.inputs_to_detach(gm, forward.meta))
        meta, reason = self._metadata(by_torch=True)
        if reason is not None:
            return _Compiled(kind, reason)
        saved = front_autograd.saved_sizes(gm, meta)
        if getattr(meta, "num_symints_saved_for_bw", saved) != saved:   # a layout of outputs we do not know
            return _Compiled(kind, f"AOT autograd counts {meta.num_symints_saved_for_bw} saved sizes, the "
                                   f"forward graph {saved}")
        return _Compiled(kind, None, part=part, meta=meta, saved_sizes=saved)

    def _metadata(self, by_torch: bool = False):
        """AOT autograd's metadata of the graph being compiled, and why it rules out an entry (or None;
        `by_torch`: see runtime_wrapping)."""
        ctx = torch._guards.TracingContext.try_get()
        meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
        reason = runtime_wrapping(meta, by_torch)
        if reason is None and getattr(ctx, "fakify_first_call", False):
            reason = "the first call returns fake outputs (fakify_first_call)"
        if reason is None and torch._C._is_any_autocast_enabled():
            reason = "autocast is on"
        if reason is None and len(meta.output_info) != self.num_outputs:
            reason = f"{len(meta.output_info)} ATen graph outputs for {self.num_outputs} Dynamo graph outputs"
        if reason is None and len(meta.input_info) != self.num_inputs:   # AOT merged or split inputs
            reason = f"AOT autograd's metadata has {len(meta.input_info)} inputs for the graph's {self.num_inputs}"
        return meta, reason

    def _store_training(self) -> str | None:
        """A training entry once AOT autograd compiled a forward and its backward; its path, or None."""
        kinds = [c.kind for c in self.compiled]
        if kinds == ["forward"]:
            return None     # the backward is compiled at the first backward: written then
        reason = next((c.reason for c in self.compiled if c.reason), None)
        if reason is None and kinds != ["forward", "backward"]:
            reason = f"AOT autograd compiled {kinds}, not one forward and one backward graph"
        if reason is None:
            forward, backward = self.compiled
            reason = front_autograd.metadata_reason(forward.meta)
            missing = [p.graph for p in (forward.part, backward.part)
                       if not os.path.exists(graph_cache.entry_path(self.cfg.cache_dir, p.graph_key))]
            reason = reason or (f"the ATen-graph entry of {missing[0]} was not written" if missing else None)
            guards, why = self.guards_added()
            reason = reason or why
        if reason is None:
            try:
                packed = front_autograd.pack_metadata(forward.meta)
            except Exception as e:  # noqa: BLE001  (a field pickle cannot take: no entry, never a failed compile)
                reason = f"its metadata cannot be pickled ({type(e).__name__}: {e})"
        if reason is not None:
            self._refused(f"no front cache entry ({reason})")
            self.compiled = [_Compiled("done", reason)]   # nothing more to write for this graph
            return None
        entry = front_autograd.TrainingEntry(forward.part, backward.part, forward.saved_sizes, self.num_inputs,
                                             self.num_outputs, backward.inputs_to_detach, packed, guards)
        self.compiled = [_Compiled("done", "written")]
        path = files.write(entry_path(self.cfg.cache_dir, self.key, guards), entry.to_json(), "front cache entry")
        if path:
            schedule_log.info("%s, %s: front cache training entry written at %s (a warm start skips AOT autograd)",
                              forward.part.graph, backward.part.graph, path)
        return path

    def _refused(self, why: str, say: bool = True) -> None:
        """No entry for this Dynamo graph: logged, and on the records of the graphs compiled under it
        (`GraphRecord.warm_start`: a warm start runs AOT autograd for them again)."""
        if say:
            schedule_log.info("%s for key %s…: through AOT autograd at a warm start too", why, self.key[:12])
        for record in metrics.compiled_graphs[self.first_record:]:
            if record.name in self.names:
                record.warm_start = f"AOT autograd again: {why}"

    def store(self) -> str | None:
        """After AOT autograd returned: write the entry when the call qualifies; its path, or None
        (a training entry is written later, once the backward is compiled)."""
        if self.key is None:
            return None
        self.stored = True
        kinds = [c.kind for c in self.compiled]
        if self.training and kinds != ["inference"]:
            self._store_training()
            return None     # Dynamo's cache (dynamo_cache.py) keeps inference graphs only
        # (with grad on, AOT autograd makes an inference graph where no output requires grad: an argmax of
        # a model's logits; the entry says so, and only such an entry serves a call that needs grad)
        if kinds != ["inference"]:
            reason = f"AOT autograd compiled {kinds or 'nothing'}, not one inference graph"
        else:
            reason = self.compiled[0].reason
        guards, why = self.guards_added()
        reason = reason or why
        entry = dataclasses.replace(self.compiled[0].entry, guards=guards, under_grad=self.training) \
            if reason is None else None
        if entry is not None and self.compiled[0].meta is not None:   # (made runtime-safe once AOT returned)
            try:
                entry = dataclasses.replace(entry, metadata=front_autograd.pack_metadata(self.compiled[0].meta))
            except Exception as e:  # noqa: BLE001  (a field pickle cannot take: no entry)
                entry, reason = None, f"its metadata cannot be pickled ({type(e).__name__}: {e})"
        if entry is not None and not os.path.exists(graph_cache.entry_path(self.cfg.cache_dir, entry.graph_key)):
            reason = "its ATen-graph entry was not written"
        if reason is not None:
            self._refused(f"no front cache entry ({reason})")
            return None
        path = files.write(entry_path(self.cfg.cache_dir, self.key, entry.guards), entry.to_json(),
                           "front cache entry")
        if path:
            schedule_log.info("%s: front cache entry written at %s (a warm start skips AOT autograd)",
                              entry.graph, path)
        return path


def serve(cfg: Config, key: str, num_inputs: int, params: list[torch.Tensor], began: float,
          label: str = LABEL, training: bool = False, shape_env=None) -> Callable | None:
    """The callable for front cache entry `key` (a graph of `num_inputs` inputs, `params` the graph
    module's own parameters and buffers among them), or None when the entry or the compiled graph it
    names cannot be loaded (logged). `training`: the graph needs autograd (its key says so, and only a
    training entry serves it). `shape_env`: a dynamic graph's, to which a hit adds the entry's guards.
    Front.load, and dynamo_cache.py for a graph from Dynamo's cache.

    A key has one entry per set of guards its compiles added (`entry_path`): the first whose guards
    hold at this call's sizes serves it."""
    found = None
    for path, entry in candidates(cfg.cache_dir, key):
        if isinstance(entry, front_autograd.TrainingEntry) != training and not getattr(entry, "under_grad", False):
            log.warning("mini_inductor: front cache entry %s is for %s, the graph is compiled %s; ignoring it",
                        path, "inference" if training else "training",
                        "for training" if training else "without autograd")
        elif entry.num_inputs != num_inputs:
            log.warning("mini_inductor: front cache entry %s expects %d inputs, the graph has %d; ignoring it",
                        path, entry.num_inputs, num_inputs)
        else:
            guards, why = shape_guards.check(shape_env, list(entry.guards))
            if why is None:
                found = path, entry, guards
                break
            schedule_log.info("front cache entry %s not used (%s)", path, why)
    if found is None:
        schedule_log.info("front cache miss (key %s…): through AOT autograd", key[:12])
        return None
    path, entry, guards = found
    if isinstance(entry, front_autograd.TrainingEntry):
        fn = _serve_training(entry, cfg, key, path, params, began, label)
        if fn is not None:
            shape_guards.install(shape_env, guards)
        return fn
    meta = _entry_metadata(entry, path) if entry.metadata else None
    if entry.metadata and meta is None:
        return None
    compiled = _rebuild(entry.graph_key, "inference", entry, cfg, began, label)
    if compiled is None:
        schedule_log.info("front cache entry %s… names ATen-graph entry %s…, which cannot be loaded: through "
                          "AOT autograd", key[:12], entry.graph_key[:12])
        return None
    if meta is not None:
        try:
            fn = front_autograd.inference_function(compiled, meta, len(params))
        except Exception as e:  # noqa: BLE001  (torch's runtime wrappers changed: a miss, never a failed compile)
            metrics.compiled_graphs.remove(metrics.compiled_graphs[-1])
            log.warning("mini_inductor: cannot build AOT autograd's runtime for front cache entry %s (%s: %s); "
                        "going through AOT autograd", path, type(e).__name__, e)
            return None
    shape_guards.install(shape_env, guards)
    schedule_log.info("%s: front cache hit (key %s…, compiled earlier as %s): AOT autograd skipped",
                      compiled.name, key[:12], entry.graph)
    if meta is not None:
        return front_autograd.as_dynamo_callable(fn, params)
    return disable(_aot_runtime(compiled, params, entry.num_outputs, entry.dynamic_dims),
                   reason="mini_inductor's generated graph")


def _entry_metadata(entry, path: str):
    """An entry's AOT autograd metadata, read back and checked; None (a warning) where it cannot be used."""
    try:
        meta = front_autograd.unpack_metadata(entry.metadata)
        reason = runtime_wrapping(meta, by_torch=True) or front_autograd.metadata_reason(meta)
    except Exception as e:  # noqa: BLE001  (torch's metadata classes changed, a damaged pickle: a miss)
        reason = f"its metadata cannot be read ({type(e).__name__}: {e})"
    if reason is not None:
        log.warning("mini_inductor: front cache entry %s: %s; going through AOT autograd", path, reason)
        return None
    return meta


def _serve_training(entry: front_autograd.TrainingEntry, cfg: Config, key: str, path: str,
                    params: list[torch.Tensor], began: float, label: str) -> Callable | None:
    """A training entry's forward and backward graphs inside AOT autograd's autograd.Function."""
    meta = _entry_metadata(entry, path)
    if meta is None:
        return None
    first = len(metrics.compiled_graphs)
    forward = _rebuild(entry.forward.graph_key, "forward", entry.forward, cfg, began, label)
    backward = forward and _rebuild(entry.backward.graph_key, "backward", entry.backward, cfg, began, label)
    if backward is None:
        del metrics.compiled_graphs[first:]   # the compile that follows records them
        schedule_log.info("front cache training entry %s… names an ATen-graph entry that cannot be loaded: "
                          "through AOT autograd", key[:12])
        return None
    try:
        fn = front_autograd.autograd_function(forward, backward, meta, entry.inputs_to_detach, len(params),
                                              entry.forward.static_input_idxs, entry.num_saved_sizes)
    except Exception as e:  # noqa: BLE001  (torch's runtime wrappers changed: a miss, never a failed compile)
        del metrics.compiled_graphs[first:]
        log.warning("mini_inductor: cannot build AOT autograd's runtime for front cache entry %s (%s: %s); "
                    "going through AOT autograd", path, type(e).__name__, e)
        return None
    schedule_log.info("%s, %s: front cache hit (key %s…, compiled earlier as %s, %s): AOT autograd skipped",
                      forward.name, backward.name, key[:12], entry.forward.graph, entry.backward.graph)
    return front_autograd.as_dynamo_callable(fn, params)


def _rebuild(graph_key: str, kind: str, part, cfg: Config, began: float, label: str) -> CompiledGraph | None:
    """The graph an entry names (`part`: a FrontEntry, or a training entry's GraphPart), rebuilt as a
    disk hit is (lookup.rebuild) but without the ATen graph, and recorded under `label`; None when it
    cannot be loaded."""
    name = metrics.graph_name(kind)
    record = metrics.GraphRecord(name, num_fx_nodes=part.num_fx_nodes)
    install_interpreter_shims()
    graph_args = dict(kind=kind, static_input_idxs=tuple(part.static_input_idxs), cfg=cfg,
                      sizes_key=None, generator_idxs=(), param_grad_idxs=tuple(getattr(part, "param_grad_idxs", ())))
    try:
        constants = constant_values.unpack(getattr(part, "constants", {}))
    except (ValueError, RuntimeError) as e:   # (checked as read: a device this machine lacks)
        schedule_log.info("%s: the entry's constants cannot be made (%s)", name, e)
        return None
    compiled = lookup.rebuild(graph_key, name, record, graph_args, constants, label=label, check_guards=False)
    if compiled is None:
        return None
    record.compile_seconds = time.perf_counter() - began
    metrics.compiled_graphs.append(record)
    log.info("%s", record.summary())
    return compiled


def runtime_wrapping(meta, by_torch: bool = False) -> str | None:
    """What AOT autograd's inference runtime wrapper has to do for a graph with this metadata (torch's
    ViewAndMutationMeta) that a hit could not, or None.

    `by_torch`: the hit runs torch's own runtime wrappers, built from the metadata (a training entry:
    front_autograd.py), which write mutated inputs' new values back and rebuild outputs that alias
    inputs or intermediates, as after a trace; only what they cannot rebuild from the metadata alone
    is refused. Otherwise (an inference entry, `_aot_runtime`) the wrapper must have nothing to do.

    A field these checks read that the installed torch lacks means "not trivial"; fields of newer
    features (async collective inputs, graph-safe RNG states) count as the feature being absent."""
    if meta is None:
        return "no AOT autograd metadata"
    try:
        for i, info in enumerate(meta.input_info):
            for flag in ("mutates_metadata", "mutates_storage_metadata", "mutation_inductor_storage_resize",
                         *(() if by_torch else ("mutates_data",))):
                if getattr(info, flag):
                    return f"input {i} {flag.replace('_', ' ')}"
        if not by_torch and (meta.mutated_inp_runtime_indices or meta.mutated_graph_handled_indices):
            return "inputs are mutated"
        for i, out in enumerate(meta.output_info):
            kind = out.output_type.name
            if kind != "non_alias" and not by_torch:
                return f"output {i} is {kind.replace('_', ' ')}"
            if kind == "custom_function_view":
                return f"output {i} is a view made by a custom autograd.Function"
        if meta.num_intermediate_bases and not by_torch:
            return "outputs alias intermediates"
        if len(meta.tokens):
            return "effect tokens"
        if meta.is_rng_op_functionalized or meta.num_outputs_rng_offset:
            return "functionalized RNG"
        if meta.grad_enabled_mutation is not None:
            return "the graph changes grad mode"
        for m in [*meta.subclass_inp_meta, *meta.subclass_fw_graph_out_meta]:
            if not isinstance(m, int) and type(m).__name__ != "PlainTensorMeta":
                return f"a tensor subclass ({type(m).__name__})"
        if getattr(meta, "act_input_indices", None) or getattr(meta, "num_graphsafe_rng_states", 0):
            return "async collective inputs or graph-safe RNG states"
    except AttributeError as e:
        return f"AOT autograd metadata without a field this check reads ({e})"
    return None


def _aten_graph_reason(gm: torch.fx.GraphModule) -> str | None:
    """Why the ATen graph itself rules out an entry: a submodule it reads (a higher-order op's), higher
    order ops, custom ops other than ours (the runtime wrapper checks their aliasing at the first call).
    Its tensor constants are kept with the entry (constant_values.py)."""
    for node in gm.graph.nodes:
        if node.op == "get_attr" and not isinstance(getattr(gm, node.target, None), torch.Tensor):
            return f"the ATen graph reads {node.target}, not a tensor constant"
        if node.op != "call_function":
            continue
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            return f"higher-order op {node.target}"
        namespace = getattr(node.target, "namespace", None)
        if isinstance(node.target, torch._ops.OpOverload) and namespace not in _OWN_NAMESPACES:
            return f"custom op {node.target}"
    return None


def _aot_runtime(compiled: CompiledGraph, params: list[torch.Tensor], num_outputs: int,
                 dynamic_dims: tuple = ()) -> Callable:
    """What aot_module_simplified's forward and AOT's inference RuntimeWrapper do when the metadata is
    trivial: the graph module's parameters and buffers before the inputs, one boxed call (the list is
    consumed) with grad mode off, the outputs as a list of the expected length, a dynamic graph's
    outputs marked with the dims Dynamo is to treat as dynamic. No autocast change: entries are only
    written and read with autocast off."""
    from torch._functorch._aot_autograd import runtime_wrappers

    mark = getattr(runtime_wrappers, "mark_dynamo_propagated_dynamic_indices", None)
    marks = [(i, set(d)) for i, d in enumerate(dynamic_dims) if d is not None] if mark is not None else []

    def forward(*args: Any) -> list:
        full = [*params, *args]
        grad = torch.is_grad_enabled()
        try:
            if grad:
                torch._C._set_grad_enabled(False)
            outs = compiled(full)
        finally:
            if grad:
                torch._C._set_grad_enabled(True)
        if isinstance(outs, tuple):
            outs = list(outs)
        elif not isinstance(outs, list):
            outs = [outs]
        if len(outs) != num_outputs:
            raise AssertionError(f"mini_inductor: {compiled.name} returned {len(outs)} outputs, "
                                 f"its front cache entry expects {num_outputs}")
        for i, dims in marks:
            mark(outs[i], dims)
        return outs
    return forward


# ── the files ────────────────────────────────────────────────────────────────────────────────
def entry_path(cache_dir: str, key: str, guards: tuple = ()) -> str:
    """Where the entry of `key` lives: front/ab/<key>.json, or for one whose compile added guards
    front/ab/<key>.<hash of the guards>.json (a size that fails one set compiles again and writes
    another beside it, rather than replacing it)."""
    if guards:
        key = f"{key}.{files.sha256(json.dumps(list(guards)))[:16]}"
    return files.keyed_path(cache_dir, "front", key)


def load_entry(cache_dir: str, key: str) -> FrontEntry | front_autograd.TrainingEntry | None:
    """The entry at `key` (a path's stem), or None: missing, or damaged or of an old format (deleted
    with a warning)."""
    return files.read(entry_path(cache_dir, key), "front cache entry", "going through AOT autograd", _parse_entry)


def candidates(cache_dir: str, key: str) -> list[tuple[str, FrontEntry | front_autograd.TrainingEntry]]:
    """(path, entry) of every entry of `key`: the one without guards first, then those with guards."""
    plain = entry_path(cache_dir, key)
    guarded = sorted(glob.glob(os.path.join(glob.escape(os.path.dirname(plain)), f"{key}.*.json")))
    found = []
    for path in ([plain] if os.path.exists(plain) else []) + guarded:
        entry = files.read(path, "front cache entry", "going through AOT autograd", _parse_entry)
        if entry is not None:
            found.append((path, entry))
    return found


def _parse_entry(data: bytes) -> FrontEntry | front_autograd.TrainingEntry:
    text = data.decode("utf-8")
    parsed = json.loads(text)
    if isinstance(parsed, dict) and parsed.get("kind") == front_autograd.KIND:
        return front_autograd.TrainingEntry.from_dict(parsed)
    return FrontEntry.from_json(text)
