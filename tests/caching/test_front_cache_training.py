"""The front cache's training entries (caching/front_autograd.py): a Dynamo graph whose inputs require
grad is served at a warm start with its compiled forward and backward inside AOT autograd's own
autograd.Function, built from the stored metadata without tracing. Every check compares the warm (hit)
run with eager and with the cold run, which went through AOT autograd."""
import base64
import dataclasses
import json
import logging
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from torch._dynamo.utils import counters

from common import caches_per_call
from mini_inductor import config, metrics
from mini_inductor.caching import PROCESS, files, front_autograd, front_cache

HIT = front_cache.LABEL
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _front_entries() -> list[pathlib.Path]:
    return sorted((pathlib.Path(config.current().cache_dir) / "front").rglob("*.json"))


def _training_entries() -> list[dict]:
    out = []
    for path in _front_entries():
        entry = front_cache.load_entry(config.current().cache_dir, path.stem)
        if isinstance(entry, front_autograd.TrainingEntry):
            out.append(entry)
    return out


def _seeded(build, seed=0):
    torch.manual_seed(seed)
    return build()


class _Step:
    """One compiled training step, with torch._dynamo.reset() first so only the disk can serve it:
    (outputs, gradients of the parameters and of the inputs that require grad, AOT autograd calls,
    the records of the graphs it compiled or loaded)."""

    def __init__(self, fn, loss=lambda outs: sum(o.float().sum() for o in outs if o.requires_grad)):
        self.fn, self.loss = fn, loss

    def compiled(self, *inputs):
        torch._dynamo.reset()
        assert not PROCESS.graphs
        first, before = len(metrics.compiled_graphs), counters["aot_autograd"]["total"]
        outs, grads = self._run(torch.compile(self.fn, backend="mini_inductor"), inputs)
        return outs, grads, counters["aot_autograd"]["total"] - before, metrics.compiled_graphs[first:]

    def eager(self, *inputs):
        return self._run(self.fn, inputs)

    def _run(self, fn, inputs):
        leaves = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
        module = self.fn if isinstance(self.fn, nn.Module) else None
        if module is not None:
            module.zero_grad(set_to_none=True)
        for x in leaves:
            x.grad = None
        outs = fn(*inputs)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        self.loss(outs).backward()
        params = [p.grad for p in module.parameters()] if module is not None else []
        return [o.detach().clone() for o in outs], [g.clone() for g in params + [x.grad for x in leaves]]


def _same(a: list, b: list, **tol):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, **tol)


def _mlp():
    return nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))


def test_an_mlp_step_is_served_warm_without_aot_autograd_with_eager_gradients():
    model = _seeded(_mlp)
    x = torch.randn(16, 8)
    step = _Step(model)
    ref_outs, ref_grads = step.eager(x)
    cold_outs, cold_grads, cold_aot, cold = step.compiled(x)
    warm_outs, warm_grads, warm_aot, warm = step.compiled(x)
    assert (cold_aot, warm_aot) == (1, 0)
    assert [g.cache for g in cold] == ["miss", "miss"] and [g.cache for g in warm] == [HIT, HIT]
    assert [g.name.split("_")[0] for g in warm] == ["forward", "backward"]
    assert [g.kernel_names for g in warm] == [g.kernel_names for g in cold]
    (entry,) = _training_entries()
    assert entry.forward.graph == cold[0].name and entry.backward.graph == cold[1].name
    for outs, grads in ((cold_outs, cold_grads), (warm_outs, warm_grads)):
        _same(outs, ref_outs)
        _same(grads, ref_grads)
    # the served function keeps serving: a second step in the same process, other data
    x2 = torch.randn(16, 8)
    fn = torch.compile(model, backend="mini_inductor")
    model.zero_grad(set_to_none=True)
    fn(x2).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model(x2).sum().backward()
    _same(got, [p.grad for p in model.parameters()])


def _two_outputs(x, w):
    h = torch.tanh(x @ w)
    return h * 2, h.argmax(-1), (h + 1).detach()


def _transposed_use(x, w):
    return torch.sigmoid(x @ w)


def _saves_its_input(x, w):
    return (x * w).sin()


@pytest.mark.parametrize("fn, loss", [
    (_two_outputs, lambda outs: outs[0].sum()),                      # non-differentiable outputs, one unused
    (_transposed_use, lambda outs: (outs[0].t() * torch.arange(8.0).unsqueeze(1)).sum()),   # a transposed tangent
    (_transposed_use, lambda outs: outs[0][:, :3].sum()),            # a tangent that is mostly zeros
], ids=["non-differentiable outputs", "transposed tangent", "sliced tangent"])
def test_outputs_and_tangents_as_aot_autograd_gives_them(fn, loss):
    x = torch.randn(4, 8)
    w = torch.randn(8, 8).requires_grad_()
    step = _Step(fn, loss)
    ref_outs, ref_grads = step.eager(x, w)
    cold_outs, cold_grads, _, _ = step.compiled(x, w)
    warm_outs, warm_grads, aot, warm = step.compiled(x, w)
    assert aot == 0 and [g.cache for g in warm] == [HIT, HIT]
    _same(warm_outs, ref_outs)
    _same(warm_grads, ref_grads)
    _same(warm_grads, cold_grads)
    if fn is _two_outputs:   # the same differentiability as eager's outputs
        outs = torch.compile(fn, backend="mini_inductor")(x, w)
        assert [o.requires_grad for o in outs] == [o.requires_grad for o in fn(x, w)] == [True, False, False]


def test_retain_graph_backward_twice_on_every_step_warm_and_cold():
    # AOT autograd refuses retain_graph=True once a backward was compiled with donated buffers;
    # mini_inductor's backward donates none (backend.py _no_donated_buffers), so both work as eager
    model = _seeded(_mlp)
    x = torch.randn(16, 8)
    for round_ in range(2):
        torch._dynamo.reset()
        fn = torch.compile(model, backend="mini_inductor")
        model.zero_grad(set_to_none=True)
        fn(x).sum().backward()                 # a first step without retain_graph
        model.zero_grad(set_to_none=True)
        loss = fn(x).sum()
        loss.backward(retain_graph=True)
        once = [p.grad.clone() for p in model.parameters()]
        loss.backward()
        _same([p.grad for p in model.parameters()], [2 * g for g in once])
        assert [g.cache for g in metrics.compiled_graphs[-2:]] == (["miss", "miss"] if round_ == 0 else [HIT, HIT])
    meta = front_autograd.unpack_metadata(_training_entries()[0].metadata)
    assert not meta.bw_donated_idxs


def test_double_backward_raises_as_on_the_cold_path():
    x = torch.randn(4, 8)
    errors = []
    for _ in range(2):
        torch._dynamo.reset()
        w = torch.randn(8, 8).requires_grad_()
        out = torch.compile(_transposed_use, backend="mini_inductor")(x, w).sum()
        (g,) = torch.autograd.grad(out, w, create_graph=True)
        with pytest.raises(RuntimeError) as info:
            g.sum().backward()
        errors.append(str(info.value))
    assert [g.cache for g in metrics.compiled_graphs[-2:]] == [HIT, HIT]
    assert errors[0] == errors[1] and "double backward" in errors[0]


def test_an_input_changed_in_place_after_the_forward_fails_the_backward_as_eager():
    errors = []
    for run in ("eager", "cold", "warm"):
        torch._dynamo.reset()
        x = torch.randn(4, 8)
        w = torch.randn(4, 8).requires_grad_()
        fn = _saves_its_input if run == "eager" else torch.compile(_saves_its_input, backend="mini_inductor")
        fn(x, w).sum().backward()   # a whole step first: the backward is compiled (and the entry written)
        out = fn(x, w).sum()
        w.data.add_(0)      # no version bump: fine
        x.add_(1)           # the saved x changed: the backward must refuse it
        with pytest.raises(RuntimeError) as info:
            out.backward()
        errors.append(str(info.value))
    assert all("modified by an inplace operation" in e for e in errors)
    assert [g.cache for g in metrics.compiled_graphs[-2:]] == [HIT, HIT]


def test_a_non_leaf_input_gets_its_gradient_into_the_eager_graph_before_it():
    lin = _seeded(lambda: nn.Linear(8, 8))
    w = torch.randn(8, 8).requires_grad_()

    def body(h, w):
        return torch.relu(h @ w).sum() + (h.detach() * 0).sum()

    grads = []
    for run in ("eager", "cold", "warm"):
        torch._dynamo.reset()
        lin.zero_grad(set_to_none=True)
        w.grad = None
        fn = body if run == "eager" else torch.compile(body, backend="mini_inductor")
        h = lin(torch.ones(3, 8))      # a non-leaf input that requires grad
        fn(h, w).backward()
        grads.append([lin.weight.grad.clone(), lin.bias.grad.clone(), w.grad.clone()])
    _same(grads[1], grads[0])
    _same(grads[2], grads[0])
    assert [g.cache for g in metrics.compiled_graphs[-2:]] == [HIT, HIT]


def _rewrite_metadata(payload: bytes) -> pathlib.Path:
    (path,) = _front_entries()
    data = json.loads(files.read(str(path), "test", "test").decode())
    data["metadata"] = base64.b64encode(payload).decode()
    files.write(str(path), json.dumps(data), "test")   # a valid hash line: the content is what is checked
    return path


class _NotTorch:
    pass


class _SympyFunctionOfAString:
    """Pickles as a call of torch's FloorDiv with a string, which sympy would parse and evaluate."""

    def __reduce__(self):
        from torch.utils._sympy.functions import FloorDiv
        return FloorDiv, ("__import__('os').environ.__setitem__('MI_PICKLED_CODE_RAN', '1') or 7", 1)


@pytest.mark.parametrize("payload, says", [
    (b"not a pickle", "cannot be read"),
    (pickle.dumps(_NotTorch()), "not one of the classes"),
    (pickle.dumps(torch.Size([2])), "not a ViewAndMutationMeta"),
    (pickle.dumps(_SympyFunctionOfAString()), "names torch.utils._sympy.functions.FloorDiv, which is not one"),
    (pickle.dumps(torch.nn.Identity()), "names torch.nn.modules.linear.Identity, which is not one"),
], ids=["garbage", "a foreign class", "another torch class", "a sympy function of a string", "a torch module"])
def test_metadata_that_is_not_torchs_is_refused_before_use_and_the_step_compiles_again(payload, says, caplog):
    model = _seeded(_mlp)
    x = torch.randn(16, 8)
    step = _Step(model)
    ref_outs, ref_grads = step.eager(x)
    step.compiled(x)
    _rewrite_metadata(payload)
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        outs, grads, aot, records = step.compiled(x)
    assert aot == 1 and [g.cache for g in records] == ["disk", "disk"]   # AOT autograd ran; the ATen level served
    assert any(says in r.getMessage() and "going through AOT autograd" in r.getMessage() for r in caplog.records)
    assert "MI_PICKLED_CODE_RAN" not in os.environ
    _same(outs, ref_outs)
    _same(grads, ref_grads)


def test_an_inference_entry_never_serves_a_training_call(caplog):
    def f(x, w):
        return torch.tanh(x @ w)
    x, w = torch.randn(4, 8), torch.randn(8, 8).requires_grad_()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(f, backend="mini_inductor")(x, w)
    (inference,) = _front_entries()
    torch._dynamo.reset()
    out = torch.compile(f, backend="mini_inductor")(x, w)
    assert out.requires_grad and len(_front_entries()) == 1   # another key: the training entry is written at backward
    out.sum().backward()
    assert len(_front_entries()) == 2 and w.grad is not None
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        served = front_cache.serve(config.current(), inference.stem, 2, [], 0.0, training=True)
    assert served is None, served
    assert "is for inference" in caplog.text, caplog.text


def test_a_graph_whose_outputs_need_no_grad_gets_an_inference_entry_that_serves_it_under_grad():
    # grad on and a weight that requires grad, but an argmax out: AOT autograd makes an inference graph;
    # its entry (marked under_grad) serves the warm call, which no other inference entry would
    def f(x, w):
        return (x @ w).argmax(-1), (x @ w).sum(-1).detach()
    x, w = torch.randn(4, 8), torch.randn(8, 8).requires_grad_()
    results = []
    for _ in range(2):
        torch._dynamo.reset()
        first, before = len(metrics.compiled_graphs), counters["aot_autograd"]["total"]
        outs = torch.compile(f, backend="mini_inductor")(x, w)
        for got, want in zip(outs, f(x, w)):
            torch.testing.assert_close(got, want)
            assert not got.requires_grad
        results.append((counters["aot_autograd"]["total"] - before, [r.cache for r in metrics.compiled_graphs[first:]]))
    assert results == [(1, ["miss"]), (0, [HIT])]
    (path,) = _front_entries()
    assert front_cache.load_entry(config.current().cache_dir, path.stem).under_grad


TRAIN_CHILD = textwrap.dedent('''
    import json, sys, torch, torch.nn as nn
    import mini_inductor
    from mini_inductor import metrics
    from torch._dynamo.utils import counters
    device = sys.argv[1]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.GELU(), nn.Linear(128, 8)).to(device)
    eager = nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.GELU(), nn.Linear(128, 8)).to(device)
    eager.load_state_dict(model.state_dict())
    opt, opt_eager = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager))
    fn = torch.compile(model, backend="mini_inductor")
    errors = []
    for batch in (32, 32, 32, 20, 32, 20, 32, 20):   # a second size: Dynamo compiles the graph again, dynamic
        x = torch.randn(batch, 64, device=device)
        for m, f, o in ((model, fn, opt), (eager, eager, opt_eager)):
            o.zero_grad(set_to_none=True)
            f(x).pow(2).mean().backward()
            o.step()
        errors.append(max((a - b).abs().max().item() for a, b in zip(model.parameters(), eager.parameters())))
    stats = {}
    if device == "cuda":
        stats = {k: v for k, v in mini_inductor.cudagraphs.stats().items() if k in ("recordings", "replays", "warmups")}
    print("RESULT " + json.dumps({"cache": [g.cache for g in metrics.compiled_graphs],
                                  "aot": counters["aot_autograd"]["total"], "errors": errors, "stats": stats}))
''')


def _child(script, tmp_path, device):
    """The script in a fresh process on `device`, caches under tmp_path: its RESULT, its stderr."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINI_INDUCTOR_CACHE_DIR=str(tmp_path / "mini"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"), MINI_INDUCTOR_LOGS="schedule")
    env.pop("TRITON_INTERPRET", None) if device == "cuda" else env.update(TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", script, device], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):]), proc.stderr


def test_a_fresh_process_trains_without_aot_autograd_as_the_cold_one(tmp_path):
    # the static graph's forward and backward, then the dynamic one's (a smaller batch): all four served
    cold, _ = _child(TRAIN_CHILD, tmp_path, "cpu")
    warm, log = _child(TRAIN_CHILD, tmp_path, "cpu")
    assert cold["cache"] == ["miss"] * 4 and cold["aot"] == 2
    assert warm["cache"] == [HIT] * 4 and warm["aot"] == 0
    assert "AOT autograd skipped" in log and "lowering (" not in log
    assert max(cold["errors"] + warm["errors"]) < 1e-5


@pytest.mark.gpu
def test_a_fresh_process_on_cuda_trains_from_the_entry_with_the_cold_ones_cuda_graphs(tmp_path):
    cold, _ = _child(TRAIN_CHILD, tmp_path, "cuda")
    warm, log = _child(TRAIN_CHILD, tmp_path, "cuda")
    assert cold["cache"] == ["miss"] * 4 and cold["aot"] == 2
    assert warm["cache"] == [HIT] * 4 and warm["aot"] == 0 and "AOT autograd skipped" in log
    assert cold["stats"]["recordings"] >= 2 and cold["stats"]["replays"] >= 1
    assert warm["stats"] == cold["stats"]
    assert max(cold["errors"] + warm["errors"]) < 1e-4


# ── dynamic shapes ───────────────────────────────────────────────────────────────────────────
def test_a_dynamic_inference_graph_is_served_at_another_size_with_its_outputs_marked_as_aot_marks_them():
    model = _seeded(_mlp)
    outs = []
    for n in (6, 11):     # the warm call at another size: the same symbolic graph
        torch._dynamo.reset()
        x = torch.randn(n, 8)
        with torch.no_grad():
            out = torch.compile(model, backend="mini_inductor", dynamic=True)(x)
            torch.testing.assert_close(out, model(x))
        outs.append(out)
    records = metrics.compiled_graphs[-2:]
    assert [r.cache for r in records] == ["miss", HIT]
    marks = [getattr(o, "_dynamo_propagated_dynamic_indices", None) for o in outs]
    assert marks[0] == marks[1]   # the batch dim, for a later graph that reads it (torch 2.13; 2.11 marks none)
    from torch._functorch._aot_autograd import runtime_wrappers
    if hasattr(runtime_wrappers, "mark_dynamo_propagated_dynamic_indices"):
        assert marks[0]


def test_a_dynamic_training_graph_saving_sizes_for_its_backward_is_served():
    model = _seeded(_mlp)
    step = _Step(model)
    results = []
    for n in (8, 12):     # warm at another size: the same symbolic graph
        x = torch.randn(n, 8)
        torch._dynamo.mark_dynamic(x, 0)
        ref_outs, ref_grads = step.eager(x)
        outs, grads, aot, records = step.compiled(x)
        _same(outs, ref_outs)
        _same(grads, ref_grads)
        results.append((aot, [r.cache for r in records]))
    assert results == [(1, ["miss", "miss"]), (0, [HIT, HIT])]
    (entry,) = _training_entries()
    assert entry.num_saved_sizes >= 1     # the backward reads the batch size the forward saved


def test_guards_aot_autograd_adds_are_kept_in_the_entry_and_a_warm_start_adds_them_again():
    # x.view(n // 2, 2, -1): AOT autograd's trace adds Ne(n // (n // 2), 0) and matmul's contiguity
    # checks to the ShapeEnv after the key was made; the entry keeps them, a hit adds them back
    def f(x, w):
        return (x.view(x.shape[0] // 2, 2, -1) @ w).softmax(-1).mean()
    step = _Step(f, loss=lambda outs: outs[0])
    results = []
    for n in (8, 12):
        x = torch.randn(n, 8)
        torch._dynamo.mark_dynamic(x, 0)
        w = torch.randn(8, 8).requires_grad_()
        outs, grads, aot, records = step.compiled(x, w)
        ref_outs, ref_grads = step.eager(x, w)
        _same(outs, ref_outs)
        _same(grads, ref_grads)
        results.append((aot, [r.cache for r in records]))
    assert results == [(1, ["miss", "miss"]), (0, [HIT, HIT])]
    (entry,) = _training_entries()
    assert any("FloorDiv" in json.dumps(g) for g in entry.guards), entry.guards


def test_attention_computed_by_our_flash_op_is_served_warm_in_training(monkeypatch):
    # the matcher rewrites soft-capped attention into mini_inductor's flash op (a custom op of ours,
    # which mutates nothing): its graphs get front entries, forward and backward
    if torch.cuda.is_available():   # (CUDA tensors: small float32 attention is left as written there)
        from mini_inductor.attention import match
        monkeypatch.setattr(match, "float32_left_as_written", lambda *args: None)

    def softcap(q, k, v):
        return (torch.tanh(q @ k.transpose(-2, -1) * 0.5 / 5.0) * 5.0).softmax(-1) @ v
    step = _Step(softcap)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 4, generator=g).requires_grad_() for _ in range(3))
    ref_outs, ref_grads = step.eager(q, k, v)
    results = []
    for _ in range(2):
        outs, grads, aot, records = step.compiled(q, k, v)
        _same(outs, ref_outs, atol=1e-5, rtol=1e-5)
        _same(grads, ref_grads, atol=1e-4, rtol=1e-4)
        results.append((aot, [r.cache for r in records]))
        assert any("flash_attention_forward" in op for r in records for op in r.extern_calls)
    assert results == [(1, ["miss", "miss"]), (0, [HIT, HIT])]


def test_a_torch_whose_runtime_wrappers_take_other_arguments_costs_a_compile_not_a_failure(monkeypatch, caplog):
    # AOTDispatchAutograd.post_compile's arguments changed between torch releases (a spec object in
    # 2.13, parameters in 2.11): one this module cannot build is a warning and a trip through AOT autograd
    from torch._functorch._aot_autograd import runtime_wrappers

    model = _seeded(_mlp)
    x = torch.randn(16, 8)
    step = _Step(model)
    ref_outs, ref_grads = step.eager(x)
    step.compiled(x)

    @dataclasses.dataclass
    class OtherSpec:          # a spec of other fields (AOT autograd's own trace imported the real one)
        compiled_forward: object

    monkeypatch.setattr(runtime_wrappers, "AOTDispatchAutogradCompileSpec", OtherSpec, raising=False)
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        outs, grads, aot, records = step.compiled(x)
    assert aot == 1 and [r.cache for r in records] == ["disk", "disk"]   # no record of the failed hit
    assert "cannot build AOT autograd's runtime" in caplog.text
    _same(outs, ref_outs)
    _same(grads, ref_grads)


# ── what torch's runtime wrappers rebuild from the metadata ──────────────────────────────────
def test_batch_norm_training_updates_its_running_stats_on_a_warm_start_as_eager():
    # running_mean, running_var and num_batches_tracked are mutated inputs: torch's runtime wrapper
    # writes their new values back after the served forward
    def make():
        return nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU())
    x = torch.randn(16, 8)
    caches = []
    for _ in range(2):
        model, eager = _seeded(make), _seeded(make)
        outs, grads, aot, records = _Step(model).compiled(x)
        ref_outs, ref_grads = _Step(eager).eager(x)
        _same(outs, ref_outs)
        _same(grads, ref_grads)
        for (name, got), want in zip(model.state_dict().items(), eager.state_dict().values()):
            torch.testing.assert_close(got, want, msg=name)
        caches.append((aot, [r.cache for r in records]))
    assert caches == [(1, ["miss", "miss"]), (0, [HIT, HIT])]


def _aliasing_outputs(x, w):
    h = x @ w
    return x.t(), h.view(-1), h.relu()


def test_outputs_that_alias_an_input_or_an_intermediate_are_views_as_in_eager():
    x = torch.randn(4, 8)
    w = torch.randn(8, 8).requires_grad_()
    step = _Step(_aliasing_outputs, lambda outs: outs[1].sum() + outs[2].sum())
    ref_outs, ref_grads = step.eager(x, w)
    step.compiled(x, w)
    outs, grads, aot, records = step.compiled(x, w)
    assert aot == 0 and [r.cache for r in records] == [HIT, HIT]
    _same(outs, ref_outs)
    _same(grads, ref_grads)
    got = torch.compile(_aliasing_outputs, backend="mini_inductor")(x, w)
    want = _aliasing_outputs(x, w)
    assert got[0]._base is x and want[0]._base is x                     # a view of the input itself
    storages = [[o.untyped_storage().data_ptr() for o in outs] for outs in (got, want)]
    assert [len(set(p)) for p in storages] == [3, 3]                        # (h's view shares with no other)
    assert [o.requires_grad for o in got] == [o.requires_grad for o in want]


# ── found by review (session 47) ─────────────────────────────────────────────────────────────
def _mutates_one(a, b):
    a.add_(1)
    return b * 2


def _mutates_one_trains(a, b, w):
    a.add_(1)
    return (b * w).sum()


def test_an_entry_for_separate_tensors_never_serves_two_views_of_one():
    # a mutation through one input shows in the other: AOT autograd traces that, an entry made for
    # separate tensors of the same sizes does not know it
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(_mutates_one, backend="mini_inductor")(torch.zeros(4), torch.zeros(4))
    assert len(_front_entries()) == 1
    torch._dynamo.reset()
    base, eager_base = torch.zeros(4), torch.zeros(4)
    with torch.no_grad():
        out = torch.compile(_mutates_one, backend="mini_inductor")(base, base[:])
    assert metrics.compiled_graphs[-1].cache != HIT
    torch.testing.assert_close(out, _mutates_one(eager_base, eager_base[:]))
    torch.testing.assert_close(base, eager_base)


def test_a_training_entry_for_separate_tensors_never_serves_overlapping_views():
    w = torch.ones(4, requires_grad=True)
    torch._dynamo.reset()
    torch.compile(_mutates_one_trains, backend="mini_inductor")(torch.zeros(4), torch.zeros(4), w).backward()
    torch._dynamo.reset()
    w.grad = None
    base = torch.zeros(6)
    out = torch.compile(_mutates_one_trains, backend="mini_inductor")(base[0:4], base[2:6], w)
    out.backward()
    w_eager, eager_base = torch.ones(4, requires_grad=True), torch.zeros(6)
    want = _mutates_one_trains(eager_base[0:4], eager_base[2:6], w_eager)
    want.backward()
    assert HIT not in [r.cache for r in metrics.compiled_graphs[-2:]]
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(w.grad, w_eager.grad)


def test_compiled_autograd_on_a_served_backward_says_how_to_get_it():
    from torch._dynamo import compiled_autograd

    x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
    torch._dynamo.reset()
    torch.compile(_transposed_use, backend="mini_inductor")(x, w).sum().backward()
    torch._dynamo.reset()
    out = torch.compile(_transposed_use, backend="mini_inductor")(x, w)
    assert [r.cache for r in metrics.compiled_graphs[-2:]] == [HIT, HIT]
    with pytest.raises(RuntimeError, match="front_cache': False"):
        with compiled_autograd._enable(lambda gm: torch.compile(gm, backend="eager")):
            out.sum().backward()


@pytest.mark.parametrize("view, sizes", [
    (lambda t: t.t(), (4, 6)),                               # sizes: symbols
    (lambda t: t.view(t.shape[0] // 2, 2, -1), (8, 12)),     # torch's FloorDiv, in the guards too
], ids=["transposed", "floor-divided"])
def test_a_dynamic_graph_returning_a_view_of_its_input_is_served_warm_at_another_size(view, sizes, caplog):
    # the metadata replays the output's view with sympy expressions of the sizes: they come back as
    # shape_guards' trees (never through sympy's classes), and a warm start at another size returns
    # eager's view of the input
    results = []
    for n in sizes:
        torch._dynamo.reset()
        x = torch.randn(n, 3)
        torch._dynamo.mark_dynamic(x, 0)
        first = len(metrics.compiled_graphs)
        with torch.no_grad(), caplog.at_level(logging.WARNING, logger="mini_inductor"):
            out = torch.compile(view, backend="mini_inductor")(x)
        assert out._base is x and out.shape == view(x).shape and out.stride() == view(x).stride()
        results.append([r.cache for r in metrics.compiled_graphs[first:]])
    assert results == [["miss"], [HIT]] and "cannot" not in caplog.text
    (path,) = _front_entries()
    assert front_cache.load_entry(config.current().cache_dir, path.stem).metadata   # the view's, replayed


def test_a_graph_without_an_entry_says_on_its_record_why_a_warm_start_traces_it():
    # a graph compiled under autocast: no key
    def f(x, w):
        return (x @ w).relu().mean()
    torch._dynamo.reset()
    first = len(metrics.compiled_graphs)
    compiled = torch.compile(f, backend="mini_inductor")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        compiled(torch.randn(4, 8), torch.randn(8, 8).requires_grad_()).backward()
    records = [r for r in metrics.compiled_graphs[first:] if "autocast" in r.warm_start]
    assert [r.name.split("_")[0] for r in records] == ["forward", "backward"], \
        [(r.name, r.warm_start) for r in metrics.compiled_graphs[first:]]
    assert "[warm start: AOT autograd again: no front cache key (autocast is on)]" in records[0].summary()
    # a graph that gets one says nothing
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(lambda t: t * 2, backend="mini_inductor")(torch.randn(4))
    assert metrics.compiled_graphs[-1].warm_start == "" and "warm start" not in metrics.compiled_graphs[-1].summary()


def test_a_training_graph_with_a_python_float_is_served_warm_at_the_values_its_guards_allow():
    # the float a dynamic graph takes as a 0-d tensor: clamp's bound makes AOT autograd specialize on it
    # (Eq(zf, a)), kept with the training entry and added again by a hit
    def f(x, w, a):
        return ((x @ w).clamp(max=a) * a).mean()
    runs = _trained_by_value(f, ((0.5, 0.25), (0.5, 0.25, 0.1)))   # cold, then warm with a new value
    assert runs[0] == [["miss", "miss"], ["miss", "miss"]], runs
    # 0.1: the forward compiles (its graph bakes the bound in); the backward's ATen graph, which does not,
    # may come from the disk
    assert runs[1][:2] == [[HIT, HIT], [HIT, HIT]] and runs[1][2][0] == "miss", runs


def test_one_training_entry_serves_every_value_of_a_float_nothing_specializes_on():
    # `a` reaches the backward as the 0-d tensor Dynamo passes; no guard on its value, one entry
    def g(x, w, a):
        return (torch.sin(x @ w) * a).mean()
    runs = _trained_by_value(g, ((0.5, 0.25), (0.5, 0.25, -1.5)))
    assert runs == [[["miss", "miss"], ["miss", "miss"]], [[HIT, HIT], [HIT, HIT], []]], runs


def test_the_saved_sizes_count_every_symbolic_number_as_aot_autograd_counts_them():
    # num_symints_saved_for_bw counts SymInts, SymFloats and SymBools alike (a float argument's value, a
    # size's true quotient): a count of SymInts alone refused the entry of a graph saving the others
    import types
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch._dynamo.source import ConstantSource
    env = ShapeEnv()
    n = env.create_symintnode(env.create_symbol(3, source=ConstantSource("n")), hint=3)
    graph = torch.fx.Graph()
    values = [torch.empty(2), n, env.create_unbacked_symfloat(), n > 2, torch.empty(3), 4]
    nodes = []
    for i, value in enumerate(values):
        node = graph.placeholder(f"p{i}")
        node.meta["val"] = value
        nodes.append(node)
    graph.output(tuple(nodes))
    gm = torch.fx.GraphModule({}, graph)
    assert front_autograd.saved_sizes(gm, types.SimpleNamespace(num_forward_returns=1)) == 3


def _trained_by_value(fn, value_sets) -> list:
    """common.caches_per_call over training steps `fn(x, w, a).backward()`, the loss and w's gradient
    checked against eager."""
    x = torch.randn(4, 8)

    def step(compiled, a):
        w = torch.randn(8, 8, generator=torch.Generator().manual_seed(1)).requires_grad_()
        ref = w.detach().clone().requires_grad_()
        out = compiled(x, w, a)
        out.backward()
        expected = fn(x, ref, a)
        expected.backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(w.grad, ref.grad)
    return caches_per_call(fn, value_sets, step)
