"""The front cache (front_cache.py): an inference graph is served on a warm start from an entry keyed
on the Dynamo graph, without calling AOT autograd (where AOT autograd's runtime wrapper has work to do,
torch's wrapper is built from the entry's metadata); a graph the entry cannot rebuild goes through AOT
autograd as before and gets no entry."""
import json
import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from torch._dynamo.utils import counters
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from common import caches_per_call
from mini_inductor import config, metrics
from mini_inductor.caching import front_cache

backend = sys.modules["mini_inductor.backend"]
from mini_inductor.caching import PROCESS  # noqa: E402
ROOT = pathlib.Path(__file__).resolve().parents[2]
HIT = front_cache.LABEL


def _aot_calls() -> int:
    return counters["aot_autograd"]["total"]


def _front_entries() -> list[pathlib.Path]:
    return sorted((pathlib.Path(config.current().cache_dir) / "front").rglob("*.json"))


def _compile_fresh(fn, *args, grad=False, **options):
    """Compile and run `fn` with the in-process caches emptied (torch._dynamo.reset() empties ours too),
    so only the disk can serve it: (output, the last graph record, AOT autograd calls it made)."""
    torch._dynamo.reset()
    assert not PROCESS.graphs
    before = _aot_calls()
    with torch.set_grad_enabled(grad):
        out = torch.compile(fn, backend="mini_inductor", options=options or None)(*args)
    return out, metrics.compiled_graphs[-1], _aot_calls() - before


def _assert_like_eager(out, ref):
    outs, refs = (list(out), list(ref)) if isinstance(ref, (tuple, list)) else ([out], [ref])
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o, r)
        assert (o.dtype, o.shape) == (r.dtype, r.shape)
        assert [s for s, n in zip(o.stride(), o.shape) if n > 1] == [s for s, n in zip(r.stride(), r.shape) if n > 1]


def _f(x, y):
    return torch.relu(x * 2 + y).sum(-1), x * y


def test_after_a_reset_the_same_graph_is_a_front_hit_without_aot_autograd():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    cold_out, cold, cold_aot = _compile_fresh(_f, x, y)
    out, warm, warm_aot = _compile_fresh(_f, x, y)
    assert (cold.cache, warm.cache) == ("miss", HIT) and warm.cache_hit
    assert (cold_aot, warm_aot) == (1, 0)
    assert len(_front_entries()) == 1
    assert warm.kernel_names == cold.kernel_names and warm.num_fx_nodes == cold.num_fx_nodes
    assert warm.source_path == cold.source_path and f"cache hit: {HIT}" in warm.summary()
    # AOT autograd's own time is the cold record's first stage; the front hit has none
    assert list(cold.stage_seconds)[0] == "AOT autograd" and cold.stage_seconds["AOT autograd"] > 0
    assert "AOT autograd" not in warm.stage_seconds
    _assert_like_eager(cold_out, _f(x, y))
    _assert_like_eager(out, _f(x, y))


def test_a_linear_model_under_no_grad_hits_with_its_parameters_as_static_inputs():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    x = torch.randn(4, 8)
    _, cold, _ = _compile_fresh(model, x)
    out, warm, aot = _compile_fresh(model, x)
    assert (cold.cache, warm.cache, aot) == ("miss", HIT, 0)
    with torch.no_grad():
        _assert_like_eager(out, model(x))
    (path,) = _front_entries()
    entry = front_cache.load_entry(config.current().cache_dir, path.stem)
    placeholders = [n.name for n in _dynamo_graph(model, x).graph.nodes if n.op == "placeholder"]
    params = tuple(i for i, name in enumerate(placeholders) if "_parameters_" in name)
    assert len(params) == 4 and entry.static_input_idxs == params
    assert entry.num_inputs == 5 and entry.num_outputs == 1


CHILD = textwrap.dedent('''
    import json, sys
    import torch, torch.nn as nn, mini_inductor
    from torch._dynamo.utils import counters
    from mini_inductor import metrics
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 8))
    x = torch.randn(4, 8)
    with torch.no_grad():
        out = torch.compile(model, backend="mini_inductor")(x)
        ref = model(x)
    print("RESULT " + json.dumps({"cache": [g.cache for g in metrics.compiled_graphs],
                                  "aot": counters["aot_autograd"]["total"],
                                  "kernels": [g.kernel_names for g in metrics.compiled_graphs],
                                  "error": (out - ref).abs().max().item(),
                                  "layout": [list(out.shape), list(out.stride()), str(out.dtype)]}))
''')


def _run_child(script, cache_dir, *, gpu=False):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINI_INDUCTOR_CACHE_DIR=str(cache_dir / "mini"),
               TRITON_CACHE_DIR=str(cache_dir / "triton"), MINI_INDUCTOR_LOGS="schedule", TRITON_INTERPRET="1")
    if gpu:
        env.pop("TRITON_INTERPRET")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):]), proc.stderr


def test_a_fresh_process_serves_the_graph_without_aot_autograd(tmp_path):
    cold, _ = _run_child(CHILD, tmp_path)
    assert cold["cache"] == ["miss"] and cold["aot"] == 1
    warm, log = _run_child(CHILD, tmp_path)
    assert warm["cache"] == [HIT] and warm["aot"] == 0
    assert warm["kernels"] == cold["kernels"] and warm["layout"] == cold["layout"]
    assert cold["error"] < 1e-5 and warm["error"] < 1e-5
    assert "front cache hit" in log and "AOT autograd skipped" in log and "lowering (" not in log


def _mutates(x):
    return x.add_(1) * 2


def _views_an_input(x):
    return x.t(), x + 1


def _cache_update(cache, x, pos):
    # a serving step's key/value cache written in place at the new positions (a static cache)
    cache.index_copy_(0, pos, x)
    return cache.sum(0)


@pytest.mark.parametrize("fn", [_mutates, _views_an_input], ids=["input mutated", "output views an input"])
def test_graphs_whose_wrapper_has_work_are_served_through_torchs_wrapper_and_stay_correct(fn):
    # AOT autograd's runtime wrapper writes the input's new value back, or makes the output a view of
    # the input: a hit builds that wrapper from the entry's metadata (front_autograd.inference_function)
    results = []
    for _ in range(2):
        x = torch.randn(4, 8)
        x_eager = x.clone()
        out, rec, aot = _compile_fresh(fn, x)
        want = fn(x_eager)
        _assert_like_eager(out, want)
        torch.testing.assert_close(x, x_eager)
        if fn is _views_an_input:
            assert out[0]._base is x and want[0]._base is x_eager
        results.append((aot, rec.cache))
    assert results == [(1, "miss"), (0, HIT)]
    (entry,) = _front_entries()
    assert front_cache.load_entry(config.current().cache_dir, entry.stem).metadata


def test_a_cache_written_in_place_by_a_served_graph_holds_eager_values():
    cache, x, pos = torch.zeros(8, 4), torch.randn(2, 4), torch.tensor([1, 5])
    results = []
    for _ in range(2):
        mine, theirs = cache.clone(), cache.clone()
        out, rec, aot = _compile_fresh(_cache_update, mine, x, pos)
        _assert_like_eager(out, _cache_update(theirs, x, pos))
        torch.testing.assert_close(mine, theirs)
        results.append((aot, rec.cache))
    assert results == [(1, "miss"), (0, HIT)]


def test_training_is_served_from_a_training_entry_and_its_backward_matches_eager():
    # (the training entries' own tests: tests/caching/test_front_cache_training.py)
    def f(x, w):
        return torch.tanh(x @ w).pow(2).mean()
    x = torch.randn(4, 8)
    aots = []
    for _ in range(2):
        w = torch.randn(8, 8, generator=torch.Generator().manual_seed(0), device="cpu").to(x.device).requires_grad_()
        out, _, aot = _compile_fresh(f, x, w, grad=True)
        out.backward()
        w_eager = w.detach().clone().requires_grad_()
        f(x, w_eager).backward()
        aots.append(aot)
        torch.testing.assert_close(w.grad, w_eager.grad)
    assert aots == [1, 0]
    assert [g.cache for g in metrics.compiled_graphs] == ["miss", "miss", HIT, HIT]
    assert len(_front_entries()) == 1


# ── graphs Dynamo never hands over, given to the backend directly ────────────────────────────────
def _like_dynamo(fn, *inputs) -> torch.fx.GraphModule:
    """An FX graph of `fn` with the example values Dynamo's placeholders and outputs carry."""
    gm = torch.fx.symbolic_trace(fn)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(gm, mode).propagate(*[mode.from_tensor(x) for x in inputs])
    for node in gm.graph.nodes:
        if "val" in node.meta:
            node.meta["example_value"] = node.meta["val"]
    return gm


def _backend_fresh(fn, *inputs):
    """The backend called as Dynamo calls it (in a tracing context), in-process caches emptied; then
    the returned callable run under no_grad: (outputs, AOT autograd calls made)."""
    backend.reset()
    before = _aot_calls()
    gm = _like_dynamo(fn, *inputs)
    with torch.no_grad(), torch._guards.tracing(torch._guards.TracingContext(FakeTensorMode())):
        compiled = backend.mini_inductor(gm, list(inputs))
    with torch.no_grad():
        return compiled(*inputs), _aot_calls() - before


def _twice(x):
    y = x * 2
    return y, y


def _returns_its_input(x):
    return x, x + 1


def test_a_graph_returning_its_input_returns_that_input_when_served_too():
    x = torch.randn(4, 8)
    aots = []
    for _ in range(2):
        (out, plus), aot = _backend_fresh(_returns_its_input, x)
        assert out is x
        torch.testing.assert_close(plus, x + 1)
        aots.append(aot)
    assert aots == [1, 0] and len(_front_entries()) == 1


def test_a_graph_returning_one_tensor_twice_is_served_as_aot_autograd_serves_it():
    # an inference graph's repeated output is a plain output to AOT autograd: its wrapper returns
    # the compiled graph's list as it is, so a hit returns the same tensor twice too
    x = torch.randn(4, 8)
    (a, b), cold_aot = _backend_fresh(_twice, x)
    (c, d), warm_aot = _backend_fresh(_twice, x)
    assert (cold_aot, warm_aot) == (1, 0) and metrics.compiled_graphs[-1].cache == HIT
    assert a is b and c is d
    torch.testing.assert_close(c, x * 2)


def test_the_same_tensor_passed_twice_gets_no_key():
    x = torch.randn(4, 8)
    for _ in range(2):
        (out,), aot = _backend_fresh(lambda a, b: (a * b + a,), x, x)
        assert aot == 1
        torch.testing.assert_close(out, x * x + x)
    assert not _front_entries()


class _OwnParameters(nn.Linear):
    """A graph module holding its parameters (Dynamo's graphs take them as inputs instead)."""

    def forward(self, x):
        return (torch.relu(nn.functional.linear(x, self.weight, self.bias)),)


def test_a_graph_module_with_its_own_parameters_hits_and_passes_them_first():
    module = _OwnParameters(8, 4)
    x = torch.randn(4, 8)
    _, cold_aot = _backend_fresh(module, x)
    (out,), warm_aot = _backend_fresh(module, x)
    assert (cold_aot, warm_aot) == (1, 0) and metrics.compiled_graphs[-1].cache == HIT
    with torch.no_grad():
        _assert_like_eager(out, module(x)[0])
    (path,) = _front_entries()
    assert front_cache.load_entry(config.current().cache_dir, path.stem).num_inputs == 3


# ── the key and the files ────────────────────────────────────────────────────────────────────
def _dynamo_graph(fn, *inputs) -> torch.fx.GraphModule:
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=capture)(*inputs)
    return graphs[0]


def test_other_strides_dtypes_or_requires_grad_are_other_keys():
    x = torch.randn(4, 8)
    gm = _dynamo_graph(lambda x: (x.sin() + 1,), x)
    cfg = config.current()

    def key(inp, **changes):
        with torch.no_grad():
            return front_cache.Front(gm, [inp], cfg.replace(**changes)).key
    base = key(x)
    assert base is not None and base == key(x.clone()) == key(x, compile_threads=1, cudagraph_rerecord_limit=2)
    others = [key(torch.randn(8, 4).t()), key(x.double()), key(x[:, :4].contiguous().expand(4, 4)),
              key(x.clone().requires_grad_()), key(x, max_fusion_size=2)]
    assert len({base, *others}) == 1 + len(others)
    assert key(x, front_cache=False) is None and key(x, graph_cache=False) is None


def test_a_new_stride_or_dtype_compiles_again_and_the_first_still_hits():
    f = lambda x: (x * 3).relu().sum(0)  # noqa: E731
    x = torch.randn(4, 8)
    _compile_fresh(f, x)
    for other in (torch.randn(8, 4).t(), x.double()):
        out, rec, aot = _compile_fresh(f, other)
        assert (rec.cache, aot) == ("miss", 1)
        _assert_like_eager(out, f(other))
    _, rec, aot = _compile_fresh(f, x)
    assert (rec.cache, aot) == (HIT, 0) and len(_front_entries()) == 3


@pytest.mark.parametrize("text", ['{"format": 1, "graph_key": "ab', '{"format": 0}',
                                  '{"format": 1, "graph_key": "nothex", "graph": "g", "num_fx_nodes": 1, '
                                  '"num_inputs": 2, "num_outputs": 1, "static_input_idxs": []}'],
                         ids=["truncated", "old format", "not a key"])
def test_a_corrupt_front_entry_is_a_logged_miss_and_is_rewritten(text, caplog):
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    _compile_fresh(_f, x, y)
    (path,) = _front_entries()
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        out, rec, aot = _compile_fresh(_f, x, y)
    assert (rec.cache, aot) == ("disk", 1)
    assert any("ignoring a corrupt front cache entry" in r.getMessage() for r in caplog.records)
    _assert_like_eager(out, _f(x, y))
    assert front_cache.load_entry(config.current().cache_dir, path.stem).num_outputs == 2
    _, rec, aot = _compile_fresh(_f, x, y)
    assert (rec.cache, aot) == (HIT, 0)


def test_a_missing_aten_graph_entry_is_a_miss(caplog):
    import shutil
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    _compile_fresh(_f, x, y)
    shutil.rmtree(pathlib.Path(config.current().cache_dir) / "graphs")
    with caplog.at_level(logging.INFO, logger="mini_inductor.schedule"):
        out, rec, aot = _compile_fresh(_f, x, y)
    assert (rec.cache, aot) == ("miss", 1)
    assert any("cannot be loaded: through AOT autograd" in r.getMessage() for r in caplog.records)
    _assert_like_eager(out, _f(x, y))
    _, rec, _ = _compile_fresh(_f, x, y)
    assert rec.cache == HIT


def test_switched_off_the_aten_graph_level_still_serves(monkeypatch):
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    _compile_fresh(_f, x, y, front_cache=False)
    _, rec, aot = _compile_fresh(_f, x, y, front_cache=False)
    assert (rec.cache, aot) == ("disk", 1) and not _front_entries()
    monkeypatch.setenv("MINI_INDUCTOR_FRONT_CACHE", "0")
    assert config._from_env().front_cache is False


def test_explain_and_the_debug_dir_go_through_aot_autograd(tmp_path):
    from mini_inductor.debug import trace
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    _compile_fresh(_f, x, y)
    with trace.capture() as traces:
        _, rec, aot = _compile_fresh(_f, x, y)
    assert (rec.cache, aot) == ("miss", 1) and traces[0].lowered is not None
    _, rec, aot = _compile_fresh(_f, x, y, debug_dir=str(tmp_path))
    assert (rec.cache, aot) == ("miss", 1) and any(tmp_path.iterdir())


# ── GPU: a warm process with CUDA graphs ─────────────────────────────────────────────────────
GPU_CHILD = textwrap.dedent('''
    import json
    import torch, torch.nn as nn, mini_inductor
    from torch._dynamo.utils import counters
    from mini_inductor import metrics
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.LayerNorm(32)).cuda()
    x = torch.randn(16, 32, device="cuda")
    compiled = torch.compile(model, backend="mini_inductor")
    errors = []
    with torch.no_grad():
        ref = model(x)
        for _ in range(3):
            errors.append((compiled(x) - ref).abs().max().item())
    stats = mini_inductor.cudagraphs.stats()
    keys = ("warmups", "recordings", "replays", "skips", "recorded_non_static_inputs", "fallback_runs")
    print("RESULT " + json.dumps({"cache": [g.cache for g in metrics.compiled_graphs],
                                  "aot": counters["aot_autograd"]["total"], "errors": errors,
                                  "stats": {k: stats.get(k) for k in keys}, "tree": str(stats.get("tree"))}))
''')


@pytest.mark.gpu
def test_a_warm_process_on_cuda_skips_aot_autograd_and_replays_cuda_graphs_as_the_cold_one(tmp_path):
    cold, _ = _run_child(GPU_CHILD, tmp_path, gpu=True)
    warm, log = _run_child(GPU_CHILD, tmp_path, gpu=True)
    assert cold["cache"] == ["miss"] and cold["aot"] == 1
    assert warm["cache"] == [HIT] and warm["aot"] == 0 and "AOT autograd skipped" in log
    assert cold["stats"]["recordings"] >= 1 and cold["stats"]["replays"] >= 1
    assert warm["stats"] == cold["stats"] and warm["tree"] == cold["tree"]
    assert max(cold["errors"] + warm["errors"]) < 1e-3


def test_a_graph_the_channels_last_pass_changed_is_still_a_front_hit():
    # the entry points at the key the changed graph was compiled under (layout_opt.py runs before it)
    conv = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1))
    x = torch.randn(1, 3, 6, 6)
    _, cold, _ = _compile_fresh(conv, x, conv_layout="channels_last")
    out, warm, aot = _compile_fresh(conv, x, conv_layout="channels_last")
    assert (cold.cache, warm.cache, aot) == ("miss", HIT, 0)
    assert any("clone" in k for k in cold.kernel_names)       # the pass did change the graph
    with torch.no_grad():
        _assert_like_eager(out, conv(x))


def test_a_python_float_that_aot_autograd_specializes_on_is_not_served_from_the_front_cache():
    # Dynamo passes an unspecialized float as a 0-d tensor; clamp(max=a) makes AOT autograd bake its
    # value in with a guard, which a front hit never adds: a = 1.5 and 0.3 got a = 0.75's graph
    # (review, session 34)
    def f(x, a):
        return x.clamp(max=a) * a
    compiled = torch.compile(f, backend="mini_inductor")
    x = torch.linspace(-1, 2, 4)
    for a in (0.25, 0.75, 1.5, 0.3, 0.75):
        _assert_like_eager(compiled(x, a), f(x, a))
    assert all(r.cache != HIT for r in metrics.compiled_graphs[1:]), [r.cache for r in metrics.compiled_graphs]


def test_a_python_float_aot_autograd_specializes_on_is_served_only_at_its_value_on_a_warm_start():
    # Dynamo passes an unspecialized float as a 0-d tensor, its value a ShapeEnv symbol; clamp(max=a)
    # makes AOT autograd bake the value in with the guard Eq(zf, a), which the entry keeps and a hit adds
    # again (the test above: without it, a = 1.5 and 0.3 got a = 0.75's graph)
    def f(x, a):
        return x.clamp(max=a) * a
    x = torch.linspace(-1, 2, 4)
    runs = _served_by_value(f, x, ((0.25, 0.75, 1.5), (0.25, 0.75, 1.5, 0.3, 2.0)))   # cold; warm, two new
    # (0.25: Dynamo specializes the first value; the others are the dynamic graph, once per guard set)
    assert runs[0] == [["miss"], ["miss"], ["miss"]], runs
    assert runs[1] == [[HIT], [HIT], [HIT], ["miss"], ["miss"]], runs
    guarded = [p for p in _front_entries() if p.stem.count(".") == 1]
    assert len(guarded) == 4, guarded     # one entry per value AOT autograd specialized the graph on


def test_a_python_float_nothing_specializes_on_is_one_entry_for_every_value():
    def g(x, a):
        return x * a + torch.sin(x) / a
    x = torch.linspace(-1, 2, 4)
    runs = _served_by_value(g, x, ((0.5, 0.75), (0.5, 1.25, -3.0)))
    assert runs == [[["miss"], ["miss"]], [[HIT], [HIT], []]], runs   # -3.0: the same compiled frame


def _served_by_value(fn, x, value_sets) -> list:
    """common.caches_per_call over `fn(x, a)`, every output checked against eager."""
    def step(compiled, a):
        _assert_like_eager(compiled(x, a), fn(x, a))
    return caches_per_call(fn, value_sets, step)
