"""Where the GPU time goes: the kernels of one suite model (or the dynamic serving loop) under eager,
Inductor and mini_inductor, CUDA graphs off so that each kernel shows. Not a test.

    PYTHONPATH=. python -m benchmarks kernel_profile --model gpt2_causal --dtype float32 [--rows 12]
    PYTHONPATH=. python -m benchmarks kernel_profile --model serve      (benchmarks/dynamic_shapes.py's loop)
    PYTHONPATH=. python -m benchmarks kernel_profile --model attention_causal --train --backends mini_inductor
    PYTHONPATH=. python -m benchmarks kernel_profile --model sdpa_causal --train --backends eager   (ATen flash)

For each backend: the kernel time per call (the sum of the CUDA kernels' durations, from
torch.profiler over 10 calls), the kernels launched per call, and the kernels that take the most
time. With CUDA graphs off the host time is not the one a user sees; the wall time per call is
printed for reference only. A backend's kernel time above another's points at its kernels, not at
its launch overhead.
"""
from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

BACKENDS = ("eager", "inductor", "mini_inductor", "mini_inductor_per_size")


def _compile(model, backend: str):
    if backend == "eager":
        return model
    if backend == "inductor":
        return torch.compile(model)
    import mini_inductor  # noqa: F401  registers the backend
    options = {"cudagraphs": False}
    if backend == "mini_inductor_per_size":
        options["dynamic_shapes"] = "per_size"
    return torch.compile(model, backend="mini_inductor", options=options)


def _workload(name: str, dtype):
    """(model, a list of argument tuples called in turn)."""
    if name == "serve":
        from benchmarks.dynamic_shapes import LENGTHS
        from mini_inductor.examples import DecoderStack
        torch.manual_seed(0)
        model = DecoderStack(768, 12, 2).cuda().half().eval()
        return model, [(torch.randn(8, t, 768, device="cuda", dtype=torch.half),) for t in LENGTHS]
    if name in ("attention_causal", "sdpa_causal"):
        # the attention sweep's causal variant written out (mini_inductor matches it to SDPA), and
        # SDPA itself (eager: ATen's flash attention); fp16, B 4, 16 heads, L 1024, head dim 64
        import torch.nn.functional as F

        from benchmarks.attention_sweep import causal
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(4, 16, 1024, 64, device="cuda", dtype=torch.float16, generator=gen).requires_grad_()
                   for _ in range(3))
        model = (lambda q, k, v: causal(q, k, v, {})) if name == "attention_causal" else \
            (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return model, [(q, k, v)]
    from benchmarks.models import MODELS
    w = MODELS[name](torch.device("cuda"), dtype)
    return w.model, [tuple(w.inputs)]


def measure(name: str, backend: str, dtype, rows: int, train: bool = False) -> None:
    torch._dynamo.reset()
    model, calls = _workload(name, dtype)
    with torch.set_grad_enabled(train):
        fn = _compile(model, backend)
        if train:   # each call: the forward, then the backward of its output against a fixed gradient
            forward = fn

            def fn(*args):
                out = forward(*args)
                out.backward(torch.ones_like(out))
        for _ in range(3):
            for args in calls:
                fn(*args)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            for args in calls:
                fn(*args)
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - start) * 1e3 / 10
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                for args in calls:
                    fn(*args)
            torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total_us = sum(e.device_time for e in kernels) / 10
    print(f"\n=== {name} {backend}: kernel time {total_us / 1e3:.3f} ms per call ({len(kernels) / 10:.0f} kernels), "
          f"wall {wall_ms:.3f} ms (no CUDA graphs) ===", flush=True)
    by_name: dict[str, list[float]] = {}
    for e in kernels:
        by_name.setdefault(e.name, []).append(e.device_time)
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:rows]
    for kname, times in top:
        print(f"  {sum(times) / 10:9.1f} us  x{len(times) / 10:<4.0f} {kname[:110]}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2_causal")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--rows", type=int, default=12)
    p.add_argument("--train", action="store_true", help="forward and backward in each call (default: no_grad)")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/kernel_profile.py needs a CUDA GPU")
    for backend in a.backends.split(","):
        try:
            measure(a.model, backend, getattr(torch, a.dtype), a.rows, a.train)
        except Exception as e:  # noqa: BLE001  (a backend that fails is reported, the others still run)
            print(f"\n=== {a.model} {backend}: {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
