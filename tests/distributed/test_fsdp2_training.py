"""FSDP2 (`fully_shard`) compiled with mini_inductor trains exactly as eager FSDP2 (two gloo ranks, 20 steps).

FSDP2's hooks (all-gather before a block, reduce-scatter after its backward) run outside Dynamo
(torch marks them dynamo-disabled), so compiled FSDP2 is compiled compute between eager collectives:
per block (`block.compile`) or the whole model. The collectives inside compiled graphs are the
subject of test_collectives_in_graph.py.

Compiled autograd over FSDP2 does not train as eager FSDP2 in torch 2.13, whatever compiles its
graphs (backend="eager" too): FSDP2's post-backward reduce-scatter does not run under it, and the
gradients stay unsharded (the blocks' full-size DTensors, the root's plain tensors). So it is compared
with itself: mini_inductor compiling compiled autograd's graphs against torch's eager backend.
"""
import copy

import pytest
import torch
import torch._dynamo
from torch.distributed.fsdp import fully_shard

from dist_harness import TinyGPT, assert_same_training, batches, compiled_graph_counts, full_params, on_two_ranks, train

STEPS = 20
CA_STEPS = 5


def _sharded(base):
    model = copy.deepcopy(base)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def _compiled_autograd(backend: str):
    from torch._dynamo import compiled_autograd

    def backward(loss):
        with compiled_autograd._enable(lambda gm: torch.compile(gm, backend=backend)):
            loss.backward()
    return backward


def _run(base, data, how: str) -> dict:
    from mini_inductor import metrics
    torch._dynamo.reset()
    metrics.reset()
    model = _sharded(base)
    backward = None
    if how == "per block":
        for block in model.blocks:
            block.compile(backend="mini_inductor")
        compiled = model
    elif how == "whole model":
        compiled = torch.compile(model, backend="mini_inductor")
    else:   # compiled autograd, its graphs compiled by `how`
        compiled = torch.compile(model, backend="mini_inductor")
        backward = _compiled_autograd(how.split()[-1])
    losses = train(compiled, model.parameters(), data, backward)
    return {"losses": losses, "params": full_params(model), "graphs": compiled_graph_counts()}


def fsdp2_job(rank: int):
    torch.manual_seed(0)
    base = TinyGPT()
    data = batches(rank, STEPS)
    eager = _sharded(base)
    results = {"eager": {"losses": train(eager, eager.parameters(), data), "params": full_params(eager)}}
    for how in ("per block", "whole model"):
        results[how] = _run(base, data, how)
    try:
        results["compiled autograd, eager"] = _run(base, data[:CA_STEPS], "compiled autograd, eager")
    except Exception as e:  # noqa: BLE001  (torch 2.11: its own compiled autograd over FSDP2 does not trace)
        results["compiled autograd unsupported"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
        return results
    results["compiled autograd, mini_inductor"] = _run(base, data[:CA_STEPS], "compiled autograd, mini_inductor")
    return results


@pytest.fixture(scope="module")
def runs():
    return on_two_ranks(fsdp2_job)


def _all_compiled(graphs):
    assert graphs["eager"] == [] and graphs["fallbacks"] == {}


def test_fully_shard_compiled_per_block_equals_eager_fsdp2(runs):
    assert_same_training(runs["per block"], runs["eager"])
    assert runs["eager"]["losses"][-1] < runs["eager"]["losses"][0]   # it trained
    # the two blocks share one compiled forward and backward (same code, parameters are inputs)
    assert runs["per block"]["graphs"]["kinds"] == {"forward": 1, "backward": 1}
    _all_compiled(runs["per block"]["graphs"])


def test_fully_shard_whole_model_compiled_equals_eager_fsdp2(runs):
    assert_same_training(runs["whole model"], runs["eager"])
    kinds = runs["whole model"]["graphs"]["kinds"]
    # what Dynamo captures of a fully_shard root in this torch: the blocks' frame, one graph for both
    # (no graph break is counted; the root's own embeddings and head run in eager around it)
    assert kinds == {"forward": 1, "backward": 1}
    _all_compiled(runs["whole model"]["graphs"])


def test_compiled_autograd_over_fsdp2_compiles_its_graphs_as_torch_runs_them(runs):
    if "compiled autograd unsupported" in runs:   # with torch's own eager backend: nothing to compare with
        pytest.skip(f"this torch's compiled autograd over FSDP2 fails with its eager backend too: "
                    f"{runs['compiled autograd unsupported']}")
    ours, torchs = runs["compiled autograd, mini_inductor"], runs["compiled autograd, eager"]
    assert_same_training(ours, torchs)
    # compiled autograd's backward graphs reach us as inference graphs; no AOT backward is compiled
    assert ours["graphs"]["kinds"].get("inference", 0) >= 1 and "backward" not in ours["graphs"]["kinds"]
    # compiled autograd traces its graphs with symbolic sizes: how much of them is generated code is
    # the dynamic-shapes path's business (ATen fallbacks are counted there), only that none runs eagerly
    assert ours["graphs"]["eager"] == []
