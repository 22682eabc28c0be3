"""`mini_inductor.explain(fn, *args)`: what mini_inductor made of a function or module, for notebooks.

    report = mini_inductor.explain(model, x)     # compiles and runs model(x) once, under a trace
    report                     # Jupyter: the HTML fusion report (the page `mini-inductor explain` writes)
    print(report)              # the text summary `mini-inductor explain` prints
    report.kernels             # [{graph, name, kind, nodes, ops, sources, bytes_read, bytes_written, time_ms}, ...]
    report.fused, report.refused, report.ran_eagerly, report.compile_seconds, report.output
    report.compiled_per_size   # dynamic graphs the symbolic compile could not take, and why
    report.attention           # attention found in Dynamo's graphs: replaced by SDPA / flash, or why not
    report.graph_breaks        # where Dynamo split fn into graphs, and why: [{source, reason}, ...]
    report.graphs              # the per-graph data of report.json
"""
from __future__ import annotations

import dataclasses
import html
import io
from typing import Any


@dataclasses.dataclass
class ExplainReport:
    """What one compiled call did: `kernels`, `fused`, `refused`, `ran_eagerly`, `compile_seconds`,
    `graphs` (the per-graph reports of report.json) and `output` (what the call returned)."""

    graphs: list[dict[str, Any]]
    ran_eagerly: list[dict[str, str]]
    output: Any
    title: str = "mini_inductor explain"
    _traces: Any = dataclasses.field(default=None, repr=False)
    compiled_per_size: list[dict[str, str]] = dataclasses.field(default_factory=list)   # dynamic graphs: why
    attention: list[dict[str, str]] = dataclasses.field(default_factory=list)   # metrics.AttentionMatch fields
    graph_breaks: list[dict[str, str]] = dataclasses.field(default_factory=list)   # debug.trace.GraphBreak fields

    @property
    def kernels(self) -> list[dict[str, Any]]:
        return [{"graph": g["graph"], **k} for g in self.graphs for k in g["kernels"]]

    @property
    def fused(self) -> list[dict[str, Any]]:
        return [{"graph": g["graph"], **d} for g in self.graphs for d in g["fused"]]

    @property
    def refused(self) -> list[dict[str, Any]]:
        return [{"graph": g["graph"], **d} for g in self.graphs for d in g["refused"]]

    @property
    def compile_seconds(self) -> dict[str, dict[str, float]]:
        """Per graph, seconds per compile stage (AOT autograd, lowering, scheduling, codegen, loading, …)."""
        return {g["graph"]: dict(g.get("stage_seconds") or {}) for g in self.graphs}

    def why(self, graph: str, node_a: str, node_b: str) -> str:
        """`mini-inductor why`: one pair's fusion decision, with both nodes' ops and source lines."""
        from .why import why

        found = next((g for g in self.graphs if g["graph"] == graph), None)
        if found is None:
            names = ", ".join(g["graph"] for g in self.graphs) or "none"
            raise KeyError(f"graph {graph!r} is not in this report; compiled graphs: {names}")
        return why(found, node_a, node_b)

    def __str__(self) -> str:
        from ..cli import Output, print_explain
        from ..metrics import AttentionMatch
        from .trace import EagerGraphNote, GraphBreak

        text = io.StringIO()
        if not self.graphs and not self.ran_eagerly:
            # (explain compiles anew even a function compiled before: Dynamo handed over no graph at all)
            text.write("no graph reached mini_inductor: Dynamo found no tensor operations to compile in this call"
                       + (", around its graph breaks (below)" if self.graph_breaks else "") + "\n")
        print_explain(Output(file=text), self.graphs, [EagerGraphNote(**e) for e in self.ran_eagerly],
                      [EagerGraphNote(**e) for e in self.compiled_per_size],
                      [AttentionMatch(**a) for a in self.attention], [GraphBreak(**b) for b in self.graph_breaks])
        return f"{self.title}\n{text.getvalue()}"

    def __repr__(self) -> str:
        return str(self)

    def html_page(self) -> str:
        """The report as one self-contained HTML page (what `explain --out` writes to report.html)."""
        from .explain import report_html

        return report_html(self.graphs, self._traces, self.title)

    def _repr_html_(self) -> str:
        # in a frame: the page's styles must not restyle the notebook around it
        return (f'<iframe srcdoc="{html.escape(self.html_page(), quote=True)}" title="{html.escape(self.title)}" '
                'style="width: 100%; height: 640px; border: 1px solid #ddd;"></iframe>')


def explain(fn, *args, **kwargs) -> ExplainReport:
    """Compile `fn` (a function or an nn.Module) with mini_inductor, call it once with `args` and
    `kwargs` under a trace, and return what was compiled: an ExplainReport. On a GPU the kernels'
    times are those of this call, from torch.profiler."""
    import torch

    from . import explain as explain_module
    from . import trace as debug_trace
    from ..backend import mini_inductor as backend

    def explained(gm, example_inputs):
        # a backend object of its own: Dynamo's cache, keyed by backend, compiles fn again for this trace
        return backend(gm, example_inputs)

    compiled = torch.compile(fn, backend=explained)
    timings: dict[str, float] = {}
    with debug_trace.capture() as traces:
        if torch.cuda.is_available():
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                output = compiled(*args, **kwargs)
                torch.cuda.synchronize()
            timings = explain_module._per_launch_ms(prof)
        else:
            output = compiled(*args, **kwargs)
    reports = explain_module.build_reports(traces, timings)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return ExplainReport(reports, [e.as_dict() for e in traces.eager], output,
                         f"mini_inductor explain: {name}", traces,
                         compiled_per_size=[e.as_dict() for e in traces.per_size],
                         attention=[dataclasses.asdict(a) for a in traces.attention],
                         graph_breaks=[b.as_dict() for b in traces.graph_breaks])
