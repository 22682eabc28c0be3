"""Keep what each compile decided, while someone (the CLI, a test) is looking.

    with capture() as traces:
        compiled(x)
    traces[0].schedule.decisions      # every fusion candidate, fused or refused with a reason

Outside a `capture()` block nothing is kept, so normal runs hold no extra references.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

_active: list[list["GraphTrace"]] = []


@dataclasses.dataclass
class GraphTrace:
    """One compiled graph: the ATen graph, its IR, its schedule and the generated module."""

    name: str
    gm: Any              # the ATen FX graph module
    lowered: Any
    schedule: Any
    generated: Any
    record: Any          # the metrics.GraphRecord (kernel names, fallbacks, source path, cache hit)

    @property
    def aten_graph(self) -> str:
        """The ATen graph as readable code (made only when asked: compiles don't pay for it)."""
        return self.gm.print_readable(print_output=False, include_stride=True, include_device=True)


@contextlib.contextmanager
def capture() -> Iterator[list[GraphTrace]]:
    traces: list[GraphTrace] = []
    _active.append(traces)
    try:
        yield traces
    finally:
        _active.remove(traces)


def capturing() -> bool:
    return bool(_active)


def record(trace: GraphTrace) -> None:
    for traces in _active:
        traces.append(trace)
