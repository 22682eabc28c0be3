"""Triton kernels compiled in worker processes (runtime/launch/compile_pool.py, compile_worker.py).

On the CPU: real workers compile a module's kernels for an sm90 target (Triton compiles without a
GPU), and this side's compile of the same specialization must be a hit in Triton's cache, with the
same hash. On the GPU: a graph compiled with fresh caches has every kernel compiled by a worker and
found here, and matches eager.
"""
import json
import os
import subprocess
import sys

import pytest
import torch
import triton

from mini_inductor import config, metrics
from mini_inductor.runtime.launch import compile_pool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _child(tmp_path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "runtime", "compile_pool_child.py"),
                          str(tmp_path)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_a_kernel_a_worker_compiled_is_a_cache_hit_here_with_the_same_hash_and_failures_are_answers(tmp_path):
    rows = _child(tmp_path)
    kernels = [r for r in rows if r.get("kernel", "").startswith("triton_")]
    assert [r["kernel"] for r in kernels] == ["triton_poi_fused_tanh_0", "triton_poi_fused_index_1"]
    for row in kernels:   # the plain kernel (calling triton_helpers) and the checked one (debug=True)
        done, worker_hash, _, files = row["answer"]
        assert done, row
        assert worker_hash == row["hash"] and files["name"] == row["name"], row
        assert row["cache_hit"], f"{row['kernel']}: compiled again here (another cache key)"
        assert "cubin" in row["asm"]
        # built from the worker's files: Triton's own kernel, without a compile here
        assert row["built"] == {"hash": row["hash"], "name": row["name"], "asm": row["asm"], "cubin": True,
                                "listener_calls": 0}, row
        assert row["refused"] == [None, None, None], row   # another name, a missing file, no files named
    missing = next(r for r in rows if r.get("kernel") == "no_such_kernel")
    assert missing["answer"][0] is False and missing["answer"][1].startswith("LookupError: no function no_such_kernel")
    other = next(r for r in rows if r.get("kernel") == "other_triton")
    assert other["answer"][0] is False and "ImportError: the asking process runs the Triton of" in other["answer"][1]
    assert next(r for r in rows if "unpicklable" in r) == {"unpicklable": [None] * 4, "workers": 2, "idle": 2}
    # both workers killed: their two requests get no answer (the caller compiles), replacements serve on
    killed = next(r for r in rows if "after_kill" in r)
    assert killed == {"after_kill": [True, True], "then": True, "workers": 2}


def test_the_option_is_an_option_and_does_not_change_the_generated_code():
    from mini_inductor.caching import graph_cache
    assert config.current().compile_workers is True
    with config.patch(compile_workers=False):
        assert config.current().compile_workers is False
    assert "compile_workers" in graph_cache._NO_CODE_EFFECT


def _fresh_compile(tmp_path, monkeypatch, workers: bool):
    def f(x, w, b, idx):
        h = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
        return torch.nn.functional.gelu(h, approximate="tanh") * 3, h[idx].sum(-1)
    x = torch.randn(64, 768, device="cuda")
    w, b = torch.randn(768, device="cuda"), torch.randn(768, device="cuda")
    idx = torch.randint(0, 64, (16,), device="cuda")
    monkeypatch.setattr(triton.knobs.cache, "dir", str(tmp_path / "triton"))
    compiles_here = []    # Triton's compile entered in this process (a cache hit too)
    monkeypatch.setattr(triton.knobs.compilation, "listener", lambda **kw: compiles_here.append(kw["cache_hit"]))
    before = dict(compile_pool.stats)
    with config.patch(cache_dir=str(tmp_path / "mi"), compile_workers=workers, cudagraphs=False):
        torch._dynamo.reset()
        got = torch.compile(f, backend="mini_inductor")(x, w, b, idx)
    for a, e in zip(got, f(x, w, b, idx)):
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)
    record = metrics.compiled_graphs[-1]
    assert "kernel compile" in record.stage_seconds, record.stage_seconds
    counts = {k: compile_pool.stats[k] - before[k] for k in before}
    return dict(counts, compiles_here=len(compiles_here)), len(set(record.kernel_names))


@pytest.mark.gpu
def test_a_fresh_graph_has_every_kernel_compiled_by_a_worker_and_matches_eager(tmp_path, monkeypatch):
    counts, kernels = _fresh_compile(tmp_path, monkeypatch, workers=True)
    assert counts["recompiled"] == 0 and counts["failed"] == 0, counts
    assert counts["served"] >= 2, (counts, kernels)
    # built from the workers' files here (precompile.worker_kernel): Triton's compile never entered
    assert counts["compiles_here"] == 0, counts
    assert compile_pool.running() is not None


@pytest.mark.gpu
def test_with_compile_workers_off_no_kernel_goes_to_a_worker(tmp_path, monkeypatch):
    counts, _ = _fresh_compile(tmp_path, monkeypatch, workers=False)
    assert counts["compiles_here"] >= 2, counts
    del counts["compiles_here"]
    assert counts == {"served": 0, "recompiled": 0, "failed": 0}


def test_a_forked_child_does_not_use_its_parents_workers(monkeypatch):
    pool = compile_pool.Pool(1)
    monkeypatch.setattr(compile_pool, "_pool", [pool])
    try:
        assert compile_pool.running() is pool
        pid = os.fork()
        if pid == 0:   # a DataLoader worker, say: the parent's pipes are not its to write
            os._exit(0 if compile_pool.running() is None else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert compile_pool.running() is pool
    finally:
        pool.close()
