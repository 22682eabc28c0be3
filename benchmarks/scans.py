"""cumsum over rows of several lengths: eager, the masked square, the scan kernel (static and dynamic), GPU
time per call. Not a test; needs a CUDA GPU (--cpu-check: tiny sizes in Triton's interpreter, no timing).

    PYTHONPATH=. python -m benchmarks scans [--rows 4096] [--lengths 16,64,128,256,512,1024,8192,65536]
        [--dtype float32] [--ops cumsum,fused]

lowering/scan_lowerings.py lowers a scan of at most MAX_SQUARE_LENGTH (16 since session 37; 256 before) elements as a reduction over a
masked square (n² work, but an ordinary reduction), and longer or symbolic ones as a scan kernel
(tl.cumsum along a row held whole, or block by block with a carry). The crossover was set without a GPU;
this gives the numbers to set it by. Columns, GPU ms per call (queued behind a sleep):

    eager          ATen's cumsum
    square         mini_inductor, the masked square forced (lengths up to --square-max)
    scan           mini_inductor, the scan kernel forced (static sizes: persistent up to 32768)
    scan_dynamic   mini_inductor under dynamic=True (the length a symbol: always looped)

`fused` times `relu(cumsum(x * 2) + 1)`, where the producer and the consumer share the scan's kernel.
"""
from __future__ import annotations

import argparse
import contextlib

import torch

OPS = {"cumsum": lambda x: torch.cumsum(x, -1), "fused": lambda x: torch.relu(torch.cumsum(x * 2, -1) + 1)}
# the variants differ in a module constant only: no cache may serve one's compile to another
OPTIONS = {"graph_cache": False, "front_cache": False}


@contextlib.contextmanager
def _square_up_to(length: int):
    from mini_inductor.lowering import scan_lowerings
    original = scan_lowerings.MAX_SQUARE_LENGTH
    scan_lowerings.MAX_SQUARE_LENGTH = length
    try:
        yield
    finally:
        scan_lowerings.MAX_SQUARE_LENGTH = original


def _compiled(fn, x, *, square: bool, dynamic: bool):
    """fn compiled by mini_inductor with the masked square or the scan kernel, and called once (compiled).
    Each variant compiles a copy of fn's code: Dynamo keeps its compiles on the code object, so the
    variants' compiles stand side by side (a reset between them would recompile each at its next call,
    under the constant as it is then)."""
    import types

    import mini_inductor  # noqa: F401  registers the backend
    from mini_inductor.caching import PROCESS
    PROCESS.graphs.clear()   # its key is the ATen graph's, which the variants share
    kind = f"{'square' if square else 'scan'}{'_dynamic' if dynamic else ''}_{x.shape[-1]}"
    own = types.FunctionType(fn.__code__.replace(co_name=kind), fn.__globals__, kind)
    with _square_up_to(x.shape[-1] if square else 1):
        compiled = torch.compile(own, backend="mini_inductor", dynamic=dynamic, options=OPTIONS)
        compiled(x)
    return compiled


def variants(fn, x, square_max: int) -> dict:
    out = {"eager": fn}
    if x.shape[-1] <= square_max:
        out["square"] = _compiled(fn, x, square=True, dynamic=False)
    out["scan"] = _compiled(fn, x, square=False, dynamic=False)
    out["scan_dynamic"] = _compiled(fn, x, square=False, dynamic=True)
    return out


def cpu_check() -> None:
    """Each variant of each op compiles and matches eager at tiny sizes (Triton's interpreter)."""
    from mini_inductor import metrics
    for name, fn in OPS.items():
        for n in (8, 300):
            x = torch.randn(3, n)
            want = fn(x.double()).float()
            metrics.reset()
            for variant, call in variants(fn, x, square_max=256).items():
                err = (call(x) - want).abs().max().item()
                assert err < 1e-3, (name, n, variant, err)
                print(f"{name} n={n} {variant}: max error {err:.1e}")
            # compiled in order, and only once: square (where timed), scan, scan_dynamic
            scans = ["tl.cumsum(" in open(r.source_path).read() for r in metrics.compiled_graphs]
            assert scans == [False] * (n <= 256) + [True, True], (name, n, scans)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--lengths", default="16,64,128,256,512,1024,8192,65536")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--ops", default="cumsum,fused")
    p.add_argument("--square-max", type=int, default=1024, help="longest row the masked square is timed at")
    p.add_argument("--cpu-check", action="store_true", help="no GPU: compile every variant and compare with eager")
    a = p.parse_args(argv)
    if a.cpu_check:
        cpu_check()
        return
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/scans.py needs a CUDA GPU (--cpu-check: compile the variants on the CPU)")
    from mini_inductor.timing import bench
    dtype = getattr(torch, a.dtype)
    for name in a.ops.split(","):
        fn = OPS[name]
        for n in map(int, a.lengths.split(",")):
            x = torch.randn(a.rows, n, device="cuda", dtype=dtype)
            line = [f"{name} {a.rows}x{n} {a.dtype}:"]
            for variant, call in variants(fn, x, a.square_max).items():
                ms = bench(lambda: call(x), warmup=5, samples=7, calls=10, queue_ahead=True).gpu_ms
                line.append(f"{variant} {ms:.4f} ms")
            print(" ".join(line), flush=True)


if __name__ == "__main__":
    main()
