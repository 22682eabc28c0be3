"""Keep what each compile decided, while someone (the CLI, a test) is looking.

    with capture() as traces:
        compiled(x)
    traces[0].schedule.decisions      # every fusion candidate, fused or refused with a reason
    traces.eager                      # graphs that ran eagerly: EagerGraphNote(name, reason, source)
    traces.attention                  # attention found in Dynamo's graphs: metrics.AttentionMatch
    traces.graph_breaks               # where Dynamo split the code into graphs, and why: GraphBreak

Outside a `capture()` block nothing is kept, so normal runs hold no extra references. Graphs that run
eagerly are noted (and warned about, once per reason, at the user's line) whether or not anyone captures.
"""
from __future__ import annotations

import contextlib
import dataclasses
import linecache
import logging
import os
import re
import sys
import warnings
from typing import Any, Iterator

from ..errors import user_frame

_active: list["Traces"] = []
_warned: set[str] = set()


@dataclasses.dataclass
class GraphTrace:
    """One compiled graph: the ATen graph, its IR, its schedule and the generated module."""

    name: str
    gm: Any              # the ATen FX graph module
    lowered: Any
    schedule: Any
    generated: Any
    record: Any          # the metrics.GraphRecord (kernel names, fallbacks, source path, cache hit)
    shapes: Any = None   # a dynamic graph's lowering.symbolic.GraphShapes: reports give sizes at its hints

    @property
    def aten_graph(self) -> str:
        """The ATen graph as readable code (made only when asked: compiles don't pay for it)."""
        return self.gm.print_readable(print_output=False, include_stride=True, include_device=True)


@dataclasses.dataclass(frozen=True)
class EagerGraphNote:
    """A graph mini_inductor did not generate code for: it ran as its ATen ops, eagerly."""

    name: str
    reason: str
    source: str = ""     # the user's source line of the graph's first op with one, 'File "f.py", line 3, in g: code'
    hint: str = ""       # what the user can do about it

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    """Where Dynamo stopped a graph and started another (its graph_breaks log), and why."""

    source: str          # 'File "f.py", line 4, in f: print(y.shape)'
    reason: str          # Dynamo's reason, its first lines: 'Failed to trace builtin operator: Dynamo does not ...'

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


class Traces(list):
    """The GraphTraces of the compiled graphs, in order, plus `eager`: the graphs that ran eagerly,
    `per_size`: the dynamic graphs compiled per size because the symbolic compile failed, and
    `graph_breaks`: where Dynamo split the code into graphs."""

    def __init__(self):
        super().__init__()
        self.eager: list[EagerGraphNote] = []
        self.per_size: list[EagerGraphNote] = []
        self.attention: list = []       # metrics.AttentionMatch: attention found in Dynamo's graphs
        self.graph_breaks: list[GraphBreak] = []


@contextlib.contextmanager
def capture() -> Iterator[Traces]:
    traces = Traces()
    _active.append(traces)
    try:
        with _graph_breaks_to(traces.graph_breaks):
            yield traces
    finally:
        _active.remove(traces)


_BREAK_AT = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\nGraph Break Reason: ")


def graph_break_from_log(message: str) -> GraphBreak | None:
    """A GraphBreak from one message of Dynamo's graph_breaks log: its kind (the wrapping 'Encountered graph
    break when attempting to trace ...' line left out) and its explanation, at the user's line."""
    m = _BREAK_AT.search(message)
    if m is None:
        return None
    body = message[m.end():].split("\nUser code traceback:")[0]
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    kinds = [ln for ln in lines if not ln.startswith(("Encountered graph break", "Explanation:", "Hint:",
                                                       "Developer debug context:", "For more details"))]
    explanation = next((ln.removeprefix("Explanation:").strip() for ln in lines if ln.startswith("Explanation:")), "")
    reason = (kinds or lines or ["unknown"])[0].rstrip(":") + (f": {explanation}" if explanation else "")
    frame = re.search(rf'File "{re.escape(m["file"])}", line {m["line"]}, in ([\w<>.]+)', message)
    code = linecache.getline(m["file"], int(m["line"])).strip()
    source = f'File "{m["file"]}", line {m["line"]}' + (f", in {frame[1]}" if frame else "")
    return GraphBreak(source + (f": {code}" if code else ""), reason)


class _GraphBreakHandler(logging.Handler):
    def __init__(self, into: list[GraphBreak]):
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        found = graph_break_from_log(record.getMessage())
        # Dynamo logs a break it logged before again, without the user's stack: one entry per line and reason
        if found is not None and all(_place(b) != _place(found) for b in self.into):
            self.into.append(found)


def _place(b: GraphBreak) -> tuple[str, str]:
    return _SOURCE.match(b.source)[0], b.reason


@contextlib.contextmanager
def _graph_breaks_to(into: list[GraphBreak]) -> Iterator[None]:
    """Collect Dynamo's graph_breaks log (on at DEBUG for the block, printed nowhere unless TORCH_LOGS
    asked for it) into `into`."""
    try:
        from torch._dynamo import symbolic_convert
        logger = symbolic_convert.graph_break_log
    except (ImportError, AttributeError):   # another torch: no graph breaks listed
        yield
        return
    handler, level, propagate = _GraphBreakHandler(into), logger.level, logger.propagate
    logger.addHandler(handler)
    if not logger.isEnabledFor(logging.DEBUG):   # off (no TORCH_LOGS=graph_breaks): on for us alone
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def attention_found(records) -> None:
    """Attention found in a Dynamo graph (attention/match.py), matched or near misses, for every capture()."""
    for traces in _active:
        traces.attention.extend(records)


def capturing() -> bool:
    return bool(_active)


def record(trace: GraphTrace) -> None:
    for traces in _active:
        traces.append(trace)


# ─── graphs that run eagerly ───────────────────────────────────────────────────────────────────

def _hint(reason: str) -> str:
    if reason.startswith("dynamic shapes"):
        return ("drop options={'dynamic_shapes': 'eager'}: one compiled graph then serves every size "
                "(or, with 'per_size', each new input size gets its own)")
    if reason.startswith(("higher-order op", "data-dependent")):
        return ("move that code into a function decorated with @torch.compiler.disable so the rest "
                "of the graph compiles")
    if "TRITON_INTERPRET" in reason:
        return "set TRITON_INTERPRET=1 before Python starts, or run on a CUDA GPU"
    return "report it with the graph (options={'debug_dir': ...} dumps it); the results are eager's"


def ran_eagerly(name: str, reason: str, gm, warn_key: str | None = None) -> EagerGraphNote:
    """Note that graph `name` runs eagerly, for every capture(); warn (once per `warn_key`, never
    when it is None) at the user's source line of the graph, saying what to do."""
    note = EagerGraphNote(name, reason, first_source_line(gm), _hint(reason))
    for traces in _active:
        traces.eager.append(note)
    if warn_key is not None and warn_key not in _warned:
        _warned.add(warn_key)
        warn_at_user_code(f"mini_inductor: graph {name} runs eagerly (no generated code): {reason}. "
                          f"To compile it: {note.hint}.", note.source)
    return note


PER_SIZE_HINT = ("each new size gets its own compile; the reason names the op and the size expression "
                 "the symbolic compile could not take")


def compiled_per_size(name: str, reason: str, gm) -> EagerGraphNote:
    """Note, for every capture(), that dynamic graph `name` is compiled per size, and why; warn at the
    user's source line of the graph."""
    note = EagerGraphNote(name, reason, first_source_line(gm), PER_SIZE_HINT)
    for traces in _active:
        traces.per_size.append(note)
    warn_at_user_code(f"mini_inductor: graph {name} cannot be compiled once for every size ({reason}); it is "
                      "compiled for each new size instead", note.source)
    return note


def first_source_line(gm) -> str:
    """The user's source line of the first op of an FX graph that has one, or ''."""
    from ..lowering.graph import _source_line

    for node in gm.graph.nodes:
        if node.op == "call_function":
            line = _source_line(node)
            if line.startswith("File "):
                return line
    return ""


_SOURCE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def warn_at_user_code(message: str, source: str = "") -> None:
    """A UserWarning shown at `source` ('File "f.py", line 3, ...') when given, else at the innermost
    frame outside mini_inductor, torch and the import machinery: the user's call of the compiled code."""
    m = _SOURCE.match(source)
    if m:
        filename, lineno = m["file"], int(m["line"])
    else:
        filename, lineno = user_frame()
    # a fresh registry: the default filter's once-per-location would hide the next graph's warning
    warnings.warn_explicit(message, UserWarning, filename, lineno, registry={})


