"""Profile one built-in example under eager and mini_inductor: the GPU kernels that take the time.

    PYTHONPATH=. python3 benchmarks/profile_example.py --example transformer_block --dtype float16
"""
from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import mini_inductor
from mini_inductor import examples, metrics


def _profile(fn, inputs, label: str, rows: int) -> None:
    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn(*inputs)
        torch.cuda.synchronize()
    print(f"\n=== {label} (10 calls) ===")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--example", default="transformer_block", choices=sorted(examples.EXAMPLES))
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--rows", type=int, default=15)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    model, inputs = examples.EXAMPLES[args.example](torch.device("cuda"), dtype)
    with torch.no_grad():
        compiled = torch.compile(model, backend="mini_inductor")
        compiled(*inputs)
        for rec in metrics.compiled_graphs:
            print(rec.summary(), rec.source_path)
        _profile(model, inputs, "eager", args.rows)
        _profile(compiled, inputs, "mini_inductor", args.rows)


if __name__ == "__main__":
    main()
