"""The on-disk cache of compiled graphs: a warm start compiles nothing; any change of graph, shape,
option or compiler source compiles again; a broken entry is ignored with a warning."""
import json
import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import torch

from mini_inductor import config, metrics
from mini_inductor.caching import files as cache_files, graph_cache

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A child process: counts lowering / scheduling / codegen calls, checks the output against eager.
CHILD = textwrap.dedent('''
    import json, sys
    import torch, mini_inductor
    from mini_inductor import metrics
    pipeline = sys.modules["mini_inductor.pipeline"]
    calls = {"lower": 0, "schedule": 0, "codegen": 0}

    def counting(name, stage):
        real = getattr(pipeline, name)
        def wrapper(*args, **kwargs):
            calls[stage] += 1
            return real(*args, **kwargs)
        setattr(pipeline, name, wrapper)

    counting("lower_graph", "lower"); counting("schedule", "schedule"); counting("generate", "codegen")

    def f(x, w):
        return torch.softmax(x @ w, -1) * 2 + torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])

    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    out = torch.compile(f, backend="mini_inductor")(x, w)
    print("RESULT " + json.dumps({
        "calls": calls, "cache": [g.cache for g in metrics.compiled_graphs],
        "kernels": [g.kernel_names for g in metrics.compiled_graphs], "error": (out - f(x, w)).abs().max().item()}))
''')


def _run_child(cache_dir):
    # the ATen-graph level: the level before AOT autograd, which would serve this graph first, is off
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", MINI_INDUCTOR_CACHE_DIR=str(cache_dir),
               MINI_INDUCTOR_LOGS="schedule", MINI_INDUCTOR_FRONT_CACHE="0")
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):]), proc.stderr


def test_warm_start_in_a_new_process_lowers_schedules_and_generates_nothing(tmp_path):
    cold, _ = _run_child(tmp_path)
    assert cold["calls"] == {"lower": 1, "schedule": 1, "codegen": 1} and cold["cache"] == ["miss"]
    warm, log = _run_child(tmp_path)
    assert warm["calls"] == {"lower": 0, "schedule": 0, "codegen": 0} and warm["cache"] == ["disk"]
    assert warm["kernels"] == cold["kernels"] and warm["kernels"][0]
    assert warm["error"] < 1e-5
    assert "compiled-graph cache hit" in log and "lowering (" not in log


def _f(x):
    return torch.relu(x * 2 + 1).sum(-1)


def _compile_fresh(fn, *args, **options):
    """Compile in this process with the in-process caches emptied, so only the disk can serve it: the
    ATen-graph level, as the level before AOT autograd is off unless asked for (tests/caching/test_front_cache.py)."""
    options.setdefault("front_cache", False)
    torch._dynamo.reset()
    out = torch.compile(fn, backend="mini_inductor", options=options)(*args)
    return out, metrics.compiled_graphs[-1]


def test_same_graph_after_reset_is_served_from_disk_with_the_original_record():
    x = torch.randn(4, 8)
    _, cold = _compile_fresh(_f, x)
    out, warm = _compile_fresh(_f, x)
    assert (cold.cache, warm.cache) == ("miss", "disk") and warm.cache_hit
    assert warm.kernel_names == cold.kernel_names and warm.nodes_after_fusion == cold.nodes_after_fusion
    assert warm.planned_peak_bytes == cold.planned_peak_bytes and warm.source_path == cold.source_path
    assert "lowering" not in warm.stage_seconds and "cache hit: disk" in warm.summary()
    torch.testing.assert_close(out, _f(x))


def test_a_new_input_shape_or_a_changed_graph_compiles_again():
    _compile_fresh(_f, torch.randn(4, 8))
    _, other_shape = _compile_fresh(_f, torch.randn(4, 16))
    x = torch.randn(4, 8)
    out, other_graph = _compile_fresh(lambda x: torch.relu(x * 3 + 1).sum(-1), x)
    _, transposed = _compile_fresh(_f, torch.randn(8, 4).t())
    assert (other_shape.cache, other_graph.cache, transposed.cache) == ("miss", "miss", "miss")
    torch.testing.assert_close(out, torch.relu(x * 3 + 1).sum(-1))
    _, again = _compile_fresh(_f, torch.randn(4, 16))
    assert again.cache == "disk"


def test_key_covers_code_options_and_compiler_versions_but_not_where_files_go(monkeypatch):
    x = torch.randn(4, 8)
    gm = torch.fx.symbolic_trace(_f)
    cfg = config.current()
    key = graph_cache.graph_key(gm, [x], cfg)
    assert key == graph_cache.graph_key(torch.fx.symbolic_trace(_f), [x.clone()], cfg)
    assert key == graph_cache.graph_key(gm, [x], cfg.replace(debug_dir="/tmp/elsewhere", compile_threads=3))
    assert key != graph_cache.graph_key(gm, [x], cfg.replace(max_fusion_size=2))
    # ops cut out of CUDA-graph partitions change the code; the other cudagraph_* options do not
    assert key != graph_cache.graph_key(gm, [x], cfg.replace(cudagraph_unsafe_ops="aten.mm"))
    assert key != graph_cache.graph_key(gm, [x], cfg.replace(reorder_for_partitions=False))
    assert key == graph_cache.graph_key(gm, [x], cfg.replace(cudagraph_rerecord_limit=3))
    assert key != graph_cache.graph_key(gm, [x.double()], cfg)
    monkeypatch.setattr(cache_files, "versions", lambda: ("torch 0", "triton 0", "mini_inductor edited"))
    assert key != graph_cache.graph_key(gm, [x], cfg)


def test_package_source_hash_reads_every_module():
    digest = cache_files.package_source_hash()
    assert len(digest) == 16 and digest == cache_files.package_source_hash.__wrapped__()


def test_forward_and_backward_graphs_of_a_training_step_are_both_served_from_disk():
    def f(x, w):
        return torch.tanh(x @ w).pow(2).mean()
    x = torch.randn(4, 8)
    grads = []
    for _ in range(2):
        w = torch.randn(8, 8, generator=torch.Generator().manual_seed(0), device="cpu").to(x.device).requires_grad_()
        torch._dynamo.reset()
        torch.compile(f, backend="mini_inductor", options={"front_cache": False})(x, w).backward()   # the ATen level
        grads.append(w.grad)
    assert [g.cache for g in metrics.compiled_graphs] == ["miss", "miss", "disk", "disk"]
    w = torch.randn(8, 8, generator=torch.Generator().manual_seed(0), device="cpu").to(x.device).requires_grad_()
    f(x, w).backward()
    torch.testing.assert_close(grads[1], w.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_lifted_constants_are_read_from_the_graph_again():
    def f(x):
        return x * torch.tensor([1.0, -2.0, 3.0, -4.0], device=x.device)  # Dynamo ignores a default-device context
    x = torch.randn(3, 4)
    _, cold = _compile_fresh(f, x)
    out, warm = _compile_fresh(f, x)
    assert warm.cache == "disk"
    torch.testing.assert_close(out, f(x))


def test_a_graph_that_differs_only_in_a_cpu_scalar_constant_has_another_key():
    # on CUDA such a constant's value is in the generated code (lowering/graph.py moves it into the
    # kernel that reads it): an entry of 1.5 must not serve a graph of 2.5
    from mini_inductor.caching.graph_cache import graph_key

    def keyed(value):
        c = torch.tensor(value)
        gm = torch.fx.symbolic_trace(lambda x: x * c)
        return graph_key(gm, [torch.randn(3)], config.current())
    assert keyed(1.5) != keyed(2.5) and keyed(1.5) == keyed(1.5)


def test_a_corrupt_entry_is_ignored_with_a_warning_and_rewritten(caplog):
    x = torch.randn(4, 8)
    _compile_fresh(_f, x)
    (entry,) = (pathlib.Path(config.current().cache_dir) / "graphs").rglob("*.json")
    entry.write_text('{"format": 1, "graph": "inference_0", "sour')
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        out, rec = _compile_fresh(_f, x)
    assert rec.cache == "miss"
    assert any("ignoring a corrupt compiled-graph cache entry" in r.getMessage() for r in caplog.records)
    torch.testing.assert_close(out, _f(x))
    assert graph_cache.load(config.current().cache_dir, entry.stem).graph == rec.name
    _, rec = _compile_fresh(_f, x)
    assert rec.cache == "disk"


def test_switched_off_it_neither_reads_nor_writes():
    x = torch.randn(4, 8)
    _, first = _compile_fresh(_f, x, graph_cache=False)
    _, second = _compile_fresh(_f, x, graph_cache=False)
    assert (first.cache, second.cache) == ("off", "off")
    assert not (pathlib.Path(config.current().cache_dir) / "graphs").exists()


def test_a_disk_hit_still_logs_the_fusion_decisions(caplog):
    f = lambda x, w: (torch.relu(x) * w + (torch.relu(x) * w).t()).sum(-1)  # noqa: E731
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    _compile_fresh(f, x, w)
    with caplog.at_level(logging.INFO, logger="mini_inductor.fusion"):
        _, rec = _compile_fresh(f, x, w)
    assert rec.cache == "disk"
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "mini_inductor.fusion")
    assert "cache hit" in text and "its fusion decisions" in text and "fused" in text


def test_explain_and_the_debug_dir_compile_for_real(tmp_path):
    from mini_inductor.debug import trace
    x = torch.randn(4, 8)
    _compile_fresh(_f, x)
    with trace.capture() as traces:
        _, rec = _compile_fresh(_f, x)
    assert rec.cache == "miss" and traces and traces[0].lowered is not None
    _, rec = _compile_fresh(_f, x, debug_dir=str(tmp_path))
    assert rec.cache == "miss" and any(tmp_path.iterdir())


def test_entry_holds_the_module_source_and_record():
    x = torch.randn(4, 8)
    _, rec = _compile_fresh(_f, x)
    (path,) = (pathlib.Path(config.current().cache_dir) / "graphs").rglob("*.json")
    entry = graph_cache.load(config.current().cache_dir, path.stem)
    assert entry.source == pathlib.Path(rec.source_path).read_text()
    assert entry.record["kernel_names"] == rec.kernel_names and entry.decisions is not None


def test_a_python_function_target_keys_by_its_name_not_its_address():
    from mini_inductor.caching.graph_cache import _target_name
    assert _target_name(torch.sym_float) == "torch.sym_float"
    assert _target_name(torch.ops.aten.add.Tensor) == "aten.add.Tensor"


def test_the_keys_tell_a_compile_under_the_interpreter_from_one_without(monkeypatch):
    # a CPU graph compiled under TRITON_INTERPRET=1 and served from the front cache to a run without it
    # crashed at its first launch, where a cold run says why it runs eagerly (review, session 33)
    cfg = config.current()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    under = graph_cache.compiler_key_parts(cfg)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert graph_cache.compiler_key_parts(cfg) != under


def test_a_graph_the_symbolic_compile_could_not_take_goes_per_size_at_once_on_a_warm_start(monkeypatch):
    # interpolate by 1.7: an output length lowering does not take symbolically; the cold process lowers
    # the graph up to that failure, then compiles per size; the warm one goes per size at once
    import pytest
    pipeline = sys.modules["mini_inductor.pipeline"]
    lowered = []
    real = pipeline.lower_graph
    monkeypatch.setattr(pipeline, "lower_graph", lambda *a, **k: lowered.append(1) or real(*a, **k))

    def f(x):
        return torch.nn.functional.interpolate(x[None, None], scale_factor=1.7, mode="nearest") + 1
    runs = []
    for _ in range(2):
        torch._dynamo.reset()
        lowered.clear()
        compiled = torch.compile(f, backend="mini_inductor", dynamic=True, options={"dynamic_shapes": "symbolic"})
        first = len(metrics.compiled_graphs)
        with pytest.warns(UserWarning, match="cannot be compiled once for every size"):
            for n in (6, 10):
                x = torch.randn(n, 6)
                torch.testing.assert_close(compiled(x), f(x))
        dynamic = [r for r in metrics.compiled_graphs[first:] if r.dynamic_fallback]
        runs.append(([r.cache for r in dynamic], [r.dynamic_fallback for r in dynamic], len(lowered),
                     [r.cache for r in metrics.compiled_graphs[first:] if not r.dynamic_fallback]))
    (cold_cache, cold_why, cold_lowered, cold_sizes), (warm_cache, warm_why, warm_lowered, warm_sizes) = runs
    # (Dynamo traces the frame twice: the dynamic graph is compiled twice, each tried and failed)
    assert cold_cache == ["miss", "miss"] and warm_cache == ["disk (per size)"] * 2, runs
    assert cold_lowered == 4 and warm_lowered == 0, runs     # the symbolic tries and the two sizes, then none
    assert cold_sizes == ["miss", "miss"] and warm_sizes == ["disk", "disk"], runs
    # the same reason, told of the warm process's graph
    assert all("TruncToInt" in w and "in graph inference_" in w for w in warm_why)
    assert [w.split("in graph ")[1].split(":")[0] for w in warm_why] == \
        [r.name for r in metrics.compiled_graphs if r.cache == "disk (per size)"]
    assert [w.split(":", 1)[1] for w in warm_why] == [c.split(":", 1)[1] for c in cold_why]


def test_a_damaged_per_size_marker_is_a_symbolic_compile_again(tmp_path, caplog):
    key = "ab" + "0" * 62
    path = graph_cache.store_per_size(str(tmp_path), key, "a reason in graph forward_3", "forward_3")
    assert graph_cache.load_per_size(str(tmp_path), key, "forward_9") == "a reason in graph forward_9"
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(len(data) - 5)
        f.write(b"XXXX}")
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        assert graph_cache.load_per_size(str(tmp_path), key, "forward_9") is None
    assert "per-size marker" in caplog.text and not os.path.exists(path)
