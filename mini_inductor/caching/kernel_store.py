"""Compiled Triton kernels reloaded from disk without going through Triton's JIT.

A warm start already has every binary in Triton's cache, but reaching it through `JITFunction`
costs more than the load itself: the first lookup of the process hashes Triton's own package and
its 500 MB shared library (`triton_key`), and each kernel's key is computed again from its source.
On a warm start that was most of our first call.

So when a kernel is compiled (runtime/launch/precompile.py), its specialization is written down here, under
`cache_dir/kernels/<key>.json`: the files Triton's cache keeps for it (binary and metadata), its hash
and the signature and constants its launcher needs. The key is a hash of the kernel's source, the
launch spec (argument dtypes and sizes, block sizes, warps), the GPU's compute capability and the
torch/Triton/mini_inductor versions. A later process rebuilds the `CompiledKernel` straight from
those files and hands it to the launch site (runtime/launch/launcher.py), which launches it as it would a
kernel Triton compiled: the same binary, found by a cheaper path.

Anything missing (Triton's cache was cleared, a file moved) is a miss: that kernel compiles through
Triton as before. A record is written behind a content hash (caching/files.py): a damaged one is
deleted with a warning, and is a miss too.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any

import torch

from . import files as cache_files

log = logging.getLogger("mini_inductor.schedule")

_PLAIN = (int, float, bool, str, type(None))


def spec_key(args, num_warps: int, meta: dict) -> tuple:
    """What identifies one compiled specialization at a launch site: dtypes of the pointer arguments,
    values of the others, warps, block sizes. `args` are tensors or (for precompiling) torch dtypes."""
    return (tuple(a.dtype if isinstance(a, torch.Tensor) else a for a in args), num_warps,
            tuple(sorted(meta.items())))


def _file_key(fn, key: tuple, device: int) -> str:
    cap = torch.cuda.get_device_capability(device)
    text = "\n".join([*cache_files.versions(), f"sm {cap}", getattr(fn, "src", ""), repr(key)])
    return hashlib.sha256(text.encode()).hexdigest()


def _path(store_dir: str, fn, key: tuple, device: int) -> str:
    return os.path.join(store_dir, _file_key(fn, key, device)[:40] + ".json")


def save(store_dir: str, fn, key: tuple, kernel: Any, device: int) -> bool:
    """Write down where Triton keeps `kernel` (a CompiledKernel of `fn` for `key`); False if it can't be."""
    try:
        src = kernel.src
        constants = [[list(k), v] for k, v in src.constants.items()]
        if not all(isinstance(v, _PLAIN) for _, v in constants) or not isinstance(kernel.metadata_group, dict):
            return False
        record = {"name": kernel.name, "hash": kernel.hash, "group": dict(kernel.metadata_group),
                  "signature": dict(src.signature), "constants": constants, "attrs": _attrs(src)}
        path = _path(store_dir, fn, key, device)
        return cache_files.write(path, json.dumps(record), "compiled-kernel record") is not None
    except Exception as e:  # noqa: BLE001  (not being able to remember a kernel only costs a later compile)
        log.debug("not storing compiled kernel %s: %s: %s", getattr(fn, "__name__", fn), type(e).__name__, e)
        return False


def _attrs(src) -> list:
    """The ASTSource's attrs (alignment specializations), JSON-friendly; [] when they are not plain."""
    try:
        out = [[list(k), [list(x) for x in v]] for k, v in src.attrs.items()]
        json.dumps(out)
        return out
    except Exception:  # noqa: BLE001
        return []


def load(store_dir: str, fn, key: tuple, device: int):
    """The CompiledKernel of `fn` for `key` rebuilt from Triton's cache files, or None."""
    path = _path(store_dir, fn, key, device)
    record = cache_files.read(path, "compiled-kernel record", "compiling the kernel through Triton",
                              lambda data: _record(json.loads(data.decode("utf-8"))))
    if record is None:
        return None
    try:
        group = record["group"]
        if not all(os.path.exists(p) for p in group.values()):
            return None
        from triton.compiler.compiler import ASTSource, CompiledKernel
        constants = {tuple(k): v for k, v in record["constants"]}
        attrs = {tuple(k): [tuple(x) for x in v] for k, v in record.get("attrs", [])}
        src = ASTSource(fn, record["signature"], constants, attrs)
        kernel = CompiledKernel(src, group, record["hash"])
        if kernel.name != record["name"]:
            return None
        return kernel
    except Exception as e:  # noqa: BLE001  (a record Triton's files no longer match is a miss)
        log.debug("cannot reload compiled kernel %s from %s: %s: %s", getattr(fn, "__name__", fn), path,
                  type(e).__name__, e)
        return None


def _record(data) -> dict:
    if not isinstance(data, dict) or not isinstance(data.get("group"), dict):
        raise ValueError("not a kernel record")
    return data


def attach(fn, key: tuple, kernel) -> None:
    """Give the launch sites of `fn` the compiled kernel for `key` (runtime/launch/launcher.py looks here)."""
    table = getattr(fn, "_mini_inductor_compiled", None)
    if table is None:
        table = {}
        try:
            fn._mini_inductor_compiled = table
        except AttributeError:
            return
    table[key] = kernel


def attached(fn, key: tuple):
    table = getattr(fn, "_mini_inductor_compiled", None)
    return None if table is None else table.get(key)
