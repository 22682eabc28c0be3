"""CUDA-graph trees: every cudagraph-safe compiled partition runs from a recorded CUDA graph.

One TreeManager per device owns a private memory pool and a side stream shared by every recording,
so one graph's outputs feed the next graph with no copy, and memory dead after graph A is reused by
graph B. Recordings form a tree: a function's node depends on which graph ran before it (its
parent) and on which earlier outputs were alive when it was recorded, so A→B and A→B' both replay.

    iteration 1: every function warms up (runs eagerly, allocating in the pool)
    iteration 2: every function is recorded (the graph is replayed once right away)
    iteration 3+: every function replays: dynamic inputs copied in, outputs rebuilt over pool memory

An iteration ("generation") is one top-level torch.compile call, or the span between two
`mini_inductor.mark_step()` calls once the user has called it. A forward whose backward has not run
yet keeps the path open. Read-only introspection: `stats()`, `get_manager(device)`, `reset()`.
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import functools
import logging
import sys
import threading
import warnings
import weakref
from typing import Any

import torch

from . import gradients
from .gradients import parameters_grads
from .nodes import Check, GraphNode, WarmupNode, save_adopted, unpin
from .utils import (PENDING_BACKWARD, FunctionInfo, aligned, check_pool, counters, have_cuda_graph_apis,
                    log, log_skip, overwritten_message, perf_log, pool_blocks, pool_segments,
                    skip_reasons)

_UNEXPECTED_RERECORD = (Check.STATIC_MOVED, Check.MANAGED_MOVED, Check.STABLE_MOVED)


class _MarkStep:
    counter = 0   # counts down from 0 at each mark_step(), so it never equals a dynamo generation


def mark_step() -> None:
    """Start a new iteration explicitly (also: torch.compiler.cudagraph_mark_step_begin())."""
    _MarkStep.counter -= 1


def _current_generation() -> int:
    if _MarkStep.counter:
        return _MarkStep.counter
    inductor = sys.modules.get("torch._inductor.cudagraph_trees")
    box = getattr(inductor, "MarkStepBox", None)
    if box is not None and box.mark_step_counter:
        return box.mark_step_counter
    return _generation_tracker().generation


@functools.cache
def _generation_tracker():
    """Dynamo's generation counter, imported at the first call (an import statement in
    _current_generation would cost every call)."""
    from torch._dynamo.mutation_guard import GenerationTracker
    return GenerationTracker


def _user_marked_steps() -> bool:
    inductor = sys.modules.get("torch._inductor.cudagraph_trees")
    box = getattr(inductor, "MarkStepBox", None)
    return bool(_MarkStep.counter) or bool(box is not None and box.mark_step_counter)


class TreeManager:
    """The tree of one device: roots, the current node, the pool, the stream, and the dispatch."""

    def __init__(self, device: int):
        self.device = device
        torch.cuda.synchronize(device)
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device)
            self.stream.wait_stream(torch.cuda.current_stream(device))
        self._open_pool()
        torch._C._set_cached_tensors_enabled(True)
        self.roots: dict[int, list[GraphNode]] = collections.defaultdict(list)
        self.functions: dict[int, FunctionInfo] = {}
        self.warmed_up: set = set()   # fids warmed up; (fid, sizes) for a dynamic function
        self.warned_pending: set[int] = set()
        self.warned_mutation: set[int] = set()
        self.mutation_hint: dict[tuple, bool] = {}
        self.rerecords: collections.Counter = collections.Counter()
        self.over_limit: set[tuple] = set()
        self.warned_rerecord: set[int] = set()
        self.capture_failed: set[int] = set()   # functions whose capture failed: they run without graphs
        # functions a static input of which is resized in place between calls: they run without graphs
        self.resizing: set[int] = set()
        self.current: GraphNode | WarmupNode | None = None
        self.state = "none"            # none | warmup | recording | execution
        self.current_gen = -1
        self.pending_backward = False
        self.shut_down = False
        self.graph_ids = 0
        self.warmup_ids = 0
        self.fids = 0
        # introspection
        self.num_warmups = 0
        self.num_recordings = 0
        self.num_replays = 0
        self.num_fallback_runs = 0
        self.num_checkpoints = 0
        self.num_unmatched = 0          # in execution, no recorded child matched: had to record
        self.num_failed_captures = 0    # each one dropped the recordings and opened a new pool
        # "beyond Inductor": inputs that arrive at the same address call after call are used in place
        # per function (a dynamic one: per function and sizes, see _warm_key): input addresses at its
        # last warm-up, and inputs seen moving
        self._last_ptrs: dict[Any, list] = {}
        self._moved: dict[Any, set[int]] = collections.defaultdict(set)
        # the edges of the autograd nodes of the current path's backward calls whose gradients autograd
        # adopted in the pool: their parameters' `.grad` move out should they outlive the path (nodes.py)
        self.gradient_sources: list = []

    def _open_pool(self) -> None:
        with torch.cuda.device(self.device):
            self.pool = torch.cuda.graph_pool_handle()
            self.keepalive = torch.cuda.CUDAGraph()   # an empty graph captured into the pool keeps it alive
            with warnings.catch_warnings(record=True), \
                    torch.cuda.graph(self.keepalive, pool=self.pool, stream=self.stream,
                                     capture_error_mode="thread_local"):
                pass

    # --- functions -------------------------------------------------------------------------------

    def add_function(self, info: FunctionInfo) -> int:
        fid = self.fids
        self.fids += 1
        self.functions[fid] = info
        return fid

    def run(self, inputs: list, fid: int) -> list:
        assert not self.shut_down, "Running CUDAGraph after shutdown"
        mode = self.functions[fid].mode
        outs = self._run(inputs, fid)
        if mode == "forward":
            self.pending_backward = True
        elif mode == "backward":
            self.pending_backward = False
        return outs

    def set_to_running_backward(self) -> None:
        self.pending_backward = False

    def _run(self, inputs: list, fid: int, warm_key=None) -> list:
        """`warm_key`: this call's, when an ended path runs it again (it depends on the inputs only)."""
        if log.isEnabledFor(logging.DEBUG):
            log.debug("run %s (fid %d, %s): state %s, generation %s → %s, pending backward %s",
                      self.functions[fid].name, fid, self.functions[fid].mode, self.state, self.current_gen,
                      _current_generation(), self.pending_backward)
        if self.state == "recording":
            self._try_end_recording_or_warmup(fid)
        elif self.state == "warmup":
            self._try_end_recording_or_warmup(fid)
        node_id = self.current.id if self.current is not None else None
        key = (node_id, fid)
        if key not in self.mutation_hint:
            self.mutation_hint[key] = self._mutates_outside_pool(inputs, fid)
        if self.mutation_hint[key] or key in self.over_limit or fid in self.capture_failed or fid in self.resizing:
            return self._run_without_graph(inputs, fid)
        info = self.functions[fid]
        cfg = info.cfg
        if warm_key is None:
            warm_key = self._warm_key(fid, inputs)
        sizes = warm_key[1] if isinstance(warm_key, tuple) else None
        if (warm_key not in self.warmed_up and not cfg.cudagraph_skip_warmup) \
                or self.state == "warmup" \
                or cfg.cudagraph_force_warmup:
            if self.state == "execution":
                self._apply_checkpoint()
            return self._warmup(inputs, fid)
        unexpected: tuple | None = None
        if self.state != "recording":
            candidates = self.roots.get(fid, []) if self.current is None else self.current.children.get(fid, [])
            for node in candidates:
                status = node.check(inputs, sizes)
                if status is Check.SUCCESS:
                    return self._replay(node, inputs)
                if status is Check.STATIC_MOVED and (resized := node.resized_static_storage(inputs)) is not None:
                    return self._resized_in_place(node, inputs, fid, resized)
                if status in _UNEXPECTED_RERECORD and not node.other_static_tensor(status, inputs):
                    unexpected = (node, status)
                    if status is Check.STABLE_MOVED:
                        self._moved[warm_key] |= {i for i in node.stable_idxs
                                             if inputs[i].data_ptr() != node.ptrs[i]}
            if self.current is not None and fid in self.roots:
                if self._try_end_execution():
                    return self._run(inputs, fid, warm_key)
        if info.mutated_idxs:
            self.mutation_hint[key] = self._mutates_outside_pool(inputs, fid)
            if self.mutation_hint[key]:
                return self._run_without_graph(inputs, fid)
        if unexpected is not None:
            self.rerecords[key] += 1
            if self.rerecords[key] > cfg.cudagraph_rerecord_limit:
                node, status = unexpected
                if fid not in self.warned_rerecord:   # said and counted once per function
                    self.warned_rerecord.add(fid)
                    log_skip(f"function {fid} ({info.name}) exceeding max re-recording limit "
                             f"(={cfg.cudagraph_rerecord_limit}) on cudagraph node {node_id} due to "
                             f"{node.mismatch_text(status, inputs)}", cfg=cfg)
                self.over_limit.add(key)
                return self._run_without_graph(inputs, fid)
        if self.state == "execution":
            self.num_unmatched += 1
        if self._try_end_execution() and info.mutated_idxs and self._mutates_outside_pool(inputs, fid):
            # the path's end moved adopted gradients this function writes in place out of the pool
            return self._run_without_graph(inputs, fid)
        if self.current is not None and self.state == "execution":
            self._apply_checkpoint()
        return self._record(inputs, fid)

    def _resized_in_place(self, node: GraphNode, inputs: list, fid: int, i: int) -> list:
        """A static input's storage was freed and allocated again since the recording (FSDP2 does it
        to every unsharded parameter each step). Re-recording would repeat at every call, and copying
        it into the graph would keep a second copy of what FSDP2 frees: the function runs without
        CUDA graphs from now on, said and counted once. `i`: the input resized."""
        info = self.functions[fid]
        self.resizing.add(fid)
        log_skip(f"function {fid} ({info.name}): static input {info.input_name(i)} was resized in place "
                 f"between calls (its storage freed and allocated again, as FSDP2 does with unsharded "
                 f"parameters), data pointer {node.ptrs[i]} -> {inputs[i].data_ptr()}",
                 info.input_trace(i), cfg=info.cfg)
        return self._run_without_graph(inputs, fid)

    # --- the three ways to run -------------------------------------------------------------------

    def _warmup(self, inputs: list, fid: int) -> list:
        warm_key = self._warm_key(fid, inputs)
        already = warm_key in self.warmed_up
        log.debug("Running %s of function %d", "eager" if already else "warmup", fid)
        self.warmup_ids -= 1
        node = WarmupNode(self, self.functions[fid], fid, self.current, self.warmup_ids, already)
        self.warmed_up.add(warm_key)
        self.current, self.state = node, "warmup"
        self.current_gen = _current_generation()
        self.num_warmups += 1
        self._last_ptrs[warm_key] = [x.data_ptr() if isinstance(x, torch.Tensor) else None for x in inputs]
        return node.run(inputs)

    def _warm_key(self, fid: int, inputs: list):
        """A function is warmed up once before its first recording; a dynamic one once per sizes."""
        sizes = self.functions[fid].sizes_key(inputs)
        return fid if sizes is None else (fid, sizes)

    def _record(self, inputs: list, fid: int) -> list:
        assert not isinstance(self.current, WarmupNode)
        gid = self.graph_ids
        self.graph_ids += 1
        log.debug("Recording function %d of graph recording id %d", fid, gid)
        stable = self._stable_inputs(inputs, fid)
        torch.cuda.synchronize(self.device)
        parent = self.current
        # The recording empties `inputs`; they are kept for an eager run should the capture fail. Pool
        # tensors (earlier outputs) only weakly: the recording must see them die where the function
        # lets go of them, as its replays will, or it would neither reuse their memory nor know it.
        originals = [weakref.ref(x) if isinstance(x, torch.Tensor) and parent is not None
                     and parent.is_pool_tensor(x) else x for x in inputs]
        try:
            node = GraphNode(self, self.functions[fid], fid, gid, parent, inputs, stable)
        except Exception as error:
            self._capture_failed(fid, error)
            args = [x() if isinstance(x, weakref.ref) else x for x in originals]
            gone = [self.functions[fid].input_name(i) for i, (x, o) in enumerate(zip(args, originals))
                    if x is None and isinstance(o, weakref.ref)]
            if gone:   # freed inside the failed capture: this call cannot be run again
                raise RuntimeError(f"CUDA graph capture of {self.functions[fid].name} failed ({error}) after "
                                   f"it had freed its inputs {', '.join(gone)}, held by nothing else; the "
                                   "function runs without CUDA graphs from the next call on") from error
            return self._run_without_graph(args, fid)
        del originals
        if parent is None:
            self.roots[fid].append(node)
        else:
            parent.children.setdefault(fid, []).append(node)
        self.current, self.state = node, "recording"
        self.current_gen = _current_generation()
        self.num_recordings += 1
        torch.cuda.synchronize(self.device)
        release_before_process_group_teardown()
        return node.first_outputs()

    def _replay(self, node: GraphNode, inputs: list) -> list:
        self.current, self.state = node, "execution"
        self.current_gen = _current_generation()
        self.num_replays += 1
        return node.run(inputs)

    def _run_without_graph(self, inputs: list, fid: int) -> list:
        self.num_fallback_runs += 1
        return self.functions[fid].fn(inputs)

    def _stable_inputs(self, inputs: list, fid: int) -> set[int]:
        """Dynamic inputs seen at the same address on the previous call and never seen moving (of a
        dynamic function: the previous call at the same sizes, whose recording this one is)."""
        if not self.functions[fid].cfg.cudagraph_stable_inputs:
            return set()
        key = self._warm_key(fid, inputs)
        last = self._last_ptrs.get(key) or []
        return {i for i, x in enumerate(inputs) if i < len(last) and isinstance(x, torch.Tensor) and x.is_cuda
                and x.data_ptr() == last[i] and aligned(x) and i not in self._moved[key]}

    # --- mutation, generations, ending paths -----------------------------------------------------

    def _mutates_outside_pool(self, inputs: list, fid: int) -> bool:
        info = self.functions[fid]
        if not info.mutated_idxs:
            return False
        static = set(info.static_idxs)
        outside = [i for i in info.mutated_idxs if i not in static and not (
            self.current is not None and isinstance(inputs[i], torch.Tensor) and self.current.is_pool_tensor(inputs[i]))]
        if outside and fid not in self.warned_mutation:
            self.warned_mutation.add(fid)
            names = ", ".join(info.input_name(i) for i in outside)
            log_skip(f"mutated inputs ({len(outside)} instances)", f"{info.name}: mutates {names}", info.cfg)
        return bool(outside)

    def _new_generation_allowed(self) -> bool:
        if self.current_gen == _current_generation():
            return False
        return _user_marked_steps() or not self.pending_backward

    def _try_end_recording_or_warmup(self, fid: int) -> None:
        if self._new_generation_allowed():
            self._dealloc_current_path()
            self._set_current(None)
        elif self.current.all_outputs_dead():
            self._set_current(None)
        else:
            self._maybe_warn_pending_backward(fid)

    def _try_end_execution(self) -> bool:
        if self.current is None or self.state == "recording":
            return self.current is None
        if self._new_generation_allowed():
            self._save_adopted(self._path_nodes())
        elif not self.current.all_outputs_dead():
            return False
        # (all dead: so are the adopted gradients, outputs like the others, and nothing is left to move)
        self._set_current(None)
        return True

    def _save_adopted(self, nodes) -> None:
        """Adopted gradients of `nodes` still held move out of the pool before it is written again."""
        found = None

        def grads():
            nonlocal found
            if found is None:
                found = parameters_grads(self.gradient_sources)
            return found
        save_adopted([node for node in nodes if node.adopted], grads)

    def _set_current(self, node) -> None:
        self.current = node
        if node is None:
            self.state = "none"
            self.gradient_sources = []

    def _maybe_warn_pending_backward(self, fid: int) -> None:
        if self.current_gen == _current_generation() or fid in self.warned_pending:
            return
        nodes = [n for n in self._path_nodes() if n.fid == fid]
        if len(nodes) <= 1:
            return
        parents = {n.parent.fid if n.parent is not None else None for n in nodes}
        parents.add(self.current.fid)
        if len(parents) == len(nodes):
            return
        self.warned_pending.add(fid)
        warnings.warn(PENDING_BACKWARD)

    def _path_nodes(self) -> list:
        node = self.current
        if isinstance(node, WarmupNode):
            return list(node.path_nodes)
        out = []
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def _dealloc_current_path(self) -> None:
        """A new iteration ends a recording or warmup path: free its live outputs now and poison them."""
        nodes = self._path_nodes()
        self._save_adopted(nodes)
        log.debug("new iteration: freeing the live outputs of %s", [n.info.name for n in nodes])
        traces: dict[int, str | None] = {}
        for node in nodes:
            for i, (tref, sref) in enumerate(zip(node.tensor_refs, node.outputs_refs)):
                trace = node.info.trace_of(i)
                if sref is not None:
                    traces[sref.ptr] = trace
                t = tref() if tref is not None else None
                if t is not None:
                    torch._C._set_storage_access_error_msg(t, overwritten_message(trace))
        freed = set()
        set_ptr_msg = getattr(torch._C, "_set_storage_data_ptr_access_error_msg", None)
        for ref in self.current.path_live_refs():
            cdata = ref.cdata()
            if cdata is None or ref.ptr in freed:
                continue
            freed.add(ref.ptr)
            torch._C._free_And_Remove_DeleterFn(cdata)
            if set_ptr_msg is not None:
                set_ptr_msg(cdata, overwritten_message(traces.get(ref.ptr)))
        for node in nodes:
            unpin(node)

    def _apply_checkpoint(self) -> None:
        """From replay back to warmup or recording: make the allocator's view of the pool true again."""
        node = self.current
        assert isinstance(node, GraphNode)
        self.num_checkpoints += 1
        # (adopted gradients still held stay: live, they get the allocator's deleters like any output
        # the caller holds, and the recordings that follow see them live, as their replays will)
        log.debug("Checkpointing cuda caching allocator state. Number of checkpoints %d", self.num_checkpoints)
        for n in self._path_nodes():
            n.remove_cached_outputs()
        live = node.path_live_refs()
        dead = node.dead_since_recording()
        torch._C._cuda_setCheckpointPoolState(self.device, node.checkpoint, [], [r.cdata() for r in live])
        for ptr in dict.fromkeys(dead):
            torch._C._cuda_cudaCachingAllocator_raw_delete(ptr)
        if any(info.cfg.cudagraph_slow_asserts for info in self.functions.values()):
            check_pool(self.device, self.pool, live)

    def mark_aliased(self, node: GraphNode | None, i: int) -> None:
        if node is not None:
            node.mark_not_cacheable(i)

    # --- introspection and teardown --------------------------------------------------------------

    def live_pool_blocks(self) -> int:
        return len(pool_blocks(self.pool))

    def pool_segments(self) -> int:
        return pool_segments(self.pool)

    def tree_shape(self) -> dict[str, list[int]]:
        """Per function name: the descendant count of each of its roots."""
        return {self.functions[fid].name: [r.descendants() for r in roots]
                for fid, roots in self.roots.items() if roots}

    def all_graph_nodes(self):
        for roots in self.roots.values():
            for r in roots:
                yield from r.all_nodes()

    def _capture_failed(self, fid: int, error: Exception) -> None:
        """A recording failed (an op the capture does not permit, such as a host sync, or an error in
        the function): the function runs without graphs from now on, and the tree starts over.

        `capturing()` has ended the capture and taken the CUDA generator out of capture mode, but
        torch 2.11 can leave the pool marked as being recorded into, and no capture into it could
        begin again. So every recording is dropped (outputs the caller holds stay valid) and later
        recordings go to a new pool; the other functions warm up and record again.
        """
        info = self.functions[fid]
        self.capture_failed.add(fid)
        self.num_failed_captures += 1
        first_line = (str(error).strip().splitlines() or [""])[0]
        log.warning("CUDA graph capture of %s failed (%s: %s); recordings dropped, new pool opened",
                    info.name, type(error).__name__, first_line)
        self._drop_recordings()
        self._open_pool()
        log_skip(f"a failed CUDA graph capture of {info.name} ({type(error).__name__}: {first_line})", cfg=info.cfg)

    def _drop_recordings(self) -> None:
        path = self._path_nodes() if self.current is not None else []
        self._save_adopted(list(self.all_graph_nodes()) + path)
        for node in list(self.all_graph_nodes()) + path:
            if isinstance(node, GraphNode):
                node.remove_cached_outputs()
            unpin(node)
            node.graph = None
        self.keepalive = None
        self.roots = collections.defaultdict(list)
        self._set_current(None)

    def shutdown(self) -> None:
        self._drop_recordings()
        self.shut_down = True


# --- one manager per device, shared by every thread (the backward runs on autograd's thread) ----------

@dataclasses.dataclass
class _Container:
    manager: TreeManager | None = None
    live_functions: int = 0


_containers: dict[int, _Container] = {}
_lock = threading.Lock()


def get_manager(device: int, create: bool = False) -> TreeManager | None:
    with _lock:
        box = _containers.setdefault(device, _Container())
        if box.manager is None and create:
            box.manager = TreeManager(device)
        return box.manager


def _function_collected(device: int, manager: TreeManager) -> None:
    with _lock:
        box = _containers.get(device)
        if box is None or box.manager is not manager:
            return
        box.live_functions -= 1
        if box.live_functions == 0 and box.manager is not None:
            box.manager.shutdown()
            box.manager = None


class TreeFunction:
    """A compiled partition's boxed callable, routed through its device's tree.

    The tree is joined at the first call (compiling happens under a fake-tensor mode, where no real
    CUDA work may run); from then on the function belongs to that manager, even after a reset.
    """

    _boxed_call = True

    def __init__(self, info: FunctionInfo, cfg):
        info.cfg = cfg
        self.info = info
        self.manager: TreeManager | None = None
        self.fid = -1

    def __call__(self, args: list) -> list:
        manager = self.manager
        if manager is None:
            manager = self._join()
        return manager.run(args, self.fid)

    def _join(self) -> TreeManager:
        device = self.info.device
        self.manager = get_manager(device, create=True)
        self.fid = self.manager.add_function(self.info)
        with _lock:
            _containers[device].live_functions += 1
        weakref.finalize(self, _function_collected, device, self.manager)
        return self.manager


_shapes_seen: dict[tuple, set] = collections.defaultdict(set)
_shape_warned: set[tuple] = set()


MAX_GRADIENT_SOURCES = 64


def note_gradient_source(device: int, edges) -> None:
    """A backward call whose parameters' gradients autograd adopts in the pool: its autograd node's
    edges (gradients.current_backward_edges)."""
    box = _containers.get(device)   # (one dict read, atomic: no lock on the per-call path)
    manager = box.manager if box is not None else None
    if manager is not None:
        if len(manager.gradient_sources) >= MAX_GRADIENT_SOURCES:   # a path that never ends: the oldest
            del manager.gradient_sources[0]                          # go (their holders are found by a scan)
        manager.gradient_sources.append(edges)


def backward_ran(device: int | None) -> None:
    """A backward ran (graphed or not): no forward of that device (of every device, when the
    backward's device is unknown) waits for its backward any more."""
    if device is not None:
        boxes = [_containers.get(device)]   # (one dict read, atomic: no lock on the per-call path)
    else:
        with _lock:
            boxes = list(_containers.values())
    for box in boxes:
        if box is not None and box.manager is not None:
            box.manager.set_to_running_backward()


def note_compiled_shape(frame, kind: str, shape_key: tuple, limit: int) -> None:
    """Each input shape of a function gets its own graphs; warn once per frame when they pile up
    (on the perf-hints logger, as the other CUDA-graph messages)."""
    family = (frame, kind)
    seen = _shapes_seen[family]
    seen.add(shape_key)
    if limit and len(seen) > limit and family not in _shape_warned:
        _shape_warned.add(family)
        perf_log.warning(dynamic_shape_message(len(seen)))


def dynamic_shape_message(sizes: int) -> str:
    return ("CUDAGraph supports dynamic shapes by recording a new graph for each distinct input size. "
            f"Recording too many CUDAGraphs may lead to extra overhead. We have observed {sizes} distinct "
            "sizes. Please consider the following options for better performance: a) padding inputs to a few "
            "fixed number of shapes; or b) options={'cudagraph_capture_sizes': [...]} to graph only the listed "
            "sizes, or options={'cudagraphs': False} for this function. Set "
            "options={'cudagraph_dynamic_shape_warn_limit': 0} to silence this warning.")


def reset() -> None:
    """Tear down every tree: graphs, cached outputs and pools (called by torch._dynamo.reset())."""
    with _lock:
        for box in _containers.values():
            if box.manager is not None:
                box.manager.shutdown()
                box.manager = None
        _containers.clear()
    _shapes_seen.clear()
    _shape_warned.clear()
    gradients.warned_scan.clear()
    if have_cuda_graph_apis():
        torch._C._set_cached_tensors_enabled(False)
    _MarkStep.counter = 0


_teardown_guarded = False


def release_before_process_group_teardown() -> None:
    """Let torch.distributed's teardown free the trees first (once a graph is recorded in a process
    with a process group). NCCL cannot destroy a communicator while a CUDA graph that captured its
    kernels is alive: `destroy_process_group()` then waits forever in ncclCommDestroy (pytorch
    issue 115388), at the end of every training script whose collectives our graphs captured. So
    `torch.distributed.destroy_process_group` becomes a wrapper that synchronizes and calls `reset()`
    before the real one, and the interpreter's exit resets too (the process groups' destructors run
    after atexit handlers). A tree torn down this way records again if its functions run again."""
    global _teardown_guarded
    if _teardown_guarded:
        return
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return
    from torch.distributed import distributed_c10d
    original = distributed_c10d.destroy_process_group

    @functools.wraps(original)
    def destroy_process_group(*args, **kwargs):
        _release_graphs()
        return original(*args, **kwargs)
    destroy_process_group.mini_inductor_releases_graphs = True
    distributed_c10d.destroy_process_group = dist.destroy_process_group = destroy_process_group
    atexit.register(_release_graphs_at_exit)
    _teardown_guarded = True


def _release_graphs_at_exit() -> None:
    try:
        _release_graphs()
    except Exception as error:  # noqa: BLE001  (a CUDA context already broken at exit: nothing to free)
        log.debug("CUDA graphs not released at exit: %s", error)


def _release_graphs() -> None:
    managers = [box.manager for box in list(_containers.values()) if box.manager is not None]
    for manager in managers:   # replays still running on the GPU keep their graphs' work alive
        torch.cuda.synchronize(manager.device)
    if managers:
        reset()


def stats(device: int = 0) -> dict[str, Any]:
    """Counts for tests and the CLI (read-only)."""
    m = get_manager(device)
    out: dict[str, Any] = {"skips": counters["skips"], "skip_reasons": list(skip_reasons),
                           "recorded_non_static_inputs": counters["recorded_non_static_inputs"],
                           "gradients_moved_out": counters["gradients_moved_out"]}
    if m is None:
        return out
    out.update(warmups=m.num_warmups, recordings=m.num_recordings, replays=m.num_replays,
               fallback_runs=m.num_fallback_runs, checkpoints=m.num_checkpoints, unmatched=m.num_unmatched,
               failed_captures=m.num_failed_captures,
               tree=m.tree_shape(), live_pool_blocks=m.live_pool_blocks(), pending_backward=m.pending_backward)
    return out


def reset_counters() -> None:
    counters.clear()
    skip_reasons.clear()
