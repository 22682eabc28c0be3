"""Matmul templates (option matmul_templates) against cuBLAS plus the epilogue kernel, on transformer
shapes: each linear layer with its epilogue compiled with "off" (cuBLAS), "always" (the template, default
config), "auto" (the cost model's choice) and mode="max-autotune" (timed at compile time), CUDA graphs
on; with --variants ...,inductor-max-autotune, torch's Inductor in max-autotune mode in the same run.
Not a test; needs a CUDA GPU.

    PYTHONPATH=. python3 -m benchmarks.matmul_templates [--dtype float16] [--tokens 8192] [--variants off,auto]

One line per shape and epilogue: ms per call of each, the cost model's prediction (µs) and the largest
difference from eager. The lines are what to refit scheduler/matmul_choice.py's constants to
(PEAK_TFLOPS, HBM_GB_PER_S, TEMPLATE_EFFICIENCY, LAUNCH_US).
"""
import argparse
import time

import torch
import torch.nn.functional as F

import mini_inductor  # noqa: F401  (registers the backend; starts its setup threads)
from mini_inductor.timing import bench

# (N, K) of a GPT-2 small / Llama-7B-like block's linear layers
SHAPES = ((3 * 768, 768), (3072, 768), (768, 3072), (11008, 4096), (4096, 11008))
EPILOGUES = {
    "bias+gelu": lambda x, w, b, r, w2: F.gelu(F.linear(x, w, b)),
    "residual": lambda x, w, b, r, w2: F.linear(x, w, b) + r,
    "silu": lambda x, w, b, r, w2: F.silu(F.linear(x, w)),
    # LLaMA's MLP gate: SiLU of one linear times another of the same input (two matmuls)
    "swiglu": lambda x, w, b, r, w2: F.silu(F.linear(x, w)) * F.linear(x, w2),
    "none": lambda x, w, b, r, w2: F.linear(x, w),
}
VARIANTS = (("off", dict(options={"matmul_templates": "off"})),
            ("always", dict(options={"matmul_templates": "always"})),
            ("auto", dict(options={"matmul_templates": "auto"})),
            ("max-autotune", dict(mode="max-autotune")))
# torch's Inductor in the same run (what it chose is not read: its row gives the time, error and compile time)
INDUCTOR = (("inductor-max-autotune", dict(backend="inductor", mode="max-autotune")),)


def gpu_ms(fn, args, n=50) -> tuple[float, torch.Tensor]:
    outputs = []

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        outputs[:] = [fn(*args)]

    with torch.no_grad():
        ms = bench(step, warmup=5, samples=5, calls=n, device="cuda").gpu_ms
    return ms, outputs[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    p.add_argument("--tokens", type=int, default=8192, help="M: rows of the activations")
    p.add_argument("--epilogues", default=",".join(EPILOGUES))
    p.add_argument("--variants", default=",".join(label for label, _ in VARIANTS),
                   help="of " + ", ".join(label for label, _ in VARIANTS) + ", and inductor-max-autotune: "
                   "torch's Inductor with mode='max-autotune' (its Triton templates against cuBLAS, timed)")
    a = p.parse_args()
    chosen = [(label, kw) for label, kw in VARIANTS + INDUCTOR if label in a.variants.split(",")]
    from mini_inductor import metrics
    from mini_inductor.scheduler.matmul_choice import prefer_template
    dtype, m = getattr(torch, a.dtype), a.tokens
    for n, k in SHAPES:
        for name in a.epilogues.split(","):
            fn = EPILOGUES[name]
            torch.manual_seed(0)
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype) * k ** -0.5
            b = torch.randn(n, device="cuda", dtype=dtype)
            r = torch.randn(m, n, device="cuda", dtype=dtype)
            w2 = torch.randn(n, k, device="cuda", dtype=dtype) * k ** -0.5
            args = (x, w, b, r, w2)
            eager_ms, ref = gpu_ms(fn, args)
            _, model = prefer_template(1, m, n, k, dtype, name != "none", name in ("bias+gelu", "silu", "swiglu"))
            row = [f"{m}x{n}x{k} {a.dtype} {name}: eager {eager_ms:.3f} ms"]
            for label, kw in chosen:
                torch._dynamo.reset()
                metrics.reset()
                t0 = time.perf_counter()
                try:
                    ms, out = gpu_ms(torch.compile(fn, **{"backend": "mini_inductor", **kw}), args)
                    err = (out.float() - ref.float()).abs().max().item()
                    kernels = [k for g in metrics.compiled_graphs for k in g.kernel_names]
                    externs = [c for g in metrics.compiled_graphs for c in g.extern_calls]
                    used = "template" if any(k.startswith("triton_tem_") for k in kernels) else "cuBLAS"
                    what = f"{used}, {len(kernels)} kernels, {len(externs)} extern, " \
                        if kw.get("backend") != "inductor" else ""
                    row.append(f"{label} {ms:.3f} ms ({what}err {err:.3g}, compile {time.perf_counter() - t0:.0f} s)")
                except Exception as e:  # noqa: BLE001  (a failing variant is a result)
                    row.append(f"{label} failed: {type(e).__name__}: {str(e)[:200]}")
            row.append(f"model: {model}")
            print("; ".join(row), flush=True)


if __name__ == "__main__":
    main()
