"""Autotuning winners on disk: the config mode="max-autotune" picked for a kernel, one file each.

    cache_dir/autotune/ab/ab12….json     behind a content hash line (files.py)
    {"format": 1, "kernel": "triton_poi_…", "meta": {"XBLOCK": 512}, "num_warps": 4, "ms": 0.012,
     "tried": [[meta, num_warps, ms or null], ...]}

    key(fn, args, num_warps, meta)   # kernel source, size arguments, pointer dtypes, the heuristic's
                                     # config, the GPU and Triton's version
    path(cache_dir, key)             # where that winner lives
    read(path, meta)                 # (num_warps, meta), or None: missing, damaged or not fitting
    write(path, record)

The tuning itself (candidates, timing, which one wins) is runtime/launch/autotune.py.
"""
from __future__ import annotations

import hashlib
import json

import torch

from . import files as cache_files

FORMAT = 1


def key(fn, args: tuple, num_warps: int, meta: dict) -> str:
    """Kernel source, size arguments, pointer dtypes, the heuristic config, device and Triton version."""
    import triton

    device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda),
                  torch.device("cuda", torch.cuda.current_device()))
    parts = [getattr(fn, "src", repr(fn)), repr(sorted(meta.items())), str(num_warps),
             torch.cuda.get_device_name(device), str(torch.cuda.get_device_capability(device)),
             triton.__version__]
    parts += [str(a.dtype) if isinstance(a, torch.Tensor) else repr(a) for a in args]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def path(cache_dir: str, key: str) -> str:
    return cache_files.keyed_path(cache_dir, "autotune", key)


def read(path: str, meta: dict) -> tuple[int, dict] | None:
    """(num_warps, meta) of the winner at `path`, or None: missing, or damaged or not fitting this kernel
    (deleted with a warning by cache_files.read; the kernel is tuned again)."""
    return cache_files.read(path, "autotuning entry", "tuning the kernel again",
                            lambda data: _winner(json.loads(data.decode("utf-8")), meta))


def _winner(data, meta: dict) -> tuple[int, dict]:
    if not isinstance(data, dict):
        raise ValueError("not an object")
    best, warps = data.get("meta"), data.get("num_warps")
    if (data.get("format") != FORMAT or not isinstance(best, dict) or best.keys() != meta.keys()
            or not all(isinstance(v, int) and v > 0 for v in best.values()) or not isinstance(warps, int)):
        raise ValueError(f"does not fit this kernel (block sizes {list(meta)})")
    return warps, {k: best[k] for k in meta}   # the kernel's own order of block-size arguments


def write(path: str, record: dict) -> None:
    cache_files.write(path, json.dumps(record, indent=1), "autotuning entry")
