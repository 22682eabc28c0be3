"""Option cudagraph_capture_sizes: only the listed sizes of a graph's dynamic dims are graphed.

The CPU tests check the option's parsing and the per-size specialization (under Triton's
interpreter there are no CUDA graphs, but the listed sizes still get their static compiles and the
others run eagerly with a counted skip); the GPU tests count recordings.
"""
import copy

import pytest
import torch
from cg_helpers import train_step_matches_eager
import torch.nn as nn

import mini_inductor
from mini_inductor import config as config_module
from mini_inductor.config import Config, normalize_capture_sizes
from mini_inductor.runtime.cudagraphs.capture_sizes import sizes_key
from mini_inductor.runtime.cudagraphs.utils import counters, skip_reasons

from mini_inductor.caching import PROCESS  # noqa: E402


def _dynamic(x, *dims):
    for d in dims:
        torch._dynamo.mark_dynamic(x, d)
    return x


def _specialized_keys():
    """The sizes keys of the static specializations compiled so far."""
    return {entry.compiled.sizes_key for entry in PROCESS.graphs.values()} - {None}


def _size_skips():
    return [r for r in skip_reasons if "not in cudagraph_capture_sizes" in r]


# --- the option -----------------------------------------------------------------------------------

def test_capture_sizes_option_accepts_ints_tuples_and_strings():
    assert normalize_capture_sizes(None) is None
    assert normalize_capture_sizes([2, 5, 7]) == (2, 5, 7)
    assert normalize_capture_sizes([(2, 3), [4, 8], (5,)]) == ((2, 3), (4, 8), 5)   # a 1-tuple is its int
    assert normalize_capture_sizes("2, 5, 7") == (2, 5, 7)
    assert normalize_capture_sizes("[2, 5, 7]") == (2, 5, 7)
    assert normalize_capture_sizes("(2, 3), (4, 8)") == ((2, 3), (4, 8))
    assert normalize_capture_sizes("(2, 3)") == ((2, 3),)          # one pair, not the sizes 2 and 3
    assert normalize_capture_sizes(4) == (4,)
    assert Config(cudagraph_capture_sizes=[3, (1, 2)]).cudagraph_capture_sizes == (3, (1, 2))
    assert Config().replace(cudagraph_capture_sizes="6,7").cudagraph_capture_sizes == (6, 7)


@pytest.mark.parametrize("bad", ["2, x", [2.5], [(2, "a")], [True], "{1: 2}", [()]])
def test_capture_sizes_option_rejects_other_values_with_a_clear_message(bad):
    with pytest.raises(ValueError, match="cudagraph_capture_sizes"):
        Config(cudagraph_capture_sizes=bad)


def test_capture_sizes_option_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("MINI_INDUCTOR_CUDAGRAPH_CAPTURE_SIZES", "(2, 3), (4, 8)")
    assert config_module._from_env().cudagraph_capture_sizes == ((2, 3), (4, 8))


def test_sizes_key_is_an_int_for_one_dynamic_dim_and_a_tuple_for_several():
    x = torch.zeros(3, 4, 5)
    assert sizes_key([(0, 0)], [x]) == 3
    assert sizes_key([(1, None), (0, 2)], [x, 9]) == (9, 5)
    assert sizes_key([], [x]) is None


# --- specialization per listed size (CPU: the same compiles, no graphs) ---------------------------

def test_listed_sizes_get_static_compiles_and_others_run_eagerly_with_a_counted_skip(device):
    def fn(x):
        return (x.sin() + 1).view(-1, 2) * x.shape[0]
    f = torch.compile(fn, backend="mini_inductor", options={"cudagraph_capture_sizes": [2, 5]})
    for n in range(2, 7):
        x = _dynamic(torch.randn(n, 4, device=device), 0)
        for _ in range(2):
            torch.testing.assert_close(f(x), fn(x))
    assert _specialized_keys() == {2, 5}
    skips = _size_skips()
    assert len(skips) == 3 and counters["skips"] >= 3          # 3, 4, 6: each logged and counted once
    assert "skipping cudagraphs due to dynamic sizes 3 not in cudagraph_capture_sizes [2, 5]" in skips[0]


def test_capture_size_tuples_follow_the_order_of_the_dynamic_dims(device):
    def fn(x):
        return x.cos() * 2 + x.sum(1, keepdim=True)
    pairs = [(2, 3), (3, 2)]
    f = torch.compile(fn, backend="mini_inductor", options={"cudagraph_capture_sizes": pairs})
    for rows in (2, 3):
        for cols in (2, 3):
            x = _dynamic(torch.randn(rows, cols, device=device), 0, 1)
            torch.testing.assert_close(f(x), fn(x))
    assert _specialized_keys() == set(pairs)
    assert len(_size_skips()) == 2                              # (2, 2) and (3, 3)


def test_int_sizes_for_a_graph_of_several_dynamic_dims_say_what_a_listed_size_must_be(device):
    # dynamic=True makes both dims dynamic: the key is (rows, 3), which the ints 2 and 4 never match
    f = torch.compile(lambda x: x.sin() * 2, backend="mini_inductor", dynamic=True,
                      options={"cudagraph_capture_sizes": [2, 4]})
    x = torch.randn(4, 3, device=device)
    torch.testing.assert_close(f(x), x.sin() * 2)
    (skip,) = _size_skips()
    assert ("dynamic sizes (4, 3) not in cudagraph_capture_sizes [2, 4] (the graph runs eagerly at these sizes); "
            "this graph has 2 dynamic dims (dim 0 of a 4x3 input, dim 1 of a 4x3 input), so each listed size "
            "must be a tuple of 2") in skip, skip


def test_a_failed_specialization_runs_the_graph_eagerly_with_one_counted_skip(device, monkeypatch):
    from mini_inductor.runtime.cudagraphs import capture_sizes

    def broken(gm, args):
        raise RuntimeError("retrace broke")
    monkeypatch.setattr(capture_sizes, "specialize", broken)
    f = torch.compile(lambda x: x.exp() * 2, backend="mini_inductor", options={"cudagraph_capture_sizes": [3]})
    for _ in range(2):
        x = _dynamic(torch.randn(3, 4, device=device), 0)
        torch.testing.assert_close(f(x), x.exp() * 2)
    failed = [r for r in skip_reasons if "failed static compile for dynamic sizes 3" in r]
    assert len(failed) == 1 and "retrace broke" in failed[0]


def test_capture_sizes_do_nothing_when_cudagraphs_are_off(device):
    f = torch.compile(lambda x: x.tanh() + 1, backend="mini_inductor",
                      options={"cudagraphs": False, "cudagraph_capture_sizes": [2]})
    for n in (2, 3):
        x = _dynamic(torch.randn(n, 4, device=device), 0)
        torch.testing.assert_close(f(x), x.tanh() + 1)
    assert _specialized_keys() == set() and not _size_skips()


def test_training_step_with_a_dynamic_batch_specializes_forward_and_backward(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.SiLU(), nn.Linear(8, 3)).to(device)
    ref = copy.deepcopy(model)
    f = torch.compile(model, backend="mini_inductor", options={"cudagraph_capture_sizes": [2]})
    for n in (2, 3, 2):
        x = _dynamic(torch.randn(n, 4, device=device), 0)
        out = f(x)
        out.pow(2).sum().backward()
        want = ref(x)
        want.pow(2).sum().backward()
        torch.testing.assert_close(out, want)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None
    kinds = {(e.compiled.kind, e.compiled.sizes_key) for e in PROCESS.graphs.values()}
    assert {("forward", 2), ("backward", 2)} <= kinds
    assert len(_size_skips()) == 2                              # forward and backward at size 3


def test_graph_without_dynamic_dims_logs_a_skip_while_capture_sizes_is_set(monkeypatch):
    from cg_helpers import fake_cuda_module, pretend_cuda
    from mini_inductor.runtime import CompiledGraph
    pretend_cuda(monkeypatch)
    cfg = Config(cudagraph_capture_sizes=[4])
    graph = CompiledGraph("inference_3", fake_cuda_module(["cuda:0"]), "", {}, cfg=cfg)
    assert graph.tree_functions == []
    assert skip_reasons == ["skipping cudagraphs due to a graph without dynamic dims while "
                            "cudagraph_capture_sizes is set. Found from : \n inference_3"]


# --- on the GPU: recordings ----------------------------------------------------------------------

def _recordings():
    return mini_inductor.cudagraphs.stats(0).get("recordings", 0)


@pytest.mark.gpu
def test_only_listed_capture_sizes_are_recorded_and_others_run_ungraphed():
    def fn(x):
        return x.sin() * 3 + 1
    f = torch.compile(fn, backend="mini_inductor", options={"cudagraph_capture_sizes": (2, 5, 7)})
    for n in range(2, 10):
        x = _dynamic(torch.randn(n, 16, device="cuda"), 0)
        for _ in range(3):
            torch.testing.assert_close(f(x), fn(x))
    assert _recordings() == 3
    assert len(_size_skips()) == 5                              # 3, 4, 6, 8, 9
    assert mini_inductor.cudagraphs.stats(0)["replays"] >= 3   # the third call at each listed size


@pytest.mark.gpu
def test_capture_size_pairs_record_one_graph_per_listed_pair():
    def fn(x):
        return x.relu() + x.mean()
    pairs = [(2, 3), (3, 4), (4, 2), (5, 5)]
    f = torch.compile(fn, backend="mini_inductor", options={"cudagraph_capture_sizes": pairs})
    for rows in range(2, 6):
        for cols in range(2, 6):
            x = _dynamic(torch.randn(rows, cols, device="cuda"), 0, 1)
            for _ in range(2):                                  # warmup, then the recording
                torch.testing.assert_close(f(x), fn(x))
    assert _recordings() == 4
    assert len(_size_skips()) == 16 - 4


@pytest.mark.gpu
def test_capture_size_triples_over_three_dynamic_dims():
    def fn(x):
        return x * 2 - 1
    triples = [(2, 2, 2), (2, 3, 4), (3, 3, 3), (4, 2, 3)]
    f = torch.compile(fn, backend="mini_inductor", options={"cudagraph_capture_sizes": triples})
    for a in range(2, 5):
        for b in range(2, 5):
            for c in range(2, 5):
                x = _dynamic(torch.randn(a, b, c, device="cuda"), 0, 1, 2)
                for _ in range(2):
                    torch.testing.assert_close(f(x), fn(x))
    assert _recordings() == 4


@pytest.mark.gpu
def test_graph_without_dynamic_dims_is_not_captured_while_capture_sizes_is_set():
    f = torch.compile(lambda x: x.exp() + 1, backend="mini_inductor", dynamic=False,
                      options={"cudagraph_capture_sizes": [4]})
    x = torch.randn(4, device="cuda")
    for _ in range(3):
        torch.testing.assert_close(f(x), x.exp() + 1)
    assert mini_inductor.cudagraphs.get_manager(0) is None
    assert any("without dynamic dims" in r for r in skip_reasons)


@pytest.mark.gpu
def test_training_with_capture_sizes_records_listed_batch_and_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 4)).cuda()
    ref = copy.deepcopy(model)
    # (address-stable inputs off: a tangent that happens to come back at one address would add a
    # recording when it later moves, an allocator coincidence this count is not about)
    f = torch.compile(model, backend="mini_inductor",
                      options={"cudagraph_capture_sizes": [8], "cudagraph_stable_inputs": False})
    for n in (8, 8, 8, 6, 8, 6):
        x = _dynamic(torch.randn(n, 16, device="cuda"), 0)
        train_step_matches_eager(f, model, ref, x)
    assert _recordings() == 2                                   # forward and backward at batch 8
    assert len(_size_skips()) == 2                              # forward and backward at batch 6
