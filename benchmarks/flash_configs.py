"""Block sizes, warps and stages of the generated flash-attention kernels, timed per config on the GPU.
Not a test; needs a CUDA GPU.

    PYTHONPATH=. python -m benchmarks flash_configs [--cases hf_causal,alibi] [--lengths 1024,4096]
        [--head-dims 64] [--dtype float16] [--modes fwd,dkdv,dq] [--top 3] [--configs 64x64x4x3,128x64x4x2]

attention/flash.py's `forward_config`, `backward_config` (dk/dv) and `dq_config` were chosen by compiling for sm_90 and
reading ptxas's register and spill counts, not by timing. Each case here is a modification our own
kernels compute (batch 4, 16 heads): for each config of the grid, the forward (`triton_forward`) or
the backward (`triton_backward`: delta, dk/dv, dq; the config of dk/dv or of dq varied) is timed alone, GPU time queued behind a sleep
(mini_inductor/timing.py), its result checked against the current config's, and the fastest are
printed beside the current choice; ATen's flash
attention (SDPA, causal) is timed too as the reference the issue's "within 15%" targets. A config
that does not compile or launch (shared memory, registers) is skipped.
"""
from __future__ import annotations

import argparse
import itertools
import math

import torch
import torch.nn.functional as F

from mini_inductor.attention import flash, score_mod
from mini_inductor.timing import bench

BATCH, HEADS = 4, 16
DEVICE = "cuda"   # (the CPU, under Triton's interpreter, only to check this script)
FILL = torch.finfo(torch.float32).min
FORWARD_GRID = [(bm, bn, w, s) for (bm, bn), w, s in itertools.product(
    ((64, 64), (128, 64), (64, 128), (128, 128), (128, 32)), (4, 8), (2, 3, 4))]
BACKWARD_GRID = [(bm, bn, w, s) for (bm, bn), w, s in itertools.product(
    ((32, 64), (64, 64), (64, 128), (128, 64), (32, 128), (128, 128)), (4, 8), (1, 2, 3))]


def _case(name: str, L: int, E: int, dtype) -> tuple[str, list[torch.Tensor]]:
    """(mod, extra tensors) of one modification, as attention/match.py would write it."""
    scale = repr(1.0 / math.sqrt(E))
    if name == "causal":       # i and j only: a static block table
        return f"where(j <= i, s * {scale}, -inf)", []
    if name == "hf_causal":    # a bool buffer: the table from its data
        return f"where(t0, s * {scale}, {FILL!r})", [torch.ones(L, L, dtype=torch.bool, device=DEVICE).tril()[None, None]]
    if name == "padding":
        pad = torch.zeros(BATCH, 1, 1, L, dtype=torch.bool, device=DEVICE)
        pad[..., L - L // 8:] = True
        return f"where(t0, -inf, s * {scale})", [pad]
    if name == "alibi":
        slopes = (2.0 ** (-8.0 * torch.arange(1, HEADS + 1, device=DEVICE) / HEADS)).view(1, HEADS, 1, 1)
        return f"s * {scale} + t0 * (j - i)", [slopes]
    raise ValueError(name)


def _time(fn) -> float:
    try:
        t = bench(fn, warmup=3, samples=7, calls=5, queue_ahead=True, device=DEVICE)
        return t.gpu_ms if t.gpu_ms is not None else t.wall_ms
    except Exception:  # noqa: BLE001  (a config that does not compile or launch is skipped)
        return math.inf


def sweep(case: str, L: int, E: int, dtype, mode: str, top: int, configs: list | None = None) -> None:
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    q, k, v = (torch.randn(BATCH, HEADS, L, E, device=DEVICE, dtype=dtype, generator=gen) for _ in range(3))
    mod, extra = _case(case, L, E, dtype)
    sm = score_mod.parse(mod)
    out, lse = flash.triton_forward(q, k, v, extra, sm)
    dout = torch.randn_like(out)
    if mode == "fwd":
        def call():
            return flash.triton_forward(q, k, v, extra, sm)
        grid, names = FORWARD_GRID, ("forward_config",)
    else:   # the whole backward timed, one of its two kernels' configs varied
        def call():
            return flash.triton_backward(dout, q, k, v, out, lse, extra, sm)
        grid, names = BACKWARD_GRID, (("backward_config", "dq_config") if mode == "dkdv" else ("dq_config",))
    grid = configs or grid
    current_config = getattr(flash, names[0])(*_args(E, dtype, mode, sm))
    current = _time(call)
    expected = [t.float() for t in call()]
    originals = {name: getattr(flash, name) for name in ("forward_config", "backward_config", "dq_config")}
    kept_dq = flash.dq_config(*_args(E, dtype, "dq", sm))   # dk/dv varied: dq keeps its blocks
    timed, wrong = [], 0
    try:
        for config in grid:
            setattr(flash, names[0], lambda *a, config=config, **kw: config)
            if mode == "dkdv":
                setattr(flash, "dq_config", lambda *a, **kw: kept_dq)
            flash._plan.cache_clear()
            ms = _time(call)
            if math.isfinite(ms) and not all(torch.allclose(t.float(), e, atol=2e-2, rtol=2e-2)
                                              for t, e in zip(call(), expected)):
                ms, wrong = math.inf, wrong + 1   # a config must also compute what the current one does
            timed.append((ms, config))
    finally:
        for name, fn in originals.items():
            setattr(flash, name, fn)
        flash._plan.cache_clear()
    timed.sort()
    q2, k2, v2 = (t.detach().requires_grad_(mode != "fwd") for t in (q, k, v))
    if mode == "fwd":
        reference = _time(lambda: F.scaled_dot_product_attention(q2, k2, v2, is_causal=True))
    else:
        ref_out = F.scaled_dot_product_attention(q2, k2, v2, is_causal=True)
        reference = _time(lambda: torch.autograd.grad(ref_out, (q2, k2, v2), dout, retain_graph=True))
    best = ", ".join(f"{c} {ms:.4f}" for ms, c in timed[:top] if math.isfinite(ms))
    failed = sum(1 for ms, _ in timed if math.isinf(ms)) - wrong
    print(f"{mode} {case} L={L} E={E} {str(dtype).split('.')[-1]}: current {current_config} "
          f"{current:.4f} ms; best (BLOCK_M, BLOCK_N, warps, stages) {best}; of {len(grid)}, {failed} did not run, "
          f"{wrong} differed from the current config's result; "
          f"SDPA causal {reference:.4f} ms", flush=True)


def _args(E: int, dtype, mode: str, sm) -> tuple:
    block_e = flash._pad(E)
    if mode == "fwd":
        return block_e, dtype, DEVICE == "cuda", sm.skips_blocks
    return block_e, dtype, DEVICE == "cuda"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="hf_causal,alibi")
    p.add_argument("--lengths", default="1024,4096")
    p.add_argument("--head-dims", default="64")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--modes", default="fwd,dkdv,dq", help="fwd, dkdv, dq: the kernel whose config varies")
    p.add_argument("--top", type=int, default=3)
    p.add_argument("--configs", default="", help="only these configs, BLOCK_MxBLOCK_NxWARPSxSTAGES comma-separated "
                   "(64x64x4x3,128x64x4x2), instead of the grid")
    a = p.parse_args(argv)
    configs = [tuple(int(n) for n in c.split("x")) for c in a.configs.split(",") if c] or None
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/flash_configs.py needs a CUDA GPU")
    dtype = getattr(torch, a.dtype)
    for mode in a.modes.split(","):
        for case in a.cases.split(","):
            for L in map(int, a.lengths.split(",")):
                for E in map(int, a.head_dims.split(",")):
                    sweep(case, L, E, dtype, mode, a.top, configs)


if __name__ == "__main__":
    main()
