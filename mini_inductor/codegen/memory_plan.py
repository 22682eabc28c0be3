"""Memory planning over the wrapper lines of one scope (the `call` function or one partition).

    del bufA                      (FreeLine: bufA goes to the pool under its reuse key)
    ...
    bufB = empty_strided(...)     (AllocateLine, same key: pops bufA)
        ↓
    (nothing)
    ...
    bufB = bufA; del bufA  # reuse

A key is (device, dtype, storage elements), so equal keys mean equal bytes. Only buffers allocated in
this scope go to the pool: a scope's outputs, inputs from other scopes, extern outputs (ATen
allocated them: their real strides are ATen's business) and buffers that an extern call may have
aliased (a view-returning ATen op) are never reused. Each scope has its own pool.
"""
from __future__ import annotations

from .wrapper import (AllocateLine, ExternCallLine, FreeLine, MultiOutputLine, PartitionCallLine, ReturnLine,
                      ReuseLine, WrapperLine)


def plan_reuse(lines: list[WrapperLine], *, outputs: set[str], never_reuse: set[str]) -> list[WrapperLine]:
    """Turn free → later same-key allocate into reuse lines; drop frees just before the return."""
    pool: dict[tuple, list[tuple[FreeLine, str]]] = {}
    allocated: dict[str, AllocateLine] = {}
    planned: list[WrapperLine] = []
    for line in lines:
        if isinstance(line, AllocateLine):
            stack = pool.get(line.reuse_key())
            if stack:
                free, old = stack.pop()  # the most recently freed: likeliest still in cache
                free.reused.add(old)
                previous = allocated.pop(old)
                line = ReuseLine(old, line, previous.size, previous.stride)
                allocated[line.name] = line.new
            else:
                allocated[line.name] = line
        elif isinstance(line, ReuseLine):
            previous = allocated.pop(line.old, None)
            allocated[line.name] = line.new
        elif isinstance(line, FreeLine):
            for name in line.names:
                alloc = allocated.get(name)
                if alloc is not None and name not in outputs and name not in never_reuse:
                    pool.setdefault(alloc.reuse_key(), []).append((line, name))
        planned.append(line)
    return _mark_trailing_frees(planned)


def _mark_trailing_frees(lines: list[WrapperLine]) -> list[WrapperLine]:
    """Frees right before `return` need no line: the names die with the frame. They stay in the
    list (printing nothing) so that the peak simulation still sees the memory go."""
    if not lines or not isinstance(lines[-1], ReturnLine):
        return lines
    k = len(lines) - 1
    while k > 0 and isinstance(lines[k - 1], FreeLine):
        lines[k - 1].at_return = True
        k -= 1
    return lines


def simulate_peak(lines: list[WrapperLine], nbytes: dict[str, int],
                  partitions: dict[str, tuple[int, int]] | None = None) -> tuple[int, int]:
    """(peak, final) bytes allocated by these lines above what was live before them.

    Allocations and extern outputs add their storage's bytes, unreused frees subtract them, a reuse
    moves a storage to a new name. `partitions` gives each partition function's own (peak, final).
    """
    live = peak = 0
    for line in lines:
        if isinstance(line, AllocateLine):
            live += line.nbytes()
        elif isinstance(line, (ExternCallLine, MultiOutputLine)):
            live += nbytes.get(line.name, 0)
        elif isinstance(line, FreeLine):
            live -= sum(nbytes.get(n, 0) for n in line.names if n not in line.reused)
        elif isinstance(line, PartitionCallLine) and partitions:
            sub_peak, sub_final = partitions[line.function]
            peak = max(peak, live + sub_peak)
            live += sub_final
        peak = max(peak, live)
    return peak, live
