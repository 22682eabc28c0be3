"""DDP and FSDP2 training of a GPT-style model on two GPUs, against eager and Inductor: tokens per
second and peak memory. Not a test.

    PYTHONPATH=. python -m benchmarks distributed [--modes ddp,fsdp2] [--backends eager,inductor,mini_inductor]
                                                 [--steps 30] [--warmup 5] [--size small|medium] [--out FILE]

The model is the catalog's GPT2 (mini_inductor/examples.py), next-token cross-entropy, fp32 (TF32
matmuls), SGD. Two ranks on one host (NCCL), each its own process, started afresh for every
(mode, backend) pair so that peak memory and compile caches are its own:

    ddp     torch.compile(DDP(model)): Dynamo's DDPOptimizer splits the graph at DDP's buckets
    fsdp2   fully_shard on each block and the root, each block compiled (block.compile)

Each row: tokens per second (both ranks, steady state: `--steps` after `--warmup` steps that
compile), the peak GPU memory of rank 0 during the timed steps, the first step's seconds (compiles
included), and the last loss (the backends should agree to a few decimals).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time

import torch

MODES = ("ddp", "fsdp2")
BACKENDS = ("eager", "inductor", "mini_inductor")
# a backend named with this suffix runs with IEEE fp32 matmuls (TF32 off): how far TF32 rounding alone
# moves the last loss ("eager-ieee", "mini_inductor-ieee"; not default rows)
IEEE = "-ieee"
# GPT2(vocab, context, dim, heads, depth), batch per rank
SIZES = {"small": ((8192, 256, 512, 8, 4), 8), "medium": ((8192, 512, 768, 12, 8), 8)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _compile(module, backend: str):
    backend = backend.removesuffix(IEEE)
    if backend == "eager":
        return module
    if backend == "inductor":
        return torch.compile(module)
    import mini_inductor  # noqa: F401  registers the backend
    return torch.compile(module, backend="mini_inductor")


def _wrap(model, mode: str, backend: str):
    backend = backend.removesuffix(IEEE)
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = DDP(model)
        return _compile(ddp, backend), ddp.parameters()
    from torch.distributed.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block)
        if backend == "inductor":
            block.compile()
        elif backend == "mini_inductor":
            import mini_inductor  # noqa: F401  registers the backend
            block.compile(backend="mini_inductor")
    fully_shard(model)
    return model, model.parameters()


def _rank(rank: int, port: int, out: str, mode: str, backend: str, size: str, steps: int, warmup: int) -> None:
    import torch.distributed as dist
    from mini_inductor.examples import GPT2, next_token_loss
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2)
    try:
        torch.backends.cuda.matmul.allow_tf32 = not backend.endswith(IEEE)
        (vocab, context, dim, heads, depth), batch = SIZES[size]
        torch.manual_seed(0)
        model = GPT2(vocab, context, dim, heads, depth).cuda()
        run, params = _wrap(model, mode, backend)
        opt = torch.optim.SGD(params, lr=1e-3)
        gen = torch.Generator(device="cuda").manual_seed(rank)
        data = [torch.randint(0, vocab, (batch, context), device="cuda", generator=gen) for _ in range(4)]

        def step(i: int) -> float:
            tokens = data[i % len(data)]
            loss = next_token_loss(run(tokens), (tokens,))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

        torch.cuda.synchronize()
        began = time.perf_counter()
        step(0)
        torch.cuda.synchronize()
        first = time.perf_counter() - began
        for i in range(1, warmup):
            step(i)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        began = time.perf_counter()
        for i in range(steps):
            loss = step(i)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - began
        row = {"mode": mode, "backend": backend, "size": size, "tokens_per_s": 2 * batch * context * steps / seconds,
               "ms_per_step": seconds / steps * 1e3, "peak_mib": torch.cuda.max_memory_allocated() / 2 ** 20,
               "first_step_s": first, "last_loss": float(loss)}
        if rank == 0:
            with open(out, "w") as f:
                json.dump(row, f)
    finally:
        dist.destroy_process_group()


def measure(mode: str, backend: str, size: str, steps: int, warmup: int) -> dict:
    """One (mode, backend) pair on two fresh ranks; rank 0's row, or an error row."""
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "row.json")
        try:
            mp.spawn(_rank, args=(_free_port(), out, mode, backend, size, steps, warmup), nprocs=2, join=True)
            with open(out) as f:
                return json.load(f)
        except Exception as e:  # noqa: BLE001  (a failed pair is a row of the table, not the end of the run)
            return {"mode": mode, "backend": backend, "size": size, "error": f"{type(e).__name__}: {e}"[-400:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="distributed.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {MODES}")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"comma-separated, of {BACKENDS}, each also with the suffix {IEEE} (TF32 off)")
    parser.add_argument("--size", default="small", choices=sorted(SIZES))
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="steps before timing (the first compiles)")
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if torch.cuda.device_count() < 2:
        print("distributed.py: needs two CUDA GPUs; nothing measured")
        return 0
    rows = []
    print(f"{'mode':6s} {'backend':14s} {'tokens/s':>10s} {'ms/step':>8s} {'peak MiB':>9s} {'1st step s':>10s} {'loss':>8s}")
    for mode in args.modes.split(","):
        for backend in args.backends.split(","):
            row = measure(mode, backend, args.size, args.steps, args.warmup)
            rows.append(row)
            if "error" in row:
                print(f"{mode:6s} {backend:14s} error: {row['error']}")
            else:
                print(f"{mode:6s} {backend:14s} {row['tokens_per_s']:10.0f} {row['ms_per_step']:8.2f} "
                      f"{row['peak_mib']:9.0f} {row['first_step_s']:10.1f} {row['last_loss']:8.4f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"size": args.size, "gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
