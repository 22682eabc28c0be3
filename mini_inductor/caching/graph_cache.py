"""Compiled graphs on disk, so that a new process compiles nothing for a graph it has seen before.

    key = graph_key(gm, example_inputs, cfg)       # the same in every process for the same graph
    entry = load(cfg.cache_dir, key)               # a CacheEntry, or None (missing, damaged, old format)
    store(cfg.cache_dir, key, entry)               # atomic, with a content hash (files.py)

The key hashes the ATen graph's structure (ops, arguments and node names, not object ids), the
inputs' sizes, strides, dtypes and devices, the metadata of its get_attr constants, the options
that change generated code, and the versions of torch, Triton and mini_inductor's own source (an
edit to the compiler invalidates every entry). An entry holds the generated module's source and
what the compile record and the fusion log show (kernels, extern calls, fallbacks, fusion
decisions); the constants' values are not stored, they are read from the graph module again.
Triton's own cache (TRITON_CACHE_DIR) keeps the kernel binaries.

    cache_dir/graphs/ab/ab12….json     (a hash line, then the JSON: files.py)
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging

import torch

from . import files, shape_guards
from ..codegen import triton_ops
from ..config import Config, interpreting
from ..distributed.policy import graph_key_part as collective_key_part
from ..lowering import symbolic
from ..metrics import GraphRecord
from ..scheduler.fusion import FusionDecision

log = logging.getLogger("mini_inductor")

FORMAT = 1
# Options that do not change the generated module (where it is written, how it is compiled, run or
# debugged): cudagraph_* options are read by the runtime when the CompiledGraph is built again.
_NO_CODE_EFFECT = frozenset({"debug_dir", "cache_dir", "fallback_on_error", "graph_cache", "front_cache",
                             "compile_threads", "compile_workers", "cudagraphs", "dynamo_cache", "static_launch"})
# GraphRecord fields an entry carries over to the record of a graph served from the cache.
_RECORD_FIELDS = ("nodes_before_fusion", "nodes_after_fusion", "kernel_names", "extern_calls",
                  "planned_peak_bytes", "estimated_bytes_moved", "graphed_workspace_bytes")


@dataclasses.dataclass
class CacheEntry:
    """What rebuilds a CompiledGraph and its record without lowering, scheduling or codegen."""

    graph: str                                   # the name it was compiled under, e.g. "forward_0"
    source: str                                  # the generated module
    constants: list[str]                         # names of the get_attr constants `call` expects
    record: dict                                 # _RECORD_FIELDS plus fallback_ops, dynamic_symbols, stage_seconds
    decisions: list[FusionDecision]              # for the fusion log on a hit
    guards: list = dataclasses.field(default_factory=list)   # added to a dynamic graph's ShapeEnv by the compile

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["format"] = FORMAT
        return json.dumps(data, default=str)  # a sympy number in a fusion score prints as text

    @classmethod
    def from_json(cls, text: str) -> "CacheEntry":
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
        decisions = [FusionDecision(d["node1"], d["node2"], int(d["round"]),
                                    tuple(d["score"]) if d["score"] is not None else None,
                                    bool(d["fused"]), d["reason"]) for d in data["decisions"]]
        entry = cls(str(data["graph"]), data["source"], list(data["constants"]), dict(data["record"]), decisions,
                    list(shape_guards.of_entry(data)))
        if not isinstance(entry.source, str) or "def call(" not in entry.source:
            raise ValueError("no generated module in the entry")
        missing = [f for f in _RECORD_FIELDS if f not in entry.record]
        if missing:
            raise ValueError(f"record lacks {missing}")
        return entry


def make_entry(record: GraphRecord, source: str, constants, decisions, guards=()) -> CacheEntry:
    fields = {f: getattr(record, f) for f in _RECORD_FIELDS}
    fields["fallback_ops"] = dict(record.fallback_ops)
    fields["dynamic_symbols"] = list(record.dynamic_symbols)   # (optional: entries before it lack it)
    fields["stage_seconds"] = dict(record.stage_seconds)
    return CacheEntry(record.name, source, list(constants), fields, list(decisions), list(guards))


def restore_record(record: GraphRecord, entry: CacheEntry) -> None:
    """Fill `record` (a graph served from the cache) with what the original compile produced."""
    for f in _RECORD_FIELDS:
        value = entry.record[f]
        setattr(record, f, list(value) if isinstance(value, list) else value)
    record.fallback_ops = collections.Counter(entry.record.get("fallback_ops", {}))
    record.dynamic_symbols = [str(s) for s in entry.record.get("dynamic_symbols", [])]


def graph_constants(gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    """The get_attr tensors of the graph by node name (what lowering hands the generated `call`)."""
    return {n.name: getattr(gm, n.target) for n in gm.graph.nodes
            if n.op == "get_attr" and not isinstance(getattr(gm, n.target), torch.nn.Module)}


def _scalar_value(t) -> str:
    """A CPU 0-d constant's value: on CUDA the generated code holds it (lowering/graph_scan.py
    scalar_chains_for_the_gpu moves it into a kernel), so two graphs that differ in it differ in code."""
    if not (isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() == 0):
        return ""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return f"value {t.item()!r}"


# ── the key ──────────────────────────────────────────────────────────────────────────────────
def graph_key(gm: torch.fx.GraphModule, example_inputs, cfg: Config) -> str:
    """A hash of everything the generated module depends on; stable across processes."""
    parts = [f"format {FORMAT}", *compiler_key_parts(cfg)]
    for node in gm.graph.nodes:
        parts.append(f"{node.op}|{node.name}|{_target_name(node.target)}|{node.args}|{node.kwargs}")
        if node.op == "get_attr" and isinstance(getattr(gm, node.target), torch.fx.GraphModule):
            # a higher-order op's function: the generated module holds its code (lowering/subgraphs.py)
            parts.append(getattr(gm, node.target).graph.python_code(root_module="self").src)
        elif node.op == "get_attr":
            parts.append(tensor_meta(getattr(gm, node.target)))
            parts.append(_scalar_value(getattr(gm, node.target)))
        if node.op == "call_function" and collective_key_part(node):   # its group's backend decides the partitions
            parts.append(collective_key_part(node))
    for x in example_inputs:
        if isinstance(x, torch.Generator):   # its identity does not reach the code, its device does
            parts.append(f"generator {x.device}")
        else:
            parts.append(tensor_meta(x) if isinstance(x, torch.Tensor) else repr(x))
    for name, buf in gm.named_buffers():
        parts.append(f"{name}:{tensor_meta(buf)}")
    if symbolic.current().bounds:   # a dynamic graph's symbols' ranges decide 32- or 64-bit indices
        parts.append(f"bounds {sorted((str(s), b) for s, b in symbolic.current().bounds.items())}")
    parts += symbolic.facts_key(gm)   # and its nodes' symbolic sizes, its guards
    if gm.meta.get("mini_inductor_input_aliases"):   # outputs returned as views of inputs (lowering/graph.py)
        parts.append(f"input aliases {sorted(gm.meta['mini_inductor_input_aliases'].items())}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _target_name(target) -> str:
    """An FX target as text that is the same in every process: a Python function's own str holds its
    address (`torch.sym_float` of an interpolate's scale: every warm start missed; review, session 33)."""
    if isinstance(target, str) or not callable(target) or isinstance(target, torch._ops.OpOverload):
        return str(target)
    qualname = getattr(target, "__qualname__", "")
    if not qualname or "<" in qualname:   # a closure or lambda: two of one name may differ (as before)
        return str(target)
    try:
        return torch.fx.node._get_qualified_name(target)
    except Exception:  # noqa: BLE001  (a callable without a module path)
        return str(target)


def compiler_key_parts(cfg: Config) -> list[str]:
    """What every key hashes besides the graph: the versions, the global state lowering reads and the
    options that change generated code (front_cache.py's key too)."""
    return [*files.versions(), f"default dtype {torch.get_default_dtype()}",           # lowering reads it
            f"deterministic {torch.are_deterministic_algorithms_enabled()}",     # so does index_put's
            f"matmul TF32 {torch.backends.cuda.matmul.allow_tf32}",   # matmul templates' fp32 precision
            f"branchless math {triton_ops.BRANCHLESS_MATH}",          # benchmarks switch it (erf, tanh)
            # a CPU graph has kernels only under Triton's interpreter; without it, it runs eagerly: a
            # graph compiled under the interpreter, served to a run without, crashed at its first
            # launch instead of the warning that says so (review, session 33)
            f"interpreter {interpreting()}",
            repr(sorted((k, v) for k, v in vars(cfg).items()   # cudagraph_* options are run-time ones,
                        if k not in _NO_CODE_EFFECT                # except the ops cut out of partitions
                        and (not k.startswith("cudagraph_") or k == "cudagraph_unsafe_ops")))]


def tensor_meta(t) -> str:
    if not isinstance(t, torch.Tensor):
        return repr(t)
    return f"{tuple(t.shape)}|{t.stride()}|{t.dtype}|{t.device}|{t.storage_offset()}"


# ── the files ────────────────────────────────────────────────────────────────────────────────
def entry_path(cache_dir: str, key: str) -> str:
    return files.keyed_path(cache_dir, "graphs", key)


def load(cache_dir: str, key: str) -> CacheEntry | None:
    """The entry for `key`, or None. A damaged entry (files.read) is deleted with a warning."""
    return files.read(entry_path(cache_dir, key), "compiled-graph cache entry", "compiling again",
                            lambda data: CacheEntry.from_json(data.decode("utf-8")))


def store(cache_dir: str, key: str, entry: CacheEntry) -> str | None:
    """Write `entry` atomically, behind its content hash; its path, or None on an OS error."""
    return files.write(entry_path(cache_dir, key), entry.to_json(), "compiled-graph cache entry")


# ── dynamic graphs compiled per size ─────────────────────────────────────────────────────────
# A dynamic graph whose symbolic compile failed (a divisor that may be 0, a size expression lowering
# does not take) is compiled per size (pipeline.compile_dynamic). The failure is the compiler's answer
# to what the key holds, so a later process goes per size at once instead of lowering the graph again
# up to the same failure; the entry keeps the reason, which that process reports as the first did.
PER_SIZE = "per_size"
_GRAPH = "<graph>"   # the failing graph's name in the kept reason, the graph it is read for named instead


def store_per_size(cache_dir: str, key: str, why: str, name: str) -> str | None:
    """Keep `why` the symbolic compile of graph `name`, of key `key`, failed."""
    return files.write(files.keyed_path(cache_dir, PER_SIZE, key),
                       json.dumps({"format": FORMAT, "why": why.replace(name, _GRAPH)}), "per-size marker")


def load_per_size(cache_dir: str, key: str, name: str) -> str | None:
    """Why the symbolic compile of the graph of `key` failed before, told of graph `name`, or None (it
    never did, or the marker is unreadable)."""
    why = files.read(files.keyed_path(cache_dir, PER_SIZE, key), "per-size marker", "trying the symbolic compile",
                     _per_size_reason)
    return why.replace(_GRAPH, name) if why is not None else None


def _per_size_reason(data: bytes) -> str:
    parsed = json.loads(data.decode("utf-8"))
    if not isinstance(parsed, dict) or parsed.get("format") != FORMAT or not isinstance(parsed.get("why"), str):
        raise ValueError("not a per-size marker")
    return parsed["why"]
