"""Outputs that share storage in eager share it compiled: one a view of another, one returned twice, a
view of an input. A write through one output then shows in the others, as in eager; also with
autograd on, and when the compiled graph comes from the on-disk caches."""
import contextlib

import pytest
import torch

from common import assert_same_tensor, clone_input, compile_fn


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _sharing(outputs, inputs) -> list[list[bool]]:
    """Which outputs share storage with which outputs, then with which inputs."""
    return [[_storage(a) == _storage(b) for b in [*outputs, *inputs]] for a in outputs]


def _run(fn, args, grad: bool):
    inputs = [clone_input(a, requires_grad=grad) for a in args]
    with (contextlib.nullcontext() if grad else torch.no_grad()):
        return list(fn(*inputs)), inputs


def check_aliasing(fn, *args, grad: bool = False, runs: int = 2):
    """Compiled `fn` returns eager's outputs (values, shapes, strides, offsets), sharing storage among
    themselves and with the inputs exactly as eager's do; writing through each output in turn changes
    the other outputs and the inputs as it does in eager. `grad`: inputs require grad, grad mode on;
    else inference (no_grad)."""
    expected, eager_inputs = _run(fn, args, grad)
    compiled = compile_fn(fn)
    for run in range(runs):
        actual, inputs = _run(compiled, args, grad)
        label = f"run {run}"
        assert len(actual) == len(expected)
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same_tensor(a, e, f"{label} output {i}")
            assert a.storage_offset() == e.storage_offset() or not _shares_any(e, expected, eager_inputs), \
                f"{label} output {i}: storage offset {a.storage_offset()} != eager's {e.storage_offset()}"
        assert _sharing(actual, inputs) == _sharing(expected, eager_inputs), (
            f"{label}: storage sharing {_sharing(actual, inputs)} != eager's {_sharing(expected, eager_inputs)}")
        for i in range(len(expected)):
            with torch.no_grad():   # the write goes to the storage, as an in-place op of the caller's would
                expected[i].detach().add_(i + 1)
                actual[i].detach().add_(i + 1)
            for j, (a, e) in enumerate(zip(actual, expected)):
                assert_same_tensor(a, e, f"{label}: output {j} after writing into output {i}")
            for j, (a, e) in enumerate(zip(inputs, eager_inputs)):
                assert_same_tensor(a, e, f"{label}: input {j} after writing into output {i}")
        expected, eager_inputs = _run(fn, args, grad)   # fresh ones for the next run


def _shares_any(t, outputs, inputs) -> bool:
    return sum(_storage(t) == _storage(o) for o in [*outputs, *inputs]) > 1


def _permuted_times_two(x):
    return x.t() * 2    # eager's result is column-major, as its input's transpose


CASES = {
    "view_of_output": lambda x: (lambda y: (y, y.view(-1)))(x * 2),
    "slice_of_output": lambda x: (lambda y: (y, y[1:]))(x * 2),
    "transpose_of_output": lambda x: (lambda y: (y, y.t()))(x * 2),
    "output_returned_twice": lambda x: (lambda y: (y, y))(x * 2),
    "view_of_input_and_a_fresh_output": lambda x: (x.view(-1), x * 2),
    "two_views_of_input": lambda x: (x.t(), x[1:]),
    "input_returned_twice": lambda x: (x, x),
    "transpose_before_its_column_major_base": lambda x: (lambda y: (y.t(), y))(_permuted_times_two(x)),
    "column_major_base_before_its_transpose": lambda x: (lambda y: (y, y.t()))(_permuted_times_two(x)),
    "two_rows_of_a_column_major_intermediate": lambda x: (lambda y: (y[0], y[2]))(_permuted_times_two(x)),
    "transpose_of_a_column_major_base_read_twice":
        lambda x: (lambda y: (y.t(), y, y.sum(0)))((x.t() * 2).sin() + x.t().cos()),
    "views_of_a_reduction": lambda x: (lambda y: (y, y[1:], y.view(2, 2)))(x.sum(1)),
    "views_of_a_matmul": lambda x: (lambda y: (y, y.t(), y[0]))(x @ x),
}


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("case", list(CASES))
def test_outputs_share_storage_as_eager_does(device, case, grad):
    check_aliasing(CASES[case], torch.randn(4, 4, device=device), grad=grad)


def test_returned_views_of_an_input_mutated_in_place_see_the_mutation(device):
    def fn(x):
        x.mul_(2)
        return x.view(-1), x.t()
    check_aliasing(fn, torch.randn(4, 4, device=device))


def test_views_of_an_output_computed_before_an_input_mutation_keep_the_old_values(device):
    def fn(x):
        y = x.t() * 2
        x.add_(1)
        return y.t(), y, x
    check_aliasing(fn, torch.randn(4, 4, device=device))


@pytest.mark.gpu
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("case", ["transpose_before_its_column_major_base", "output_returned_twice",
                                  "two_rows_of_a_column_major_intermediate", "views_of_a_matmul"])
def test_outputs_of_cuda_graph_replays_share_storage_as_eager_does(case, grad):
    # warm-up, recording, then replays: each replay's outputs alias one another as the first run's did
    check_aliasing(CASES[case], torch.randn(4, 4, device="cuda"), grad=grad, runs=4)


# ── served from the on-disk caches ───────────────────────────────────────────────────────────
def _compile_fresh(fn, x, grad: bool, **options):
    """Compile and run `fn` with the in-process caches emptied, so only the disk can serve it: its
    outputs, its input, and how each graph it compiled was served."""
    from mini_inductor import metrics
    torch._dynamo.reset()
    before = len(metrics.compiled_graphs)
    x = clone_input(x, requires_grad=grad)
    with (contextlib.nullcontext() if grad else torch.no_grad()):
        out = torch.compile(fn, backend="mini_inductor", options=options)(x)
    return list(out), x, {g.cache for g in metrics.compiled_graphs[before:]}


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("front_cache", [False, True], ids=["aten_graph_level", "front_level"])
@pytest.mark.parametrize("case", ["transpose_before_its_column_major_base", "views_of_a_matmul",
                                  "view_of_input_and_a_fresh_output"])
def test_a_graph_served_from_disk_aliases_its_outputs_as_eager_does(case, front_cache, grad):
    from mini_inductor.caching import front_cache as front
    fn, x = CASES[case], torch.randn(4, 4)
    expected, eager_inputs = _run(fn, [x], grad)
    _, _, cold = _compile_fresh(fn, x, grad, front_cache=front_cache)
    actual, inp, warm = _compile_fresh(fn, x, grad, front_cache=front_cache)
    # the front level serves these inference graphs (one whose output aliases its input through torch's
    # runtime wrapper, built from the entry's metadata); a training graph's entry is written at its first
    # backward, which these runs do not make: the graph's own level serves it
    served_by_front = front_cache and not grad
    assert (cold, warm) == ({"miss"}, {front.LABEL if served_by_front else "disk"})
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_same_tensor(a, e, f"output {i}")
    assert _sharing(actual, [inp]) == _sharing(expected, eager_inputs)


def test_an_alias_of_attention_output_saved_for_backward_costs_no_kernel(device):
    # AOT autograd saves `alias(sdpa_out)` for the backward; a view never becomes a copy kernel
    # (seen on the H100 as triton_poi_fused_alias_... after F.scaled_dot_product_attention)
    import torch.nn.functional as F

    from mini_inductor.debug import trace

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(2) * 2

    q, k, v = (torch.randn(2, 4, 16, 16, device=device, requires_grad=True) for _ in range(3))
    with trace.capture() as traces:
        out = compile_fn(attend)(q, k, v)
        out.sum().backward()
    assert_same_tensor(out, attend(q, k, v), "output")
    forward = [t for t in traces if "alias" in t.aten_graph]
    assert forward, "the traced graphs save no alias: the premise of this test changed"
    kernels = [name for t in traces for name in t.record.kernel_names]
    assert kernels and not [name for name in kernels if "alias" in name]
