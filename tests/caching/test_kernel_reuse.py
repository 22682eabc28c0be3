"""Compile-time savings that must not change what runs: kernels with the same code are one kernel,
and a warm process reloads compiled kernels from disk without Triton's JIT lookup."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

from mini_inductor import metrics
from mini_inductor.caching import front_cache
from mini_inductor.caching import PROCESS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _stack(layers: int) -> nn.Module:
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(32, 32), nn.SiLU()]
    return nn.Sequential(*mods).eval()


def _module_of(record):
    (module,) = [m for m in PROCESS.modules.values() if m.__file__ == record.source_path]
    return module


def test_repeated_layers_share_one_kernel_under_every_name(device):
    torch.manual_seed(0)
    model = _stack(4).to(device)
    x = torch.randn(4, 32, device=device)
    with torch.no_grad():
        out = torch.compile(model, backend="mini_inductor")(x)
        torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
    rec = metrics.compiled_graphs[-1]
    assert len(rec.kernel_names) == 4                      # every launch keeps its own name (CLI, traces)
    source = pathlib.Path(rec.source_path).read_text()
    first = rec.kernel_names[0]
    assert source.count("@triton.jit\ndef triton_") == 1   # but the code is there once
    for name in rec.kernel_names[1:]:
        assert f"\n{name} = {first}  # the same code as {first}\n" in source
    module = _module_of(rec)
    kernels = {id(getattr(getattr(module, n), "fn", getattr(module, n))) for n in rec.kernel_names}
    assert len(kernels) == 1


def test_only_kernels_with_identical_code_become_aliases():
    from mini_inductor.codegen.wrapper import _kernel_definitions

    def kernel(name, const):
        return f"@triton.jit\ndef {name}(in_ptr0, out_ptr0):\n    tl.store(out_ptr0, tl.load(in_ptr0) * {const})\n"

    parts = _kernel_definitions({"k_0": kernel("k_0", 2), "k_1": kernel("k_1", 3), "k_2": kernel("k_2", 2),
                                 "k_3": kernel("k_3", 3)})
    text = "".join(parts)
    assert text.count("@triton.jit") == 2
    assert "\nk_2 = k_0  # the same code as k_0\n" in text and "\nk_3 = k_1  # the same code as k_1\n" in text
    namespace = {"triton": type("T", (), {"jit": staticmethod(lambda f: f)}), "tl": None}
    exec(text, namespace)
    assert namespace["k_2"] is namespace["k_0"] and namespace["k_3"] is namespace["k_1"]
    assert namespace["k_0"] is not namespace["k_1"]


CHILD = textwrap.dedent('''
    import json, sys
    import torch, torch.nn as nn, mini_inductor
    from mini_inductor import metrics
    from mini_inductor.caching import PROCESS
    torch.manual_seed(0)
    mods = []
    for _ in range(6):
        mods += [nn.Linear(64, 64), nn.SiLU(), nn.LayerNorm(64)]
    model = nn.Sequential(*mods, nn.Softmax(-1)).cuda().eval()
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        out = torch.compile(model, backend="mini_inductor", options={"cudagraphs": False})(x)
        ref = model(x)
    rec = metrics.compiled_graphs[-1]
    (module,) = [m for m in PROCESS.modules.values() if m.__file__ == rec.source_path]
    fns = {id(f): f for f in (getattr(getattr(module, n), "fn", None) for n in rec.kernel_names) if f is not None}
    jit_compiled = sum(len(f.device_caches[0][0]) for f in fns.values())
    from mini_inductor.runtime.launch import compile_pool
    print("RESULT " + json.dumps({"cache": rec.cache, "stages": sorted(rec.stage_seconds), "kernels": len(fns),
                                  "jit_compiled": jit_compiled, "from_workers": compile_pool.stats["served"],
                                  "error": (out - ref).abs().max().item()}))
''')


# either level of the graph cache (this model under no_grad is served before AOT autograd)
DISK_HITS = ("disk", front_cache.LABEL)


def _run_child(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINI_INDUCTOR_CACHE_DIR=str(tmp_path / "mini"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"), MINI_INDUCTOR_LOGS="schedule")
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):]), proc.stderr


@pytest.mark.gpu
def test_a_warm_process_reloads_compiled_kernels_without_triton_jit(tmp_path):
    cold, _ = _run_child(tmp_path)
    assert cold["cache"] == "miss" and "kernel compile" in cold["stages"]
    # each distinct kernel compiled once (6 layers: 2), through Triton's JIT or by a compile worker, whose
    # kernel precompile builds from its files without the JIT (precompile.worker_kernel)
    assert cold["jit_compiled"] + cold["from_workers"] == cold["kernels"] >= 2, cold
    assert len(list((tmp_path / "mini" / "kernels").glob("*.json"))) == cold["kernels"]
    warm, log = _run_child(tmp_path)
    assert warm["cache"] in DISK_HITS and "kernel load" in warm["stages"] and "kernel compile" not in warm["stages"]
    assert warm["jit_compiled"] == 0, "a warm launch went through Triton's JIT"
    assert "reloaded from the cache" in log
    assert warm["error"] < 1e-4 and cold["error"] < 1e-4


@pytest.mark.gpu
def test_a_missing_triton_cache_file_falls_back_to_compiling(tmp_path):
    _run_child(tmp_path)
    shutil.rmtree(tmp_path / "triton")   # our records now point at files that are gone
    warm, _ = _run_child(tmp_path)
    assert warm["cache"] in DISK_HITS and warm["jit_compiled"] == warm["kernels"] and warm["error"] < 1e-4
