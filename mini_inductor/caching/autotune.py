"""Autotuning winners on disk: the config mode="max-autotune" picked for a kernel, one file each.

    cache_dir/autotune/ab/ab12….json     behind a content hash line (files.py)
    {"format": 1, "kernel": "triton_poi_…", "meta": {"XBLOCK": 512}, "num_warps": 4, "ms": 0.012,
     "tried": [[meta, num_warps, ms or null], ...]}

    key(fn, args, num_warps, meta)   # kernel source, size arguments, pointer dtypes, the heuristic's
                                     # config, the GPU and Triton's version
    path(cache_dir, key)             # where that winner lives
    read(path, meta)                 # (num_warps, meta), or None: missing, damaged or not fitting
    write(path, record)

Layout timings of the channels-last pass (lowering/layout_timing.py) live in the same folder: what one
convolution (or one layout copy) costs in NCHW and in channels-last, on one device.

    {"format": 1, "measured": "conv2d x=(16, 64, 56, 56) … | cuda NVIDIA H100 … torch 2.11.0",
     "nchw_ms": 0.041, "channels_last_ms": 0.030}

    layout_key(measured)          # the sha256 of that description (the item, the device, its flags, torch)
    read_layout(path, measured)   # (nchw_ms, channels_last_ms), or None: missing, damaged or another item's
    write_layout(path, measured, nchw_ms, channels_last_ms)

Matmul choices of max-autotune (codegen/matmul_autotune.py) live there too: for one matmul template
with its epilogues, on one device, the timings of its configs and of cuBLAS plus the epilogue kernel.

    {"format": 1, "measured": "<template kernel source> | cuda NVIDIA H100 … torch 2.11.0 …",
     "choice": "template", "config": {"BLOCK_M": 128, …, "num_warps": 8, "num_stages": 3},
     "timings": [["template 128x128x64 g8 w8 s3", 0.081], ["cuBLAS + epilogue", 0.102], …]}

    matmul_key(measured)     # the sha256 of that description
    read_matmul(path, measured)   # (choice, config or None, timings), or None: missing, damaged or another's
    write_matmul(path, measured, choice, config, timings)

The tuning itself (candidates, timing, which one wins) is runtime/launch/autotune.py.
"""
from __future__ import annotations

import hashlib
import json

import torch

from . import files as cache_files

FORMAT = 1


def device_description(device: torch.device) -> str:
    """The device as timings kept on disk are keyed: a CUDA GPU's name and compute capability."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda {torch.cuda.get_device_name(index)} {torch.cuda.get_device_capability(index)}"
    return str(device)


def key(fn, args: tuple, num_warps: int, meta: dict) -> str:
    """Kernel source, size arguments, pointer dtypes, the heuristic config, device and Triton version."""
    import triton

    device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda),
                  torch.device("cuda", torch.cuda.current_device()))
    parts = [getattr(fn, "src", repr(fn)), repr(sorted(meta.items())), str(num_warps), device_description(device),
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


def layout_key(measured: str) -> str:
    """The key of one layout timing: `measured` says the item and everything its time depends on."""
    return hashlib.sha256(f"layout timing {FORMAT}\n{measured}".encode()).hexdigest()


def read_layout(path: str, measured: str) -> tuple[float, float] | None:
    """(nchw_ms, channels_last_ms) at `path`, or None: missing, or damaged or not this item's (deleted
    with a warning by cache_files.read; the item is measured again)."""
    return cache_files.read(path, "layout timing", "measuring it again",
                            lambda data: _layout_times(json.loads(data.decode("utf-8")), measured))


def _layout_times(data, measured: str) -> tuple[float, float]:
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("measured") != measured:
        raise ValueError("not a layout timing of this item")
    times = data.get("nchw_ms"), data.get("channels_last_ms")
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t < float("inf") for t in times):
        raise ValueError(f"times {times} are not milliseconds")
    return float(times[0]), float(times[1])


def write_layout(path: str, measured: str, nchw_ms: float, channels_last_ms: float) -> None:
    cache_files.write(path, json.dumps({"format": FORMAT, "measured": measured, "nchw_ms": nchw_ms,
                                        "channels_last_ms": channels_last_ms}, indent=1), "layout timing")


def matmul_key(measured: str) -> str:
    """The key of one matmul choice: `measured` says the kernel, the device, its flags and versions."""
    return hashlib.sha256(f"matmul choice {FORMAT}\n{measured}".encode()).hexdigest()


def read_matmul(path: str, measured: str) -> tuple[str, dict | None, list] | None:
    """(choice, config, timings) at `path`, or None: missing, or damaged or not this matmul's (deleted
    with a warning by cache_files.read; it is timed again)."""
    return cache_files.read(path, "matmul choice", "timing it again",
                            lambda data: _matmul_choice(json.loads(data.decode("utf-8")), measured))


def _matmul_choice(data, measured: str) -> tuple[str, dict | None, list]:
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("measured") != measured:
        raise ValueError("not a timing of this matmul")
    choice, config, timings = data.get("choice"), data.get("config"), data.get("timings")
    if choice not in ("template", "cublas") or not isinstance(timings, list):
        raise ValueError(f"choice {choice!r} is neither 'template' nor 'cublas'")
    if choice == "template" and not (isinstance(config, dict) and config
                                     and all(isinstance(v, int) and v >= 0 for v in config.values())):
        raise ValueError(f"config {config!r} is not ints")
    return choice, (config if choice == "template" else None), [tuple(t) for t in timings]


def write_matmul(path: str, measured: str, choice: str, config: dict | None, timings: list) -> None:
    cache_files.write(path, json.dumps({"format": FORMAT, "measured": measured, "choice": choice,
                                        "config": config, "timings": [list(t) for t in timings]}, indent=1),
                      "matmul choice")
