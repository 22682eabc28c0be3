"""DDP compiled with mini_inductor trains exactly as eager DDP (two gloo ranks, 20 steps).

torch.compile(DDP(model)): Dynamo's DDPOptimizer splits the graph at DDP's gradient buckets, so each
bucket's all-reduce (DDP's reducer, eager) can start while the backward of the earlier layers runs;
DDP(torch.compile(model)): the same split (Dynamo sees the DDP module active around the compiled one).
"""
import copy

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dist_harness import TinyGPT, batches, compiled_graph_counts, full_params, on_two_ranks, train

STEPS = 20
# DDP's first bucket and its other buckets, in bytes: small enough that the tiny model has several
BUCKET_BYTES = 16 * 1024


def _ddp(model):
    return DDP(model, bucket_cap_mb=BUCKET_BYTES / 2 ** 20)


def ddp_job(rank: int, wrap: str):
    dist._DEFAULT_FIRST_BUCKET_BYTES = BUCKET_BYTES   # read by DDP and by Dynamo's DDPOptimizer alike
    torch.manual_seed(0)
    base = TinyGPT()
    data = batches(rank, STEPS)
    eager = _ddp(copy.deepcopy(base))
    eager_losses = train(eager, eager.parameters(), data)

    if wrap == "compile(DDP(model))":
        ddp = _ddp(copy.deepcopy(base))
        model = torch.compile(ddp, backend="mini_inductor")
    else:
        ddp = _ddp(torch.compile(copy.deepcopy(base), backend="mini_inductor"))
        model = ddp
    losses = train(model, ddp.parameters(), data)
    # DDP's bucketing at this cap (the C++ reducer's assignment), over the parameters in reverse order
    params = [p for p in reversed(list(ddp.parameters()))]
    assignment = dist._compute_bucket_assignment_by_size(params, [BUCKET_BYTES], [False] * len(params))
    buckets = len(assignment[0]) if isinstance(assignment, tuple) else len(assignment)
    return {"eager_losses": eager_losses, "losses": losses, "eager_params": full_params(eager),
            "params": full_params(ddp), "ddp_buckets": buckets, "graphs": compiled_graph_counts()}


@pytest.fixture(scope="module")
def compiled_ddp():
    return on_two_ranks(ddp_job, "compile(DDP(model))")


def _assert_same_training(result):
    torch.testing.assert_close(result["losses"], result["eager_losses"], rtol=1e-4, atol=1e-5)
    assert result["params"].keys() == result["eager_params"].keys()
    for name, p in result["params"].items():
        torch.testing.assert_close(p, result["eager_params"][name], rtol=1e-4, atol=1e-5, msg=name)


def test_compiled_ddp_losses_and_parameters_equal_eager_ddp(compiled_ddp):
    _assert_same_training(compiled_ddp)
    assert compiled_ddp["losses"][-1] < compiled_ddp["losses"][0]   # it trained


def test_ddp_optimizer_splits_the_graph_once_per_bucket(compiled_ddp):
    graphs = compiled_ddp["graphs"]
    assert compiled_ddp["ddp_buckets"] > 1
    # one forward and one backward graph per DDP bucket, every one of them compiled
    assert graphs["kinds"] == {"forward": compiled_ddp["ddp_buckets"], "backward": compiled_ddp["ddp_buckets"]}
    assert graphs["eager"] == [] and graphs["fallbacks"] == {}


def test_ddp_around_a_compiled_model_equals_eager_ddp_and_splits_at_buckets():
    result = on_two_ranks(ddp_job, "DDP(compile(model))")
    _assert_same_training(result)
    assert result["graphs"]["kinds"] == {"forward": result["ddp_buckets"], "backward": result["ddp_buckets"]}
