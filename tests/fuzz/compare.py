"""Compiled results against eager's: one function, returning (category, why) or None.

    compare_run(actual, expected, inputs, eager_inputs, reference) -> None | (category, why)

Categories, checked in this order: structure, dtype, shape, value, stride, alias, mutation.
  value     floats within a dtype tolerance (NaN/inf at the same places), integers and bools exact;
            a float output that misses the tolerance is settled against a float64 run of the
            program (tests/opinfo/compare.py's rule: no worse than twice eager's own error).
  stride    every output's strides on its dims of size > 1 (where a stride is observable):
            eager's layout is observable for dense results and views alike.
  alias     which inputs and which other outputs each output shares storage with.
  mutation  every input's value after the call.
Gradients (autograd mode) are compared on values only, with the same float64 rule: `compare_grads`.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from tests.opinfo.compare import against_reference

# (atol, rtol): a chain of fused ops computes in float32 and rounds once, eager rounds every step
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7),
              torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}


def _tolerance(dtype: torch.dtype, inputs=(), dtypes=()) -> tuple[float, float]:
    """The output dtype's (atol, rtol), or the loosest floating input's (or of `dtypes`, those it was
    computed in) when that is looser: a float64 output of float32 inputs (a layer norm .to(float64))
    is only as exact as float32 arithmetic."""
    tols = [TOLERANCES.get(dtype, (0, 0))] + [TOLERANCES[x.dtype] for x in inputs
                                               if isinstance(x, torch.Tensor) and x.dtype in TOLERANCES] \
        + [TOLERANCES[d] for d in dtypes if d in TOLERANCES]
    return max(t[0] for t in tols), max(t[1] for t in tols)


def _values(a: torch.Tensor, e: torch.Tensor, tolerance: tuple[float, float] | None = None) -> str | None:
    atol, rtol = tolerance or TOLERANCES.get(e.dtype, (0, 0))
    try:
        torch.testing.assert_close(a.detach().cpu(), e.detach().cpu(), atol=atol, rtol=rtol,
                                   equal_nan=True, check_stride=False, check_dtype=False)
    except AssertionError as err:
        lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
        return " ".join(lines[:4])
    return None


def _observable_strides(t: torch.Tensor) -> list:
    return [s for s, n in zip(t.stride(), t.shape) if n > 1]


def _storage(t: torch.Tensor):
    return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) and t.numel() else None


def _sharing(outputs, inputs) -> list:
    """For each output: (inputs sharing its storage, other outputs sharing its storage)."""
    out_ptrs = [_storage(o) for o in outputs]
    in_ptrs = [_storage(x) for x in inputs]
    return [(tuple(j for j, q in enumerate(in_ptrs) if p is not None and q == p),
             tuple(j for j, q in enumerate(out_ptrs) if p is not None and q == p and j != i))
            for i, p in enumerate(out_ptrs)]


def compare_tensor(a, e: torch.Tensor, what: str, reference: Callable | None = None,
                   strides: bool = True, inputs=(), dtypes=()):
    """`inputs`: the program's inputs, whose precision bounds the tolerance (_tolerance); `dtypes`:
    those the value was computed in (a gradient's: `gradient_dtypes`)."""
    if not isinstance(e, torch.Tensor):     # a number (an argument returned as it is)
        return None if type(a) is type(e) and a == e else ("structure", f"{what}: {a!r}, eager gave {e!r}")
    if not isinstance(a, torch.Tensor):
        return "structure", f"{what}: {type(a).__name__}, eager gave a tensor"
    if a.dtype != e.dtype:
        return "dtype", f"{what}: dtype {a.dtype} != eager's {e.dtype}"
    if a.shape != e.shape:
        return "shape", f"{what}: shape {tuple(a.shape)} != eager's {tuple(e.shape)}"
    tolerance = _tolerance(e.dtype, inputs, dtypes)
    bad = _values(a, e, tolerance)
    if bad is not None and e.is_floating_point() and reference is not None:
        r = reference()
        if isinstance(r, torch.Tensor) and r.shape == e.shape and r.is_floating_point():
            why = against_reference(a.detach(), e.detach(), r.detach(), tolerance)
            bad = None if why is None else f"{bad}; against float64: {why}"
    if bad is not None:
        return "value", f"{what}: {bad}"
    if strides and e.numel() > 1 and _observable_strides(a) != _observable_strides(e):
        return "stride", f"{what}: strides {tuple(a.stride())} != eager's {tuple(e.stride())} (shape {tuple(e.shape)})"
    return None


def _lazy_reference(reference: Callable[[], list] | None) -> Callable[[int], Any]:
    """i → the float64 reference's i-th value, computed at the first miss only (None if it cannot run)."""
    refs: list = []

    def ref(i):
        if reference is None:
            return None
        if not refs:
            try:
                refs.append(reference())
            except Exception:
                refs.append(None)
        return refs[0][i] if refs[0] is not None else None
    return ref


def compare_run(actual, expected, inputs, eager_inputs, reference: Callable[[], list] | None = None):
    """None when the compiled call behaved as eager's did; else (category, why)."""
    if not isinstance(actual, tuple) or len(actual) != len(expected):
        return "structure", f"outputs {type(actual).__name__} of {len(actual)} != eager's {len(expected)}"
    ref = _lazy_reference(reference)

    for i, (a, e) in enumerate(zip(actual, expected)):
        bad = compare_tensor(a, e, f"output {i}", lambda i=i: ref(i), inputs=eager_inputs)
        if bad:
            return bad
    got, want = _sharing(actual, inputs), _sharing(expected, eager_inputs)
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return "alias", (f"output {i} shares storage with inputs {g[0]} and outputs {g[1]}; "
                             f"eager's with inputs {w[0]} and outputs {w[1]}")
    for i, (a, e) in enumerate(zip(inputs, eager_inputs)):
        if not isinstance(e, torch.Tensor):     # a Python number argument: nothing to mutate
            continue
        bad = compare_tensor(a, e, f"input {i} after the call", strides=False)
        if bad:
            return "mutation", bad[1]
    return None


def gradient_dtypes(outputs, leaves) -> list[set]:
    """For each leaf: the float dtypes its gradient was computed in, its own among them. Those are the
    dtypes of every autograd node on a path from an output the loss flows through to the leaf (a
    node's forward outputs, which its incoming gradients have: torch's `_input_metadata`); a node off
    every such path (an output of another input, however exact) does not bound it (fuzz seed 953 prog
    57: a float64 input's gradient through log_softmax(..., dtype=float32), beside a float64 output
    computed from it directly, is float32's)."""
    roots = [o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    parents: dict = {}          # node -> the nodes whose backward feeds it
    seen, stack = set(), list(roots)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for child, _ in node.next_functions:
            if child is not None:
                parents.setdefault(child, []).append(node)
                stack.append(child)
    out = []
    for leaf in leaves:
        dtypes = {leaf.dtype} if isinstance(leaf, torch.Tensor) else set()
        starts = [n for n in seen if getattr(n, "variable", None) is leaf]
        on_path, stack = set(), starts
        while stack:
            node = stack.pop()
            if node in on_path:
                continue
            on_path.add(node)
            dtypes.update(m.dtype for m in getattr(node, "_input_metadata", ()))
            stack.extend(parents.get(node, ()))
        out.append({d for d in dtypes if d in TOLERANCES})
    return out


def compare_grads(inputs, eager_inputs, reference: Callable[[], list] | None = None, outputs=()):
    """Input gradients on values; a miss is settled against float64 gradients, as outputs are
    (a gradient through a normalization sums terms that cancel, so eager's own error can be large).
    `outputs`: eager's, whose autograd graph says which dtypes each gradient was computed in
    (`gradient_dtypes`): its tolerance is the loosest of theirs (a float64 input's gradient through
    a float32 log_softmax is float32's; a float32 input's through a float16 layer norm float16's).
    Not seen there: a saved value of another input's lower-precision chain that a float64 node's
    backward multiplies by (the float64 reference settles those, as it does any miss)."""
    ref = _lazy_reference(reference)
    chains = gradient_dtypes(outputs, eager_inputs)

    for i, (a, e) in enumerate(zip(inputs, eager_inputs)):
        if not (isinstance(e, torch.Tensor) and e.requires_grad):
            continue
        if (a.grad is None) != (e.grad is None):
            return "grad", f"grad of input {i}: {'none' if a.grad is None else 'a tensor'}, eager's " \
                           f"{'none' if e.grad is None else 'a tensor'}"
        if e.grad is not None:
            bad = compare_tensor(a.grad, e.grad, f"grad of input {i}", lambda i=i: ref(i), strides=False,
                                 dtypes=chains[i])
            if bad:
                return "grad", bad[1]
    return None
