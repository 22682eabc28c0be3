"""Delta debugging over a failing program, and the standalone repro script it ends as.

    shrink(program, signature, evaluate, budget=120) -> Program
    repro_script(program, outcome) -> str

`evaluate(candidates)` runs programs (in workers) and returns their Outcomes; a candidate is kept
when it fails the same way (same Outcome.signature()). Candidates, smallest change first:
fewer outputs, dead statements gone, fewer or smaller other size sets (--dynamic; a failure found
at other sizes keeps the set it needs: Outcome.signature() says where it failed), one statement
dropped (with what reads it), a statement bypassed (its readers read its operand instead), simpler
inputs (contiguous, no grad, float32, smaller dims), a number argument written in as its value or kept
at its value in an other size set, unused inputs gone. Repeated until nothing
smaller fails the same way. The repro script calls the compiled function at every size set left.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Callable, Iterator

from .program import Program


def _with(p: Program, stmts=None, outputs=None, inputs=None) -> Program:
    return dataclasses.replace(p, stmts=tuple(p.stmts if stmts is None else stmts),
                               outputs=tuple(p.outputs if outputs is None else outputs),
                               inputs=tuple(p.inputs if inputs is None else inputs))


def _drop(p: Program, i: int) -> Program | None:
    """Program without statement i and every statement that (transitively) reads its value."""
    gone = {p.stmts[i].out}
    kept = []
    for j, s in enumerate(p.stmts):
        if j == i or gone & set(s.reads()):
            gone.add(s.out)
        else:
            kept.append(s)
    outs = [o for o in p.outputs if o not in gone]
    return _with(p, kept, outs) if outs else None


def _rename(expr: str, old: str, new: str) -> str:
    return re.sub(rf"\b{old}\b", new, expr)


def _bypass(p: Program, i: int) -> Iterator[Program]:
    """Statement i gone; whatever read its value reads one of its operands instead."""
    s = p.stmts[i]
    numbers = {spec.name for spec in p.scalars()}
    for operand in dict.fromkeys(r for r in s.reads() if r not in numbers):
        stmts = [dataclasses.replace(t, expr=_rename(t.expr, s.out, operand)) for t in p.stmts[i + 1:]]
        outs = list(dict.fromkeys(operand if o == s.out else o for o in p.outputs))
        yield _with(p, list(p.stmts[:i]) + stmts, outs)


def _prune(p: Program) -> Program:
    """Statements that no output needs (an in-place write on an input is always needed)."""
    return p.live()


def _unused_inputs(p: Program) -> Program:
    used = {r for s in p.stmts for r in s.reads()} | set(p.outputs)
    return _with(p, inputs=[i for i in p.inputs if i.name in used])


def _input_variants(p: Program) -> Iterator[Program]:
    for k, spec in enumerate(p.inputs):
        simpler = []
        if spec.layout != "contiguous":
            simpler.append(dataclasses.replace(spec, layout="contiguous"))
        if spec.requires_grad:
            simpler.append(dataclasses.replace(spec, requires_grad=False))
        if spec.dtype in ("float16", "bfloat16", "float64"):
            simpler.append(dataclasses.replace(spec, dtype="float32"))
        if spec.values is None and not p.size_sets:   # with size sets: _traced_size_variants
            for d, n in enumerate(spec.shape):
                for smaller in dict.fromkeys((1, n // 2)):
                    if 0 < smaller < n:
                        simpler.append(dataclasses.replace(
                            spec, shape=spec.shape[:d] + (smaller,) + spec.shape[d + 1:]))
        for s in simpler:
            yield _with(p, inputs=list(p.inputs[:k]) + [s] + list(p.inputs[k + 1:]))


def _traced_size_variants(p: Program) -> Iterator[Program]:
    """With other size sets: a traced size n made smaller in every input at once (its class, sizes.py; in
    the sets too where they leave it n), never to another class's size (that would tie them), and to 1
    only where no set varies it (Dynamo specializes 1: the other sizes would run another graph)."""
    varying = {n for i in p.inputs if i.values is None for other in i.other_shapes
               for n, m in zip(i.shape, other) if n != m}
    sizes = {n for i in p.inputs for n in i.shape}

    def resized(i, n, smaller):
        if i.values is not None:
            return i
        others = tuple(tuple(smaller if d == e == n else e for d, e in zip(i.shape, other)) for other in i.other_shapes)
        return dataclasses.replace(i, shape=tuple(smaller if d == n else d for d in i.shape), other_shapes=others)
    for n in sorted({n for i in p.inputs if i.values is None for n in i.shape if n >= 2}):
        for smaller in dict.fromkeys((1, 2, n // 2)):
            if smaller < n and ((smaller == 1 and n not in varying) or (smaller >= 2 and smaller not in sizes)):
                yield _with(p, inputs=[resized(i, n, smaller) for i in p.inputs])


def _size_set_variants(p: Program) -> Iterator[Program]:
    """Fewer other size sets (--dynamic), then smaller sizes in one: a new size n -> m of the set moved to
    2 (or half) in every input at once, as its class varies (sizes.py)."""
    if not p.size_sets:
        return
    yield _with(p, inputs=[dataclasses.replace(i, other_shapes=(), other_values=()) for i in p.inputs])
    for k in range(p.size_sets if p.size_sets > 1 else 0):
        yield _with(p, inputs=[dataclasses.replace(i, other_shapes=i.other_shapes[:k] + i.other_shapes[k + 1:],
                                                   other_values=i.other_values[:k] + i.other_values[k + 1:])
                               for i in p.inputs])
    for k in range(p.size_sets):
        pairs = dict.fromkeys((n, m) for i in p.inputs if i.values is None
                              for n, m in zip(i.shape, i.other_shapes[k]) if n != m)
        for n, m in pairs:
            for smaller in dict.fromkeys((2, m // 2)):
                if 2 <= smaller < m:
                    yield _with(p, inputs=[_resized(i, k, n, m, smaller) for i in p.inputs])


def _scalar_variants(p: Program) -> Iterator[Program]:
    """A number argument written into the program as its value (is it the argument that matters?), or
    kept at its traced value in one other size set."""
    for k, spec in enumerate(p.inputs):
        if not spec.is_scalar:
            continue
        literal = f"({spec.value!r})"
        stmts = [dataclasses.replace(t, expr=_rename(t.expr, spec.name, literal)) for t in p.stmts]
        if spec.name not in p.outputs:
            yield _with(p, stmts, inputs=list(p.inputs[:k]) + list(p.inputs[k + 1:]))
        for j, v in enumerate(spec.other_values):
            if v != spec.value:
                same = dataclasses.replace(spec, other_values=spec.other_values[:j] + (spec.value,) + spec.other_values[j + 1:])
                yield _with(p, inputs=list(p.inputs[:k]) + [same] + list(p.inputs[k + 1:]))


def _resized(spec, k: int, n: int, m: int, smaller: int):
    """`spec` with size m (traced n) of its other size set k made `smaller`."""
    if spec.values is not None:
        return spec
    shape = tuple(smaller if (a, b) == (n, m) else b for a, b in zip(spec.shape, spec.other_shapes[k]))
    return dataclasses.replace(spec, other_shapes=spec.other_shapes[:k] + (shape,) + spec.other_shapes[k + 1:])


def candidates(p: Program) -> Iterator[Program]:
    if len(p.outputs) > 1:
        for o in p.outputs:
            yield _with(p, outputs=[o])
        half = len(p.outputs) // 2
        yield _with(p, outputs=p.outputs[:half])
        yield _with(p, outputs=p.outputs[half:])
    pruned = _unused_inputs(_prune(p))
    if pruned != p:
        yield pruned
    yield from _size_set_variants(p)
    for i in range(len(p.stmts)):
        dropped = _drop(p, i)
        if dropped is not None:
            yield _unused_inputs(dropped)
    for i in range(len(p.stmts)):
        for q in _bypass(p, i):
            yield _unused_inputs(q)
    yield from _input_variants(p)
    yield from _scalar_variants(p)
    if p.size_sets:
        yield from _traced_size_variants(p)


def size(p: Program) -> tuple:
    elements = sum(len(i.shape) + sum(i.shape) + sum(len(s) + sum(s) for s in i.other_shapes) for i in p.inputs) + \
        sum(v != i.value for i in p.inputs for v in i.other_values)
    return (len(p.stmts), len(p.outputs), len(p.inputs), elements, len(p.to_source()))


def shrink(program: Program, signature: str, evaluate: Callable[[list[Program]], list],
           budget: int = 120, batch: int = 1) -> tuple[Program, int]:
    """The smallest program found that fails as `program` does, and how many candidates ran."""
    best = program
    tried = 0
    seen = {program.to_source()}
    improved = True
    while improved and tried < budget:
        improved = False
        pending = []
        for c in candidates(best):
            src = c.to_source()
            if src in seen or size(c) >= size(best):
                continue
            seen.add(src)
            pending.append(c)
            if len(pending) < batch:
                continue
            hit = _first_hit(pending, signature, evaluate)
            tried += len(pending)
            pending = []
            if hit is not None:
                best, improved = hit, True
                break
            if tried >= budget:
                break
        if not improved and pending and tried < budget:
            hit = _first_hit(pending, signature, evaluate)
            tried += len(pending)
            if hit is not None:
                best, improved = hit, True
    return best, tried


def _first_hit(pending: list[Program], signature: str, evaluate) -> Program | None:
    for c, outcome in zip(pending, evaluate(pending)):
        if outcome.signature() == signature:
            return c
    return None


REPRO = '''"""Fuzz repro {name} ({ops}): {cls} ({category}) under mini_inductor.
{detail}

Run: TRITON_INTERPRET=1 python {file} [cpu|cuda] [mini_inductor|aot_eager]
"""
import sys

import torch
import torch.nn.functional as F

import mini_inductor  # noqa: F401  registers the backend

AUTOGRAD = {autograd}
DYNAMIC = {dynamic}   # found under --dynamic: every size a symbol, mini_inductor's one compile for all
# after the traced call, the compiled function is called at these other input sizes too, each compared with
# eager at its sizes (make_inputs(device, sizes=k); tests/fuzz/sizes.py)
OTHER_SIZES = {other_sizes}
if {matmul_split}:     # found under --matmul-split: every matmul a template left to cuBLAS (tests/fuzz/execute.py)
    import os
    os.environ["MINI_FUZZ_MATMUL_SPLIT"] = "1"
    sys.path.insert(0, {root!r})
    from tests.fuzz.execute import matmul_split
    matmul_split()
if {matmul_tma}:       # found under --matmul-tma: every mm and addmm a template, TMA loads where allowed
    import os
    os.environ["MINI_FUZZ_MATMUL_TMA"] = "1"
    sys.path.insert(0, {root!r})
    from tests.fuzz.execute import matmul_tma
    matmul_tma()
if {flex}:             # flex attention: eager's CPU backward allowed, its warnings off (tests/fuzz/ops_flex.py)
    import warnings
    import torch.nn.attention.flex_attention
    torch.nn.attention.flex_attention._validate_device = lambda *args: None
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    warnings.filterwarnings("ignore", message="return_lse is deprecated")


{source}

def loss_of(outputs):
    gen = torch.Generator().manual_seed(1)
    terms = [(o * torch.empty(o.shape).uniform_(0.5, 1.5, generator=gen).to(o.device, o.dtype)).sum()
             for o in outputs if o.requires_grad and o.is_floating_point()]
    return sum(terms) if terms else None


def run(fn, device, sizes=0):
    inputs = make_inputs(device) if sizes == 0 else make_inputs(device, sizes)
    try:
        outputs = fn(*inputs)
    except ZeroDivisionError as err:    # a number argument 0 as a divisor: must raise compiled too
        return inputs, err
    except RuntimeError as err:
        if "ZeroDivisionError" not in str(err):
            raise
        return inputs, err
    loss = loss_of(outputs) if AUTOGRAD else None
    if loss is not None:
        loss.backward()
    return inputs, outputs


if __name__ == "__main__":
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    backend = sys.argv[2] if len(sys.argv) > 2 else "mini_inductor"
    dynamic = {{"dynamic": True, **({{"options": {{"dynamic_shapes": "symbolic"}}}} if backend == "mini_inductor" else {{}})}} \
        if DYNAMIC else {{}}
    compiled = torch.compile(f, backend=backend, fullgraph=True, **dynamic)
    if {warm}:   # found under --warm: the checks below run on a second compile after torch._dynamo.reset(), from the caches
        run(compiled, device)
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=backend, fullgraph=True, **dynamic)
    from torch._dynamo.utils import counters
    tols = {{torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float32: 1e-4, torch.float64: 1e-7}}
    observable = lambda t: [s for s, n in zip(t.stride(), t.shape) if n > 1]
    tensor = lambda x: isinstance(x, torch.Tensor)
    share = lambda outs, ins: [[j for j, x in enumerate(ins) if tensor(x) and o.numel() and x.numel() and
                                o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()] for o in outs]
    for sizes in range(1 + OTHER_SIZES):
        eager_inputs, expected = run(f, device, sizes)
        graphs = counters["stats"]["unique_graphs"]
        inputs, actual = run(compiled, device, sizes)
        at = f"sizes {{sizes}} ({{', '.join(str(tuple(x.shape)) if tensor(x) else repr(x) for x in inputs)}})"
        print(f"{{at}}{{': traced' if sizes == 0 else ''}}"
              f"{{': Dynamo recompiled' if sizes and counters['stats']['unique_graphs'] > graphs else ''}}")
        if isinstance(expected, Exception):
            assert isinstance(actual, Exception), f"{{at}}: eager raised {{expected!r}}, compiled returned"
            print(f"  both raised: eager {{type(expected).__name__}}, compiled {{type(actual).__name__}}")
            continue
        close = lambda a, e, what: torch.testing.assert_close(
            a, e, equal_nan=True, atol=tols.get(e.dtype, 0), rtol=tols.get(e.dtype, 0), msg=lambda m: f"{{at}}, {{what}}: {{m}}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            print(f"  output {{i}}: {{a.dtype}} {{tuple(a.shape)}} strides {{a.stride()}}; eager: {{e.dtype}} "
                  f"{{tuple(e.shape)}} strides {{e.stride()}}")
            close(a, e, f"output {{i}}")
            assert e.numel() <= 1 or observable(a) == observable(e), f"{{at}}, output {{i}}: strides differ from eager's"
        assert share(actual, inputs) == share(expected, eager_inputs), f"{{at}}: outputs alias other inputs than eager's"
        assert share(actual, actual) == share(expected, expected), f"{{at}}: outputs alias each other unlike eager's"
        for i, (a, e) in enumerate(zip(inputs, eager_inputs)):
            if not tensor(e):
                continue
            close(a, e, f"input {{i}} after the call")
            if AUTOGRAD and e.requires_grad:
                assert (a.grad is None) == (e.grad is None), \
                    f"{{at}}, grad of input {{i}}: {{'none' if a.grad is None else 'a tensor'}}, eager's {{'none' if e.grad is None else 'a tensor'}}"
                if e.grad is not None:
                    close(a.grad, e.grad, f"grad of input {{i}}")
    print("compiled matches eager")
'''


def repro_script(program: Program, outcome, file: str = "repro.py") -> str:
    detail = "\n".join("    " + ln for ln in outcome.detail.splitlines()[:8])
    return REPRO.format(name=program.name, ops=", ".join(program.ops()), cls=outcome.cls,
                        category=outcome.category, detail=detail.replace('"""', "'''"), file=file,
                        autograd=program.autograd, source=program.to_source(), other_sizes=program.size_sets,
                        dynamic=os.environ.get("MINI_FUZZ_DYNAMIC") == "1",
                        warm=os.environ.get("MINI_FUZZ_WARM") == "1",
                        matmul_split=os.environ.get("MINI_FUZZ_MATMUL_SPLIT") == "1",
                        matmul_tma=os.environ.get("MINI_FUZZ_MATMUL_TMA") == "1",
                        flex="flex" in program.families(),
                        root=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
