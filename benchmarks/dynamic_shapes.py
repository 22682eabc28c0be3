"""Variable sizes on the GPU: a serving loop over sequence lengths and a training loop with a smaller
last batch, against eager and Inductor. Not a test.

    PYTHONPATH=. python -m benchmarks dynamic_shapes [--backends eager,inductor,mini_inductor] [--out FILE]

serve: a 2-layer decoder (the catalog's DecoderStack, 768 wide, fp16, batch 8) called at six sequence
       lengths in turn, 10 rounds after a first round that compiles; the steady-state time of one round.
train: a 4-layer MLP with norms (fp32, AdamW) over 7 batches of 256 and a last of 100, 10 epochs after a
       first that compiles; the steady-state time of one epoch.
train_interleaved: the same loop for every backend of --backends in one process, their epochs taken
       in turn (20 rounds) once all have compiled.
Each row: milliseconds per round or epoch (median over rounds), the first round's seconds (compiles
included), the graphs each backend compiled, and whether every output matched eager's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from mini_inductor.examples import DecoderStack, MLPWithNorm

LENGTHS = (64, 96, 128, 192, 256, 384)
# mini_inductor: its default (dynamic_shapes="symbolic", one compile for every size); _per_size: a compile per size
BACKENDS = ("eager", "inductor", "inductor_reduce_overhead", "mini_inductor", "mini_inductor_per_size")
# also: mini_inductor_no_graphs (CUDA graphs off), for host-time comparisons; mini_inductor_copy_grads
# (parameter gradients copied out of the CUDA-graph pool after each backward: option
# cudagraph_adopt_gradients=False; adopted in the pool is the default since session 39)


def _compile(model, backend: str):
    if backend == "eager":
        return model
    if backend == "inductor":
        return torch.compile(model)
    if backend == "inductor_reduce_overhead":
        return torch.compile(model, mode="reduce-overhead")
    import mini_inductor  # noqa: F401  registers the backend
    options = {"mini_inductor_per_size": {"dynamic_shapes": "per_size"},
               "mini_inductor_no_graphs": {"cudagraphs": False},
               "mini_inductor_copy_grads": {"cudagraph_adopt_gradients": False}}.get(backend)
    return torch.compile(model, backend="mini_inductor", options=options)


def _sync_time(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def serve(backend: str, rounds: int = 10) -> dict:
    torch.manual_seed(0)
    model = DecoderStack(768, 12, 2).cuda().half().eval()
    inputs = {t: torch.randn(8, t, 768, device="cuda", dtype=torch.half) for t in LENGTHS}
    with torch.no_grad():
        expected = {t: model(x) for t, x in inputs.items()}
        run = _compile(model, backend)

        def one_round():
            for t in LENGTHS:
                out = run(inputs[t])
                if backend == "inductor_reduce_overhead":
                    out = out.clone()
            return out
        first = _sync_time(one_round)
        correct = all(torch.allclose(run(x).float(), expected[t].float(), atol=2e-2, rtol=2e-2)
                      for t, x in inputs.items())
        times = [_sync_time(one_round) for _ in range(rounds)]
    return {"case": "serve", "backend": backend, "ms": statistics.median(times) * 1e3, "first_s": first,
            "correct": correct}


def _train_loop(backend: str):
    """(one epoch of the training loop, its model), compiled by `backend` at the first epoch."""
    torch.manual_seed(0)
    model = MLPWithNorm(512, 2048, 4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [torch.randn(256, 512, device="cuda") for _ in range(7)] + [torch.randn(100, 512, device="cuda")]
    run = _compile(model, backend)

    def epoch():
        for x in batches:
            opt.zero_grad(set_to_none=True)
            run(x).float().pow(2).mean().backward()
            opt.step()
    return epoch, model


def train(backend: str, epochs: int = 10) -> dict:
    epoch, model = _train_loop(backend)
    first = _sync_time(epoch)
    times = [_sync_time(epoch) for _ in range(epochs)]
    return {"case": "train", "backend": backend, "ms": statistics.median(times) * 1e3, "first_s": first,
            "correct": bool(all(torch.isfinite(p).all() for p in model.parameters()))}


def train_interleaved(backends: list[str], rounds: int = 20) -> list[dict]:
    """The training loop of `train` for every backend in one process, their epochs interleaved (the
    order rotated each round) after each has compiled: epoch times drift within a process (session 27:
    reduce-overhead's 15.3 and 18.3 ms in one call, run one after the other), so back-to-back runs
    compare a backend with the moment it ran in. Medians, with the fastest and slowest epoch."""
    loops = []
    for backend in backends:
        epoch, model = _train_loop(backend)
        first = _sync_time(epoch)
        _sync_time(epoch)
        loops.append((backend, epoch, first, model))
    times: dict[int, list[float]] = {n: [] for n in range(len(loops))}
    for r in range(rounds):
        for n in [(r + k) % len(loops) for k in range(len(loops))]:
            times[n].append(_sync_time(loops[n][1]) * 1e3)
    return [{"case": "train_interleaved", "backend": backend, "ms": statistics.median(times[n]),
             "min_ms": min(times[n]), "max_ms": max(times[n]), "first_s": first,
             "correct": bool(all(torch.isfinite(p).all() for p in model.parameters()))}
            for n, (backend, _, first, model) in enumerate(loops)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--cases", default="serve,train", help="serve, train, train_interleaved (every backend's "
                   "epochs in turn, after all have compiled)")
    p.add_argument("--out")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/dynamic_shapes.py needs a CUDA GPU")
    rows = []
    for case in a.cases.split(","):
        if case == "train_interleaved":   # every backend at once (its rows carry no compile counts)
            torch._dynamo.reset()
            for row in train_interleaved(list(dict.fromkeys(a.backends.split(",")))):
                row["frames_compiled"] = None
                rows.append(row)
                print(json.dumps(row), flush=True)
            continue
        for backend in a.backends.split(","):
            torch._dynamo.reset()
            from torch._dynamo.utils import counters
            counters.clear()
            row = {"serve": serve, "train": train}[case](backend)
            row["frames_compiled"] = counters["stats"]["unique_graphs"]
            if backend.startswith("mini_inductor"):
                from mini_inductor import metrics
                row["mi_graphs"] = len(metrics.compiled_graphs)
                row["mi_dynamic_graphs"] = sum(bool(r.dynamic_symbols) for r in metrics.compiled_graphs)
                row["mi_per_size_fallbacks"] = sum(bool(r.dynamic_fallback) for r in metrics.compiled_graphs)
                row["mi_compile_s"] = sum(r.compile_seconds for r in metrics.compiled_graphs)
                metrics.reset()
            rows.append(row)
            print(json.dumps(row), flush=True)
    base = {r["case"]: r["ms"] for r in rows if r["backend"] == "eager"}
    print(f"\n{'case':6} {'backend':26} {'ms':>9} {'vs eager':>9} {'first s':>8} {'graphs':>7} correct")
    for r in rows:
        speed = base.get(r["case"], float("nan")) / r["ms"]
        graphs = "" if r["frames_compiled"] is None else r["frames_compiled"]
        spread = f" (epochs {r['min_ms']:.2f}-{r['max_ms']:.2f})" if "min_ms" in r else ""
        print(f"{r['case']:6} {r['backend']:26} {r['ms']:9.3f} {speed:9.2f} {r['first_s']:8.2f} "
              f"{graphs:>7} {r['correct']}{spread}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
