"""Matmul templates (option matmul_templates) against cuBLAS plus the epilogue kernel, on transformer
shapes: each linear layer with its epilogue compiled with "off" (cuBLAS), "always" (the template, default
config), "auto" (the cost model's choice), "auto-no-lt" (auto without option cublaslt_activations) and
mode="max-autotune" (timed at compile time), CUDA graphs
on; with --variants ...,inductor-max-autotune, torch's Inductor in max-autotune mode in the same run.
Not a test; needs a CUDA GPU.

    PYTHONPATH=. python3 -m benchmarks.matmul_templates [--dtype float16] [--tokens 256,2048,16384]
        [--shapes gpt2,llama,vit] [--epilogues bias+gelu,residual,swiglu] [--variants off,auto,inductor]

One line per tokens, shape and epilogue: GPU ms per call of each (calls queued behind a sleep kernel,
so the host's launch time is left out as it is in a larger model's graph), the cost model's prediction (µs) and the
largest difference from eager; at the end, per variant, the geomean speedup over eager and the lines
slower than eager. `inductor`: torch's Inductor in its default mode. The lines are what to refit scheduler/matmul_choice.py's constants to
(PEAK_TFLOPS, HBM_GB_PER_S, TEMPLATE_EFFICIENCY, LAUNCH_US).
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

import mini_inductor  # noqa: F401  (registers the backend; starts its setup threads)
from mini_inductor.timing import bench

# (N, K) of the linear layers of a GPT-2 small block (also ViT-B's MLP), a LLaMA-7B MLP and a ViT-L MLP
SHAPES = {"gpt2": ((3 * 768, 768), (3072, 768), (768, 3072)), "llama": ((11008, 4096), (4096, 11008)),
          "vit": ((4096, 1024), (1024, 4096))}
EPILOGUES = {
    "bias+gelu": lambda x, w, b, r, w2: F.gelu(F.linear(x, w, b)),
    # the two activations cuBLASLt applies itself (variant auto-lt)
    "bias+relu": lambda x, w, b, r, w2: torch.relu(F.linear(x, w, b)),
    "bias+gelu_tanh": lambda x, w, b, r, w2: F.gelu(F.linear(x, w, b), approximate="tanh"),
    "residual": lambda x, w, b, r, w2: F.linear(x, w, b) + r,
    "silu": lambda x, w, b, r, w2: F.silu(F.linear(x, w)),
    # LLaMA's MLP gate: SiLU of one linear times another of the same input (two matmuls)
    "swiglu": lambda x, w, b, r, w2: F.silu(F.linear(x, w)) * F.linear(x, w2),
    "none": lambda x, w, b, r, w2: F.linear(x, w),
}
VARIANTS = (("off", dict(options={"matmul_templates": "off"})),
            ("always", dict(options={"matmul_templates": "always"})),
            ("auto", dict(options={"matmul_templates": "auto"})),
            # auto without cuBLASLt's own ReLU or tanh-GELU epilogue (an addmm and a kernel, or a template)
            ("auto-no-lt", dict(options={"matmul_templates": "auto", "cublaslt_activations": False})),
            ("max-autotune", dict(mode="max-autotune")),
            # the same with the templates' operands loaded through TMA descriptors (option matmul_tma)
            ("always-tma", dict(options={"matmul_templates": "always", "matmul_tma": True})),
            ("auto-tma", dict(options={"matmul_templates": "auto", "matmul_tma": True})),
            ("max-autotune-tma", dict(mode="max-autotune", options={"matmul_tma": True})))
# torch's Inductor in the same run (what it chose is not read: its row gives the time, error and compile time)
INDUCTOR = (("inductor", dict(backend="inductor")),
            ("inductor-max-autotune", dict(backend="inductor", mode="max-autotune")))


def gpu_ms(fn, args, n=20) -> tuple[float, torch.Tensor]:
    outputs = []

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        outputs[:] = [fn(*args)]

    with torch.no_grad():   # the GPU's time: the calls queued behind a sleep, no launch gaps (as in a model's graph)
        ms = bench(step, warmup=5, samples=5, calls=n, device="cuda", queue_ahead=True).gpu_ms
    return ms, outputs[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    p.add_argument("--tokens", default="8192", help="M, the rows of the activations: a comma-separated list")
    p.add_argument("--shapes", default=",".join(SHAPES), help="of " + ", ".join(SHAPES))
    p.add_argument("--epilogues", default=",".join(EPILOGUES))
    p.add_argument("--variants", default=",".join(label for label, _ in VARIANTS),
                   help="of " + ", ".join(label for label, _ in VARIANTS) + ", inductor (torch's Inductor, "
                   "default mode) and inductor-max-autotune (its Triton templates against cuBLAS, timed)")
    a = p.parse_args()
    chosen = [(label, kw) for label, kw in VARIANTS + INDUCTOR if label in a.variants.split(",")]
    from mini_inductor import metrics
    from mini_inductor.scheduler.matmul_choice import prefer_template
    dtype = getattr(torch, a.dtype)
    speedups: dict[str, list[float]] = {label: [] for label, _ in chosen}
    slower: dict[str, list[str]] = {label: [] for label, _ in chosen}
    for m in (int(t) for t in a.tokens.split(",")):
        for n, k in (shape for group in a.shapes.split(",") for shape in SHAPES[group]):
            for name in a.epilogues.split(","):
                line = f"{m}x{n}x{k} {a.dtype} {name}"
                eager_ms, row = _line(line, EPILOGUES[name], m, n, k, dtype, chosen, prefer_template, metrics)
                for label, ms in row.items():
                    speedups[label].append(eager_ms / ms)
                    if ms > eager_ms:
                        slower[label].append(f"{line} {eager_ms / ms:.3f}x")
    print("\nper variant: geomean speedup over eager; lines slower than eager (speedup)")
    for label, ratios in speedups.items():
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
        print(f"{label}: {geomean:.3f}x over {len(ratios)} lines; {len(slower[label])} slower: "
              + ("; ".join(slower[label]) or "none"), flush=True)


def _line(line, fn, m, n, k, dtype, chosen, prefer_template, metrics) -> tuple[float, dict[str, float]]:
    """Time one shape and epilogue: eager, then each variant; prints the line, returns eager's ms and the
    variants' (those that ran)."""
    name = line.rsplit(" ", 1)[1]
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) * k ** -0.5
    b = torch.randn(n, device="cuda", dtype=dtype)
    r = torch.randn(m, n, device="cuda", dtype=dtype)
    w2 = torch.randn(n, k, device="cuda", dtype=dtype) * k ** -0.5
    args = (x, w, b, r, w2)
    eager_ms, ref = gpu_ms(fn, args)
    _, model = prefer_template(1, m, n, k, dtype, name != "none", name in ("bias+gelu", "silu", "swiglu"))
    row = [f"{line}: eager {eager_ms:.3f} ms"]
    times = {}
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
            times[label] = ms
        except Exception as e:  # noqa: BLE001  (a failing variant is a result)
            row.append(f"{label} failed: {type(e).__name__}: {str(e)[:200]}")
    row.append(f"model: {model}")
    print("; ".join(row), flush=True)
    return eager_ms, times


if __name__ == "__main__":
    main()
