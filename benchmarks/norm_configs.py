"""A residual add and layer norm (a transformer block's persistent reduction) at the row counts of
the suite's models: eager, Inductor and mini_inductor, and mini_inductor with each persistent
reduction launched at other rows-per-program and warps. Not a test; needs a CUDA GPU.

    PYTHONPATH=. python -m benchmarks norm_configs [--rows 512,3152,8192] [--cols 768] [--dtype float32]
        [--configs 1x4,2x4,4x8]

Session 32's kernel profile of HF GPT-2 (512 tokens of 768, float32, H200) had our residual+layer
norm kernels at 4.5 µs each against Inductor's 3: `pick_config` gave 4 rows a program and 8 warps,
128 programs for 132 SMs. Each line: GPU ms per call (queued behind a sleep) per column.
"""
from __future__ import annotations

import argparse
import dataclasses

import torch
import torch.nn.functional as F

from mini_inductor.timing import bench


def _with_persistent(xblock: int, warps: int):
    """mini_inductor's heuristic, every persistent reduction launched at `xblock` rows and `warps` warps."""
    from mini_inductor.codegen import heuristics, triton as triton_codegen
    original = heuristics.pick_config

    def pick(numel, rnumel, *args, **kwargs):
        config = original(numel, rnumel, *args, **kwargs)
        if rnumel > 1 and config.persistent:
            config = dataclasses.replace(config, XBLOCK=xblock, num_warps=warps)
        return config
    triton_codegen.pick_config = pick
    return lambda: setattr(triton_codegen, "pick_config", original)


def _block(x, r, b, w, beta):
    h = x + r + b
    return F.layer_norm(h, (h.shape[-1],), w, beta), h


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="512,3152,8192")
    p.add_argument("--cols", default="768")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--configs", default="1x2,1x4,1x8,2x4,2x8,4x4,4x8")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/norm_configs.py needs a CUDA GPU")
    import mini_inductor  # noqa: F401  registers the backend
    dtype = getattr(torch, a.dtype)
    configs = [tuple(map(int, c.split("x"))) for c in a.configs.split(",") if c]
    columns = ["eager", "inductor", "mini_inductor"] + [f"{x}x{w}" for x, w in configs]
    print("rows cols dtype | " + " | ".join(columns))
    for cols in map(int, a.cols.split(",")):
        for rows in map(int, a.rows.split(",")):
            g = torch.Generator(device="cuda").manual_seed(0)
            x, r = (torch.randn(rows, cols, device="cuda", dtype=dtype, generator=g) for _ in range(2))
            b, w, beta = (torch.randn(cols, device="cuda", dtype=dtype, generator=g) for _ in range(3))
            line = []
            for col in columns:
                torch._dynamo.reset()
                restore = lambda: None  # noqa: E731
                if col == "eager":
                    fn = _block
                elif col == "inductor":
                    fn = torch.compile(_block)
                else:
                    if col != "mini_inductor":
                        restore = _with_persistent(*map(int, col.split("x")))
                    fn = torch.compile(_block, backend="mini_inductor", options={"graph_cache": False})
                try:
                    ms = bench(lambda: fn(x, r, b, w, beta), warmup=5, samples=7, calls=20, queue_ahead=True).gpu_ms
                finally:
                    restore()
                line.append(f"{ms * 1000:.2f}")
            print(f"{rows} {cols} {a.dtype} | " + " | ".join(line), flush=True)
    print("(µs per call)")


if __name__ == "__main__":
    main()
