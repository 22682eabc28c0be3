"""The model suite against eager and Inductor, every backend in fresh processes. Not a test.

    PYTHONPATH=. python3 -m benchmarks.suite [--models decoder,norm_heavy] [--backends ...] [--out DIR]

Per (model, backend): cold compile (a fresh process, empty Inductor/Triton/mini_inductor caches),
warm compile (another fresh process, the caches the cold one filled), wall ms per call, GPU ms, peak
memory (allocated, and reserved: a CUDA graph's outputs live in its pool and never count as allocated,
so only reserved memory compares graphed and ungraphed backends), correctness against eager (cold and warm), and ratios against Inductor. A compile is the
first call's seconds less one steady-state call. For mini_inductor, warm_mi_cache counts the graphs
by cache state (a warm start should show only "disk", or "disk (before AOT)" for inference graphs
served without AOT autograd, or "disk (Dynamo cache)" under the opt-in backend
mini_inductor_dynamo_cache, whose warm start traces nothing). Targets (issue 7):
cold_compile_vs_inductor <= 0.5, warm_vs_cold <= 0.2. Writes a table to stdout, results.json and
speedup.png to --out. On the H100 machine one row costs 13-30 s of worker processes (cold and warm).
`--repeats N`: N processes time each row's steady state (the cold one and N-1 more, warm caches), and
the row reports their medians (each process's figures in wall_ms_runs, gpu_ms_runs).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from .models import MODELS
from .worker import BACKENDS, DEFAULT_BACKENDS


def _worker(model, backend, dtype, cache, compile_only, timeout, extra_env=None):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"), MINI_INDUCTOR_CACHE_DIR=os.path.join(cache, "mini"),
               **(extra_env or {}))
    cmd = [sys.executable, "-m", "benchmarks.worker", "--model", model, "--backend", backend, "--dtype", dtype]
    if compile_only:
        cmd.append("--compile-only")
    began = time.perf_counter()
    # its own process group: whatever the worker started (Inductor's compile workers) goes with it,
    # also after a timeout, instead of running on beside the next row's measurement
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        return {"model": model, "backend": backend, "error": f"timed out after {timeout} s"}
    finally:
        _kill_group(proc)
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            # the whole process, start to exit: what one row costs to measure, not a figure of the backend
            return dict(json.loads(line[len("RESULT "):]), worker_s=time.perf_counter() - began)
    return {"model": model, "backend": backend, "error": (stderr or stdout)[-300:]}


def _repeat_timing(res: dict, more: list[dict]) -> None:
    """Give `res` the medians of its own steady-state timing and that of the `more` processes (same
    row, warm caches); each process's figures stay in wall_ms_runs and gpu_ms_runs."""
    runs = [res] + [r for r in more if "error" not in r and "wall_ms" in r]
    errors = [r["error"] for r in more if "error" in r]
    if errors:
        res["repeat_errors"] = errors
    for key in ("wall_ms", "gpu_ms", "peak_mib", "peak_reserved_mib"):
        values = [r[key] for r in runs if key in r]
        if values:
            res[f"{key}_runs"] = values
            res[key] = statistics.median(values)


def _kill_group(proc: subprocess.Popen) -> None:
    """End every process left in the worker's group (a no-op when the worker took its children along)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--backends", default=",".join(DEFAULT_BACKENDS),
                   help=f"comma-separated, of {', '.join(BACKENDS)}")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--no-warm", action="store_true", help="skip the warm-cache compile runs")
    p.add_argument("--warm-backends", default=None,
                   help="comma-separated: the backends that get a warm-cache run (default: every one but eager)")
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--out", default="benchmark_results")
    p.add_argument("--repeats", type=int, default=1,
                   help="processes that time each row's steady state (the cold one and N-1 more); the row "
                        "gets their medians: host-bound rows spread by up to 1.6x between processes")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    _byte_compile()
    warm_backends = set(a.warm_backends.split(",")) if a.warm_backends else set(BACKENDS) - {"eager"}
    rows = []
    for model in a.models.split(","):
        for backend in a.backends.split(","):
            # cold: a fresh process with empty caches (ours, Inductor's, Triton's); warm: another fresh
            # process with the caches the cold one left
            with tempfile.TemporaryDirectory() as cache:
                res = _worker(model, backend, a.dtype, cache, False, a.timeout)
                if backend in warm_backends and not a.no_warm and "error" not in res:
                    warm = _worker(model, backend, a.dtype, cache, True, a.timeout)
                    res["warm_first_call_s"] = warm.get("first_call_s")
                    res["warm_correct"] = warm.get("correct", warm.get("error"))
                    for k in warm:
                        if k.startswith("mi_") or k in ("torch_compile_s", "worker_s"):
                            res[f"warm_{k}"] = warm[k]
                if a.repeats > 1 and "error" not in res:
                    _repeat_timing(res, [_worker(model, backend, a.dtype, cache, False, a.timeout)
                                         for _ in range(a.repeats - 1)])
            res.setdefault("model_key", model)
            rows.append(res)
            print(json.dumps(res), flush=True)
    _ratios(rows)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    _table(rows)
    _plot(rows, os.path.join(a.out, "speedup.png"))


def _byte_compile() -> None:
    """Write our packages' bytecode before measuring anything, as installing a package does. From a
    tree without __pycache__ (the GPU machine gets a fresh copy), the first mini_inductor process
    would otherwise compile some 90 modules inside its first call (0.3 s on the H100 machine under
    cProfile), a cost no installed copy has."""
    import compileall
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for package in ("mini_inductor", "benchmarks"):
        compileall.compile_dir(os.path.join(root, package), quiet=1)


def _ratios(rows):
    by = {(r["model_key"], r["backend"]): r for r in rows}
    for r in rows:
        # compile = the first call less one steady-state call (what the first call ran besides compiling)
        run_s = r.get("wall_ms", 0.0) / 1e3
        if r["backend"] != "eager" and r.get("first_call_s") is not None:
            r["cold_compile_s"] = max(0.0, r["first_call_s"] - run_s)
        if r.get("warm_first_call_s") is not None:
            r["warm_compile_s"] = max(0.0, r["warm_first_call_s"] - run_s)
            if r.get("cold_compile_s"):
                r["warm_vs_cold"] = r["warm_compile_s"] / r["cold_compile_s"]
        eager, ind = by.get((r["model_key"], "eager")), by.get((r["model_key"], "inductor"))
        if "wall_ms" in r and eager and "wall_ms" in eager:
            r["speedup_vs_eager"] = eager["wall_ms"] / r["wall_ms"]
        if "wall_ms" in r and ind and "wall_ms" in ind:
            r["wall_vs_inductor"] = r["wall_ms"] / ind["wall_ms"]
    for r in rows:
        ind = by.get((r["model_key"], "inductor"))
        for which in ("cold", "warm"):
            mine, theirs = r.get(f"{which}_compile_s"), ind and ind.get(f"{which}_compile_s")
            if mine is not None and theirs:
                r[f"{which}_compile_vs_inductor"] = mine / theirs


def _table(rows):
    cols = ["model_key", "backend", "wall_ms", "gpu_ms", "peak_mib", "peak_reserved_mib", "cold_compile_s", "warm_compile_s",
            "warm_vs_cold", "correct", "warm_correct", "speedup_vs_eager", "wall_vs_inductor",
            "cold_compile_vs_inductor", "warm_compile_vs_inductor", "warm_mi_cache"]
    print("\n" + " | ".join(cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, r.get("error", "")[:40] if c == "wall_ms" else "")
            cells.append(f"{v:.3f}" if isinstance(v, float) else str(v))
        print(" | ".join(cells))
    for backend in sorted({r["backend"] for r in rows}):
        sp = [r["speedup_vs_eager"] for r in rows if r["backend"] == backend and r.get("speedup_vs_eager")]
        if sp:
            print(f"geomean speedup over eager, {backend}: {math.exp(sum(map(math.log, sp)) / len(sp)):.3f} "
                  f"({len(sp)} models)")


def _plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no speedup.png")
        return
    models = sorted({r["model_key"] for r in rows})
    backends = [b for b in dict.fromkeys(r["backend"] for r in rows) if b != "eager"]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(models)), 4))
    width = 0.8 / max(1, len(backends))
    for i, b in enumerate(backends):
        vals = [next((r.get("speedup_vs_eager", 0) for r in rows if r["model_key"] == m and r["backend"] == b), 0)
                for m in models]
        ax.bar([x + i * width for x in range(len(models))], vals, width, label=b)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + width * (len(backends) - 1) / 2 for x in range(len(models))], models, rotation=20)
    ax.set_ylabel("speedup over eager (wall time)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
