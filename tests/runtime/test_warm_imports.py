"""Torch modules Dynamo imports at its first traced call are imported at `import mini_inductor`, and the
torch sources it tokenizes are tokenized in a background thread (runtime/launch/precompile.start_torch_imports),
unless MINI_INDUCTOR_WARM_IMPORTS=0."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHILD = """
import json, sys
import mini_inductor
from mini_inductor.runtime.launch import precompile
for t in precompile._import_thread:
    t.join(60)
import os, torch
from torch._dynamo import funcname_cache
result = {name: name in sys.modules for name in precompile.lazy_torch_imports()}
for source in precompile.TOKENIZED_TORCH_SOURCES:
    path = os.path.join(os.path.dirname(torch.__file__), source)
    result[source] = bool(funcname_cache.cache.get(path))     # tokenized: line -> function name
print("RESULT " + json.dumps(result))
"""


def _child(**env):
    proc = subprocess.run([sys.executable, "-c", CHILD], env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):])


def test_dynamos_lazy_imports_and_tokenizing_are_done_ahead_and_can_be_turned_off():
    import torch
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed: nothing to import ahead")
    assert all(_child().values())
    assert not any(_child(MINI_INDUCTOR_WARM_IMPORTS="0").values())


def test_the_modules_named_are_the_ones_dynamo_imports_at_its_first_traced_call():
    # a fresh process without the warm-up: after one compiled call, every named module is loaded
    code = ("import json, sys, torch, mini_inductor\n"
            "from mini_inductor.runtime.launch import precompile\n"
            "names = precompile.lazy_torch_imports()\n"
            "before = [n in sys.modules for n in names]\n"
            "f = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.LayerNorm(8))\n"
            "with torch.no_grad():\n"
            "    torch.compile(f, backend='mini_inductor')(torch.randn(4, 8))\n"
            "from torch._dynamo import funcname_cache\n"
            "print('RESULT ' + json.dumps([before, [n in sys.modules for n in names], list(funcname_cache.cache)]))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINI_INDUCTOR_WARM_IMPORTS="0", TRITON_INTERPRET="1",
               MINI_INDUCTOR_GRAPH_CACHE="0")     # a cold first call: the list has a cold call's imports too
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    before, after, tokenized = json.loads(line[len("RESULT "):])
    assert not any(before) and all(after)
    # the torch sources Dynamo tokenized for this module's call nodes are among those done ahead
    import torch
    from mini_inductor.runtime.launch import precompile
    torch_dir = os.path.dirname(torch.__file__)
    from_torch = {os.path.relpath(p, torch_dir) for p in tokenized if p.startswith(torch_dir)}
    assert {"nn/modules/linear.py", "nn/modules/activation.py"} <= from_torch
    assert from_torch <= set(precompile.TOKENIZED_TORCH_SOURCES), from_torch


RACE = """
import logging, sys, threading
sys.setswitchinterval(1e-6)
import mini_inductor
from mini_inductor.runtime.launch import precompile
errors, rounds = [], 0
while any(t.is_alive() for t in precompile._import_thread) or rounds < 3:
    rounds += 1
    try:
        for logger in logging.root.manager.loggerDict.values():   # as pytest does at every test phase
            isinstance(logger, logging.Logger) and logger.propagate
    except RuntimeError as e:
        errors.append(str(e))
print("RESULT", len(errors), rounds, errors[:1])
"""


def test_no_logger_is_created_by_a_background_thread_while_others_iterate_the_loggers():
    # pytest iterates logging's loggerDict at every test phase, in Python: a module imported ahead in
    # a thread registers loggers in that dict, and an iteration at that moment fails ("dictionary
    # changed size during iteration", a pytest INTERNALERROR on the GPU machine in session 46).
    # Loggers are created by the imports done at `import mini_inductor` itself.
    proc = subprocess.run([sys.executable, "-c", RACE], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line.split()[1] == "0", line
