"""Compiled outputs against eager's, with a float64 reference to settle low-precision disagreements.

    compare(actual, expected, dtype, values, reference=None) -> None (accepted) or why not

Every output must have eager's structure, dtype and shape (and, for values, eager's strides on the
dims that have more than one element). Values must be within the dtype's tolerance of eager's. For
float16/bfloat16 a compiled result that misses that may still be right where eager is not: eager
rounds every intermediate to 16 bits, a fused kernel computes in float32. Then `reference()` (the
op run on the inputs upcast to float64) decides, as Inductor's own tests do: the output is accepted
when its NaN/inf placement matches eager's or the reference's, and at every finite element its
error against the reference is within the dtype's tolerance of the reference or no worse than
`REFERENCE_FACTOR` times eager's largest error against it (where the float64 value overflows the
dtype, a finite answer must be eager's). A wrong answer is still rejected: it is far from the
reference as well as from eager.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

TOLERANCES = {torch.float32: (1e-5, 1e-4), torch.float64: (1e-7, 1e-7),
              torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}
LOW_PRECISION = (torch.float16, torch.bfloat16)
# How much worse than eager's own error (both against the float64 reference) a compiled result may be.
REFERENCE_FACTOR = 2.0


def compare(actual, expected, dtype: torch.dtype, values: bool,
            reference: Callable[[], Any] | None = None) -> str | None:
    """None when `actual` (compiled) matches `expected` (eager); otherwise what differs.

    `reference()` gives the float64 outputs; it is called (once) only when a float16/bfloat16
    output misses eager's tolerance.
    """
    act, act_spec = pytree.tree_flatten(actual)
    exp, exp_spec = pytree.tree_flatten(expected)
    if act_spec != exp_spec:
        return f"output structure {act_spec} != eager's {exp_spec}"
    refs: list | None = None
    for i, (a, e) in enumerate(zip(act, exp)):
        if not isinstance(e, torch.Tensor):
            if values and a != e and not (isinstance(e, float) and e != e and a != a):
                return f"output {i}: {a!r} != eager's {e!r}"
            continue
        bad = _structure(a, e, values)
        if bad or not values:
            if bad:
                return f"output {i}: {bad}"
            continue
        bad = _values(a, e)
        if bad is None:
            continue
        if e.dtype in LOW_PRECISION and reference is not None:
            if refs is None:
                refs = _flat_reference(reference, len(exp))
            r = refs[i] if refs else None
            if isinstance(r, torch.Tensor) and r.shape == e.shape and r.is_floating_point():
                why = against_reference(a, e, r)
                if why is None:
                    continue
                bad = f"{bad}; against float64: {why}"
        return f"output {i}: {bad}"
    return None


def _structure(a, e: torch.Tensor, values: bool) -> str | None:
    if not isinstance(a, torch.Tensor):
        return f"{type(a).__name__}, eager gave a tensor"
    if a.dtype != e.dtype:
        return f"dtype {a.dtype} != eager's {e.dtype}"
    if a.shape != e.shape:
        return f"shape {tuple(a.shape)} != eager's {tuple(e.shape)}"
    if values and e.numel() > 1:
        # strides of size-1 dims are not observable (and an empty tensor has none to speak of)
        sa = [st for st, n in zip(a.stride(), a.shape) if n > 1]
        se = [st for st, n in zip(e.stride(), e.shape) if n > 1]
        if sa != se:
            return f"stride {tuple(a.stride())} != eager's {tuple(e.stride())}"
    return None


def _values(a: torch.Tensor, e: torch.Tensor) -> str | None:
    atol, rtol = TOLERANCES.get(e.dtype, (0, 0))
    try:
        torch.testing.assert_close(a.cpu(), e.cpu(), atol=atol, rtol=rtol, equal_nan=True, check_stride=False)
    except AssertionError as err:
        lines = str(err).strip().splitlines()
        return lines[0] + " " + " ".join(lines[1:4])
    return None


def _flat_reference(reference: Callable[[], Any], n: int) -> list:
    """The reference's flat outputs; an empty list when the op cannot run in float64."""
    try:
        refs = pytree.tree_leaves(reference())
    except Exception:
        return []
    return refs if len(refs) == n else []


def against_reference(a: torch.Tensor, e: torch.Tensor, r: torch.Tensor,
                      tolerance: tuple[float, float] | None = None) -> str | None:
    """None when compiled `a` is at least about as close to the float64 reference `r` as eager's `e`
    (or within `tolerance`, default the dtype's)."""
    a, e = a.detach().cpu(), e.detach().cpu()
    # the reference rounded to the output dtype: where the true value overflows, inf is right
    r = r.detach().cpu().to(a.dtype).to(torch.float64)
    if not (_same_nonfinite(a, e) or _same_nonfinite(a, r)):
        return "NaN/inf placement differs from eager's and from the reference's"
    a64, e64 = a.to(torch.float64), e.to(torch.float64)
    atol, rtol = tolerance or TOLERANCES[a.dtype]
    # finite where the true value overflows (eager finite there too): the reference cannot judge it
    beyond = torch.isfinite(a64) & ~torch.isfinite(r)
    if beyond.any() and not torch.allclose(a64[beyond], e64[beyond], atol=atol, rtol=rtol):
        return "differs from eager where the float64 value is beyond the dtype's range"
    finite = torch.isfinite(a64) & torch.isfinite(r)
    if not finite.any():
        return None
    err_a = (a64 - r).abs()[finite]
    eager_ok = finite & torch.isfinite(e64)
    worst_eager = float((e64 - r).abs()[eager_ok].max()) if eager_ok.any() else 0.0
    allowed = torch.clamp(atol + rtol * r.abs()[finite], min=REFERENCE_FACTOR * worst_eager)
    over = err_a > allowed
    if over.any():
        k = int(over.nonzero()[0])
        return (f"error {float(err_a[k]):.3g} at a finite element exceeds max({atol} + {rtol}*|ref|, "
                f"{REFERENCE_FACTOR} x eager's worst error {worst_eager:.3g})")
    return None


def _same_nonfinite(x: torch.Tensor, y: torch.Tensor) -> bool:
    """NaNs at the same places, and infinities of the same sign at the same places."""
    if not torch.equal(torch.isnan(x), torch.isnan(y)):
        return False
    xi, yi = torch.isinf(x), torch.isinf(y)
    if not torch.equal(xi, yi):
        return False
    return not xi.any() or torch.equal(x[xi].to(torch.float64), y[yi].to(torch.float64))
