"""On two GPUs (NCCL): DDP, FSDP2 and FSDP with collectives in the graph, compiled with mini_inductor,
train as eager does for 100 steps of a GPT-2 of the catalog at its real size; the collectives that
CUDA graphs may capture are captured. Run by the lead on a 2-GPU machine:

    PYTHONPATH=. python -m pytest -m gpu -q tests/distributed/test_distributed_gpu.py
"""
import copy
import re

import pytest
import torch
import torch._dynamo

from dist_harness import GatheredParameters, compiled_graph_counts, full_params, on_two_ranks

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]

STEPS = 100
LR = 0.01
C10D = "_c10d_functional"
TOL = dict(rtol=5e-3, atol=5e-3)   # 100 steps of fp32 (TF32 off) through differently fused reductions


def _gpt2(rank: int):
    from mini_inductor.examples import ZOO, next_token_loss
    torch.manual_seed(0)
    zoo = ZOO["gpt2"]
    model = zoo.build(True).cuda()
    gen = torch.Generator().manual_seed(1000 + rank)
    (tokens,) = zoo.inputs(True, "cpu")
    data = [(torch.randint(0, 512, tokens.shape, generator=gen).cuda(),) for _ in range(STEPS)]

    class WithLoss(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, tokens):
            return next_token_loss(self.inner(tokens), (tokens,))
    return WithLoss(model), data


def _loop(model, params, data) -> list[float]:
    opt = torch.optim.SGD(params, lr=LR, momentum=0.9)
    losses = []
    for (tokens,) in data:
        loss = model(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().item())
    return losses


def _unsafe_partitions(source_paths) -> list[str]:
    found = []
    for path in source_paths:
        text = open(path).read()
        block = text.split("UNSAFE_PARTITIONS = {", 1)[1].split("\n}", 1)[0] if "UNSAFE_PARTITIONS" in text else ""
        found += re.findall(r"reason='([^']*)'", block)
    return found


def _reset():
    from mini_inductor import metrics
    torch._dynamo.reset()
    metrics.reset()


def ddp_and_fsdp2_job(rank: int):
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.backends.cuda.matmul.allow_tf32 = False
    base, data = _gpt2(rank)
    results = {}
    eager = DDP(copy.deepcopy(base))
    results["ddp eager"] = {"losses": _loop(eager, eager.parameters(), data), "params": full_params(eager)}
    _reset()
    ddp = DDP(copy.deepcopy(base))
    results["ddp compiled"] = {"losses": _loop(torch.compile(ddp, backend="mini_inductor"), ddp.parameters(), data),
                               "params": full_params(ddp), "graphs": compiled_graph_counts()}

    def sharded():
        model = copy.deepcopy(base)
        for block in model.inner.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    eager = sharded()
    results["fsdp2 eager"] = {"losses": _loop(eager, eager.parameters(), data), "params": full_params(eager)}
    _reset()
    model = sharded()
    results["fsdp2 compiled"] = {"losses": _loop(torch.compile(model, backend="mini_inductor"), model.parameters(), data),
                                 "params": full_params(model), "graphs": compiled_graph_counts()}
    return results


def collectives_in_graph_job(rank: int):
    from torch.distributed.device_mesh import init_device_mesh
    from mini_inductor import cudagraphs, metrics
    torch.backends.cuda.matmul.allow_tf32 = False
    mesh = init_device_mesh("cuda", (2,))
    base, data = _gpt2(rank)
    eager = GatheredParameters(copy.deepcopy(base), mesh)
    results = {"eager": {"losses": _loop(eager, eager.parameters(), data), "params": full_params(eager)}}
    _reset()
    model = GatheredParameters(copy.deepcopy(base), mesh)
    losses = _loop(torch.compile(model, backend="mini_inductor"), model.parameters(), data)
    results["compiled"] = {"losses": losses, "params": full_params(model), "graphs": compiled_graph_counts(),
                           "parameters": len(list(base.parameters())),
                           "unsafe": _unsafe_partitions([r.source_path for r in metrics.compiled_graphs]),
                           "cudagraphs": cudagraphs.stats(rank),
                           # the harness's destroy_process_group() then frees the graphs first: with
                           # NCCL kernels captured, the real one alone waits forever (pytorch#115388)
                           "releases_graphs": getattr(torch.distributed.destroy_process_group,
                                                      "mini_inductor_releases_graphs", False)}
    return results


def gloo_group_on_cuda_job(rank: int):
    """A collective of a gloo group on CUDA tensors: an unsafe partition of its own, right answers."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from mini_inductor import metrics
    gloo = dist.new_group(backend="gloo")
    x = torch.randn(64, 64, device="cuda") + rank

    def f(x):
        return funcol.all_reduce(x.relu() * 2, "sum", gloo).sin() + x.cos()
    expected = f(x).clone()
    got = torch.compile(f, backend="mini_inductor")(x)
    return {"expected": expected.cpu(), "got": got.cpu(),
            "unsafe": _unsafe_partitions([r.source_path for r in metrics.compiled_graphs])}


def _assert_same_training(result, reference):
    torch.testing.assert_close(result["losses"], reference["losses"], **TOL)
    for name, p in result["params"].items():
        torch.testing.assert_close(p, reference["params"][name], **TOL, msg=name)
    assert result["graphs"]["eager"] == []
    assert not [op for op in result["graphs"]["fallbacks"] if op.startswith(C10D)]   # collectives are extern kernels


@pytest.fixture(scope="module")
def ddp_and_fsdp2():
    return on_two_ranks(ddp_and_fsdp2_job, backend="nccl")


def test_compiled_ddp_trains_as_eager_ddp_for_100_steps_on_two_gpus(ddp_and_fsdp2):
    _assert_same_training(ddp_and_fsdp2["ddp compiled"], ddp_and_fsdp2["ddp eager"])
    kinds = ddp_and_fsdp2["ddp compiled"]["graphs"]["kinds"]
    assert kinds["forward"] == kinds["backward"] >= 1   # one pair per DDP bucket


def test_compiled_fsdp2_trains_as_eager_fsdp2_for_100_steps_on_two_gpus(ddp_and_fsdp2):
    _assert_same_training(ddp_and_fsdp2["fsdp2 compiled"], ddp_and_fsdp2["fsdp2 eager"])


@pytest.fixture(scope="module")
def in_graph():
    return on_two_ranks(collectives_in_graph_job, backend="nccl")


def test_fsdp_with_nccl_collectives_in_the_graph_trains_as_eager_for_100_steps(in_graph):
    _assert_same_training(in_graph["compiled"], in_graph["eager"])
    externs = in_graph["compiled"]["graphs"]["externs"]
    n = in_graph["compiled"]["parameters"]
    assert externs[f"{C10D}.all_gather_into_tensor.default"] == n
    assert externs[f"{C10D}.reduce_scatter_tensor.default"] == n


def test_nccl_collectives_are_captured_in_cuda_graphs_with_the_kernels_around_them(in_graph):
    compiled = in_graph["compiled"]
    assert not [r for r in compiled["unsafe"] if "collective" in r], compiled["unsafe"]
    stats = compiled["cudagraphs"]
    assert stats.get("recordings", 0) >= 2 and stats.get("replays", 0) > 0 and stats.get("failed_captures", 0) == 0
    assert compiled["releases_graphs"]   # and the ranks' destroy_process_group() returned: the job ended


def test_a_gloo_collective_on_cuda_tensors_is_a_partition_of_its_own():
    result = on_two_ranks(gloo_group_on_cuda_job, backend="nccl")
    torch.testing.assert_close(result["got"], result["expected"])
    assert any("collective of a gloo process group" in r for r in result["unsafe"]), result["unsafe"]
