"""Running compiled graphs: the callable that aot_autograd receives.

    CompiledGraph     a generated module's `call`, its kernels launched through launch/ and its
                      cudagraph-safe partitions run from CUDA-graph trees (cudagraphs/)
    EagerGraph        a graph that runs as the FX module itself

What generated modules import by path stays at this level: module_spec.py, triton_helpers.py,
interpreter.py, example_inputs.py (and rng.py, the seed layout lowering and CompiledGraph share).
"""
from __future__ import annotations

import types
import warnings
from typing import Callable

import torch

from ..config import interpreting
from ..fx_source import op_name as _op_name, source_line as _source_line
from .cudagraphs.cublas_workspace import graphed_workspace_bytes
from .cudagraphs.gradients import GradientsOutOfPool, current_backward_edges
from .cudagraphs.trees import TreeFunction, backward_ran, note_compiled_shape, note_gradient_source
from .cudagraphs.utils import FunctionInfo, have_cuda_graph_apis, log_skip, perf_log
from .launch.launcher import accelerate
from .module_spec import PartitionSpec, UnsafePartition
from .rng import as_seed, as_state, checkpointed_random_ops, draw_seed, seed_state_inputs


class CompiledGraph:
    """Calls the generated module's `call(args)` (boxed: the argument list is consumed).

    Key attributes: `name`, `source_path`, `module`, `kind` ("inference", "forward", "backward"),
    `tree_functions` (the partitions that run inside CUDA-graph trees; empty when they are off),
    `sizes_key` (for a static specialization made under `cudagraph_capture_sizes`: its dynamic sizes),
    `graphed_workspace_bytes` (the cuBLAS workspace a warm-up or recording allocates in the pool;
    0 without trees: runtime/cudagraphs/cublas_workspace.py).
    On CUDA, every partition function of the module is routed through its device's CUDA-graph tree
    (runtime/cudagraphs/trees.py) unless `cfg.cudagraphs` is False.
    """

    _boxed_call = True

    def __init__(self, name: str, module: types.ModuleType, source_path: str, constants: dict[str, torch.Tensor],
                 *, kind: str = "inference", static_input_idxs: tuple[int, ...] = (), cfg=None, sizes_key=None,
                 generator_idxs: tuple[int, ...] = (), param_grad_idxs: tuple[int, ...] = (),
                 seed_state_idxs: tuple[tuple[int, torch.device], ...] = ()):
        # Also an instance attribute: Dynamo wraps the backward in disable(), whose functools.wraps copies
        # the instance's __dict__ only; without it aot_autograd would unpack the list into *args, and the
        # wrapper could never let go of an input before the call returns.
        self._boxed_call = True
        self.name = name
        self.graph_key: str | None = None    # the graph-cache key it was compiled or loaded under (pipeline.py)
        # arguments that are generators of checkpointed random ops: each call passes a seed drawn
        # from the generator instead, so the graph (and a CUDA graph's replay) reads a fresh seed
        self.generator_idxs = tuple(generator_idxs)
        self._seeds: dict[int, torch.Tensor] = {}
        # a backward's inputs that take the seed a compiled forward saved for a checkpointed random op
        # on a GPU, or a generator state if that forward ran eagerly (runtime/rng.py)
        self.seed_state_idxs = tuple(seed_state_idxs)
        self.module = module
        self.source_path = source_path
        self.constants = dict(constants)
        self.kind = kind
        self.static_input_idxs = tuple(static_input_idxs)
        self.param_grad_idxs = tuple(param_grad_idxs)   # a backward's outputs that are parameters' gradients
        self._grads_out_of_pool = GradientsOutOfPool(self.param_grad_idxs)
        self._all_grads_out = self._grads_out_of_pool   # every parameter's, adopted or not
        self._adopted: frozenset[int] = frozenset()   # gradients autograd adopts in the pool (_use_trees)
        self.tree_functions: list = []
        self.device: int | None = None
        # Also an instance attribute: aot_autograd wraps the backward with functools.wraps, which copies the
        # instance's __dict__ but not class attributes, and without the flag it would call us unboxed
        # (with a warning) and hold every saved activation until the whole backward returns.
        self._boxed_call = True
        self.sizes_key = sizes_key   # a static specialization of a graph with dynamic dims (capture sizes)
        self.graphed_workspace_bytes = 0
        accelerate(module, static=None if cfg is None else cfg.static_launch)
        self._call: Callable = module.call
        if cfg is not None and cfg.cudagraphs:
            self._use_trees(cfg)

    def _use_trees(self, cfg) -> None:
        partitions = getattr(self.module, "PARTITIONS", {})
        unsafe = getattr(self.module, "UNSAFE_PARTITIONS", {})
        # a graph that is all unsafe ops has no partition to graph; it is a skip when partitioning is off
        whole_graph_skip = bool(unsafe) and not cfg.cudagraph_partition
        if interpreting() or not (partitions or whole_graph_skip) or not have_cuda_graph_apis() \
                or not torch.cuda.is_available():
            return
        if cfg.cudagraph_capture_sizes is not None and self.sizes_key is None:
            # as in Inductor: a graph without dynamic dims has no sizes to match the listed ones
            log_skip("a graph without dynamic dims while cudagraph_capture_sizes is set", self.name, cfg)
            return
        devices = {torch.device(spec.device) for spec in self.module.INPUT_SPECS if spec.device is not None}
        devices |= {c.device for c in self.constants.values()}
        cuda = sorted({d.index or 0 for d in devices if d.type == "cuda"})
        if len(cuda) > 1:
            log_skip(f"multiple devices: {', '.join(f'cuda:{i}' for i in cuda)}", self.name, cfg)
            return
        if whole_graph_skip:
            if cuda or partitions:   # a CPU graph was never going to be graphed: nothing skipped
                first = next(iter(unsafe.values()))
                log_skip(f"incompatible op: {first.reason} (cudagraph_partition is off)",
                         first.source or self.name, cfg)
            return
        self.device = cuda[0] if cuda else torch.cuda.current_device()
        names = self.module.INPUT_NAMES
        static_names = {names[i] for i in self.static_input_idxs if i < len(names) and names[i]}
        static_names |= set(self.constants)
        cuda_constants = [c for c in self.constants.values() if c.is_cuda]
        scope = dict(vars(self.module))
        adopting = self.kind == "backward" and cfg.cudagraph_adopt_gradients
        params, adopted = set(self.param_grad_idxs), set()
        for pname, spec in partitions.items():
            inputs = spec.inputs
            pairs = [(j, m) for j, m in getattr(spec, "returned", ()) if m in params] if adopting else []
            adopted |= {m for _, m in pairs}
            info = FunctionInfo(fn=getattr(self.module, pname), name=f"{self.name}.{pname}", device=self.device,
                                mode=self.kind, static_idxs=tuple(j for j, n in enumerate(inputs) if n in static_names),
                                input_names=list(inputs), output_traces=list(spec.traces),
                                input_traces=list(spec.input_traces),
                                constants=cuda_constants, dynamic=bool(getattr(self.module, "SIZE_SYMBOLS", ())),
                                adoptable=frozenset(j for j, _ in pairs))
            scope[pname] = TreeFunction(info, cfg)
            self.tree_functions.append(scope[pname])
        # the adopted gradients are neither copied out of the pool nor held (held, autograd would copy them)
        self._adopted = frozenset(adopted)
        self._grads_out_of_pool = GradientsOutOfPool(tuple(i for i in self.param_grad_idxs if i not in adopted))
        self._log_partitions(partitions, unsafe)
        self.graphed_workspace_bytes = graphed_workspace_bytes(partitions, self.device)
        call = self.module.call
        self._call = types.FunctionType(call.__code__, scope, call.__name__, call.__defaults__)
        compile_id = torch._guards.CompileContext.current_compile_id()
        note_compiled_shape(getattr(compile_id, "frame_id", None), self.kind,
                            tuple(tuple(spec.size or ()) for spec in self.module.INPUT_SPECS),
                            cfg.cudagraph_dynamic_shape_warn_limit)

    def _log_partitions(self, graphed: dict[str, PartitionSpec], unsafe: dict[str, UnsafePartition]) -> None:
        """Say why the graph was cut (once per compiled graph): each run kept out of CUDA graphs with
        its reason and source line, then how many partitions there are. Not a skip: the rest is graphed."""
        if not unsafe:
            return
        for run in unsafe.values():
            msg = f"cudagraph partition due to {run.reason}"
            if run.source:
                msg += f". Found from : \n {run.source}"
            perf_log.warning(msg)
        perf_log.warning("cudagraph partition into %d partitions (%s: %d graphed, %d run without graphs)",
                         len(graphed) + len(unsafe), self.name, len(graphed), len(unsafe))

    def _seed(self, i: int, generator: torch.Generator) -> torch.Tensor:
        """This call's seed for argument i, written into one tensor per argument: a CUDA graph reads it
        in place at a fixed address (an address-stable input), rather than copying a new tensor in."""
        seed = self._seeds.get(i)
        if seed is None or seed.device != generator.device:
            seed = self._seeds[i] = torch.empty(1, dtype=torch.int64, device=generator.device)
        return draw_seed(generator, out=seed)

    def __call__(self, *args):
        # boxed (one list, consumed) or plain positional tensors
        args = args[0] if len(args) == 1 and isinstance(args[0], list) else list(args)
        for i in self.generator_idxs:
            args[i] = self._seed(i, args[i])
        for i, device in self.seed_state_idxs:
            args[i] = as_seed(args[i], device)
        self._held_grads = None   # last step's gradients: released before this replay overwrites them
        out = self._call(args, self.constants)
        if self.kind == "backward":
            backward_ran(self.device)   # a backward clears the pending flag, graphed or not
        if self.kind == "backward" and self.device is not None:
            adopted, mover = self._adopted, self._grads_out_of_pool
            if adopted:
                # autograd adopts these in the pool; the tree moves each `.grad` out should it outlive
                # the path, finding the parameters through this call's autograd node (gradients.py).
                # Without one (outside autograd's engine) they are copied out with the rest.
                edges = current_backward_edges()
                if edges is not None:
                    note_gradient_source(self.device, edges)
                else:
                    adopted, mover = frozenset(), self._all_grads_out
            out, moved = mover(out)
            # The other gradients may be views of pool memory; held twice here until the next backward,
            # autograd copies them into `.grad` rather than adopting memory a later replay overwrites.
            self._held_grads = [(t, t) for i, t in enumerate(out) if isinstance(t, torch.Tensor)
                                and i not in moved and i not in adopted]
        return out


def eager_graph_skip(gm: torch.fx.GraphModule, reason: str, dynamic: bool) -> tuple[str, str | None] | None:
    """Why a graph with CUDA inputs that runs eagerly (it gets no generated code) also runs without
    CUDA graphs, and the user line to quote; None for a graph without CUDA inputs.

    `dynamic`: the graph has symbolic sizes; the line is that of the first op reading such an input.
    Otherwise a node with data-dependent output sizes names the op (as "incompatible op ..."), else
    `reason` is quoted as it is.
    """
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    vals = [n.meta.get("val") for n in placeholders]
    if not any(isinstance(v, torch.Tensor) and v.device.type == "cuda" for v in vals):
        return None
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    if dynamic:
        symbolic = {p for p, v in zip(placeholders, vals) if isinstance(v, torch.SymInt) or (
            isinstance(v, torch.Tensor) and any(not isinstance(s, int) for s in v.shape))}
        culprit = next((n for n in calls if symbolic & set(n.all_input_nodes) and _source_line(n)), None)
        text = "graph with symbolic shapes inputs"
    else:
        culprit = next((n for n in calls if free_unbacked_symbols(n.meta.get("val"))), None)
        text = f"incompatible op {_op_name(culprit.target)} ({reason})" if culprit is not None else reason
    culprit = culprit or next((n for n in calls if _source_line(n)), None)
    return text, (_source_line(culprit) or None) if culprit is not None else None


def log_eager_graph_skip(gm: torch.fx.GraphModule, name: str, reason: str, dynamic: bool, cfg) -> None:
    """A graph that runs eagerly on a GPU with CUDA graphs on: a logged, counted skip (once per graph)."""
    if not cfg.cudagraphs or interpreting() or not have_cuda_graph_apis():
        return
    skip = eager_graph_skip(gm, reason, dynamic)
    if skip is not None:
        log_skip(skip[0], skip[1] or name, cfg)


class EagerGraph:
    """A graph that runs as the FX module itself (no GPU and no interpreter, or an error fallback)."""

    _boxed_call = True

    def __init__(self, name: str, gm: torch.fx.GraphModule, reason: str):
        self._boxed_call = True   # see CompiledGraph
        self.name = name
        self.gm = gm
        self.reason = reason
        self._seed_states = seed_state_inputs(gm)
        seeded = checkpointed_random_ops(gm)
        if seeded:
            # its twin (forward or backward) may have been compiled, with the generated Philox code
            warnings.warn(f"mini_inductor: graph {name} runs eagerly ({reason}) and holds random ops of "
                          f"activation-checkpointed regions ({', '.join(seeded)}): they draw ATen's numbers, "
                          "so if the matching forward or backward graph was compiled, the recompute in the "
                          "backward does not repeat the forward's random numbers")

    def __call__(self, *args):
        args = list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)
        if self.name.startswith("backward"):
            backward_ran(None)
        for i, device in self._seed_states:   # a seed a compiled forward saved, as a state for ATen
            args[i] = as_state(args[i], device)
        return self.gm(*args)
