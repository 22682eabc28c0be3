"""Kernels compiled before the first call (precompile) and mode="max-autotune" (runtime/launch/autotune.py,
its winners on disk: caching/autotune.py).

On the CPU both are no-ops (Triton's interpreter has nothing to compile or time); the GPU tests
check that they run the same numbers as eager, and that winners are written and read back.
"""
import json
import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

from mini_inductor import config, metrics
from mini_inductor.caching import autotune as autotune_cache
from mini_inductor.caching import files as cache_files
from mini_inductor.caching import PROCESS
from mini_inductor.runtime.launch import autotune
from mini_inductor.runtime.launch.autotune import autotune_candidates, next_power_of_2
from mini_inductor.runtime.launch.precompile import precompile


def _module_of(record):
    (module,) = [m for m in PROCESS.modules.values() if m.__file__ == record.source_path]
    return module


def _softmax_mul(x, y):
    return torch.softmax(x, -1) * y + 1


# ── the launch table and the CPU no-ops ──────────────────────────────────────────────────────
def test_generated_module_lists_every_kernel_launch_with_its_signature(device):
    x, y = torch.randn(8, 32, device=device), torch.randn(8, 32, device=device, dtype=torch.float16)
    torch.compile(lambda x, y: (torch.softmax(x, -1) * y, (x[:, :16] * 2).to(torch.float16), x.sum(0)),
                  backend="mini_inductor")(x, y)
    rec = metrics.compiled_graphs[-1]
    launches = _module_of(rec).KERNEL_LAUNCHES
    assert sorted(launch.kernel for launch in launches) == sorted(rec.kernel_names) and len(launches) >= 2
    source = pathlib.Path(rec.source_path).read_text()
    assert any(torch.float16 in launch.dtypes for launch in launches)
    for launch in launches:
        assert launch.dtypes and all(isinstance(d, torch.dtype) for d in launch.dtypes)
        call = f"{', '.join(str(s) for s in launch.sizes)}, {', '.join(f'{k}={v}' for k, v in launch.meta.items())}, " \
               f"num_warps={launch.num_warps})"
        assert call in source, (launch.kernel, call)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's no-op")
def test_precompile_is_a_no_op_under_the_interpreter():
    torch.compile(_softmax_mul, backend="mini_inductor")(torch.randn(4, 8), torch.randn(4, 8))
    rec = metrics.compiled_graphs[-1]
    assert precompile(_module_of(rec), threads=4) == (0, 0) and "kernel compile" not in rec.stage_seconds


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's no-op")
def test_max_autotune_under_the_interpreter_runs_the_heuristic_configs():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    out = torch.compile(_softmax_mul, backend="mini_inductor", mode="max-autotune")(x, y)
    torch.testing.assert_close(out, _softmax_mul(x, y))
    assert not (pathlib.Path(config.current().cache_dir) / "autotune").exists()


# ── the candidates ───────────────────────────────────────────────────────────────────────────
def test_pointwise_candidates_start_with_the_heuristic_and_stay_powers_of_two():
    cands = autotune_candidates(100_000, None, {"XBLOCK": 1024}, 8, looped=False, tune_blocks=True)
    assert cands[0] == ({"XBLOCK": 1024}, 8) and 4 <= len(cands) <= 9
    assert len({(tuple(m.items()), w) for m, w in cands}) == len(cands)
    for meta, warps in cands:
        assert meta.keys() == {"XBLOCK"} and meta["XBLOCK"] == next_power_of_2(meta["XBLOCK"])
        assert 1 <= warps <= 16


def test_small_pointwise_kernels_get_no_block_larger_than_their_size():
    cands = autotune_candidates(40, None, {"XBLOCK": 64}, 4, looped=False, tune_blocks=True)
    assert all(m["XBLOCK"] <= 64 for m, _ in cands[1:])


def test_persistent_reduction_candidates_keep_the_whole_row():
    cands = autotune_candidates(512, 1000, {"XBLOCK": 4, "RBLOCK": 1024}, 4, looped=False, tune_blocks=True)
    assert len(cands) > 2
    assert all(m["RBLOCK"] == 1024 and m["XBLOCK"] * 1024 <= 16384 for m, _ in cands)
    assert len({m["XBLOCK"] for m, _ in cands}) > 1


def test_looped_reduction_candidates_trade_rblock_for_xblock():
    cands = autotune_candidates(64, 100_000, {"XBLOCK": 1, "RBLOCK": 2048}, 8, looped=True, tune_blocks=True)
    assert {m["XBLOCK"] for m, _ in cands} >= {1, 2, 4} and len({m["RBLOCK"] for m, _ in cands}) > 2
    assert list(cands[1][0]) == ["XBLOCK", "RBLOCK"]   # the kernel's own argument order


def test_a_grid_not_following_xblock_only_varies_warps():
    cands = autotune_candidates(4096, None, {"XBLOCK": 1024}, 4, looped=False, tune_blocks=False)
    assert {tuple(m.items()) for m, _ in cands} == {(("XBLOCK", 1024),)}
    assert sorted(w for _, w in cands) == [2, 4, 8, 16]


# ── benchmark arguments and winner files (no GPU needed) ─────────────────────────────────────
def test_benchmark_copies_keep_sizes_strides_values_and_aliasing():
    base = torch.arange(48.0).reshape(6, 8)
    sliced = base[1:, 2:5]                           # offset storage, gaps between rows
    expanded = torch.arange(4.0)[None].expand(3, 4)  # stride 0
    copies = autotune._copy_args((sliced, expanded, sliced, 7))
    assert copies[3] == 7 and copies[0] is copies[2]
    for copy, orig in zip(copies[:2], (sliced, expanded)):
        assert copy.shape == orig.shape and copy.stride() == orig.stride()
        assert copy.data_ptr() != orig.data_ptr() and torch.equal(copy, orig)
    copies[0].fill_(-1)
    assert base.min() == 0   # the real tensors are untouched


def test_winner_file_is_read_back_in_the_kernels_argument_order(tmp_path):
    path = tmp_path / "w.json"
    autotune_cache.write(str(path), {"format": autotune_cache.FORMAT, "meta": {"RBLOCK": 512, "XBLOCK": 4},
                                     "num_warps": 8})
    assert autotune_cache.read(str(path), {"XBLOCK": 1, "RBLOCK": 2048}) == (8, {"XBLOCK": 4, "RBLOCK": 512})


@pytest.mark.parametrize("text", ['{"format": 1, "meta": {"XBLOCK": 4}, "num_w', "[1, 2]",
                                  '{"format": 1, "meta": {"YBLOCK": 4}, "num_warps": 4}',
                                  '{"format": 1, "meta": {"XBLOCK": 0}, "num_warps": 4}'])
def test_a_corrupt_or_unfitting_winner_is_ignored_with_a_warning(tmp_path, caplog, text):
    path = tmp_path / "w.json"
    path.write_bytes(cache_files.framed(text))   # its hash matches: the content itself is rejected
    with caplog.at_level(logging.WARNING, logger="mini_inductor.autotuning"):
        assert autotune_cache.read(str(path), {"XBLOCK": 1024}) is None
    assert "ignoring" in caplog.text


# ── on the GPU ───────────────────────────────────────────────────────────────────────────────
def _kernel_caches(record):
    module = _module_of(record)
    device = torch.cuda.current_device()
    out = {}
    for name in record.kernel_names:
        fn = getattr(module, name)
        fn = getattr(fn, "fn", fn)
        # Triton's JIT cache, and the kernel precompile handed the launch sites directly (one a compile
        # worker compiled: precompile.worker_kernel, which Triton's JIT never sees)
        attached = list(getattr(fn, "_mini_inductor_compiled", {}).values())
        out[name] = [*fn.device_caches[device][0].values(), *(k for k in attached if k not in
                                                              fn.device_caches[device][0].values())]
    return out


@pytest.mark.gpu
def test_kernels_compiled_before_the_first_call_are_the_ones_it_launches(device):
    def f(x, y):
        a = torch.softmax(x, -1)
        return a * y + 1, (x.t() * 2).sum(0), torch.relu(y).mean(-1), (x + y).to(torch.float16)
    x, y = torch.randn(64, 128, device=device), torch.randn(64, 128, device=device)
    with config.patch(compile_threads=4):
        outs = torch.compile(f, backend="mini_inductor")(x, y)
    for got, want in zip(outs, f(x, y)):
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
    rec = metrics.compiled_graphs[-1]
    assert rec.num_kernels >= 1 and "kernel compile" in rec.stage_seconds   # row reductions may all fuse
    for name, kernels in _kernel_caches(rec).items():
        assert len(kernels) == 1, f"{name}: the launch compiled another specialization than the precompiled one"


@pytest.mark.gpu
def test_precompile_off_still_runs(device):
    x, y = torch.randn(64, 128, device=device), torch.randn(64, 128, device=device)
    with config.patch(compile_threads=0):
        out = torch.compile(_softmax_mul, backend="mini_inductor")(x, y)
    torch.testing.assert_close(out, _softmax_mul(x, y))
    assert "kernel compile" not in metrics.compiled_graphs[-1].stage_seconds


LAUNCHER_CHILD = textwrap.dedent('''
    import glob, json, os
    import torch, mini_inductor
    from mini_inductor import config, metrics
    from mini_inductor.runtime.launch import precompile as pc
    built = []
    real_build = pc._build_launcher
    def counting_build(src):
        built.append(src.fn.__name__)
        return real_build(src)
    pc._build_launcher = counting_build
    def f(x, y):   # two kernels with different signatures (fp32 in and out; fp32 in, fp16 out), a matmul between
        a = torch.softmax(x, -1) * y + 1
        return a, torch.relu(a @ y.t()).to(torch.float16)
    x, y = torch.randn(64, 128, device="cuda"), torch.randn(64, 128, device="cuda")
    # static_launch off: Triton's own launchers (with it on, none is built: tests/runtime/test_static_launch.py)
    with config.patch(compile_threads=4, cudagraphs=False, static_launch=False):
        outs = torch.compile(f, backend="mini_inductor")(x, y)
    # relative to the size: the fp16 output of a matmul is off by an ulp where the rounding differs
    error = max(((a.float() - b.float()).abs() / (1 + b.float().abs())).max().item() for a, b in zip(outs, f(x, y)))
    launchers = glob.glob(os.path.join(os.environ["TRITON_CACHE_DIR"], "*", "__triton_launcher*"))
    print("RESULT " + json.dumps({"kernels": metrics.compiled_graphs[-1].num_kernels, "built": built,
                                  "launchers": len(launchers), "error": error}))
''')


@pytest.mark.gpu
def test_launchers_build_alongside_their_kernels_and_are_the_ones_triton_loads(tmp_path):
    """A cold Triton cache: every C launcher the kernels load is one `precompile` built ahead, once per
    signature (a launcher source that differed from Triton's would leave a second library behind)."""
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2]),
               MINI_INDUCTOR_CACHE_DIR=str(tmp_path / "mini"), TRITON_CACHE_DIR=str(tmp_path / "triton"))
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-c", LAUNCHER_CHILD], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    got = json.loads(line[len("RESULT "):])
    assert got["error"] < 1e-2
    assert got["kernels"] >= 2 and 2 <= len(got["built"]) <= got["kernels"], got
    assert got["launchers"] == len(got["built"]), got


def _tuned_model(x, w, acc):
    acc.mul_(2)                                          # an input mutated in place: must happen once
    h = torch.softmax(x @ w, -1)                         # persistent reduction
    return h * 3 + 1, x.sum(-1), (x.t() + 1) * 2, torch.relu(acc) + acc.sum()   # pointwise, looped, ...


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_max_autotune_matches_eager_writes_winners_and_reads_them_back(device, caplog, mode):
    x = torch.randn(32, 8192, device=device)
    w = torch.randn(8192, 64, device=device) / 90
    acc = torch.randn(32, 8192, device=device)
    expected_acc = acc.clone()
    expected = _tuned_model(x, w, expected_acc)
    with caplog.at_level(logging.INFO, logger="mini_inductor.autotuning"):
        outs = torch.compile(_tuned_model, backend="mini_inductor", mode=mode)(x, w, acc)
    for got, want in zip(outs, expected):
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(acc, expected_acc)
    files = sorted((pathlib.Path(config.current().cache_dir) / "autotune").rglob("*.json"))
    records = {path: json.loads(cache_files.read(str(path), "winner", "failing")) for path in files}
    winners = [path for path in files if "kernel" in records[path]]   # (the matmul's choice is there too)
    assert len(winners) >= 3, files
    tried = [records[path]["tried"] for path in winners]
    assert max(len(t) for t in tried) >= 3 and all(t[0][2] is not None for t in tried)   # the heuristic ran
    tuned_lines = [r for r in caplog.records if "configs)" in r.getMessage()]
    assert len(tuned_lines) == len(winners)

    caplog.clear()
    torch._dynamo.reset()                    # a new module and new call sites: winners come from disk
    acc2 = expected_acc.clone()
    with caplog.at_level(logging.INFO, logger="mini_inductor.autotuning"):
        outs = torch.compile(_tuned_model, backend="mini_inductor", mode=mode)(x, w, acc2)
    expected = _tuned_model(x, w, expected_acc)
    for got, want in zip(outs, expected):
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(acc2, expected_acc)
    assert not [r for r in caplog.records if "configs)" in r.getMessage()]
    assert sorted((pathlib.Path(config.current().cache_dir) / "autotune").rglob("*.json")) == files
