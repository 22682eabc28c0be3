"""Gradient accumulation under CUDA graphs: four micro-batches' backward passes accumulated into `.grad`
before it is read, under Inductor reduce-overhead and mini_inductor, against eager. Not a test; needs
a CUDA GPU.

    PYTHONPATH=. python3 -m benchmarks.grad_accumulation

Prints each backend's largest difference from eager's accumulated gradients, or its error. Session 34
(H200): reduce-overhead raised "accessing tensor output of CUDAGraphs that has been overwritten" (its
`.grad` lives in the graphs' pool); mini_inductor matched eager (it copies parameter gradients out of
the pool, runtime/cudagraphs/gradients.py, the host time the training loop pays for it).
"""
import argparse
import copy

import torch

import mini_inductor  # noqa: F401  (registers the backend)
from mini_inductor.examples import MLPWithNorm


def run(backend: str, base, xs) -> list:
    """Three steps of four accumulated micro-batches; the gradients read after each step."""
    torch._dynamo.reset()
    m = copy.deepcopy(base)
    mode = "reduce-overhead" if backend == "inductor" else None
    f = m if backend == "eager" else torch.compile(m, backend=backend, mode=mode)
    outs = []
    for _ in range(3):
        for x in xs:
            f(x).pow(2).mean().backward()
        outs.append([p.grad.clone() for p in m.parameters()])
        for p in m.parameters():
            p.grad = None
    return outs


def main(argv=None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/grad_accumulation.py needs a CUDA GPU")
    torch.manual_seed(0)
    base = MLPWithNorm(256, 512, 2).cuda()
    xs = [torch.randn(64, 256, device="cuda") for _ in range(4)]
    ref = run("eager", base, xs)
    for backend in ("inductor", "mini_inductor"):
        try:
            got = run(backend, base, xs)
        except Exception as e:  # noqa: BLE001  (the point: which backend fails, and how)
            print(backend, "ERROR", type(e).__name__, str(e)[:400])
            continue
        err = max((g - r).abs().max().item() for gs, rs in zip(got, ref) for g, r in zip(gs, rs))
        print(backend, "max abs error of accumulated grads vs eager:", err)


if __name__ == "__main__":
    main()
