"""What this process keeps in memory between compiles: one object to look at and to clear.

    from mini_inductor.caching import PROCESS
    PROCESS.graphs        # in-process key → the compiled graph, its cache entry and trace (lookup.py)
    PROCESS.modules       # a generated module's source hash → the module, executed once (modules.py)
    PROCESS.hits          # how each compile of this process was served: memory, disk, miss, ...
    PROCESS.layout_timings  # a layout timing's key → (NCHW ms, channels-last ms) (lowering/layout_timing.py)
    print(PROCESS)        # a one-line summary; PROCESS.clear() forgets it all (mini_inductor.reset())
"""
from __future__ import annotations

import collections
import dataclasses
import types
from typing import Any


@dataclasses.dataclass
class ProcessCache:
    graphs: dict[str, Any] = dataclasses.field(default_factory=dict)
    modules: dict[str, types.ModuleType] = dataclasses.field(default_factory=dict)
    hits: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    layout_timings: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)

    def clear(self) -> None:
        self.graphs.clear()
        self.modules.clear()
        self.hits.clear()
        self.layout_timings.clear()

    def __repr__(self) -> str:
        served = ", ".join(f"{how} {n}" for how, n in sorted(self.hits.items())) or "nothing compiled yet"
        return (f"<mini_inductor process cache: {_count(len(self.graphs), 'compiled graph')}, "
                f"{_count(len(self.modules), 'generated module')}; compiles served: {served}>")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


PROCESS = ProcessCache()
