"""Memory planning over the wrapper lines of one scope (the `call` function or one partition).

    del bufA                      (FreeLine: bufA goes to the pool under its reuse key)
    ...
    bufB = empty_strided(...)     (AllocateLine, same key: pops bufA)
        ↓
    (nothing)
    ...
    bufB = bufA; del bufA  # reuse

A key is (device, dtype, storage elements), so equal keys mean equal bytes. Only buffers allocated in
this scope go to the pool, whether a kernel's (AllocateLine) or ATen's (an extern call whose output
is a fresh tensor: its `fresh` layout is the FakeTensor's, which is what ATen allocates). Never
reused: a scope's outputs, inputs from other scopes, and every name of an alias group (a view or an
in-place result and its base), since the other names could still read the storage. Each scope has
its own pool.
"""
from __future__ import annotations

from ..lowering.ir import buffer_names
from .wrapper_ir import (AllocateLine, ExternCallLine, FreeLine, KernelCallLine, MultiOutputLine, PartitionCallLine,
                         ReturnLine, ReuseLine, WrapperLine)


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
            allocated.pop(line.old, None)
            allocated[line.name] = line.new
        elif isinstance(line, (ExternCallLine, MultiOutputLine)) and line.fresh is not None:
            allocated[line.name] = line.fresh
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


def verify_lifecycle(lines: list[WrapperLine], *, inputs: set[str], outputs: set[str],
                     never_reuse: set[str] = frozenset()) -> list[str]:
    """Check one scope's planned lines; return the problems found (an empty list: the plan is sound).

    Every buffer is defined (allocated, reused into, made by an extern call or a partition) or is a
    scope input before its first use, and is not used after it is freed or handed to a reuse; no
    name is freed twice; the scope's outputs are never freed or reused; a reuse takes a dead buffer
    (pool) or a buffer the very next kernel reads (in place), never one in `never_reuse` (aliased).
    """
    live = set(inputs)
    dead: dict[str, str] = {}            # name → how it died ("freed", "reused by bufN", ...)
    pooled: set[str] = set()             # freed, and promised to a later reuse
    problems: list[str] = []

    def use(name: str, where: str) -> None:
        if name in live:
            return
        if name in dead:
            problems.append(f"{where} uses {name} after it was {dead[name]}")
        else:
            problems.append(f"{where} uses {name} before it is allocated")

    def define(name: str, where: str) -> None:
        if name in live:
            problems.append(f"{where} defines {name}, which is already live")
        live.add(name)
        dead.pop(name, None)

    def kill(name: str, how: str, where: str) -> None:
        if name in outputs:
            problems.append(f"{where} {how.split()[0]} {name}, an output of this scope")
        if name not in live:
            use(name, where)
        live.discard(name)
        dead[name] = how

    for k, line in enumerate(lines):
        where = f"line {k} ({type(line).__name__})"
        if isinstance(line, AllocateLine):
            define(line.name, where)
        elif isinstance(line, ReuseLine):
            if line.old in never_reuse:
                problems.append(f"{where} reuses {line.old}, whose storage another name may alias")
            if line.inplace:
                nxt = next((ln for ln in lines[k + 1:] if isinstance(ln, KernelCallLine)), None)
                if nxt is None or line.name not in nxt.args:
                    problems.append(f"{where} writes {line.name} in place of {line.old}, "
                                    "but the next kernel does not take it")
                kill(line.old, f"reused in place by {line.name}", where)
            elif line.old in pooled:
                pooled.discard(line.old)
                dead[line.old] = f"reused by {line.name}"
                if line.old in outputs:
                    problems.append(f"{where} reuses {line.old}, an output of this scope")
            else:
                problems.append(f"{where} reuses {line.old}, which was not freed first")
                kill(line.old, f"reused by {line.name}", where)
            define(line.name, where)
        elif isinstance(line, FreeLine):
            for name in line.names:
                if name in dead:
                    problems.append(f"{where} frees {name} again (it was {dead[name]})")
                    continue
                kill(name, "freed", where)
                if name in line.reused:
                    pooled.add(name)
        elif isinstance(line, KernelCallLine):
            for name in line.args:
                use(name, f"{where} {line.kernel}")
        elif isinstance(line, ExternCallLine):
            for name in line.buffer_args():
                use(name, where)
            define(line.name, where)
        elif isinstance(line, MultiOutputLine):
            use(line.parent, where)
            define(line.name, where)
        elif isinstance(line, PartitionCallLine):
            for name in line.inputs:
                use(name, f"{where} {line.function}")
            for name in line.freed_inside:
                kill(name, f"freed inside {line.function}", where)
            for name in line.outputs:
                define(name, where)
        elif isinstance(line, ReturnLine):
            for value in line.values:
                for name in [value] if isinstance(value, str) else buffer_names(value):
                    use(name, where)
    for name in sorted(pooled):
        problems.append(f"{name} was promised to a reuse that never came")
    return problems
