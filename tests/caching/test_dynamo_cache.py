"""Dynamo's own cache (dynamo_cache.py, opt-in with MINI_INDUCTOR_DYNAMO_CACHE=1): a fresh process runs an
inference graph compiled by an earlier one without Dynamo tracing its function, and its loaded guards still
send a new shape or dtype to a real recompile."""
import json
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from mini_inductor import config
from mini_inductor.caching import dynamo_cache

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(dynamo_cache.torch_support() is not None,
                                reason=f"this torch has no usable Dynamo cache: {dynamo_cache.torch_support()}")

# A file, not `python -c`: Dynamo's cache checks the source of every function it inlined.
CHILD = textwrap.dedent('''
    import json, os, sys, time
    import torch, torch.nn as nn, torch.nn.functional as F
    import mini_inductor
    from torch._dynamo.utils import counters
    from mini_inductor import metrics

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

        def forward(self, x):
            return self.fc2(torch.relu(F.layer_norm(self.fc1(x), (16,))))

    def compare(out, ref):
        return {"error": (out - ref).abs().max().item(), "layout": [list(out.shape), str(out.dtype)],
                "expected": [list(ref.shape), str(ref.dtype)]}

    device = os.environ.get("DEVICE", "cpu")
    torch.manual_seed(0)
    model = MLP().to(device)
    result = {}
    with torch.no_grad():
        began = time.perf_counter()
        compiled = torch.compile(model, backend="mini_inductor")
        x = torch.randn(4, 8, device=device)
        out = compiled(x)
        torch.cuda.synchronize() if device == "cuda" else None
        result["first_call_s"] = time.perf_counter() - began      # torch.compile() and the first call
        result["first"] = compare(out, model(x))
        result["first_frames"] = counters["frames"]["total"]
        if os.environ.get("CHANGE"):            # a new batch size, then a new dtype: two guard failures
            x = torch.randn(6, 8, device=device)
            result["shape"] = compare(compiled(x), model(x))
            model.double()                      # (the same batch size: a third size would go dynamic)
            x = torch.randn(6, 8, dtype=torch.float64, device=device)
            result["dtype"] = compare(compiled(x), model(x))
    result["frames"] = counters["frames"]["total"]
    result["dynamo_cache"] = dict(counters["dynamo_cache"])
    result["cache"] = [g.cache for g in metrics.compiled_graphs]
    print("RESULT " + json.dumps(result))
''')


def _run_child(tmp_path, *, gpu=False, **env_changes):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINI_INDUCTOR_CACHE_DIR=str(tmp_path / "mini"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "torch"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               MINI_INDUCTOR_LOGS="schedule", MINI_INDUCTOR_DYNAMO_CACHE="1", TRITON_INTERPRET="1", **env_changes)
    if gpu:
        env.pop("TRITON_INTERPRET")
        env["DEVICE"] = "cuda"
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):]), proc.stderr


def _like_eager(run, tol=1e-5):
    assert run["error"] < tol and run["layout"] == run["expected"]


def _entries_on_disk(tmp_path):
    """The graphs (backend ids) of each entry torch wrote under $TORCHINDUCTOR_CACHE_DIR/dynamo."""
    folder = tmp_path / "torch" / "dynamo"
    entries = [pickle.loads((d / "entry").read_bytes()) for d in folder.iterdir()] if folder.exists() else []
    return [sorted(e.backends) for e in entries]


def test_a_fresh_process_skips_dynamo_tracing_and_new_shapes_or_dtypes_still_recompile(tmp_path):
    cold, cold_log = _run_child(tmp_path)
    assert cold["frames"] == 1 and cold["cache"] == ["miss"] and cold["dynamo_cache"] == {"dynamo_cache_miss": 1}
    assert "kept in Dynamo's cache" in cold_log and "Dynamo cache: 1 entry written" in cold_log
    assert [len(ids) for ids in _entries_on_disk(tmp_path)] == [1]
    _like_eager(cold["first"])

    warm, log = _run_child(tmp_path, CHANGE="1")
    # the first call: no frame traced, the graph rebuilt from the front cache entry (no AOT autograd)
    assert warm["first_frames"] == 0 and warm["dynamo_cache"] == {"dynamo_cache_hit": 1}
    assert warm["cache"][0] == dynamo_cache.LABEL
    first_call_log = log.split("rebuilt from Dynamo's cache and the front cache entry")[0]
    assert "lowering (" not in first_call_log and "through AOT autograd" not in first_call_log
    _like_eager(warm["first"])
    # a new batch size, then a new dtype, fail the loaded guards: Dynamo traces again, each result is
    # right for its inputs, and both new graphs join the function's entry for the next process
    assert warm["frames"] == 2 and warm["cache"] == [dynamo_cache.LABEL, "miss", "miss"]
    _like_eager(warm["shape"])
    _like_eager(warm["dtype"])
    assert warm["shape"]["layout"] == [[6, 8], "torch.float32"]
    assert warm["dtype"]["layout"] == [[6, 8], "torch.float64"]
    assert [len(ids) for ids in _entries_on_disk(tmp_path)] == [3]


@pytest.mark.gpu
def test_on_the_gpu_a_fresh_process_skips_dynamo_tracing(tmp_path):
    cold, _ = _run_child(tmp_path, gpu=True)
    warm, log = _run_child(tmp_path, gpu=True)
    assert cold["frames"] == 1 and warm["first_frames"] == 0 and warm["cache"] == [dynamo_cache.LABEL]
    _like_eager(cold["first"], 1e-4)
    _like_eager(warm["first"], 1e-4)
    print(f"torch.compile + first call: cold {cold['first_call_s']:.3f} s, warm {warm['first_call_s']:.3f} s")


# ── in-process ────────────────────────────────────────────────────────────────────────────────
def test_off_by_default_and_enable_turns_on_torchs_switch_only_when_asked():
    assert config.Config().dynamo_cache is False
    assert config._from_env().dynamo_cache is (os.environ.get("MINI_INDUCTOR_DYNAMO_CACHE") == "1")
    with torch._dynamo.config.patch(caching_precompile=False):
        assert dynamo_cache.enable(config.Config()) is False
        assert torch._dynamo.config.caching_precompile is False
        assert dynamo_cache.enable(config.Config(dynamo_cache=True)) is True
        assert torch._dynamo.config.caching_precompile is True


def test_without_torchs_switch_a_compile_records_nothing():
    from torch._dynamo.precompile_context import PrecompileContext
    PrecompileContext.clear()
    with torch._dynamo.config.patch(caching_precompile=False), config.patch(dynamo_cache=True), torch.no_grad():
        x = torch.randn(4, 8)
        out = torch.compile(lambda a: torch.relu(a) * 2, backend="mini_inductor")(x)
    torch.testing.assert_close(out, torch.relu(x) * 2)
    assert not any(isinstance(a, dynamo_cache.GraphArtifact)
                   for a in PrecompileContext._backend_artifacts_by_key.values())


def _training_step(model, x):
    return model(x).sum()


def test_a_training_graph_is_not_kept_and_its_function_gets_no_entry(tmp_path, monkeypatch):
    from torch._dynamo.precompile_context import PrecompileContext
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch"))
    PrecompileContext.clear()
    model = torch.nn.Linear(8, 4)
    x = torch.randn(2, 8)
    with torch._dynamo.config.patch(caching_precompile=True), config.patch(dynamo_cache=True):
        out = torch.compile(_training_step, backend="mini_inductor")(model, x)
        out.backward()
        assert dynamo_cache.save() == []
    torch.testing.assert_close(out, _training_step(model, x))
    assert not any(isinstance(a, dynamo_cache.GraphArtifact)
                   for a in PrecompileContext._backend_artifacts_by_key.values())
    assert not (tmp_path / "torch" / "dynamo").exists()
    PrecompileContext.clear()


def _norm_mul(x, y):
    return torch.relu(torch.nn.functional.layer_norm(x, (8,))) * y


def _kept_artifact(tmp_path, monkeypatch, x, y):
    """Compile `_norm_mul` with Dynamo's cache on (in this process): its output and the GraphArtifact kept."""
    from torch._dynamo.precompile_context import PrecompileContext
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch"))
    PrecompileContext.clear()
    with torch._dynamo.config.patch(caching_precompile=True), config.patch(dynamo_cache=True), torch.no_grad():
        out = torch.compile(_norm_mul, backend="mini_inductor")(x, y)
    (artifact,) = [a for a in PrecompileContext._backend_artifacts_by_key.values()
                   if isinstance(a, dynamo_cache.GraphArtifact)]
    PrecompileContext.clear()
    assert [len(ids) for ids in _entries_on_disk(tmp_path)] == [1]
    return out, pickle.loads(pickle.dumps(artifact))      # as a new process reads it


def test_a_reloaded_graph_is_rebuilt_from_the_front_cache_without_compiling(tmp_path, monkeypatch):
    from mini_inductor import metrics
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    cold_out, artifact = _kept_artifact(tmp_path, monkeypatch, x, y)
    reloaded = artifact.after_deserialization()
    assert reloaded.rebuilt_from is None          # nothing is loaded before the first call
    with torch.no_grad():     # a Dynamo graph returns a sequence; clones outlive CUDA-graph replays on a GPU
        out = reloaded(x, y)[0].clone()
        again = reloaded(x * 2, y)[0].clone()
    assert reloaded.rebuilt_from == "front cache" and metrics.compiled_graphs[-1].cache == dynamo_cache.LABEL
    torch.testing.assert_close(out, _norm_mul(x, y))
    torch.testing.assert_close(again, _norm_mul(x * 2, y))
    torch.testing.assert_close(out, cold_out)


def test_a_reloaded_graph_carries_forward_mode_tangents_as_eager(tmp_path, monkeypatch):
    # served from the front cache, it runs the kept Dynamo graph as traced while a dual level is open
    import torch.autograd.forward_ad as fwAD
    x, y, tangent = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
    _, artifact = _kept_artifact(tmp_path, monkeypatch, x, y)
    reloaded = artifact.after_deserialization()
    with torch.no_grad(), fwAD.dual_level():
        with pytest.warns(UserWarning, match="forward-mode AD"):
            (out,) = reloaded(fwAD.make_dual(x, tangent), y)
        got = fwAD.unpack_dual(out)
        want = fwAD.unpack_dual(_norm_mul(fwAD.make_dual(x, tangent), y))
        assert got.tangent is not None
        torch.testing.assert_close(got.tangent, want.tangent)
        torch.testing.assert_close(got.primal, want.primal)
    assert reloaded.rebuilt_from == "front cache"
    with torch.no_grad():
        (plain,) = reloaded(x, y)
    torch.testing.assert_close(plain.clone(), _norm_mul(x, y))


@pytest.mark.parametrize("damage", ["front entry removed", "compiler changed"])
def test_a_reloaded_graph_that_cannot_be_rebuilt_is_compiled_again_not_run_stale(tmp_path, monkeypatch, caplog,
                                                                                 damage):
    from mini_inductor import metrics
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    _, artifact = _kept_artifact(tmp_path, monkeypatch, x, y)
    if damage == "front entry removed":
        shutil.rmtree(pathlib.Path(config.current().cache_dir) / "front")
    else:   # as after an edit of mini_inductor, a new torch or Triton, or other options
        artifact.content["compiler"] = "0" * 64
    reloaded = artifact.after_deserialization()
    with torch.no_grad(), caplog.at_level("WARNING", logger="mini_inductor"):
        (out,) = reloaded(x, y)
    assert reloaded.rebuilt_from == "compile"
    assert "cannot be rebuilt from the front cache" in caplog.text and "compiling its Dynamo graph again" in caplog.text
    # compiled again through AOT autograd (the ATen-graph cache may serve the generated module)
    assert metrics.compiled_graphs[-1].cache in ("miss", "memory", "disk")
    torch.testing.assert_close(out, _norm_mul(x, y))
