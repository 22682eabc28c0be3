"""Pending backwards under CUDA-graph trees (cudagraph-tests.md §5 #4, #5; see TOP40.md): forwards
without a backward warn once and record nothing until a step is marked, chained forwards set the
pending flag and a backward clears it; a backward that never runs, or runs without graphs, leaves
nothing pending. The item number of the spec is in a comment above each group.
"""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
from cg_helpers import compiled, leaf, stats

pytestmark = pytest.mark.gpu


# --- #4 pending backwards ------------------------------------------------------------------------

def test_forwards_without_backward_warn_about_pending_backwards_and_record_nothing():
    lin = nn.Linear(8, 8).cuda()
    f = compiled(lin)
    keep = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            keep.append(f(torch.randn(4, 8, device="cuda")))
    msgs = [w for w in caught if "Unable to hit fast path of CUDAGraphs because of pending" in str(w.message)]
    assert len(msgs) == 1
    assert stats()["recordings"] == 0 and stats()["pending_backward"]


def test_torch_cudagraph_mark_step_begin_lets_forwards_without_backward_record():
    from torch._inductor.cudagraph_trees import MarkStepBox
    lin = nn.Linear(8, 8).cuda()
    f = compiled(lin)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(4):
                torch.compiler.cudagraph_mark_step_begin()
                x = torch.randn(4, 8, device="cuda")
                torch.testing.assert_close(f(x), lin(x))
        assert not [w for w in caught if "pending" in str(w.message)]
        assert stats()["recordings"] >= 1 and stats()["replays"] >= 1
    finally:
        MarkStepBox.mark_step_counter = 0    # later tests see Dynamo's generations again


def test_pending_flag_is_set_by_chained_forwards_and_cleared_by_backward():
    f = compiled(lambda x: x.sin() * 2)
    g = compiled(lambda y: y.cos() + 1)
    x = leaf(16)
    out = g(f(x))
    assert stats()["pending_backward"]
    out.sum().backward()
    assert not stats()["pending_backward"]
    for _ in range(2):
        x.grad = None
        g(f(x)).sum().backward()
        torch.testing.assert_close(x.grad, -torch.sin(torch.sin(x.detach()) * 2) * 2 * torch.cos(x.detach()))
    # without grad nothing is pending, so g's top-level call starts a new iteration and f's output
    # from the previous one is dead by then: the caller copies it, as Inductor requires too
    torch.testing.assert_close(g(f(x.detach()).clone()), torch.cos(torch.sin(x.detach()) * 2) + 1)
    assert not stats()["pending_backward"] and stats()["recordings"] > 0


# --- #5 a backward that never runs ---------------------------------------------------------------

def test_backward_never_run_for_one_of_two_graphs_records_three_graphs_and_leaves_nothing_pending():
    def fn(x, y):
        a = x * x * x
        torch._dynamo.graph_break()
        b = y * y * y
        return a, b
    f = compiled(fn)
    for _ in range(3):
        x, y = leaf(), leaf()
        a, b = f(x, y)
        a.sum().backward()                    # b's backward never runs
        torch.testing.assert_close(x.grad, 3 * x.detach() ** 2)
        torch.testing.assert_close(b, y.detach() ** 3)
    assert stats()["recordings"] == 3 and not stats()["pending_backward"]


def test_forward_graphed_with_its_backward_skipped_leaves_nothing_pending():
    conv = nn.Conv1d(2, 3, 3).cuda()
    ref = copy.deepcopy(conv)
    # the backward's convolution_backward is listed unsafe and partitioning is off: the backward skips
    f = compiled(conv, cudagraph_partition=False, cudagraph_unsafe_ops="aten.convolution_backward")
    for _ in range(3):
        x = torch.randn(2, 2, 8, device="cuda")
        f(x).sum().backward()
        ref(x).sum().backward()
        torch.testing.assert_close(conv.weight.grad, ref.weight.grad, atol=1e-4, rtol=1e-4)
        conv.zero_grad(), ref.zero_grad()
    s = stats()
    assert s["recordings"] == 1 and s["skips"] == 1 and not s["pending_backward"]
    assert "convolution_backward" in s["skip_reasons"][0]
