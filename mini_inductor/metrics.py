"""What each compile produced, kept as plain records so tests, the demo and the CLI can read it.

    from mini_inductor import metrics
    metrics.reset()
    torch.compile(fn, backend="mini_inductor")(x)
    metrics.total_kernels()          # Triton kernels generated since reset()
    metrics.compiled_graphs[-1]      # GraphRecord of the last compiled graph
    metrics.attention                # AttentionMatch: attention found in Dynamo's graphs (attention/match.py)
"""
from __future__ import annotations

import collections
import dataclasses
import itertools


@dataclasses.dataclass
class GraphRecord:
    """One compiled ATen graph (an inference, forward or backward graph)."""

    name: str                                    # e.g. "forward_0", "inference_2"
    num_fx_nodes: int = 0                        # call_function nodes in the ATen graph
    nodes_before_fusion: int = 0                 # scheduler nodes before fusion
    nodes_after_fusion: int = 0                  # scheduler nodes after fusion
    kernel_names: list[str] = dataclasses.field(default_factory=list)  # generated Triton kernels
    extern_calls: list[str] = dataclasses.field(default_factory=list)  # ATen ops called as extern kernels
    fallback_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    source_path: str | None = None               # the generated output_code.py
    cache_hit: bool = False                      # served from a cache (in-process or on disk), not compiled
    # "memory" / "disk" / "disk (before AOT)" (hits; the last without AOT autograd: front_cache.py),
    # "miss", "off" (graph_cache=False)
    cache: str = ""
    compile_seconds: float = 0.0
    stage_seconds: dict = dataclasses.field(default_factory=dict)  # lowering / scheduling / codegen / loading
    ran_eagerly: str | None = None               # reason when the graph runs in eager mode instead
    planned_peak_bytes: int = 0                  # memory plan: most bytes of the graph's own buffers live at once
    estimated_bytes_moved: int = 0               # bytes the kernels and extern calls read and write
    # the cuBLAS workspace a CUDA-graph warm-up or recording of the graph allocates in the pool, besides
    # its planned buffers (0 without CUDA graphs or without cuBLAS calls): runtime/cudagraphs/cublas_workspace.py
    graphed_workspace_bytes: int = 0
    layout: str = ""                             # what the channels-last pass did (lowering/layout_opt.py)
    # a dynamic graph: its size symbols (compiled once for every size its guards admit)
    dynamic_symbols: list[str] = dataclasses.field(default_factory=list)
    # a dynamic graph whose symbolic compile failed: why (it is then compiled once per size)
    dynamic_fallback: str | None = None
    # why a warm start runs AOT autograd again for this graph: the front cache wrote no entry for it
    # (caching/front_cache.py); "" when it wrote one, or the level is off
    warm_start: str = ""

    @property
    def num_kernels(self) -> int:
        return len(self.kernel_names)

    @property
    def recording_peak_bytes(self) -> int:
        """Most bytes a CUDA-graph warm-up or recording call of the graph allocates: its planned
        buffers and the cuBLAS workspace (replays allocate nothing)."""
        return self.planned_peak_bytes + self.graphed_workspace_bytes

    def summary(self) -> str:
        fb = sum(self.fallback_ops.values())
        return (f"{self.name}: {_count(self.num_fx_nodes, 'ATen node')}, {self.nodes_before_fusion} → "
                f"{_count(self.nodes_after_fusion, 'scheduler node')}, {_count(self.num_kernels, 'Triton kernel')}, "
                f"{_count(len(self.extern_calls), 'extern call')}, {_count(fb, 'fallback op')}, "
                f"{_mb(self.estimated_bytes_moved)} moved (est.), planned peak {_mb(self.planned_peak_bytes)}"
                + (f" (+{_mb(self.graphed_workspace_bytes)} cuBLAS workspace while recording)"
                   if self.graphed_workspace_bytes else "") + ", "
                f"{self.compile_seconds:.2f} s"
                + (f" (cache hit: {self.cache})" if self.cache_hit else "")
                + (f"; {self.layout}" if self.layout else "")
                + (f"; dynamic in {', '.join(self.dynamic_symbols)}" if self.dynamic_symbols else "")
                + (f" [compiled per size: {self.dynamic_fallback}]" if self.dynamic_fallback else "")
                + (f" [ran eagerly: {self.ran_eagerly}]" if self.ran_eagerly else "")
                + (f" [warm start: {self.warm_start}]" if self.warm_start else ""))


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 10_000 else f"{nbytes} B"


@dataclasses.dataclass(frozen=True)
class AttentionMatch:
    """An attention found in a Dynamo graph (attention/match.py): replaced by one call, or a near miss."""

    graph: str                   # the Dynamo graph, e.g. "dynamo_2"
    node: str                    # its second matmul's node
    source: str                  # the user's line of it, 'File "m.py", line 9, in forward: ...'
    target: str                  # "sdpa" or "flash"; "" for a near miss
    mod: str = ""                # the score modification (the contract's `mod`)
    shapes: str = ""             # "q [2, 4, 16, 8], k [...], v [...]" as the call takes them, batch dims unfolded
    reason: str = ""             # a near miss: why it was not replaced
    data: str = ""               # inputs whose data the match read (a causal buffer), under a guard

    def describe(self) -> str:
        if self.target:
            return f"{self.graph} {self.node}: {self.target}, mod {self.mod!r}, {self.shapes}" + \
                (f"; {self.data}" if self.data else "")
        return f"{self.graph} {self.node}: not replaced: {self.reason}"


def attention_summary(records) -> str:
    """'attention: 2 matched (flash: 1, sdpa: 1), near misses: 1' of AttentionMatch records."""
    matched = [r for r in records if r.target]
    by_target = {t: sum(1 for r in matched if r.target == t) for t in ("flash", "sdpa")}
    return (f"attention: {len(matched)} matched (flash: {by_target['flash']}, sdpa: {by_target['sdpa']}), "
            f"near misses: {len(records) - len(matched)}")


compiled_graphs: list[GraphRecord] = []
attention: list[AttentionMatch] = []   # every attention found since reset(), matched or not
_graph_numbers = itertools.count()   # never reset: a name stays unique within the process
_dynamo_graph_numbers = itertools.count()


def graph_name(kind: str) -> str:
    """A new graph's name: its kind and a process-wide number, e.g. "forward_3"."""
    return f"{kind}_{next(_graph_numbers)}"


def dynamo_graph_name() -> str:
    """A name for a graph Dynamo handed the backend (the level attention is matched at), e.g. "dynamo_2"."""
    return f"dynamo_{next(_dynamo_graph_numbers)}"


def reset() -> None:
    compiled_graphs.clear()
    attention.clear()


def total_kernels() -> int:
    return sum(g.num_kernels for g in compiled_graphs)


def total_fallbacks() -> collections.Counter:
    total: collections.Counter = collections.Counter()
    for g in compiled_graphs:
        total.update(g.fallback_ops)
    return total
