"""cuBLASLt's addmm (bias in its epilogue) against the plain mm whose bias would go to the next kernel,
per shape and dtype: the data behind lowering/extern_lowerings.py's `_bias_fuses_downstream`. Not a test.

    PYTHONPATH=. python -m benchmarks addmm_split [--dtypes float32,float16] [--tf32] [--ms 512,3152] [--kn 768:768]

Each row: M x K -> N, then the median µs of addmm(bias, x, w.t()) and of mm(x, w.t()) (CUDA events,
L2 flushed, each in a CUDA graph of 10 calls so that launch time does not count), and their ratio.
"""
from __future__ import annotations

import argparse

import torch

from mini_inductor.timing import bench

MS = (8, 64, 512, 2048, 8192)
KN = ((256, 256), (768, 768), (768, 2304), (768, 3072), (3072, 768), (1024, 4096), (4096, 1024))


def _graphed(fn, reps: int = 10):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    return g.replay


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--ms", default=",".join(map(str, MS)), help="row counts M (3152: ViT-B/16's 16 x 197 tokens)")
    p.add_argument("--kn", default="", help="K:N pairs, comma-separated (default: the GPT-2, ViT and LLaMA-like list)")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/addmm_split.py needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    for dtype in (getattr(torch, d) for d in a.dtypes.split(",")):
        kn = [tuple(map(int, p.split(":"))) for p in a.kn.split(",")] if a.kn else KN
        for k, n in kn:
            for m in map(int, a.ms.split(",")):
                x = torch.randn(m, k, device="cuda", dtype=dtype)
                w = torch.randn(n, k, device="cuda", dtype=dtype)
                b = torch.randn(n, device="cuda", dtype=dtype)
                t_addmm = bench(_graphed(lambda: torch.addmm(b, x, w.t())), warmup=3, samples=10, flush_l2=True)
                t_mm = bench(_graphed(lambda: torch.mm(x, w.t())), warmup=3, samples=10, flush_l2=True)
                us_addmm, us_mm = t_addmm.gpu_ms * 100, t_mm.gpu_ms * 100     # per call: ms / 10 calls
                print(f"{str(dtype).split('.')[-1]:8} tf32={a.tf32!s:5} {m:5} x {k:4} -> {n:4}  addmm {us_addmm:8.1f} us"
                      f"  mm {us_mm:8.1f} us  mm/addmm {us_mm / us_addmm:5.2f}", flush=True)


if __name__ == "__main__":
    main()
