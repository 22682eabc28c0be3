"""FlexAttention (torch.nn.attention.flex_attention) compiled by Inductor and by mini_inductor. Not a test.

    PYTHONPATH=. python -m benchmarks flex_attention [--variants causal,window,alibi,softcap,document,padding]
        (also alibi_learned: ALiBi with its slopes a parameter, whose gradient fwd+bwd computes;
         relative: a causal mask and a relative-position bias per head, table[h, q_idx - kv_idx + L - 1],
         T5's unbucketed; relative_learned: that table a parameter, its gradient computed too;
         relative_dense: the table expanded to a [H, L, S] bias beforehand, read as bias[h, q_idx, kv_idx])
        [--dtype float16] [--lengths 1024,4096] [--head-dim 64] [--modes fwd,fwdbwd]
        [--backends inductor,mini_inductor,flash] [--out FILE] [--profile] [--flash-option NAME=VALUE]

Each variant is a score_mod and/or mask_mod as users write them for flex_attention, with a block mask
made once (create_block_mask), batch 4 x 16 heads. Inductor compiles flex_attention into its own
Triton template; mini_inductor rewrites it into its generated flash-attention kernel (attention/flex.py)
or, where the modification is not one it can express, runs the op in ATen inside the compiled graph.
`flash` is ATen's scaled_dot_product_attention where its flash kernel computes the variant (causal).
Each row: median milliseconds per call, as `single/queued` (see benchmarks/attention_sweep.py), and
whether the output matched the float32 result of eager flex_attention within 2e-2. `--profile`: then
each row's GPU kernels, µs per call by kernel (torch.profiler over 10 calls).
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from mini_inductor.timing import bench

BATCH, HEADS = 4, 16
WINDOW = 256
SOFTCAP = 50.0


def _variant(name: str, length: int):
    """(score_mod, mask_mod) of a variant at this length; its tensors on the GPU."""
    if name == "causal":
        return None, lambda b, h, i, j: i >= j
    if name == "window":
        return None, lambda b, h, i, j: (i >= j) & (i - j < WINDOW)
    if name == "alibi":
        slopes = 2.0 ** (-8.0 * torch.arange(1, HEADS + 1, device="cuda") / HEADS)
        return (lambda s, b, h, i, j: s + slopes[h] * (j - i)), lambda b, h, i, j: i >= j
    if name == "alibi_learned":   # the slopes a parameter: its gradient too (attention/extra_grads.py)
        slopes = (2.0 ** (-8.0 * torch.arange(1, HEADS + 1, device="cuda") / HEADS)).requires_grad_()
        return (lambda s, b, h, i, j: s + slopes[h] * (j - i)), lambda b, h, i, j: i >= j
    if name in ("relative", "relative_learned", "relative_dense"):   # read at a computed index (score_mod.Gather)
        g = torch.Generator(device="cuda").manual_seed(1)
        table = torch.randn(HEADS, 2 * length - 1, device="cuda", generator=g).requires_grad_(name == "relative_learned")
        if name == "relative_dense":   # the same bias expanded to [H, L, S] beforehand: a plain load per score
            pos = torch.arange(length, device="cuda")
            dense = table[:, pos[:, None] - pos[None, :] + length - 1].contiguous()
            return (lambda s, b, h, i, j: s + dense[h, i, j]), lambda b, h, i, j: i >= j
        return (lambda s, b, h, i, j: s + table[h, i - j + length - 1]), lambda b, h, i, j: i >= j
    if name == "softcap":
        return (lambda s, b, h, i, j: SOFTCAP * torch.tanh(s / SOFTCAP)), None
    if name == "document":
        doc = torch.arange(length, device="cuda") // (length // 4)
        return None, lambda b, h, i, j: doc[i] == doc[j]
    if name == "padding":
        lengths = torch.tensor([length - length // 8 * n for n in range(BATCH)], device="cuda")
        return None, lambda b, h, i, j: j < lengths[b]
    raise ValueError(name)


def _call(backend: str, name: str, length: int):
    score_mod, mask_mod = _variant(name, length)
    block_mask = None if mask_mod is None else create_block_mask(mask_mod, BATCH, HEADS, length, length,
                                                                 device="cuda")

    def attend(q, k, v):
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    if backend == "eager":
        return attend
    if backend == "inductor":
        return torch.compile(attend, dynamic=False)
    if backend == "mini_inductor":
        import mini_inductor  # noqa: F401  registers the backend
        return torch.compile(attend, backend="mini_inductor", dynamic=False)
    if backend == "flash":
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)) if name == "causal" else None
    raise ValueError(backend)


def _kernel_times(call, title: str, calls: int = 10) -> None:
    """Each GPU kernel's time per call of `call`, longest first."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    by_name: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by_name.setdefault(e.name, []).append(e.device_time)
    print(f"  kernels of {title} (µs per call, launches per call):")
    for kname, times in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:12]:
        print(f"    {sum(times) / calls:9.1f}  {len(times) / calls:4.1f}  {kname[:100]}")


def measure(backend: str, name: str, dtype, length: int, head_dim: int, mode: str,
            profile: bool = False) -> dict | None:
    run = _call(backend, name, length)
    if run is None:
        return None
    torch._dynamo.reset()
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(BATCH, HEADS, length, head_dim, device="cuda", dtype=dtype, generator=g)
               .requires_grad_(mode == "fwdbwd") for _ in range(3))
    grad_out = torch.randn_like(q)

    def call():
        out = run(q, k, v)
        if mode == "fwdbwd":
            out.backward(grad_out)
        return out
    out = call()
    with torch.no_grad():
        ref = _call("eager", name, length)(q.float(), k.float(), v.float())
    correct = bool(torch.allclose(out.float(), ref, atol=2e-2, rtol=2e-2))
    t = bench(call, warmup=3, samples=10, flush_l2=True)
    queued = bench(call, warmup=1, samples=5, calls=10, queue_ahead=True)
    if profile:
        _kernel_times(call, f"{backend} {name} L={length} {mode}")
    return {"backend": backend, "variant": name, "dtype": str(dtype).split(".")[-1], "length": length,
            "head_dim": head_dim, "mode": mode, "ms": round(t.gpu_ms, 4), "queued_ms": round(queued.gpu_ms, 4),
            "correct": correct}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default="causal,window,alibi,softcap,document,padding")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--lengths", default="1024,4096")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--modes", default="fwd,fwdbwd")
    p.add_argument("--backends", default="inductor,mini_inductor,flash")
    p.add_argument("--out")
    p.add_argument("--profile", action="store_true", help="each row's GPU kernels, µs per call")
    p.add_argument("--flash-option", action="append", default=[], metavar="NAME=VALUE",
                   help="set mini_inductor.attention.flash.NAME to the Python literal VALUE first")
    a = p.parse_args(argv)
    for option in a.flash_option:
        import ast

        from mini_inductor.attention import flash
        name, value = option.split("=", 1)
        if not hasattr(flash, name):
            raise SystemExit(f"mini_inductor.attention.flash has no {name}")
        setattr(flash, name, ast.literal_eval(value))
        print(f"flash.{name} = {getattr(flash, name)!r}")
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/flex_attention.py needs a CUDA GPU")
    rows = []
    for mode in a.modes.split(","):
        for name in a.variants.split(","):
            for length in (int(x) for x in a.lengths.split(",")):
                line = []
                for backend in a.backends.split(","):
                    try:
                        row = measure(backend, name, getattr(torch, a.dtype), length, a.head_dim, mode,
                                      a.profile)
                    except Exception as e:  # noqa: BLE001  (a row that fails is reported, the sweep goes on)
                        row = {"backend": backend, "variant": name, "length": length, "mode": mode,
                               "error": f"{type(e).__name__}: {str(e)[:300]}"}
                    if row is None:
                        continue
                    rows.append(row)
                    line.append(f"{backend} {row.get('ms', 'ERR')}/{row.get('queued_ms', 'ERR')}"
                                f"{'' if row.get('correct', True) else ' WRONG'}")
                    if "error" in row:
                        line.append(f"[{row['error']}]")
                print(f"{mode:6} {a.dtype:8} {name:9} L={length:5}  " + "  ".join(line), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
