"""mode="max-autotune": at a kernel's first launch, time a few configs and keep the fastest, on disk.

    site(*args, num_warps=4, XBLOCK=1024)             # a generated launch, with the heuristic's config
      → Autotuner.tune(fn, grid, args, 4, {"XBLOCK": 1024})
          a winner on disk?   cache_dir/autotune/ab/ab12….json   (kernel source, sizes, dtypes, device:
                                                               caching/autotune.py)
          else: the candidates (autotune_candidates below), compiled concurrently,
                each timed the do_bench way on copies of the arguments (kernels that write in
                place or accumulate leave the real tensors alone); the fastest written to disk
      → (grid, num_warps, meta) that the call site launches from then on

XBLOCK is tuned only where the grid is ceil(xnumel / XBLOCK), the rule our 1-D launches follow;
for other grids only num_warps varies. Nothing is tuned while a CUDA graph is being captured.
"""
from __future__ import annotations

import logging
import math
from typing import Any

import torch

from ...caching import autotune as autotune_cache
from .precompile import CompileJob, compile_all

log = logging.getLogger("mini_inductor.autotuning")


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def autotune_candidates(xnumel: int, rnumel: int | None, meta: dict[str, int], num_warps: int, *,
                        looped: bool, tune_blocks: bool, limit: int = 8) -> list[tuple[dict[str, int], int]]:
    """Configs `mode="max-autotune"` times for one kernel: (block sizes, num_warps), the heuristic's first.

    `meta` is the heuristic's XBLOCK (and RBLOCK for reductions). A persistent reduction keeps its
    RBLOCK (the whole row must fit in one block); a looped one may trade RBLOCK for XBLOCK. Without
    `tune_blocks` (a grid that does not follow XBLOCK) only num_warps varies.
    """
    default = (dict(meta), num_warps)
    found = [default]

    def add(blocks: dict[str, int], warps: int) -> None:
        cand = ({k: blocks.get(k, v) for k, v in meta.items()}, warps)
        if cand not in found and len(found) <= limit:
            found.append(cand)

    xcap = next_power_of_2(max(1, xnumel))
    if not tune_blocks or not meta.keys() <= {"XBLOCK", "RBLOCK"}:
        elements = 1
        for v in meta.values():
            elements *= v
        for warps in (num_warps // 2, num_warps * 2, num_warps * 4):
            if 1 <= warps <= 16 and warps * 32 <= max(32, elements):
                add({}, warps)
        return found
    if "RBLOCK" not in meta:                                   # pointwise
        for xblock in (256, 512, 1024, 2048):
            xblock = min(xblock, xcap)
            for warps in (max(1, xblock // 256), max(1, xblock // 128)):
                add({"XBLOCK": xblock}, min(warps, 16))
        return found
    if not looped:                                             # persistent: RBLOCK stays
        rblock = meta["RBLOCK"]
        xblocks = [x for x in (1, 2, 4, 8, 16, 32, 64) if x <= xcap and x * rblock <= 16384]
        for xblock in xblocks:
            base = max(1, min(16, xblock * rblock // 256))
            for warps in (base, min(16, base * 2)):
                add({"XBLOCK": xblock}, warps)
        return found
    rcap = next_power_of_2(max(1, rnumel or 1))                # looped
    for xblock, rblock in ((1, 2048), (1, 4096), (1, 1024), (2, 1024), (4, 512), (8, 256), (16, 128), (32, 64)):
        if xblock <= xcap and rblock <= max(rcap, 64):
            add({"XBLOCK": xblock, "RBLOCK": rblock}, 8 if xblock * rblock >= 2048 else 4)
    return found


class Autotuner:
    """Picks and remembers each kernel's config (the winners on disk: caching/autotune.py). Key method: `tune`.

    `tuned` counts kernels benchmarked in this process, `from_disk` those whose winner was read back.
    """

    def __init__(self, cache_dir: str, threads: int, warmup_ms: float = 5.0, rep_ms: float = 25.0):
        self.cache_dir = cache_dir
        self.threads = max(1, threads)
        self.warmup_ms, self.rep_ms = warmup_ms, rep_ms
        self.tuned = 0
        self.from_disk = 0

    def tune(self, fn, grid: tuple, args: tuple, num_warps: int, meta: dict) -> tuple[tuple, int, dict]:
        """The (grid, num_warps, meta) to launch `fn` with; (grid, num_warps, meta) unchanged when untunable."""
        default = (grid, num_warps, dict(meta))
        if torch.cuda.is_current_stream_capturing():
            return default
        sizes = _size_args(fn, args)
        xnumel = sizes.get("xnumel")
        tune_blocks = (xnumel is not None and "XBLOCK" in meta and grid[1:] == (1, 1)
                       and grid[0] == math.ceil(xnumel / meta["XBLOCK"]))
        path = autotune_cache.path(self.cache_dir, autotune_cache.key(fn, args, num_warps, meta))
        winner = autotune_cache.read(path, meta)
        if winner is not None:
            self.from_disk += 1
            warps, best = winner
            return self._grid(grid, xnumel, best, tune_blocks), warps, best
        looped = "RBLOCK" in meta and "for roffset" in getattr(fn, "src", "")
        candidates = autotune_candidates(xnumel or 1, sizes.get("rnumel"), meta, num_warps,
                                         looped=looped, tune_blocks=tune_blocks)
        copies = _copy_args(args)
        jobs = [CompileJob(fn, copies, dict(m, num_warps=w)) for m, w in candidates]
        compiled = compile_all(jobs, self.threads)
        timings = []
        for (cand_meta, warps), kernel in zip(candidates, compiled):
            ms = math.inf
            if kernel is not None:
                g = self._grid(grid, xnumel, cand_meta, tune_blocks)
                ms = self._time(fn, g, copies, warps, cand_meta)
            timings.append((ms, cand_meta, warps))
        del copies
        best_ms, best, warps = min(timings, key=lambda t: t[0])
        if not math.isfinite(best_ms):
            return default
        self.tuned += 1
        log.info("%s: %s num_warps=%d, %.4f ms (heuristic %s num_warps=%d: %.4f ms; %d configs)",
                 _name(fn), best, warps, best_ms, meta, num_warps, timings[0][0], len(timings))
        autotune_cache.write(path, {"format": autotune_cache.FORMAT, "kernel": _name(fn), "meta": best,
                                    "num_warps": warps, "ms": best_ms,
                                    "tried": [[m, w, t if math.isfinite(t) else None] for t, m, w in timings]})
        return self._grid(grid, xnumel, best, tune_blocks), warps, best

    @staticmethod
    def _grid(grid: tuple, xnumel, meta: dict, tune_blocks: bool) -> tuple:
        return (math.ceil(xnumel / meta["XBLOCK"]), 1, 1) if tune_blocks else grid

    def _time(self, fn, grid, args, num_warps: int, meta: dict) -> float:
        from triton.testing import do_bench

        def launch():
            fn[grid](*args, num_warps=num_warps, **meta)
        try:
            return float(do_bench(launch, warmup=self.warmup_ms, rep=self.rep_ms, return_mode="median"))
        except Exception as e:  # noqa: BLE001  (a config that fails to launch just loses)
            log.debug("%s %s num_warps=%d failed: %s", _name(fn), meta, num_warps, e)
            return math.inf


def _name(fn) -> str:
    return str(getattr(fn, "__name__", fn))


def _size_args(fn, args: tuple) -> dict[str, Any]:
    """The non-pointer arguments by parameter name (xnumel, rnumel, ...)."""
    names = getattr(fn, "arg_names", [])
    return {n: a for n, a in zip(names, args) if not isinstance(a, torch.Tensor)}


def _copy_args(args: tuple) -> tuple:
    """Each tensor copied with its whole storage span (same sizes and strides, aligned); tensors passed
    twice stay one copy. Candidates run on these, so the real outputs and inputs are left alone."""
    copies: dict[int, torch.Tensor] = {}
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if id(a) not in copies:
                span = 0 if a.numel() == 0 else 1 + sum((s - 1) * st for s, st in zip(a.shape, a.stride()))
                flat = torch.empty(span, dtype=a.dtype, device=a.device)
                if span:
                    flat.copy_(a.as_strided((span,), (1,), a.storage_offset()))
                copies[id(a)] = flat.as_strided(a.shape, a.stride())
            out.append(copies[id(a)])
        else:
            out.append(a)
    return tuple(out)

