"""Attention written out by hand (scores, a modification, softmax, values) against eager, Inductor and ATen's flash attention. Not a test.

    PYTHONPATH=. python -m benchmarks attention_sweep [--variants causal,hf_causal,padding,alibi,softcap,window]
        [--dtypes float16,bfloat16] [--lengths 256,1024,4096] [--head-dim 64] [--modes fwd,fwdbwd]
        [--backends eager,inductor,mini_inductor,flash] [--data-skip-min-scores N] [--out FILE]

Each variant is a function in the style users write (matmul, transpose, masked_fill or where, softmax,
matmul); mini_inductor is expected to find it in the graph (attention/match.py) and run it as one
flash-attention kernel. `flash` is ATen's scaled_dot_product_attention called directly where its own
flash kernel computes the variant (plain and causal): the reference the issue's "within 15%" targets.
Each row: the median milliseconds per call, as `single/queued`: one call at a time (CUDA events, L2
flushed; the host's time per call shows where it exceeds the GPU's) and ten calls queued behind a
sleep kernel (the GPU's time alone); forward or forward + backward, batch 4 x 16 heads; and whether
the output matched the float32 reference as closely as eager's does.
"""
from __future__ import annotations

import argparse
import json
import math

import torch
import torch.nn.functional as F

from mini_inductor.timing import bench

BATCH, HEADS = 4, 16
WINDOW = 256
SOFTCAP = 50.0


def _scores(q, k):
    return (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])


def causal(q, k, v, extra):
    s = _scores(q, k)
    L, S = s.shape[-2:]
    mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v


def hf_causal(q, k, v, extra):
    # HuggingFace's GPT-2: a causal bool buffer registered once, sliced, and where(mask, scores, finfo.min)
    s = _scores(q, k)
    L, S = s.shape[-2:]
    return torch.softmax(torch.where(extra["tril"][:, :, :L, :S], s, torch.finfo(s.dtype).min), dim=-1) @ v


def padding(q, k, v, extra):
    s = _scores(q, k).masked_fill(extra["pad"][:, None, None, :], float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def alibi(q, k, v, extra):
    L, S = q.shape[-2], k.shape[-2]
    pos = torch.arange(S, device=q.device)[None, :] - torch.arange(L, device=q.device)[:, None]
    s = _scores(q, k) + (extra["slopes"][None, :, None, None] * pos).to(q.dtype)
    return torch.softmax(s, dim=-1) @ v


def softcap(q, k, v, extra):
    s = torch.tanh(_scores(q, k) / SOFTCAP) * SOFTCAP
    return torch.softmax(s, dim=-1) @ v


def window(q, k, v, extra):
    L, S = q.shape[-2], k.shape[-2]
    i = torch.arange(L, device=q.device)[:, None]
    j = torch.arange(S, device=q.device)[None, :]
    keep = (j <= i) & (i - j < WINDOW)
    s = torch.where(keep, _scores(q, k), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def plain(q, k, v, extra):
    return torch.softmax(_scores(q, k), dim=-1) @ v


VARIANTS = {"plain": plain, "causal": causal, "hf_causal": hf_causal, "padding": padding, "alibi": alibi,
            "softcap": softcap, "window": window}
FLASH = {"plain": dict(is_causal=False), "causal": dict(is_causal=True), "hf_causal": dict(is_causal=True)}   # what ATen's flash kernel computes


def _inputs(length: int, head_dim: int, dtype, grad: bool):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(BATCH, HEADS, length, head_dim, device="cuda", dtype=dtype, generator=g).requires_grad_(grad)
               for _ in range(3))
    pad = torch.zeros(BATCH, length, dtype=torch.bool, device="cuda")
    pad[:, length - length // 8:] = True
    slopes = 2.0 ** (-8.0 * torch.arange(1, HEADS + 1, device="cuda") / HEADS)
    tril = torch.ones(length, length, dtype=torch.bool, device="cuda").tril()[None, None]
    return q, k, v, {"pad": pad, "slopes": slopes, "tril": tril}


def _run(backend: str, variant: str):
    fn = VARIANTS[variant]
    if backend == "eager":
        return fn
    if backend == "inductor":
        return torch.compile(fn, dynamic=False)
    if backend == "mini_inductor":
        import mini_inductor  # noqa: F401  registers the backend
        return torch.compile(fn, backend="mini_inductor", dynamic=False)
    if backend == "flash":
        if variant not in FLASH:
            return None
        return lambda q, k, v, extra: F.scaled_dot_product_attention(q, k, v, **FLASH[variant])
    raise ValueError(backend)


def measure(backend: str, variant: str, dtype, length: int, head_dim: int, mode: str) -> dict | None:
    run = _run(backend, variant)
    if run is None:
        return None
    torch._dynamo.reset()
    q, k, v, extra = _inputs(length, head_dim, dtype, grad=mode == "fwdbwd")
    grad_out = torch.randn_like(q)

    def call():
        out = run(q, k, v, extra)
        if mode == "fwdbwd":
            out.backward(grad_out)
        return out
    out = call()
    with torch.no_grad():
        ref = VARIANTS[variant](q.float(), k.float(), v.float(), extra)
        eager_err = (VARIANTS[variant](q, k, v, extra).float() - ref).abs().max().item()
    # within 2e-2 of the float32 result, or no further from it than twice eager's own error (ALiBi's
    # bias, rounded to float16 as the variant writes it, moves eager's result past 2e-2 at L 1024)
    correct = bool(torch.allclose(out.float(), ref, atol=2e-2, rtol=2e-2)
                   or (out.float() - ref).abs().max().item() <= 2 * eager_err + 1e-3)
    t = bench(call, warmup=3, samples=10, flush_l2=True)
    # the same calls queued behind a sleep kernel: the GPU's time alone, without the host's per call
    queued = bench(call, warmup=1, samples=5, calls=10, queue_ahead=True)
    return {"backend": backend, "variant": variant, "dtype": str(dtype).split(".")[-1], "length": length,
            "head_dim": head_dim, "mode": mode, "ms": round(t.gpu_ms, 4),
            "queued_ms": round(queued.gpu_ms, 4), "correct": correct}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default="plain,causal,hf_causal,padding,alibi,softcap,window")
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--lengths", default="256,1024,4096")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--modes", default="fwd,fwdbwd")
    p.add_argument("--backends", default="eager,inductor,mini_inductor,flash")
    p.add_argument("--data-skip-min-scores", type=int, default=None,
                   help="set mini_inductor's attention.flash.DATA_SKIP_MIN_SCORES: block tables computed from "
                        "masks given as data from this many scores (B*H*L*S) on; 0: always (default: the module's)")
    p.add_argument("--out")
    a = p.parse_args(argv)
    if a.data_skip_min_scores is not None:
        from mini_inductor.attention import flash
        flash.DATA_SKIP_MIN_SCORES = a.data_skip_min_scores
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/attention_sweep.py needs a CUDA GPU")
    rows = []
    for mode in a.modes.split(","):
        for dtype in a.dtypes.split(","):
            for variant in a.variants.split(","):
                for length in (int(x) for x in a.lengths.split(",")):
                    line = []
                    for backend in a.backends.split(","):
                        try:
                            row = measure(backend, variant, getattr(torch, dtype), length, a.head_dim, mode)
                        except Exception as e:  # noqa: BLE001  (a row that fails is reported, the sweep goes on)
                            row = {"backend": backend, "variant": variant, "dtype": dtype, "length": length,
                                   "mode": mode, "error": f"{type(e).__name__}: {str(e)[:200]}"}
                        if row is not None:
                            rows.append(row)
                            line.append(f"{backend} {row.get('ms', 'ERR')}/{row.get('queued_ms', 'ERR')}"
                                        f"{'' if row.get('correct', True) else ' WRONG'}")
                    print(f"{mode:6} {dtype:8} {variant:8} L={length:5}  " + "  ".join(line), flush=True)
                    for row in rows[len(rows) - len(line):]:
                        if "error" in row:
                            print(f"    {row['backend']}: {row['error']}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
