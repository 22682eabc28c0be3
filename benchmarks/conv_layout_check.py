"""Channels-last convolutions (option conv_layout) on torchvision CNNs, in one process: eager,
mini_inductor with conv_layout "auto" (the default) and "off", and Inductor's reduce-overhead mode,
fp16 (or --dtype float32: "auto" measures then), batch 32 (--batch), CUDA graphs on. Not a test; needs
torchvision and a CUDA GPU.

    PYTHONPATH=. python3 -m benchmarks.conv_layout_check [--models mobilenet_v2,resnet50,efficientnet_b0]
    PYTHONPATH=. python3 -m benchmarks.conv_layout_check --models resnet18 --dtype float32 --batch 16

Prints ms per call (mean of 50 calls after 5) and each backend's largest difference from eager.
"""
import argparse
import time

import torch

import mini_inductor  # noqa: F401  (registers the backend; starts its setup threads)
from mini_inductor.timing import bench


def wall_ms(fn, x, n=50):
    """Host ms per call over one sample of `n` back-to-back calls after 5 warm-up calls, and the last output."""
    outputs = []

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        outputs[:] = [fn(x)]

    with torch.no_grad():
        ms = bench(step, warmup=5, samples=1, calls=n, device="cuda").wall_ms
    return ms, outputs[0]


BACKENDS = (("mini auto", dict(backend="mini_inductor", options={"conv_layout": "auto"})),
            ("mini off", dict(backend="mini_inductor", options={"conv_layout": "off"})),
            ("inductor RO", dict(mode="reduce-overhead")))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default="mobilenet_v2,resnet50,efficientnet_b0")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    import torchvision      # after the arguments: --help works without it
    from mini_inductor import metrics
    dtype = getattr(torch, a.dtype)
    for name in a.models.split(","):
        torch.manual_seed(0)
        m = getattr(torchvision.models, name)().cuda().to(dtype).eval()
        x = torch.randn(a.batch, 3, 224, 224, device="cuda", dtype=dtype)
        ref_ms, ref = wall_ms(m, x)
        row = [f"{name}: eager {ref_ms:.3f} ms"]
        for label, kw in BACKENDS:
            torch._dynamo.reset()
            t0 = time.perf_counter()
            try:
                ms, out = wall_ms(torch.compile(m, **kw), x)
                err = (out.float() - ref.float()).abs().max().item()
                row.append(f"{label} {ms:.3f} ms (err {err:.3g}, {time.perf_counter() - t0:.0f} s)")
                if label == "mini auto" and metrics.compiled_graphs:
                    row[-1] += f" [{metrics.compiled_graphs[-1].layout or 'NCHW'}]"
            except Exception as e:  # noqa: BLE001  (a failing backend is a result)
                row.append(f"{label} failed: {type(e).__name__}: {str(e)[:200]}")
        print("; ".join(row), flush=True)


if __name__ == "__main__":
    main()
