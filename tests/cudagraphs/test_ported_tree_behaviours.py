"""Top-40 behaviours of cudagraph-tests.md §5 that the other files did not yet port (see TOP40.md):
steady state with odd inputs and outputs, training on one stream, pending backwards, teardown, pool
reuse, static inputs and re-recording, dynamic shapes, tree shape, checkpoints, output reuse and
aliasing, hooks and the autocast cache. The tests name the behaviour; the item number is in a comment.
"""
import copy
import gc
import logging
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cg_helpers import manager, tree_fn

import mini_inductor
from mini_inductor.runtime import CompiledGraph
from mini_inductor.runtime.cudagraphs.utils import counters, pool_blocks, pool_segments

pytestmark = pytest.mark.gpu

from mini_inductor.caching import PROCESS  # noqa: E402


def stats():
    return mini_inductor.cudagraphs.stats(0)


def compiled(fn, **options):
    return torch.compile(fn, backend="mini_inductor", dynamic=False, options=options or None)


def step():
    mini_inductor.mark_step()


def leaf(*shape):
    return torch.rand(*(shape or (20, 20)), device="cuda", requires_grad=True)


def graphed_partitions() -> int:
    """Partitions run from CUDA graphs, over every graph compiled in this test."""
    return sum(len(e.compiled.tree_functions) for e in PROCESS.graphs.values()
               if isinstance(e.compiled, CompiledGraph))


def tree_roots() -> list[list[int]]:
    return sorted(manager().tree_shape().values())


# --- #1 inference steady state -------------------------------------------------------------------

def test_meta_tensor_input_does_not_block_capture():
    def fn(m, x):
        return m + 1, x * 2
    f = compiled(fn)
    for _ in range(4):
        m, x = torch.randn(4, device="meta"), torch.randn(8, device="cuda")
        a, b = f(m, x)
        assert a.device.type == "meta" and a.shape == (4,)
        torch.testing.assert_close(b, x * 2)
    assert stats()["recordings"] == 1


def test_empty_cpu_tensor_output_does_not_block_capture():
    def fn(x):
        return x @ x, torch.empty(2, 3, device="cpu")
    f = compiled(fn)
    for _ in range(4):
        x = torch.randn(8, 8, device="cuda")
        y, e = f(x)
        torch.testing.assert_close(y, x @ x, atol=1e-3, rtol=1e-3)
        assert e.device.type == "cpu" and e.shape == (2, 3)
    assert stats()["recordings"] == 1


def matmul(x, y):
    return x @ y


def test_run_only_mode_replays_without_new_recordings():
    f = compiled(matmul)
    x, y = torch.randn(16, 16, device="cuda"), torch.randn(16, 16, device="cuda")
    for _ in range(3):
        torch.testing.assert_close(f(x, y), x @ y, atol=1e-3, rtol=1e-3)
    assert stats()["recordings"] == 1
    run_only = torch._dynamo.run(matmul)          # cached code only, no new compile
    for _ in range(3):
        torch.testing.assert_close(run_only(x, y), x @ y, atol=1e-3, rtol=1e-3)
    assert stats()["recordings"] == 1 and stats()["replays"] >= 4


def test_expanded_input_is_graphed_and_matches_eager():
    f = compiled(lambda x: x + 4 + torch.ones(4, 6, device="cuda"))
    for _ in range(3):
        x = torch.randn(1, 6, device="cuda").expand(4, 6)
        torch.testing.assert_close(f(x), x + 5)
    assert stats()["recordings"] == 1


# --- #2 training loop ----------------------------------------------------------------------------

def test_training_records_forward_and_backward_once_each_on_one_stream():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8)).cuda()
    ref = copy.deepcopy(model)
    f = compiled(model, cudagraph_stable_inputs=False)
    for _ in range(4):
        x = torch.randn(4, 32, device="cuda")
        out = f(x)
        out.sum().backward()
        ref(x).sum().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
            p.grad = q.grad = None
    s = stats()
    assert s["recordings"] == 2 and s["replays"] >= 4
    pool = manager().pool
    streams = {seg["stream"] for seg in torch.cuda.memory_snapshot()
               if tuple(seg.get("segment_pool_id", ())) == tuple(pool)}
    assert len(streams) == 1


class CpuHop(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = self.a(x)
        h = F.relu(h.cpu()).cuda()          # a CPU op in the middle of the forward
        return self.b(h)


def test_training_with_a_cpu_op_records_one_graph_per_gpu_partition_and_matches_eager():
    torch.manual_seed(0)
    model = CpuHop().cuda()
    ref = copy.deepcopy(model)
    f = compiled(model)
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(5):
        x, target = torch.randn(8, 16, device="cuda"), torch.randint(0, 4, (8,), device="cuda")
        loss = F.cross_entropy(f(x), target)
        ref_loss = F.cross_entropy(ref(x), target)
        loss.backward()
        ref_loss.backward()
        torch.testing.assert_close(loss, ref_loss, atol=1e-4, rtol=1e-4)
        opt.step(), ref_opt.step()
        opt.zero_grad(), ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-4)
    assert graphed_partitions() >= 3                      # the forward is cut in two at least
    assert stats()["recordings"] == graphed_partitions() and stats()["skips"] == 0


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


# --- #6 teardown ---------------------------------------------------------------------------------

def test_reset_with_outputs_alive_drops_the_manager_and_leaves_no_pool_memory_once_they_die():
    f = compiled(lambda x: x * 2 + 1)
    outs = [f(torch.randn(1 << 16, device="cuda")) for _ in range(4)]   # warmup, recording, replays
    pool = manager().pool
    torch._dynamo.reset()
    assert mini_inductor.cudagraphs.get_manager(0) is None
    del outs, f
    gc.collect()
    torch.cuda.empty_cache()
    assert pool_blocks(pool) == [] and pool_segments(pool) == 0


# --- #7 pool reuse across generations ------------------------------------------------------------

def test_each_new_warmup_or_recording_reclaims_the_older_outputs_pool_memory():
    f = compiled(lambda x: x * 2 + 1)
    y = f(torch.zeros(5, device="cuda"))                   # warmup
    assert manager().live_pool_blocks() == 1
    y = f(torch.zeros(5, device="cuda"))                   # recording: the warmup output is freed
    assert manager().live_pool_blocks() == 1
    y = f(torch.zeros(6, device="cuda"))                   # a new shape: a new root warms up
    assert manager().live_pool_blocks() == 1
    y = f(torch.zeros(6, device="cuda"))                   # and is recorded
    assert manager().live_pool_blocks() == 1
    assert y.tolist() == [1.0] * 6
    del y
    gc.collect()
    assert manager().live_pool_blocks() == 0


# --- #10 module state mutated in forward ----------------------------------------------------------

class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(4, device="cuda"))
        self.plain = torch.zeros(4, device="cuda")      # neither buffer nor parameter

    def forward(self, x):
        self.steps.add_(1)
        self.plain.add_(2)
        return self.steps + self.plain + x


def test_buffer_and_plain_tensor_attribute_mutated_in_forward_stay_correct():
    m, twin = Counter(), Counter()
    f = compiled(m)
    for _ in range(4):
        x = torch.randn(4, device="cuda")
        torch.testing.assert_close(f(x), twin(x))
        torch.testing.assert_close(m.steps, twin.steps)
        torch.testing.assert_close(m.plain, twin.plain)
    assert stats()["skips"] == 0 and stats()["recordings"] >= 1


# --- #11 #12 static-input pointer churn and the re-record limit ------------------------------------

@pytest.mark.parametrize("limit", [128, 0])
def test_parameters_passed_as_arguments_record_per_parameter_and_reuse_without_recompiling(limit):
    def fn(x, y):
        return x * y
    f = compiled(fn, cudagraph_stable_inputs=False, cudagraph_rerecord_limit=limit)
    p1 = nn.Parameter(torch.rand(8, 8, device="cuda"))
    p2 = nn.Parameter(torch.rand(8, 8, device="cuda"))

    def train_step(p):
        x = leaf(8, 8)
        out = f(x, p)
        out.sum().backward()
        torch.testing.assert_close(out, x.detach() * p.detach())
        torch.testing.assert_close(p.grad, x.detach())
        torch.testing.assert_close(x.grad, p.detach())
        p.grad = None

    for _ in range(5):
        train_step(p1)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for p in [p2] * 5 + [p1] * 5:
            train_step(p)
    # forward and backward per parameter; p1's come back; another parameter is no unexpected re-record
    assert stats()["recordings"] == 4 and stats()["skips"] == 0


def test_linear_weight_replaced_and_restored_records_four_graphs_without_recompiling():
    torch.manual_seed(0)
    lin = nn.Linear(8, 8).cuda()
    f = compiled(lin, cudagraph_stable_inputs=False)
    w1, w2 = lin.weight, nn.Parameter(torch.randn(8, 8, device="cuda"))

    def train_step():
        x = torch.randn(4, 8, device="cuda")
        out = f(x)
        torch.testing.assert_close(out, x @ lin.weight.t() + lin.bias, atol=1e-4, rtol=1e-4)
        out.sum().backward()
        torch.testing.assert_close(lin.weight.grad, x.sum(0).expand(8, 8), atol=1e-4, rtol=1e-4)
        lin.zero_grad()
    for _ in range(3):
        train_step()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for w in (w2, w1):
            lin.weight = w
            for _ in range(3):
                train_step()
    assert stats()["recordings"] == 4 and stats()["skips"] == 0


def test_batchnorm_running_mean_replaced_and_restored_records_four_graphs_without_recompiling():
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(8).cuda()
    ref = copy.deepcopy(bn)
    f = compiled(bn, cudagraph_stable_inputs=False)
    m1, m2 = bn.running_mean, torch.zeros(8, device="cuda")

    def train_step():
        x = torch.randn(4, 8, device="cuda")
        out, want = f(x), ref(x)
        torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
        out.square().sum().backward()
        want.square().sum().backward()
        torch.testing.assert_close(bn.weight.grad, ref.weight.grad, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(bn.running_mean, ref.running_mean, atol=1e-5, rtol=1e-5)
        bn.zero_grad(), ref.zero_grad()
    for _ in range(3):
        train_step()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for mean in (m2, m1):
            bn.running_mean = mean
            ref.running_mean = mean.clone()
            for _ in range(3):
                train_step()
    assert stats()["recordings"] == 4 and stats()["skips"] == 0


def test_child_graph_is_recorded_once_per_parameter_under_one_parent():
    def fn(x, p):
        y = x * x
        torch._dynamo.graph_break()
        return y * p
    f = compiled(fn, cudagraph_stable_inputs=False)
    p1 = nn.Parameter(torch.rand(8, device="cuda"))
    p2 = nn.Parameter(torch.rand(8, device="cuda"))
    for p in [p1] * 3 + [p2] * 3 + [p1] * 3:
        x = torch.rand(8, device="cuda")
        out = f(x, p)
        out.sum().backward()
        torch.testing.assert_close(p.grad, x * x)
        p.grad = None
    # the parent (inference: x needs no grad), a forward and a backward of the child per parameter
    assert stats()["recordings"] == 5 and tree_roots() == [[4]]


def test_parent_graph_per_parameter_makes_its_child_record_again_under_each():
    def fn(x, p):
        y = x * p
        torch._dynamo.graph_break()
        return y + x
    f = compiled(fn, cudagraph_stable_inputs=False)
    p1 = nn.Parameter(torch.rand(8, device="cuda"))
    p2 = nn.Parameter(torch.rand(8, device="cuda"))
    for p in [p1] * 3 + [p2] * 3 + [p1] * 3:
        x = torch.rand(8, device="cuda")
        out = f(x, p)
        torch.testing.assert_close(out, x * p.detach() + x)
        out.sum().backward()
        torch.testing.assert_close(p.grad, x)
        p.grad = None
    # x * p forward and backward per parameter, and y + x under each of the two parents (its
    # backward only passes the gradient on: no kernel, nothing to record)
    assert stats()["recordings"] == 6


def test_managed_input_moved_past_the_limit_runs_without_graphs_and_says_so_once(caplog):
    a = tree_fn(lambda x: (x * 2,), "a", cudagraph_rerecord_limit=0)
    b = tree_fn(lambda y: (y + 1,), "b", cudagraph_rerecord_limit=0)
    x = torch.ones(8, device="cuda")
    for _ in range(3):
        step()
        (y,) = a([x])
        b([y])
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for _ in range(5):
            step()
            (y,) = a([x])
            (z,) = b([y.clone()])                       # not a's output any more: a moved managed input
            assert z.tolist() == [3.0] * 8
    msgs = [r.getMessage() for r in caplog.records if "exceeding max re-recording limit" in r.getMessage()]
    assert len(msgs) == 1
    assert msgs[0].startswith("skipping cudagraphs due to function 1 (b) exceeding max re-recording limit (=0) "
                              "on cudagraph node 0 due to cudagraph managed tensor data pointer changed.")
    assert stats()["skips"] == 1


def test_parameter_data_swapped_past_the_rerecord_limit_runs_without_graphs_and_says_so_once(caplog):
    torch.manual_seed(0)
    lin = nn.Linear(8, 8).cuda()
    ref = copy.deepcopy(lin)
    f = compiled(lin, cudagraph_rerecord_limit=0, cudagraph_stable_inputs=False)
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for i in range(8):
            if i >= 3:                                  # the same parameter moved: unexpected
                w = torch.randn(8, 8, device="cuda")
                lin.weight.data, ref.weight.data = w.clone(), w.clone()
            x = torch.randn(4, 8, device="cuda")
            out = f(x)
            want = ref(x)
            torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
            out.sum().backward()
            want.sum().backward()
            torch.testing.assert_close(lin.weight.grad, ref.weight.grad, atol=1e-4, rtol=1e-4)
            lin.zero_grad(), ref.zero_grad()
    msgs = [r.getMessage() for r in caplog.records if "exceeding max re-recording limit (=0)" in r.getMessage()]
    assert 1 <= len(msgs) <= 2, msgs                    # the forward, and maybe the backward: once each
    assert all(m.startswith("skipping cudagraphs due to function ") for m in msgs)
    assert all("static input data pointer changed." in m for m in msgs)
    assert len({m.split(" exceeding")[0] for m in msgs}) == len(msgs)
    assert counters["skips"] == len(msgs)


# --- #13 #14 static addresses --------------------------------------------------------------------

def test_mark_static_address_input_is_read_in_place_and_new_inputs_never_rerecord():
    y = leaf(8, 8)
    torch._dynamo.mark_static_address(y)
    f = compiled(lambda x, y: x * y, cudagraph_stable_inputs=False)
    for _ in range(5):
        with torch.no_grad():
            y.add_(1.0)                                 # in place: a replay reads y's memory
        x = leaf(8, 8)
        out = f(x, y)
        torch.testing.assert_close(out, x.detach() * y.detach())
        out.sum().backward()
        torch.testing.assert_close(y.grad, x.detach())
        y.grad = None
    assert stats()["recordings"] == 2


def test_moved_parameter_with_rerecording_off_raises_instead_of_reading_stale_memory():
    lin = nn.Linear(8, 8).cuda()
    f = compiled(lin, cudagraph_rerecord_on_static_change=False)
    x = torch.randn(4, 8, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(f(x), lin(x))
        lin.weight.data = torch.randn(8, 8, device="cuda")
        with pytest.raises(RuntimeError, match="static input data pointer changed") as e:
            f(x)
    assert "data pointer changed from" in str(e.value)
    assert "input stack trace: in forward of Linear" in str(e.value)   # the weight's reader


# --- #15 dynamic shapes --------------------------------------------------------------------------

_BODY_RUNS = [0]


@torch.library.custom_op("mini_cg_test::counted_add", mutates_args=())
def counted_add(x: torch.Tensor) -> torch.Tensor:
    _BODY_RUNS[0] += 1
    return x + 1


@counted_add.register_fake
def _(x):
    return torch.empty_like(x)


def test_graph_body_runs_at_warmup_and_recording_only_once_per_shape():
    _BODY_RUNS[0] = 0
    f = compiled(lambda x: torch.ops.mini_cg_test.counted_add(x) * 2)

    def calls(n, times):
        for _ in range(times):
            x = torch.randn(n, device="cuda")
            torch.testing.assert_close(f(x), (x + 1) * 2)
    calls(4, 4)
    assert _BODY_RUNS[0] == 2                     # warmup and recording; replays run no Python
    calls(6, 3)
    assert _BODY_RUNS[0] == 4                     # a new shape: warmup and recording again
    calls(4, 2)
    calls(6, 2)
    assert _BODY_RUNS[0] == 4


def test_dynamic_shapes_backward_matches_eager():
    def fn(x):
        y = torch.cat([x, x])
        return torch.addmm(y, y, y).relu(), y.size(0)
    with torch._dynamo.config.patch(assume_static_by_default=False):
        f = torch.compile(fn, backend="mini_inductor")
        for shape in [(2, 4), (2, 4), (3, 6), (3, 6)]:
            x = torch.randn(*shape, device="cuda", requires_grad=True)
            x_ref = x.detach().clone().requires_grad_()
            out, n = f(x)
            want, want_n = fn(x_ref)
            assert n == want_n
            torch.testing.assert_close(out, want, atol=1e-3, rtol=1e-3)
            out.sum().backward()
            want.sum().backward()
            torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-3, rtol=1e-3)


def test_each_shape_of_a_graph_with_a_cpu_op_records_one_graph_per_gpu_partition():
    def fn(x):
        a = x.sin()
        b = (a.cpu() * 2).cuda()
        return (b + a).cos()
    f = compiled(fn)
    for n in (3, 3, 3, 4, 4, 4, 3):
        x = torch.randn(n, n, device="cuda")
        torch.testing.assert_close(f(x), fn(x))
    assert graphed_partitions() >= 4                    # two shapes, the CPU op cuts each in two
    assert stats()["recordings"] == graphed_partitions()


# --- #19 tree shape ------------------------------------------------------------------------------

def cube(x):
    torch._dynamo.graph_break()
    return x * x * x


def test_one_compiled_graph_twice_on_a_path_is_two_nodes():
    def outer(x):
        return cube(cube(x)) + 1
    f = compiled(outer)
    for _ in range(4):
        x = torch.rand(8, device="cuda")
        torch.testing.assert_close(f(x), outer(x))
    assert tree_roots() == [[2]]


def branchy(x):
    y = x * 2
    if y.sum() > 0:
        return y + 10
    return y - 10


def test_data_dependent_branches_are_sibling_children_of_one_root():
    f = compiled(branchy)
    for value in [0.0] * 3 + [1.0] * 3 + [0.0] * 2:
        x = torch.full((8,), value, device="cuda")
        torch.testing.assert_close(f(x), branchy(x))
    assert tree_roots() == [[2]]
    (root,) = next(iter(manager().roots.values()))
    assert sum(len(kids) for kids in root.children.values()) == 2


def test_new_shapes_are_separate_roots():
    f = compiled(lambda x, y: (x + 1) @ y)
    for n in (20, 20, 20, 40, 40, 40):
        x, y = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        torch.testing.assert_close(f(x, y), (x + 1) @ y, atol=1e-3, rtol=1e-3)
        torch.cuda.synchronize()
    assert tree_roots() == [[0], [0]]


# --- #20 checkpoints: tensors dead since recording, inputs moved out of the pool --------------------

def test_output_that_died_before_a_new_recording_is_freed_by_the_checkpoint():
    a = tree_fn(lambda x: (x * 2, x * 3), "a", cudagraph_skip_warmup=True)
    b = tree_fn(lambda y: (y + 1,), "b", cudagraph_skip_warmup=True)
    x = torch.ones(256, device="cuda")
    step()
    a([x])                                       # recorded; both outputs dropped
    step()
    y1, y2 = a([x])                              # replayed
    del y2                                       # dies before b is recorded
    args = [y1]
    del y1
    (z,) = b(args)                               # execution → recording: one checkpoint
    assert manager().num_checkpoints == 1
    assert z.tolist() == [3.0] * 256
    assert manager().live_pool_blocks() == 1     # only b's output: a's dead output was freed
    del z
    gc.collect()
    assert manager().live_pool_blocks() == 0


def test_dead_output_and_its_alias_are_both_freed_by_the_checkpoint():
    def two_and_a_view(x):
        y3 = x * 3
        return x * 2, y3, y3[1:]
    a = tree_fn(two_and_a_view, "a", cudagraph_skip_warmup=True)
    b = tree_fn(lambda y: (y + 1,), "b", cudagraph_skip_warmup=True)
    x = torch.ones(256, device="cuda")
    step()
    a([x])
    step()
    y1, y2, view = a([x])
    del y2, view                                 # an output and its alias die before b is recorded
    args = [y1]
    del y1
    (z,) = b(args)
    assert manager().num_checkpoints == 1 and z.tolist() == [3.0] * 256
    assert manager().live_pool_blocks() == 1
    del z
    gc.collect()
    assert manager().live_pool_blocks() == 0


def test_two_row_views_of_one_buffer_keep_it_until_both_die():
    a = tree_fn(lambda x: (x[0], x[1]), "a", cudagraph_skip_warmup=True)
    b = tree_fn(lambda y: (y * 2,), "b", cudagraph_skip_warmup=True)
    x = torch.randn(2, 64, device="cuda")
    step()
    a([x])
    step()
    r0, r1 = a([x])                              # views of the graph's copy of x
    assert r0.untyped_storage().data_ptr() == r1.untyped_storage().data_ptr()
    assert r1.data_ptr() == r0.data_ptr() + 64 * 4
    (z,) = b([r0])                               # after a replay: one checkpoint
    assert manager().num_checkpoints == 1
    torch.testing.assert_close(z, x[0] * 2)
    torch.testing.assert_close(r1, x[1])
    del z
    gc.collect()
    assert manager().live_pool_blocks() == 1     # the one storage under both views
    del r0
    gc.collect()
    assert manager().live_pool_blocks() == 1
    del r1
    gc.collect()
    assert manager().live_pool_blocks() == 0


def test_input_moved_out_of_the_pool_records_a_new_child_after_a_checkpoint():
    a = tree_fn(lambda x: (x * 2,), "a", cudagraph_skip_warmup=True)
    b = tree_fn(lambda y: (y + 1,), "b", cudagraph_skip_warmup=True)
    x = torch.ones(64, device="cuda")
    step()
    (y,) = a([x])
    (z,) = b([y])                                # b recorded on a's output
    step()
    (y,) = a([x])                                # replay
    (z,) = b([torch.zeros(64, device="cuda")])   # not a pool tensor: a new child
    assert z.tolist() == [1.0] * 64
    assert manager().num_checkpoints == 1
    assert manager().tree_shape() == {"a": [2]}


# --- #21 output-object reuse, turned off by a later alias --------------------------------------------

def test_output_object_is_reused_until_a_later_graph_aliases_it():
    a = tree_fn(lambda x: (x * 2,), "a")
    b = tree_fn(lambda y: (y[1:],), "b")
    x = torch.ones(16, device="cuda")
    ids = []
    for _ in range(4):
        step()
        (y,) = a([x])
        ids.append(id(y))
        del y
    assert ids[2] == ids[3]
    node = manager().roots[0][0]
    assert node.cacheable[0]
    for _ in range(3):
        step()
        (y,) = a([x])
        (v,) = b([y])
        assert v.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
        del y, v
    assert not node.cacheable[0]
    assert not node.cached_outputs or node.cached_outputs[0] is None


# --- #22 #23 aliasing and empty outputs ---------------------------------------------------------------

class ReturnsParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.randn(4, 4, device="cuda"))

    def forward(self, x):
        return self.p[0], self.p, self.p + x


def test_outputs_aliasing_a_parameter_share_its_storage_and_only_the_new_output_is_live():
    from torch.multiprocessing.reductions import StorageWeakRef
    m = ReturnsParameter()
    f = compiled(m)
    ref = StorageWeakRef(m.p.untyped_storage())
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(4, 4, device="cuda")
            row, p, s = f(x)
            assert row.untyped_storage().data_ptr() == p.untyped_storage().data_ptr() == m.p.data_ptr()
            torch.testing.assert_close(s, m.p + x)
            torch.testing.assert_close(row, m.p[0])
        assert not ref.expired()
        assert len(manager().current.path_live_refs()) == 1


def test_outputs_that_are_the_input_and_its_view_share_its_storage_and_hold_no_pool_memory():
    f = compiled(lambda x: (x, x[1:], x * 2))
    for _ in range(4):
        x = torch.randn(8, device="cuda")
        a, b, c = f(x)
        assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        torch.testing.assert_close(c, x * 2)
    assert len(manager().current.path_live_refs()) == 1          # c only


def test_under_no_grad_a_returned_parameter_and_its_slice_alias_it():
    m = ReturnsParameter()
    f = compiled(lambda x: (m.p, m.p[:2], x + 2))
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, device="cuda")
            p, sl, y = f(x)
            assert p.data_ptr() == sl.data_ptr() == m.p.data_ptr()
            torch.testing.assert_close(y, x + 2)


def test_zero_size_outputs_are_not_live_path_outputs():
    def fn(x):
        y = x * 2
        return y, torch.empty(0, device="cuda"), (x * 3)[2:2]
    f = tree_fn(fn)
    for _ in range(4):
        step()
        y, e1, e2 = f([torch.randn(8, device="cuda")])
        assert e1.numel() == 0 and e2.numel() == 0
        assert len(manager().current.path_live_refs()) == 1
    del y, e1, e2
    gc.collect()
    assert manager().live_pool_blocks() == 0


# --- #24 #25 hooks and the autocast cache --------------------------------------------------------

def test_a_reused_leaf_output_drops_last_iterations_grad_requires_grad_and_post_accumulate_hook():
    f = compiled(lambda x: x * 2)
    x = torch.randn(8, device="cuda")
    fired = []
    for i in range(5):
        with torch.no_grad():
            out = f(x)
        assert not out.requires_grad and out.grad is None
        out.requires_grad_()
        if i == 2:
            out.register_post_accumulate_grad_hook(lambda t, i=i: fired.append(i))
        (out * 3).sum().backward()
        torch.testing.assert_close(out.grad, torch.full_like(out, 3.0))
        del out
    assert fired == [2]


def test_autocast_cast_cache_does_not_keep_a_replayed_output():
    f = compiled(lambda x: x + x)
    for i in range(5):
        with torch.no_grad():
            out = f(torch.rand(8, 8, device="cuda") + 1)
        out.requires_grad_()                           # a leaf that needs grad: autocast would cache its cast
        with torch.autocast("cuda", dtype=torch.float16):
            first = out @ out
            with torch.no_grad():
                out.zero_()
            second = out @ out
        if i >= 2:                                     # replays: outputs over graph memory
            assert first.abs().sum() > 0 and second.abs().sum() == 0
        del out
