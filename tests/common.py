"""`check`: compile a function with mini_inductor and assert it behaves exactly like eager.

    from common import check
    check(lambda x: torch.relu(x * 2 + 1).sum(-1), torch.randn(8, 16), kernels=1)

What "behaves like eager" means (DESIGN.md, invariant 1):
  * every output has eager's value (within the dtype's tolerance), dtype, shape and strides
    (strides compared on the dims of size > 1, where a stride is observable);
  * an output aliases an input exactly when eager's does (same storage);
  * inputs mutated in place end up with eager's values;
  * with grad=True, the input gradients of a backward pass match eager's.

MINI_TEST_BACKEND picks the backend under test (default "mini_inductor"). Running the suite with
MINI_TEST_BACKEND=eager or aot_eager checks the tests themselves; kernel-count and fallback
assertions are then skipped, since only mini_inductor generates kernels.
"""
from __future__ import annotations

import os

import torch
from torch.utils import _pytree as pytree

BACKEND = os.environ.get("MINI_TEST_BACKEND", "mini_inductor")
COUNTS_KERNELS = BACKEND == "mini_inductor"

# (atol, rtol) per dtype. Eager rounds every intermediate to the dtype while a fused kernel
# computes in fp32 and rounds once, so low-precision results may differ by a few ulps.
TOLERANCES = {
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (3e-2, 3e-2),
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def _metrics():
    from mini_inductor import metrics  # only imported when the backend under test is ours
    return metrics


def reset_metrics() -> None:
    if COUNTS_KERNELS:
        _metrics().reset()


def compile_fn(fn):
    """torch.compile with the backend under test, one graph (a graph break is a test failure)."""
    if BACKEND == "mini_inductor":
        import mini_inductor  # noqa: F401  registers the backend
    return torch.compile(fn, backend=BACKEND, fullgraph=True)


def clone_input(x, requires_grad: bool = False):
    """A copy of `x` with the same sizes, strides and storage offset (a transposed or sliced input stays so)."""
    if not isinstance(x, torch.Tensor):
        return x
    with torch.no_grad():
        storage = x.untyped_storage()
        copy = torch.empty(0, dtype=x.dtype, device=x.device)
        new_storage = torch.UntypedStorage(storage.nbytes(), device=x.device)
        new_storage.copy_(storage)
        copy.set_(new_storage, x.storage_offset(), x.size(), x.stride())
    if requires_grad:
        copy.requires_grad_(True)
    return copy


def tolerance(dtype: torch.dtype, atol=None, rtol=None):
    default_atol, default_rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    return (default_atol if atol is None else atol), (default_rtol if rtol is None else rtol)


def assert_same_tensor(actual: torch.Tensor, expected: torch.Tensor, what: str, atol=None, rtol=None,
                       check_stride: bool = True) -> None:
    """Value (within dtype tolerance), dtype, shape, device and observable strides."""
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != eager's {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != eager's {tuple(expected.shape)}"
    assert actual.device == expected.device, f"{what}: device {actual.device} != eager's {expected.device}"
    if check_stride and expected.numel() > 0:
        # A stride is only observable on a dim with more than one element.
        dims = [d for d in range(expected.dim()) if expected.size(d) > 1]
        got = [actual.stride(d) for d in dims]
        want = [expected.stride(d) for d in dims]
        assert got == want, (f"{what}: strides {actual.stride()} != eager's {expected.stride()} "
                             f"(compared on dims {dims} of size {tuple(expected.shape)})")
    a, r = tolerance(expected.dtype, atol, rtol)
    torch.testing.assert_close(actual.detach(), expected.detach(), atol=a, rtol=r, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def assert_step_like_eager(compiled, fn, x: torch.Tensor, *args, what: str = "") -> None:
    """compiled(x, *args) against fn on a copy of x that requires grad: the output, then x's gradient
    under the same random weighting of the output."""
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, ref = compiled(ours, *args), fn(theirs, *args)
    assert_same_tensor(out, ref, what)
    w = torch.randn(ref.shape)
    (out * w).sum().backward()
    (ref * w).sum().backward()
    assert_same_tensor(ours.grad, theirs.grad, f"{what} grad")


def _storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _aliased_input(out: torch.Tensor, inputs) -> int | None:
    """Index of the input tensor whose storage `out` shares, or None."""
    if out.numel() == 0:
        return None
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.numel() > 0 and _storage_ptr(x) == _storage_ptr(out):
            return i
    return None


def _compare(actual, expected, actual_inputs, expected_inputs, atol, rtol, check_stride, label):
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    act_leaves, act_spec = pytree.tree_flatten(actual)
    assert act_spec == exp_spec, f"{label}: output structure {act_spec} != eager's {exp_spec}"
    for i, (a, e) in enumerate(zip(act_leaves, exp_leaves)):
        what = f"{label} output {i}"
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"{what}: got {type(a).__name__}, eager returned a tensor"
            assert_same_tensor(a, e, what, atol, rtol, check_stride)
            want = _aliased_input(e, expected_inputs)
            got = _aliased_input(a, actual_inputs)
            assert got == want, (f"{what}: aliases input {got}, eager's aliases input {want}"
                                 " (None = a fresh tensor)")
        else:
            assert a == e, f"{what}: {a!r} != eager's {e!r}"
    for i, (a, e) in enumerate(zip(actual_inputs, expected_inputs)):
        if isinstance(e, torch.Tensor):
            assert_same_tensor(a, e, f"{label} input {i} after the call (in-place mutation)", atol, rtol,
                               check_stride=True)


def _backward_loss(outputs, seed: int):
    """A scalar from every floating output, weighted by fixed random tensors so that a gradient
    routed to the wrong element does not cancel out (a plain sum would give all-ones grads)."""
    gen = torch.Generator().manual_seed(seed)
    loss = None
    for out in pytree.tree_leaves(outputs):
        if isinstance(out, torch.Tensor) and out.requires_grad and out.dtype.is_floating_point:
            weight = torch.randn(out.shape, generator=gen, dtype=torch.float32, device="cpu").to(out.device, out.dtype)
            term = (out * weight).sum()
            loss = term if loss is None else loss + term
    assert loss is not None, "grad=True but no output requires grad"
    return loss


def check(fn, *args, kernels: int | None = None, atol=None, rtol=None, grad: bool = False,
          check_stride: bool = True, runs: int = 2):
    """Run `fn(*args)` eagerly and compiled and assert they agree (see the module docstring).

    kernels: the number of Triton kernels mini_inductor must generate (counted after the first call).
    atol, rtol: override the dtype's tolerance.
    grad: make every floating input a leaf that requires grad; compare input grads after backward.
    runs: how many times the compiled function is called (the second call runs already-compiled code).
    Returns a copy of the compiled function's outputs from the first call.
    """
    def fresh_inputs():
        return [clone_input(a, requires_grad=grad and isinstance(a, torch.Tensor) and a.dtype.is_floating_point)
                for a in args]

    eager_inputs = fresh_inputs()
    expected = fn(*eager_inputs)
    if grad:
        _backward_loss(expected, seed=1).backward()

    compiled = compile_fn(fn)
    reset_metrics()
    first = None
    for run in range(runs):
        inputs = fresh_inputs()
        actual = compiled(*inputs)
        if run == 0:
            # a copy: on a GPU the next run replays a CUDA graph over the first run's outputs
            first = pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, actual)
            if kernels is not None and COUNTS_KERNELS:
                metrics = _metrics()
                got = metrics.total_kernels()
                names = [n for g in metrics.compiled_graphs for n in g.kernel_names]
                assert got == kernels, f"expected {kernels} Triton kernels, got {got}: {names}"
        label = f"run {run}"
        _compare(actual, expected, inputs, eager_inputs, atol, rtol, check_stride, label)
        if grad:
            _backward_loss(actual, seed=1).backward()
            for i, (a, e) in enumerate(zip(inputs, eager_inputs)):
                if isinstance(e, torch.Tensor) and e.requires_grad:
                    assert a.grad is not None, f"{label}: input {i} got no gradient"
                    assert_same_tensor(a.grad, e.grad, f"{label} grad of input {i}", atol, rtol,
                                       check_stride=False)
    return first


def assert_fallback(op_substring: str) -> None:
    """mini_inductor counted a fallback to an ATen op whose name contains `op_substring`."""
    if not COUNTS_KERNELS:
        return
    fallbacks = _metrics().total_fallbacks()
    assert any(op_substring in str(op) for op in fallbacks), (
        f"expected a fallback op matching {op_substring!r}, metrics counted {dict(fallbacks)}")


def assert_no_fallbacks() -> None:
    if not COUNTS_KERNELS:
        return
    fallbacks = _metrics().total_fallbacks()
    assert not fallbacks, f"expected no fallback ops, metrics counted {dict(fallbacks)}"


def kernels_generated() -> int | None:
    """Triton kernels since the last reset, or None when the backend under test is not mini_inductor."""
    return _metrics().total_kernels() if COUNTS_KERNELS else None


def generated_sources() -> str:
    """The generated modules' source (wrapper and kernels) of every graph compiled since the last reset."""
    text = ""
    for rec in _metrics().compiled_graphs:
        with open(rec.source_path) as f:
            text += f.read()
    return text


def caches_per_call(fn, value_sets, step) -> list:
    """Per set of values (each a process: after torch._dynamo.reset()), the caches that served each
    call `step(compiled, value)` of `fn` compiled by mini_inductor (GraphRecord.cache of the graphs the
    call compiled or served). `step` runs the call and checks it."""
    from mini_inductor import metrics
    runs = []
    for values in value_sets:
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="mini_inductor")
        served = []
        for value in values:
            first = len(metrics.compiled_graphs)
            step(compiled, value)
            served.append([r.cache for r in metrics.compiled_graphs[first:]])
        runs.append(served)
    return runs
