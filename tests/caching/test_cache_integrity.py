"""A damaged or altered on-disk cache is never trusted (mini_inductor/caching/files.py).

Every file under $MINI_INDUCTOR_CACHE_DIR carries a content hash (a keyed entry: a first line; a generated
module: its name). A file failing it, or whose content its reader rejects, is a warning naming the file, is
deleted and rebuilt by a fresh compile, and nothing in it runs. Writes are atomic, so that processes
compiling one graph at once never read half a file.
"""
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

from mini_inductor import config, metrics
from mini_inductor.caching import files as cache_files, front_cache, graph_cache

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONSTANT = b"tl.full([1], 3.0, tl.float32)"      # how the generated kernel of _f holds its 3.0
EDITED = b"tl.full([1], 5.0, tl.float32)"        # still importable, and a wrong answer if it ran


def _f(x):
    return torch.relu(x * 3.0 + 1.0).sum(-1)


def _cache_dir() -> pathlib.Path:
    return pathlib.Path(config.current().cache_dir)


def _compile_fresh(fn, *args, **options):
    """A compile with the in-process caches emptied, as a new process would do it: only the disk serves."""
    torch._dynamo.reset()
    out = torch.compile(fn, backend="mini_inductor", options=options)(*args)
    return out, metrics.compiled_graphs[-1]


def _assert_every_file_intact(cache_dir) -> None:
    """Each file under `cache_dir` passes its content-hash check (no temporary file is left either)."""
    files = [p for p in pathlib.Path(cache_dir).rglob("*") if p.is_file()]
    assert files
    for path in files:
        if path.suffix == ".py":
            assert path.stem == "mi_" + cache_files.sha256(path.read_bytes())[:32], path
        else:
            assert path.suffix in (".json", ".code"), path
            assert cache_files.read(str(path), "cache entry", "failing the test") is not None, path


def _warnings_naming(caplog, path) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and str(path) in r.getMessage()]


def _non_utf8(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + b"\xff\xfe\x80" + data[middle + 3:]


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _constant_edited(data: bytes) -> bytes:
    assert CONSTANT in data
    return data.replace(CONSTANT, EDITED)


DAMAGES = {"non-UTF-8 bytes": _non_utf8, "truncated": _truncated, "constant edited": _constant_edited}


# ── the compiled-graph entry (which holds the generated module's source) ──────────────────────────
@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_damaged_graph_entry_is_reported_dropped_and_rebuilt_with_eager_results(damage, caplog):
    x = torch.randn(4, 8)
    _compile_fresh(_f, x, front_cache=False)
    (entry,) = (_cache_dir() / "graphs").rglob("*.json")
    entry.write_bytes(damage(entry.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        out, rec = _compile_fresh(_f, x, front_cache=False)
    assert _warnings_naming(caplog, entry), caplog.text
    assert rec.cache == "miss"
    torch.testing.assert_close(out, _f(x))
    assert graph_cache.load(str(_cache_dir()), entry.stem).graph == rec.name    # rewritten, and valid
    _assert_every_file_intact(_cache_dir())
    out, rec = _compile_fresh(_f, x, front_cache=False)
    assert rec.cache == "disk"
    torch.testing.assert_close(out, _f(x))


# ── the generated module itself ──────────────────────────────────────────────────────────────
@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_damaged_generated_module_never_runs_and_is_written_again(damage, caplog):
    x = torch.randn(4, 8)
    _, cold = _compile_fresh(_f, x, front_cache=False)
    module = pathlib.Path(cold.source_path)
    source = module.read_bytes()
    module.write_bytes(damage(source))
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        out, warm = _compile_fresh(_f, x, front_cache=False)
    assert _warnings_naming(caplog, module), caplog.text
    assert warm.cache == "disk" and warm.source_path == str(module)
    torch.testing.assert_close(out, _f(x))
    assert module.read_bytes() == source
    _assert_every_file_intact(_cache_dir())


@pytest.mark.parametrize("damage", [_truncated, lambda data: data[:-40] + bytes(40), lambda data: b""],
                         ids=["truncated", "bytes zeroed", "empty"])
def test_a_damaged_bytecode_file_is_reported_and_compiled_again(damage, caplog):
    x = torch.randn(4, 8)
    _, cold = _compile_fresh(_f, x, front_cache=False)
    (code,) = pathlib.Path(cold.source_path).parent.glob("*.code")
    intact = code.read_bytes()
    code.write_bytes(damage(intact))
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        out, warm = _compile_fresh(_f, x, front_cache=False)
    assert _warnings_naming(caplog, code), caplog.text
    assert warm.cache == "disk"
    torch.testing.assert_close(out, _f(x))
    assert code.read_bytes() == intact


# ── the front cache entry ────────────────────────────────────────────────────────────────────
FRONT_DAMAGES = {"non-UTF-8 bytes": _non_utf8, "truncated": _truncated,
                 "bad JSON behind a matching hash": lambda data: cache_files.framed(b'{"format": 1, "graph_key": '),
                 "a number edited": lambda data: data.replace(b'"num_outputs": 1', b'"num_outputs": 2')}


@pytest.mark.parametrize("damage", FRONT_DAMAGES.values(), ids=FRONT_DAMAGES.keys())
def test_a_damaged_front_entry_is_reported_dropped_and_rebuilt(damage, caplog):
    x = torch.randn(4, 8)
    _compile_fresh(_f, x)
    (entry,) = (_cache_dir() / "front").rglob("*.json")
    before = entry.read_bytes()
    assert b'"num_outputs": 1' in before
    entry.write_bytes(damage(before))
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        out, rec = _compile_fresh(_f, x)
    assert _warnings_naming(caplog, entry), caplog.text
    assert rec.cache == "disk"               # through AOT autograd again, to the intact ATen-graph entry
    torch.testing.assert_close(out, _f(x))
    rewritten = front_cache.load_entry(str(_cache_dir()), entry.stem)
    assert rewritten.num_outputs == 1 and rewritten.graph == rec.name
    _assert_every_file_intact(_cache_dir())


# ── autotuning winners and compiled-kernel records (their readers; the GPU tests below run them) ────────
@pytest.mark.parametrize("damage", [_non_utf8, _truncated,
                                    lambda data: data.replace(b'"num_warps": 8', b'"num_warps": 2')],
                         ids=["non-UTF-8 bytes", "truncated", "warps edited"])
def test_a_damaged_autotuning_winner_is_reported_and_deleted(tmp_path, caplog, damage):
    from mini_inductor.caching import autotune
    path = tmp_path / "autotune" / "ab" / "ab12.json"
    autotune.write(str(path), {"format": autotune.FORMAT, "meta": {"XBLOCK": 64}, "num_warps": 8})
    assert autotune.read(str(path), {"XBLOCK": 1024}) == (8, {"XBLOCK": 64})
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        assert autotune.read(str(path), {"XBLOCK": 1024}) is None
    assert _warnings_naming(caplog, path) and not path.exists()


def test_a_damaged_dynamo_graph_is_not_unpickled():
    from mini_inductor.caching import dynamo_cache
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    graph = pickle.dumps(gm)
    kept = dynamo_cache._Reloaded("fn_0", {"graph": graph, "graph_sha256": cache_files.sha256(graph)})
    assert isinstance(kept._kept_graph(), torch.fx.GraphModule)
    altered = dynamo_cache._Reloaded("fn_0", {"graph": graph[:-8] + bytes(8),
                                              "graph_sha256": cache_files.sha256(graph)})
    with pytest.raises(RuntimeError, match="fn_0.*damaged.*TORCHINDUCTOR_CACHE_DIR"):
        altered._kept_graph()


# ── the writer ───────────────────────────────────────────────────────────────────────────────
def test_read_returns_what_write_wrote_and_rejects_a_file_without_its_hash(tmp_path, caplog):
    path = str(tmp_path / "sub" / "entry.json")
    assert cache_files.write(path, '{"a": "é"}', "test entry") == path
    assert cache_files.read(path, "test entry", "rebuilding", lambda b: json.loads(b.decode())) == {"a": "é"}
    assert os.listdir(tmp_path / "sub") == ["entry.json"]          # no temporary file left behind
    pathlib.Path(path).write_text('{"a": "é"}')                    # valid JSON, but no content hash
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        assert cache_files.read(path, "test entry", "rebuilding") is None
    assert _warnings_naming(caplog, path) and not os.path.exists(path)


WRITER = textwrap.dedent('''
    import json, sys
    from mini_inductor.caching import files as cache_files
    versions = [json.dumps({"v": i, "pad": str(i) * 200_000}) for i in range(2)]
    for i in range(int(sys.argv[2])):
        cache_files.write(sys.argv[1], versions[i % 2], "raced entry")
''')


def test_a_reader_racing_the_atomic_writer_sees_one_whole_version_or_the_other(tmp_path, caplog):
    path = str(tmp_path / "entry.json")
    versions = [json.dumps({"v": i, "pad": str(i) * 200_000}).encode() for i in range(2)]
    cache_files.write(path, versions[0], "raced entry")
    # the writer is another process: real concurrency, as two training ranks or pytest -n workers
    writer = subprocess.Popen([sys.executable, "-c", WRITER, path, "400"], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              stderr=subprocess.PIPE, text=True)
    seen = []
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        while writer.poll() is None:
            data = cache_files.read(path, "raced entry", "rebuilding")
            if data is not None:
                seen.append(data)
    assert writer.returncode == 0, writer.stderr.read()
    assert not _warnings_naming(caplog, path), caplog.text          # never a half-written file
    assert len(seen) > 10 and all(data in versions for data in seen) and len(set(seen)) == 2
    assert cache_files.read(path, "raced entry", "rebuilding") in versions
    assert os.listdir(tmp_path) == ["entry.json"]


CHILD = textwrap.dedent('''
    import json, os, sys, time
    import torch, mini_inductor
    from mini_inductor import metrics
    while not os.path.exists(sys.argv[1]):      # start compiling together with the others
        time.sleep(0.01)
    def f(x):
        return torch.relu(x * 3.0 + 1.0).sum(-1) + torch.softmax(x, -1).sum(-1)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    out = torch.compile(f, backend="mini_inductor")(x)
    print("RESULT " + json.dumps({"error": (out - f(x)).abs().max().item(),
                                  "cache": [g.cache for g in metrics.compiled_graphs]}))
''')


def test_processes_compiling_one_graph_into_one_fresh_cache_dir_at_once_all_get_eager_results(tmp_path):
    cache, go = tmp_path / "cache", tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", MINI_INDUCTOR_CACHE_DIR=str(cache))
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(go)], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(3)]
    go.touch()
    results = [child.communicate(timeout=300) for child in children]
    for child, (out, err) in zip(children, results):
        assert child.returncode == 0, err
        assert "corrupt" not in err and "cannot write" not in err, err
        (line,) = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        assert json.loads(line[len("RESULT "):])["error"] < 1e-5
    _assert_every_file_intact(cache)


# ── a new process, graph cache off (the module is generated again, named as before) ─────────────────
NEW_PROCESS = textwrap.dedent('''
    import json, torch, mini_inductor
    from mini_inductor import metrics
    def f(x):
        return torch.relu(x * 3.0 + 1.0).sum(-1)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    out = torch.compile(f, backend="mini_inductor")(x)
    print("RESULT " + json.dumps({"error": (out - f(x)).abs().max().item(),
                                  "module": metrics.compiled_graphs[-1].source_path}))
''')


def _new_process(cache_dir):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", MINI_INDUCTOR_CACHE_DIR=str(cache_dir),
               MINI_INDUCTOR_GRAPH_CACHE="0")
    proc = subprocess.run([sys.executable, "-c", NEW_PROCESS], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):]), proc.stderr


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_with_the_graph_cache_off_a_new_process_rewrites_a_damaged_module(tmp_path, damage):
    cold, _ = _new_process(tmp_path)
    module = pathlib.Path(cold["module"])
    source = module.read_bytes()
    module.write_bytes(damage(source))
    warm, log = _new_process(tmp_path)
    assert warm["module"] == cold["module"] and warm["error"] < 1e-5
    assert str(module) in log and "corrupt generated module" in log
    assert module.read_bytes() == source
    _assert_every_file_intact(tmp_path)


# ── on the GPU: autotuning winners and compiled-kernel records in a real compile ─────────────────────
@pytest.mark.gpu
def test_on_the_gpu_a_damaged_kernel_record_is_reported_and_rebuilt(caplog):
    x = torch.randn(64, 128, device="cuda")
    _compile_fresh(_f, x, front_cache=False)
    records = sorted((_cache_dir() / "kernels").rglob("*.json"))
    assert records
    for path in records:
        path.write_bytes(_non_utf8(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        out, rec = _compile_fresh(_f, x, front_cache=False)
    assert rec.cache == "disk" and all(_warnings_naming(caplog, p) for p in records), caplog.text
    torch.testing.assert_close(out, _f(x), atol=1e-3, rtol=1e-4)   # another summation order
    assert all(cache_files.read(str(p), "record", "none") is not None for p in records)   # written again


@pytest.mark.gpu
def test_on_the_gpu_a_damaged_autotuning_winner_is_reported_and_tuned_again(caplog):
    x = torch.randn(64, 1024, device="cuda")
    _compile_fresh(_f, x, front_cache=False, max_autotune=True, cudagraphs=False)
    winners = sorted((_cache_dir() / "autotune").rglob("*.json"))
    assert winners
    for path in winners:
        path.write_bytes(_truncated(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        out, _ = _compile_fresh(_f, x, front_cache=False, max_autotune=True, cudagraphs=False)
    assert all(_warnings_naming(caplog, p) for p in winners), caplog.text
    torch.testing.assert_close(out, _f(x), atol=1e-3, rtol=1e-4)   # another summation order
    assert all(cache_files.read(str(p), "winner", "none") is not None for p in winners)
