"""The fuzzer's programs, their kernels compiled for an H100 (sm_90) on the CPU.

    TRITON_INTERPRET=1 python -m tests.fuzz.sm90 --n 100 --seed 7 [--autograd] [--dynamic] [--size N] [--weight F=W]

Each program runs compiled by mini_inductor in Triton's interpreter (its numerics are the main
fuzzer's business); every kernel it launches is recorded, and at the end the distinct ones are
compiled with Triton's compiler in one process (tests/sm90.py). A kernel the interpreter ran but the
compiler refuses would fail on the GPU: each is printed with the programs that launched it.
Exit status 1 if any does not compile.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--autograd", action="store_true")
    ap.add_argument("--dynamic", action="store_true")
    ap.add_argument("--size", type=int, default=6, help="largest size of an input dim")
    ap.add_argument("--weight", action="append", default=[], metavar="FAMILY=W")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("run it with TRITON_INTERPRET=1: the programs run in Triton's interpreter")
    if args.dynamic:
        os.environ["MINI_FUZZ_DYNAMIC"] = "1"
    if args.weight:
        os.environ["MINI_FUZZ_WEIGHTS"] = ",".join(args.weight)

    import torch

    from tests.sm90 import compile_jobs, launch_job, launches
    from .execute import _backend, _dynamic_args
    from .generate import generate, runs
    from .program import load
    from .sizes import other_size_sets

    began = time.monotonic()
    jobs: dict[str, dict] = {}
    launched_by: dict[str, list[int]] = {}
    ran = 0
    for index in range(args.start, args.start + args.n):
        try:
            program = generate(args.seed, index, args.autograd, args.size, other_sizes=other_size_sets())
        except RuntimeError:
            continue
        make_inputs, f = load(program)
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=_backend("mini_inductor"), fullgraph=True,
                                 **_dynamic_args("mini_inductor"))
        with launches() as seen:   # what fails to run is the main fuzzer's finding
            ran += runs(compiled, make_inputs, args.autograd)
            for k in range(1, program.size_sets + 1):    # --dynamic: what the other sizes compile anew too
                runs(compiled, lambda device, k=k: make_inputs(device, k), args.autograd)
        for launch in seen:
            job = launch_job(*launch)
            key = repr(sorted(job.items()))
            jobs.setdefault(key, job)
            launched_by.setdefault(key, []).append(index)
        done = index + 1 - args.start
        if done % 25 == 0 or done == args.n:
            print(f"{done}/{args.n} programs, {len(jobs)} distinct kernels, {time.monotonic() - began:.0f} s",
                  file=sys.stderr, flush=True)
    keys = list(jobs)
    results = compile_jobs([jobs[k] for k in keys])
    failed = [(k, error) for k, error in zip(keys, results) if error]
    print(f"{args.n} programs of seed {args.seed} ({ran} ran), {len(keys)} distinct kernels compiled for sm_90, "
          f"{len(failed)} failed, {time.monotonic() - began:.0f} s")
    for k, error in failed:
        programs = sorted(set(launched_by[k]))
        print(f"\n{jobs[k]['name']} ({jobs[k]['path']}), programs {programs[:10]}:\n{error}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
