"""DDP compiled with mini_inductor trains exactly as eager DDP (two gloo ranks, 20 steps).

torch.compile(DDP(model)): Dynamo's DDPOptimizer splits the graph at DDP's gradient buckets, so each
bucket's all-reduce (DDP's reducer, eager) can start while the backward of the earlier layers runs;
DDP(torch.compile(model)): the same split (Dynamo sees the DDP module active around the compiled one).
"""
import copy

import pytest
import torch
import torch._dynamo
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dist_harness import TinyGPT, assert_same_training, batches, compiled_graph_counts, full_params, on_two_ranks, train

STEPS = 20
# DDP's first bucket and its other buckets, in bytes: small enough that the tiny model has several
BUCKET_BYTES = 16 * 1024


def _ddp(model):
    return DDP(model, bucket_cap_mb=BUCKET_BYTES / 2 ** 20)


def _compiled(base, data, wrap: str) -> dict:
    from mini_inductor import metrics
    torch._dynamo.reset()
    metrics.reset()
    if wrap == "compile(DDP(model))":
        ddp = _ddp(copy.deepcopy(base))
        model = torch.compile(ddp, backend="mini_inductor")
    else:
        ddp = _ddp(torch.compile(copy.deepcopy(base), backend="mini_inductor"))
        model = ddp
    losses = train(model, ddp.parameters(), data)
    return {"losses": losses, "params": full_params(ddp), "graphs": compiled_graph_counts()}


def ddp_job(rank: int):
    dist._DEFAULT_FIRST_BUCKET_BYTES = BUCKET_BYTES   # read by DDP and by Dynamo's DDPOptimizer alike
    torch.manual_seed(0)
    base = TinyGPT()
    data = batches(rank, STEPS)
    eager = _ddp(copy.deepcopy(base))
    results = {"eager": {"losses": train(eager, eager.parameters(), data), "params": full_params(eager)}}
    # DDP's bucketing at this cap (the C++ reducer's assignment), over the parameters in reverse order
    params = list(reversed(list(eager.parameters())))
    assignment = dist._compute_bucket_assignment_by_size(params, [BUCKET_BYTES], [False] * len(params))
    results["buckets"] = len(assignment[0]) if isinstance(assignment, tuple) else len(assignment)
    for wrap in ("compile(DDP(model))", "DDP(compile(model))"):
        results[wrap] = _compiled(base, data, wrap)
    return results


@pytest.fixture(scope="module")
def runs():
    return on_two_ranks(ddp_job)


def test_compiled_ddp_losses_and_parameters_equal_eager_ddp(runs):
    assert_same_training(runs["compile(DDP(model))"], runs["eager"])
    assert runs["eager"]["losses"][-1] < runs["eager"]["losses"][0]   # it trained


@pytest.mark.parametrize("wrap", ["compile(DDP(model))", "DDP(compile(model))"])
def test_ddp_optimizer_splits_the_graph_once_per_bucket(runs, wrap):
    graphs = runs[wrap]["graphs"]
    assert runs["buckets"] > 1
    # one forward and one backward graph per DDP bucket (Dynamo sees the active DDP module in both
    # wrappings), every one of them compiled
    assert graphs["kinds"] == {"forward": runs["buckets"], "backward": runs["buckets"]}
    assert graphs["eager"] == [] and graphs["fallbacks"] == {}


def test_ddp_around_a_compiled_model_equals_eager_ddp(runs):
    assert_same_training(runs["DDP(compile(model))"], runs["eager"])
