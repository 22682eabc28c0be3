"""Variable sizes on the GPU: a serving loop over sequence lengths and a training loop with a smaller
last batch, against eager and Inductor. Not a test.

    PYTHONPATH=. python -m benchmarks dynamic_shapes [--backends eager,inductor,mini_inductor] [--out FILE]

serve: a 2-layer decoder (the catalog's DecoderStack, 768 wide, fp16, batch 8) called at six sequence
       lengths in turn, 10 rounds after a first round that compiles; the steady-state time of one round.
train: a 4-layer MLP with norms (fp32, AdamW) over 7 batches of 256 and a last of 100, 10 epochs after a
       first that compiles; the steady-state time of one epoch.
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
# also: mini_inductor_no_graphs (CUDA graphs off), for host-time comparisons


def _compile(model, backend: str):
    if backend == "eager":
        return model
    if backend == "inductor":
        return torch.compile(model)
    if backend == "inductor_reduce_overhead":
        return torch.compile(model, mode="reduce-overhead")
    import mini_inductor  # noqa: F401  registers the backend
    options = {"mini_inductor_per_size": {"dynamic_shapes": "per_size"},
               "mini_inductor_no_graphs": {"cudagraphs": False}}.get(backend)
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


def train(backend: str, epochs: int = 10) -> dict:
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
    first = _sync_time(epoch)
    times = [_sync_time(epoch) for _ in range(epochs)]
    return {"case": "train", "backend": backend, "ms": statistics.median(times) * 1e3, "first_s": first,
            "correct": bool(all(torch.isfinite(p).all() for p in model.parameters()))}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--cases", default="serve,train")
    p.add_argument("--out")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/dynamic_shapes.py needs a CUDA GPU")
    rows = []
    for case in a.cases.split(","):
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
        print(f"{r['case']:6} {r['backend']:26} {r['ms']:9.3f} {speed:9.2f} {r['first_s']:8.2f} "
              f"{r['frames_compiled']:7} {r['correct']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
