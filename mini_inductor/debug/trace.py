"""Keep what each compile decided, while someone (the CLI, a test) is looking.

    with capture() as traces:
        compiled(x)
    traces[0].schedule.decisions      # every fusion candidate, fused or refused with a reason
    traces.eager                      # graphs that ran eagerly: EagerGraphNote(name, reason, source)
    traces.attention                  # attention found in Dynamo's graphs: metrics.AttentionMatch

Outside a `capture()` block nothing is kept, so normal runs hold no extra references. Graphs that run
eagerly are noted (and warned about, once per reason, at the user's line) whether or not anyone captures.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import warnings
from typing import Any, Iterator

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


class Traces(list):
    """The GraphTraces of the compiled graphs, in order, plus `eager`: the graphs that ran eagerly, and
    `per_size`: the dynamic graphs compiled per size because the symbolic compile failed."""

    def __init__(self):
        super().__init__()
        self.eager: list[EagerGraphNote] = []
        self.per_size: list[EagerGraphNote] = []
        self.attention: list = []       # metrics.AttentionMatch: attention found in Dynamo's graphs


@contextlib.contextmanager
def capture() -> Iterator[Traces]:
    traces = Traces()
    _active.append(traces)
    try:
        yield traces
    finally:
        _active.remove(traces)


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
        filename, lineno = _user_frame()
    # a fresh registry: the default filter's once-per-location would hide the next graph's warning
    warnings.warn_explicit(message, UserWarning, filename, lineno, registry={})


def _user_frame() -> tuple[str, int]:
    import torch

    skip = (os.path.dirname(os.path.dirname(__file__)) + os.sep, os.path.dirname(torch.__file__) + os.sep, "<frozen ")
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    if frame is None:
        return "<unknown>", 0
    return frame.f_code.co_filename, frame.f_lineno
