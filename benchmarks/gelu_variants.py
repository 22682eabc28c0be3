"""Formulations of float32 erf inside an fp16 GELU kernel, timed one against another. Not a test; needs a
CUDA GPU.

    PYTHONPATH=. python -m benchmarks gelu_variants [--numel 50331648] [--blocks 2048x4,4096x8]

Session 30: our GELU kernel with libdevice's erff (a branch per element on |x|) ran at 0.0683 ms over 50M
fp16 elements on an H200, eager's at 0.0661. Each variant here is a kernel of its own, GPU time per call,
with its max error against float64 erf:

    libdevice   tl.erf (libdevice's erff, as our kernels had it before session 30)
    selects     one polynomial, its coefficients selected per element by range (11 selects for 7 FMAs
                in the PTX): 0.0674 ms, eager 0.0651 (H200, session 30)
    two_polys   triton_helpers.erf32: both ranges' polynomials in full, one select, the sign put back by a
                bit operation: 0.0579 ms (the same run)
    eager       ATen's GELU
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from mini_inductor.runtime import triton_helpers
from mini_inductor.timing import bench

SQRT1_2 = 0.7071067811865476


@triton.jit
def _erf_selects(x):
    # erf32's first form: one polynomial, its coefficients selected per element by range
    a = tl.abs(x)
    big = a >= 1.0
    t = tl.where(big, tl.minimum(a, 3.92), x * x)
    p = tl.where(big, 2.0393423255882226e-05, 7.889093831181526e-05)
    p = p * t + tl.where(big, -0.0005083335563540459, -0.0008020834065973759)
    p = p * t + tl.where(big, 0.005431359633803368, 0.005189534742385149)
    p = p * t + tl.where(big, -0.03466169908642769, -0.026854444295167923)
    p = p * t + tl.where(big, 0.15371811389923096, 0.11283600330352783)
    p = p * t + tl.where(big, 0.9160510301589966, -0.3761262595653534)
    p = p * t + tl.where(big, 0.6283658146858215, 0.12837916612625122)
    s = tl.where(big, -t, x)
    r = p * s + s
    tail = 1.0 - tl.exp2(r)
    return tl.where(big, tl.where(x < 0, -tail, tail), r)


@triton.jit
def _erf(x, VARIANT: tl.constexpr):
    if VARIANT == 0:
        e = tl.erf(x)
    elif VARIANT == 1:
        e = _erf_selects(x)
    else:
        e = triton_helpers.erf32(x)
    return e


@triton.jit
def _gelu_kernel(x_ptr, out_ptr, n, VARIANT: tl.constexpr, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = i < n
    x = tl.load(x_ptr + i, mask).to(tl.float32)
    e = _erf(x * 0.7071067811865476, VARIANT)
    tl.store(out_ptr + i, (x * 0.5 * (1.0 + e)).to(out_ptr.dtype.element_ty), mask)


@triton.jit
def _erf_kernel(x_ptr, out_ptr, n, VARIANT: tl.constexpr, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = i < n
    tl.store(out_ptr + i, _erf(tl.load(x_ptr + i, mask), VARIANT), mask)


VARIANTS = {"libdevice": 0, "selects": 1, "two_polys": 2}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numel", type=int, default=16384 * 3072)
    p.add_argument("--blocks", default="2048x4,4096x8")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gelu_variants.py needs a CUDA GPU")
    x = torch.randn(a.numel, device="cuda", dtype=torch.float16)
    out = torch.empty_like(x)
    grid_x = torch.linspace(-6, 6, 2**22, device="cuda")
    ref_erf = torch.erf(grid_x.double())
    eager = bench(lambda: F.gelu(x), warmup=5, samples=7, calls=10, queue_ahead=True).gpu_ms
    print(f"gelu {a.numel} float16: eager {eager:.4f} ms", flush=True)
    for block in a.blocks.split(","):
        xblock, warps = map(int, block.split("x"))
        grid = (triton.cdiv(a.numel, xblock),)
        line = [f"  XBLOCK {xblock}, {warps} warps:"]
        for name, v in VARIANTS.items():
            def call():
                _gelu_kernel[grid](x, out, a.numel, VARIANT=v, XBLOCK=xblock, num_warps=warps)
            ms = bench(call, warmup=5, samples=7, calls=10, queue_ahead=True).gpu_ms
            err = (out.float() - F.gelu(x.float())).abs().max().item()
            e32 = torch.empty_like(grid_x)
            _erf_kernel[(triton.cdiv(grid_x.numel(), 1024),)](grid_x, e32, grid_x.numel(), VARIANT=v, XBLOCK=1024)
            erf_err = ((e32.double() - ref_erf).abs().max()).item()
            line.append(f"{name} {ms:.4f} ms (gelu err {err:.2e}, erf err {erf_err:.2e})")
        print(" ".join(line), flush=True)


if __name__ == "__main__":
    main()
