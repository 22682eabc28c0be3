"""Other input sizes for a program under --dynamic: the compiled function, traced once with every size a
symbol, is also called at these, each call compared with eager at its sizes (execute.py).

    with_other_sizes(program, sets=2) -> Program     # each input's `other_shapes` filled in
    size_classes(program) -> [n, ...]                 # the traced sizes that may vary

Sizes vary by class: every input dim of one traced size n (n >= 2) is one class and takes one new size.
That is the partition Dynamo's duck sizing makes (input dims of equal size share a symbol when traced),
so each equality between dims that the program relies on (broadcast partners, a matmul's inner dims, a
norm's weight and its rows, a cat's other dims) holds at the new sizes as at the traced ones, and dims
of size 0 and 1 (which Dynamo specializes, and broadcasting treats apart) keep their size. A size that
is a dim of a fixed-values input (an index tensor) does not vary: the program ties it to those values.
New sizes are distinct from each other and from the sizes that never vary (no new equality either;
a class the fallback below leaves at its size may meet one, which is harmless: nothing needs two dims
to differ): one set from 2..7, one larger than traced (up to 2n + 1, at most 13), odd sizes likelier.

Literal sizes left in the program (a view's shape, a slice's stop, a narrow's length, a group count)
may still tie a class to its value, so a set is kept only where the program still means the same:
eager runs it and its backward, every statement gives a value of the same dtype and rank as at the
traced sizes, with its size-0 and size-1 dims at the same places (the same broadcasts, the same
specializations), at most 4096 elements, and the operands of value-checked ops (ops.py `domain`)
still in their domain. A class that breaks that keeps its traced size: all classes are tried, then
those that pass alone, added one at a time. A set left with no class varied is dropped.

Among valid sizes, those that pass the guards of torch's own trace of the program (dynamic=True,
backend aot_eager: Dynamo's and AOT autograd's guards, none of a compiler's) come first: duck sizing
also ties sizes to strides and to the bases of input views, AOT autograd specializes some dims, and a
size that breaks such a guard recompiles, where the point is to run the graph compiled at the traced
sizes. Only where no class can vary without that are the guards set aside (the call then recompiles,
which execute.py counts). None of this makes a set valid: eager does (above). A recompile left is
then one that no varied size avoids, or a guard of mini_inductor's own.

Python-number arguments (ops_scalar.py) vary too, each a class of its own keyed by its name: an int from
-5..7 in the first set and -12..13 in the second (0, 1 and -1 likelier: Dynamo specializes 0 and 1 at
trace time, not after), a float from -3..3 (-10..10 in the second) or 0.0; up to four values are tried for each, the first
that keeps the program's structure (with the sets' sizes, else alone) kept. A divisor (`nonzero`) is
never 0 there; instead, where eager raises ZeroDivisionError with every int divisor 0 (and all else
traced), that is one more set, last, at which the compiled call must raise too (execute.py).
Without --dynamic a program with numbers gets such sets too, its sizes as traced (`numbers_only`): the
calls there recompile (Dynamo's automatic dynamic makes an int a SymInt the second time, a float a
0-d tensor), which is where a cache keyed on the graph can serve a compile made for another value.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import random
import zlib

import torch
import torch.nn.functional as F

from .program import Program

OTHER_SIZE_SETS = 2
MAX_OTHER_SIZE = 13
MAX_ELEMENTS = 4096     # as a drawn statement's value (generate.py)


def other_size_sets() -> int:
    """How many other size sets a program is drawn with: OTHER_SIZE_SETS under --dynamic
    (MINI_FUZZ_DYNAMIC=1, which the worker processes inherit), else none."""
    return OTHER_SIZE_SETS if os.environ.get("MINI_FUZZ_DYNAMIC") == "1" else 0


def size_classes(program: Program) -> list[int]:
    fixed = {n for spec in program.inputs if spec.values is not None for n in spec.shape}
    return sorted({n for spec in program.inputs if spec.values is None for n in spec.shape
                   if n >= 2 and n not in fixed})


def with_other_sizes(program: Program, sets: int = OTHER_SIZE_SETS, numbers_only: bool = False) -> Program:
    """`program` with up to `sets` other size sets (fewer where the program ties its sizes; none without
    a size class or a number argument). Deterministic per program. numbers_only: the sizes stay as traced,
    only the number arguments vary (without --dynamic: generate.py)."""
    program = _with_shapes(program, [])
    classes = [] if numbers_only else size_classes(program)
    scalars = program.scalars()
    if not (classes or scalars) or sets <= 0:
        return program
    traced = _structure(program, {})
    if traced is None:
        return program
    rng = random.Random(zlib.crc32(f"{program.seed}:{program.index}:{program.input_seed}:sizes".encode()))
    fixed = {0, 1} | {n for spec in program.inputs for n in spec.shape} - set(classes)
    cached = functools.lru_cache(maxsize=None)(lambda items: _structure(program, dict(items)))

    def structure(mapping: dict) -> list | None:
        return cached(tuple(sorted(mapping.items(), key=lambda kv: (isinstance(kv[0], str), kv[0]))))
    guards = None if numbers_only else _dynamo_guards(program)
    chosen: list[dict] = []
    try:
        for k in range(sets):
            mapping = _draw(rng, classes, larger=k % 2 == 1, taken=fixed)
            for spec in scalars:
                value = _draw_value(rng, spec, larger=k % 2 == 1,
                                    valid=lambda v: structure({**mapping, spec.name: v}) == traced
                                    or structure({spec.name: v}) == traced)
                if value is not None:
                    mapping[spec.name] = value
            kept = {}
            for strict in ((True, False) if guards else (False,)):
                kept = _largest_valid(mapping, lambda m: structure(m) == traced and (not strict or guards(m)))
                if kept:
                    break
            if kept and kept not in chosen:
                chosen.append(kept)
        zero = {spec.name: 0 for spec in scalars if spec.nonzero and spec.dtype == "int"}
        if zero and raises_zero_division(program, zero):
            chosen.append(zero)
    finally:
        torch._dynamo.reset()
    return _with_shapes(program, chosen)


def _draw(rng: random.Random, classes: list[int], larger: bool, taken: set) -> dict[int, int]:
    """A new size for each class: odd sizes three times as likely (a block of a power of two is then
    partly masked); set 0 from 2..7, set 1 above the traced size."""
    mapping: dict[int, int] = {}
    used = set(taken)
    for n in classes:
        if larger:
            pool = [v for v in dict.fromkeys(list(range(n + 1, n + 6)) + [2 * n + 1]) if v <= MAX_OTHER_SIZE]
        else:
            pool = [v for v in range(2, 8) if v != n]
        free = [v for v in pool if v not in used] or [v for v in pool if v not in taken]
        if not free:
            continue
        v = rng.choices(free, weights=[3 if v % 2 else 1 for v in free])[0]
        mapping[n] = v
        used.add(v)
    return mapping


def _draw_value(rng: random.Random, spec, larger: bool, valid) -> int | float | None:
    """Another value for Python-number argument `spec`: the first of up to four drawn that `valid` takes
    (0 never for a divisor), None if none."""
    tried = []
    for _ in range(4):
        if spec.dtype == "int":
            pool = list(range(-12, 14) if larger else range(-5, 8))
            pool = [v for v in pool if v != spec.value and not (spec.nonzero and v == 0) and v not in tried]
            if not pool:
                return None
            v = rng.choices(pool, weights=[3 if v in (0, 1, -1) else 1 for v in pool])[0]
        else:
            v = 0.0 if not spec.nonzero and rng.random() < 0.2 else \
                round(rng.uniform(-10, 10) if larger else rng.uniform(-3, 3), 2)
            if v == spec.value or v in tried or (spec.nonzero and v == 0):
                continue
        tried.append(v)
        if valid(v):
            return v
    return None


def raises_zero_division(program: Program, mapping: dict) -> bool:
    """Whether eager raises dividing by zero at `mapping` (a Python ZeroDivisionError, or torch's for an
    integer tensor divided by 0) in a statement the outputs need: the set where the compiled call must
    raise too (execute.py). (A dead statement's division a compiler leaves out, as AOT autograd does.)"""
    from .generate import _quiet, backward

    program = program.live()
    try:
        with _quiet():
            inputs = _inputs(program, mapping)
            scope = {"torch": torch, "F": F, **{spec.name: x for spec, x in zip(program.inputs, inputs)}}
            for stmt in program.stmts:
                scope[stmt.out] = eval(stmt.expr, scope)
            if program.autograd:
                backward([scope[o] for o in program.outputs])
    except Exception as err:
        return is_zero_division(err)
    return False


def is_zero_division(err: BaseException) -> bool:
    return isinstance(err, ZeroDivisionError) or "ZeroDivisionError" in str(err)


def _largest_valid(mapping: dict[int, int], valid) -> dict[int, int]:
    """The classes of `mapping` kept where `valid` holds: all of them, or those that pass alone, added
    one at a time."""
    if not mapping or valid(mapping):
        return mapping
    kept: dict[int, int] = {}
    for n in [n for n in mapping if valid({n: mapping[n]})]:
        trial = {**kept, n: mapping[n]}
        if len(trial) == 1 or valid(trial):
            kept = trial
    return kept


def _dynamo_guards(program: Program):
    """mapping -> whether the inputs at those sizes pass the guards torch made tracing the program at its
    traced sizes with dynamic=True (aot_eager: no compiler's guards); None where it cannot trace it.
    (A strided input's stride 2 duck-sized with another input's size 2 is such a guard.)"""
    from .generate import _quiet
    from .program import load

    try:
        with _quiet():
            make_inputs, f = load(program)
            torch._dynamo.reset()
            torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)(*make_inputs("cpu"))
            entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(f.__code__)
    except Exception:
        return None
    if len(entries) != 1:
        return None
    names = [spec.name for spec in program.inputs]

    def passes(mapping: dict[int, int]) -> bool:
        try:
            with _quiet():
                inputs = _inputs(program, mapping)
                return bool(entries[0].guard_manager.check(dict(zip(names, inputs))))
        except Exception:
            return False
    return passes


def _shape(spec, mapping: dict[int, int]) -> tuple:
    return tuple(spec.shape) if spec.values is not None else tuple(mapping.get(n, n) for n in spec.shape)


def _at(spec, mapping: dict):
    """The input as `mapping` builds it: its size classes mapped, a number given its value there."""
    if spec.is_scalar:
        return dataclasses.replace(spec, value=mapping.get(spec.name, spec.value), other_shapes=(), other_values=())
    return dataclasses.replace(spec, shape=_shape(spec, mapping), other_shapes=())


def _with_shapes(program: Program, mappings: list[dict]) -> Program:
    inputs = tuple(dataclasses.replace(spec, other_shapes=tuple(_shape(spec, m) for m in mappings),
                                       other_values=tuple(mapping.get(spec.name, spec.value) for mapping in mappings)
                                       if spec.is_scalar else ())
                   for spec in program.inputs)
    return dataclasses.replace(program, inputs=inputs)


def _inputs(program: Program, mapping: dict[int, int]) -> list:
    """The program's CPU inputs with its size classes mapped: as make_inputs builds them."""
    scope = {"torch": torch, "g": torch.Generator().manual_seed(program.input_seed), "device": "cpu"}
    for spec in program.inputs:
        exec(_at(spec, mapping).source(), scope)
    return [scope[spec.name] for spec in program.inputs]


def _structure(program: Program, mapping: dict[int, int]) -> list | None:
    """Per statement: its value's dtype and, per dim, whether it is 0, 1 or more; None where eager (or its
    backward) raises at the sizes `mapping` gives, or a value is too large or leaves an op's domain."""
    from .generate import _quiet, backward
    from .ops import OPS

    domains = {spec.name: spec.domain for spec in OPS if spec.domain is not None}
    try:
        with _quiet():
            inputs = _inputs(program, mapping)
            if any(isinstance(x, torch.Tensor) and x.numel() > MAX_ELEMENTS for x in inputs):
                return None
            scope = {"torch": torch, "F": F, **{spec.name: x for spec, x in zip(program.inputs, inputs)}}
            out = []
            for stmt in program.stmts:
                domain = domains.get(stmt.op)
                if domain is not None and stmt.reads() and not domain(scope[stmt.reads()[0]]):
                    return None
                value = eval(stmt.expr, scope)
                if not isinstance(value, torch.Tensor) or value.numel() > MAX_ELEMENTS:
                    return None
                scope[stmt.out] = value
                out.append((value.dtype, tuple(min(n, 2) for n in value.shape)))
            outputs = [scope[o] for o in program.outputs]
            if program.autograd:
                backward(outputs)
    except Exception:
        return None
    return out
