"""CUDA graphs under autograd's own machinery: how `.grad` accumulates (in place, or out of place
under create_graph) and compiled autograd, whose backward graph reads parameters in place.

The accumulation test runs on the CPU too (no graphs there: it checks the compiled semantics); on
the GPU the compiled graphs run from CUDA-graph trees and the same assertions hold.
"""

import pytest
import torch
import torch.nn as nn

import mini_inductor
from mini_inductor.runtime.cudagraphs.utils import counters

from mini_inductor.caching import PROCESS  # noqa: E402


def _grad_twice(fn, x, grad_output, create_graph):
    """Backward twice through one forward (the first keeps the graph); what `.grad` was after the
    first, a copy of its value then, and `.grad` after the second."""
    y = fn(x)
    y.backward(grad_output, retain_graph=True)
    first = x.grad
    first_value = x.grad.detach().clone()
    y.backward(grad_output, create_graph=create_graph)
    return first, first_value, x.grad


def _check_accumulation_matches_eager(device, rounds):
    def fn(x):
        return x * x + 2
    f = torch.compile(fn, backend="mini_inductor", dynamic=False)
    for _ in range(rounds):
        grad_output = torch.ones(5, 5, device=device)
        for create_graph in (False, True):
            base = torch.randn(5, 5, device=device)
            x, x_ref = base.clone().requires_grad_(), base.clone().requires_grad_()
            first, first_value, second = _grad_twice(f, x, grad_output, create_graph)
            ref_first, ref_first_value, ref_second = _grad_twice(fn, x_ref, grad_output, create_graph)
            torch.testing.assert_close(first_value, ref_first_value)
            torch.testing.assert_close(second, ref_second)
            torch.testing.assert_close(first, ref_first)   # in place: doubled; out of place: unchanged
            assert (second is first) == (ref_second is ref_first) == (not create_graph)
            assert second.requires_grad == ref_second.requires_grad == create_graph
            if create_graph:
                torch.testing.assert_close(first, first_value)
            else:
                torch.testing.assert_close(first, first_value * 2)


def test_grad_accumulates_in_place_and_out_of_place_under_create_graph_as_in_eager(device):
    _check_accumulation_matches_eager(device, rounds=1)


@pytest.mark.gpu
def test_grad_accumulation_under_cudagraphs_with_and_without_create_graph_matches_eager():
    _check_accumulation_matches_eager("cuda", rounds=3)   # warmup, recording, replay
    s = mini_inductor.cudagraphs.stats(0)
    assert s["recordings"] >= 2 and s["replays"] >= 2        # forward and backward ran from graphs


# --- compiled autograd ---------------------------------------------------------------------------

def _compiled_autograd_steps(device, steps, **options):
    """A Linear's backward through compiled autograd (a compiled function calls loss.backward());
    each step's weight and bias gradients, next to eager's."""
    torch.manual_seed(0)
    model = nn.Linear(6, 4, device=device)
    x = torch.randn(3, 6, device=device)

    got, want = [], []
    with torch._dynamo.config.patch(compiled_autograd=True):   # read when the compiled function is made
        @torch.compile(backend="mini_inductor", options=options or None)
        def bwd(loss):
            loss.backward()

        for _ in range(steps):
            out = model(x)
            bwd(out.sum())
            got.append([model.weight.grad.clone(), model.bias.grad.clone()])
            model.weight.grad = model.bias.grad = None
    out = model(x)
    out.sum().backward()
    want = [model.weight.grad, model.bias.grad]
    return got, want


def test_compiled_autograd_backward_graph_reads_parameters_as_static_inputs(device):
    got, want = _compiled_autograd_steps(device, 1)
    for grads in got:
        for g, w in zip(grads, want):
            torch.testing.assert_close(g, w)
    graphs = [e.compiled for e in PROCESS.graphs.values()]
    assert len(graphs) == 1                                    # the compiled-autograd graph
    graph = graphs[0]
    shapes = {i: spec.size for i, spec in enumerate(graph.module.INPUT_SPECS) if spec.size is not None}
    static_shapes = sorted(tuple(shapes[i]) for i in graph.static_input_idxs if i in shapes)
    assert static_shapes == [(4,), (4, 6)]                      # bias and weight, not x or the seed gradient


@pytest.mark.gpu
def test_compiled_autograd_treats_parameters_as_static_and_copies_two_inputs_in_total():
    # as in Inductor: warmup copies nothing, the recording copies the two non-parameter inputs (the
    # seed gradient and x), replays copy nothing new (stable-input reuse off so both count)
    got, want = _compiled_autograd_steps("cuda", 5, cudagraph_stable_inputs=False)
    for grads in got:
        for g, w in zip(grads, want):
            torch.testing.assert_close(g, w)
    s = mini_inductor.cudagraphs.stats(0)
    assert s["recordings"] == 1 and s["replays"] == 3
    assert counters["recorded_non_static_inputs"] == 2


@pytest.mark.gpu
def test_compiled_autograd_under_default_options_copies_at_most_the_two_non_parameter_inputs():
    got, want = _compiled_autograd_steps("cuda", 5)
    for grads in got:
        for g, w in zip(grads, want):
            torch.testing.assert_close(g, w)
    s = mini_inductor.cudagraphs.stats(0)
    assert s["recordings"] >= 1 and s["replays"] >= 1
    assert counters["recorded_non_static_inputs"] <= 2 * s["recordings"]
