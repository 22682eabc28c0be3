"""Steady state under CUDA-graph trees (cudagraph-tests.md §5 #1, #2; see TOP40.md): inference with a
meta input, a CPU-constant output, an expanded input and Dynamo's run-only mode records once and then
replays; a training loop records its forward and backward once each on one stream, and a CPU op in the
forward gives one graph per GPU partition. The item number of the spec is in a comment above each group.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cg_helpers import compiled, graphed_partitions, manager, stats

pytestmark = pytest.mark.gpu


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
