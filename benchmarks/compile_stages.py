"""mini_inductor's own compile stages (lowering, scheduling, codegen) on small CPU models. Not a test.

    PYTHONPATH=. python -m benchmarks.compile_stages                    # median of 3 fresh processes per model
    PYTHONPATH=. python -m benchmarks.compile_stages --models decoder --profile lowering
    PYTHONPATH=. python -m benchmarks.compile_stages --dump DIR         # every generated module's source

Each measurement compiles one model in a fresh process with a fresh MINI_INDUCTOR_CACHE_DIR (the
on-disk graph cache would skip the stages) and sums each stage over the model's graphs. `--dump`
compiles every model (and a few training steps and single ops) in one process and writes each
generated module to DIR, named by model and graph: compare two dumps with `diff -r` to check that a
change to the compiler leaves its output byte-identical.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("lowering", "scheduling", "codegen")


def _zoo(name: str, train: bool):
    from mini_inductor.examples import ZOO, build_zoo_model
    model, inputs = build_zoo_model(name, False, "cpu")
    loss = ZOO[name].loss
    return model.train(train), inputs, (lambda out: loss(out, inputs)) if train else None


def _model(name: str):
    """(module, inputs, loss or None) for a model name; a loss means one training step."""
    import torch
    import torch.nn as nn
    from benchmarks import models
    torch.manual_seed(0)
    if name == "decoder":
        return models.DecoderStack(64, 4, 4).eval(), (torch.randn(2, 16, 64),), None
    if name == "launch_bound":
        return models.launch_bound("cpu", torch.float32).model, (torch.randn(8, 256),), None
    if name == "mlp_norm":
        return models.MLPWithNorm(64, 256, 4).eval(), (torch.randn(32, 64),), None
    if name == "norm_heavy":
        return models.NormHeavy(64).eval(), (torch.randn(16, 64),), None
    if name == "mlp_norm_train":
        return models.MLPWithNorm(64, 256, 2).train(), (torch.randn(32, 64),), lambda out: out.sum()
    if name.startswith("zoo_"):
        zoo, _, mode = name[4:].rpartition("_")
        return _zoo(zoo, mode == "train")
    if name.startswith("example_"):
        from mini_inductor.examples import EXAMPLES
        model, inputs = EXAMPLES[name[8:]]("cpu")
        return model, inputs, None
    if name == "ops":
        class Ops(nn.Module):   # indexing, scatter, pooling, scans, views, concatenation, var_mean
            def forward(self, x, idx):
                a = torch.cumsum(x, 1) + x.gather(1, idx)
                b = torch.zeros_like(x).scatter_add(1, idx, x)
                c = torch.nn.functional.max_pool2d(x.view(1, 1, 8, 16), 2).flatten()
                v, m = torch.var_mean(x.t(), 0)
                return torch.cat([a, b.t().reshape(16, 8)], 0), c.sum() + v, m[idx[:, 0]]
        return Ops(), (torch.randn(16, 8), torch.randint(0, 8, (16, 8))), None
    raise KeyError(name)


MODELS = ("decoder", "launch_bound", "mlp_norm", "norm_heavy", "zoo_resnet_eval")
DUMP_MODELS = MODELS + ("mlp_norm_train", "zoo_resnet_train", "zoo_gpt2_train", "zoo_vit_eval", "zoo_bert_eval",
                        "zoo_mlp_mixer_train", "example_transformer_block", "example_mlp",
                        "example_softmax_chain", "ops")


def _run(name: str) -> list:
    import torch
    from mini_inductor import metrics
    model, inputs, loss = _model(name)
    start = len(metrics.compiled_graphs)
    fn = torch.compile(model, backend="mini_inductor")
    if loss is None:
        with torch.no_grad():
            fn(*inputs)
    else:
        loss(fn(*inputs)).backward()
    return metrics.compiled_graphs[start:]


def _profile_stage(stage: str) -> cProfile.Profile:
    """cProfile only the calls of one stage's entry, as the backend makes them."""
    pipeline = sys.modules["mini_inductor.pipeline"]
    attr = {"lowering": "lower_graph", "scheduling": "schedule", "codegen": "generate"}[stage]
    inner, prof = getattr(pipeline, attr), cProfile.Profile()

    def profiled(*args, **kwargs):
        prof.enable()
        try:
            return inner(*args, **kwargs)
        finally:
            prof.disable()
    setattr(pipeline, attr, profiled)
    return prof


def measure_here(name: str, profile: str | None, top: int) -> dict:
    import mini_inductor  # noqa: F401
    prof = _profile_stage(profile) if profile else None
    began = time.perf_counter()
    records = _run(name)
    total = time.perf_counter() - began
    stages = {s: sum(r.stage_seconds.get(s, 0.0) for r in records) for s in STAGES}
    if prof:
        for key in ("cumulative", "tottime"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(top)
            print(s.getvalue(), file=sys.stderr)
    return {"model": name, "graphs": len(records), "first_call_s": total, **stages}


def dump(folder: str) -> None:
    import mini_inductor  # noqa: F401
    os.makedirs(folder, exist_ok=True)
    for name in DUMP_MODELS:
        for i, record in enumerate(_run(name)):
            assert record.source_path and not record.cache_hit, f"{name}: {record.name} was not compiled"
            shutil.copyfile(record.source_path, os.path.join(folder, f"{name}.{i}.{record.name}.py"))
    print(f"wrote {len(os.listdir(folder))} modules to {folder}")


def _fresh_process(name: str, profile: str | None = None, top: int = 30) -> dict:
    env = dict(os.environ, MINI_INDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="mi_stages_"), PYTHONPATH=ROOT)
    try:
        cmd = [sys.executable, "-m", "benchmarks.compile_stages", "--here", name, "--top", str(top)]
        if profile:
            cmd += ["--profile", profile]
        out = subprocess.run(cmd, env=env, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(env["MINI_INDUCTOR_CACHE_DIR"], ignore_errors=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile", choices=STAGES, help="cProfile one stage (printed to stderr), one process per model")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--dump", metavar="DIR", help="write every generated module's source to DIR")
    p.add_argument("--json", metavar="FILE", help="also write the medians to FILE")
    p.add_argument("--here", help=argparse.SUPPRESS)   # one measurement in this process (the worker)
    a = p.parse_args(argv)
    if a.here:
        print(json.dumps(measure_here(a.here, a.profile, a.top)))
        return
    if a.dump:
        dump(a.dump)
        return
    rows = []
    print(f"{'model':18} {'graphs':>6} " + " ".join(f"{s:>10}" for s in STAGES) + f" {'first call':>10}")
    for name in a.models:
        runs = [_fresh_process(name, a.profile, a.top) for _ in range(1 if a.profile else a.repeats)]
        row = {k: statistics.median(r[k] for r in runs) for k in (*STAGES, "first_call_s")}
        row.update(model=name, graphs=runs[0]["graphs"])
        rows.append(row)
        print(f"{name:18} {row['graphs']:>6} " + " ".join(f"{row[s]:>10.3f}" for s in STAGES)
              + f" {row['first_call_s']:>10.2f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
