"""Every file mini_inductor keeps under its cache dir is written and read back through here, and laid out here.

    cache_dir/graphs/ab/ab12….json     compiled graphs, keyed on the ATen graph     (graph_cache.py)
    cache_dir/per_size/ab/ab12….json   dynamic graphs compiled per size, and why    (graph_cache.py)
    cache_dir/front/ab/ab12….json      Dynamo graph → its compiled graph(s)         (front_cache.py)
    cache_dir/ab/mi_ab12….py           generated modules, named after their source  (modules.py)
    cache_dir/ab/mi_ab12….*.code       their bytecode                              (modules.py)
    cache_dir/kernels/….json           compiled Triton kernels' records             (kernel_store.py)
    cache_dir/autotune/ab/ab12….json   autotuning winners, layout timings          (autotune.py)

    write(path, payload, what)                 # a temporary file in the same folder, then os.replace:
                                               # a reader sees the old file or the new one, never half
    read(path, what, instead, parse)           # parse(payload) once its hash matched, or None
    read(path, what, instead, expect_sha256=h) # a content-addressed file (a generated module, named
                                               # after the hash of its source): no header line

A keyed entry (compiled graphs, front cache entries, generated modules' bytecode, autotuning winners,
layout timings, compiled-kernel records) starts with one line giving the sha256 of the rest of the file:

    # mini_inductor sha256=9f2c…
    {"format": 1, …}

A file without that line, whose bytes do not hash to it, or whose payload `parse` rejects (bad UTF-8,
bad JSON, bytecode that does not unmarshal, an old format) is a warning naming the file; the file is deleted and the
caller builds the entry again. Nothing is parsed, unpickled or executed before its hash matched.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import uuid
from typing import Any, Callable

import torch

log = logging.getLogger("mini_inductor")

HEADER = b"# mini_inductor sha256="
KERNELS = "kernels"               # the kernel store's folder under cache_dir (flat: its own names)
LAYOUT = {                        # what each folder under cache_dir holds (caching.describe)
    "graphs": "compiled graphs, keyed on the ATen graph (graph_cache.py)",
    "per_size": "dynamic graphs the symbolic compile could not take, and why (graph_cache.py)",
    "front": "Dynamo graph → its compiled inference graph, or forward and backward (front_cache.py)",
    "modules": "generated modules and their bytecode, at the top: ab/mi_ab12….py (modules.py)",
    KERNELS: "compiled Triton kernels' records (kernel_store.py)",
    "autotune": "autotuning winners and convolution layout timings (autotune.py)",
}


def keyed_path(cache_dir: str, folder: str, key: str, *, prefix: str = "", suffix: str = ".json") -> str:
    """Where the entry `key` of `folder` lives: cache_dir/folder/<first two hex digits>/prefix+key+suffix
    (folder "" for generated modules, which sit at the top)."""
    return os.path.join(cache_dir, folder, key[:2], f"{prefix}{key}{suffix}")


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def framed(payload: bytes | str) -> bytes:
    """`payload` with its hash line in front: what `write` puts in a keyed entry's file."""
    data = payload.encode("utf-8") if isinstance(payload, str) else payload
    return HEADER + sha256(data).encode("ascii") + b"\n" + data


def write(path: str, payload: bytes | str, what: str, *, frame: bool = True) -> str | None:
    """Write `payload` (str: UTF-8) to `path` atomically, behind its hash line unless `frame` is False
    (content-addressed files). The path, or None on an OS error (a warning naming `what`: a cache that
    cannot be written only costs a later compile)."""
    data = framed(payload) if frame else (payload.encode("utf-8") if isinstance(payload, str) else payload)
    # unique per process, thread and call: two ranks writing one entry never share a temporary file
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("mini_inductor: cannot write the %s %s (%s)", what, path, e)
        try:
            os.remove(tmp)
        except OSError:
            pass
        return None
    return path


def read(path: str, what: str, instead: str, parse: Callable[[bytes], Any] = bytes, *,
         expect_sha256: str | None = None) -> Any:
    """`parse(payload)` of the file at `path`, or None when it is missing or damaged.

    `expect_sha256`: the file is content-addressed and must hash to this (no hash line); otherwise its hash
    line must match the rest. A damaged file (no or a wrong hash, or `parse` raised) is logged as a
    warning naming `what`, `path` and what happens `instead`, and deleted."""
    try:
        with open(path, "rb") as f:
            data = f.read()
            identity = _identity(os.fstat(f.fileno()))
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("mini_inductor: cannot read the %s %s (%s); %s", what, path, e, instead)
        return None
    payload, problem = _verified(data, expect_sha256)
    if problem is None:
        try:
            return parse(payload)
        except Exception as e:  # noqa: BLE001  (json, UTF-8, pickle: any failure means a damaged entry)
            problem = f"{type(e).__name__}: {e}"
    drop(path, what, problem, instead, identity)
    return None


def drop(path: str, what: str, problem: str, instead: str, identity: tuple | None = None) -> None:
    """Warn that the `what` at `path` is damaged (`problem`) and delete it. `identity` (from the read):
    delete only that file, not one another process has written there since."""
    log.warning("mini_inductor: ignoring a corrupt %s %s (%s); deleting it, %s", what, path, problem, instead)
    try:
        if identity is None or _identity(os.stat(path)) == identity:
            os.remove(path)
    except OSError:
        pass   # gone already, or replaced by a good one


def _verified(data: bytes, expected: str | None) -> tuple[bytes, str | None]:
    """(the payload, None) when `data` passes its check, else (b"", what is wrong)."""
    if expected is not None:
        actual = sha256(data)
        return (data, None) if actual == expected else (b"", f"content hash {actual[:16]}…, its name says "
                                                              f"{expected[:16]}…")
    line, sep, payload = data.partition(b"\n")
    if not sep or not line.startswith(HEADER):
        return b"", "no content hash line (damaged, or not written by this mini_inductor)"
    stated = line[len(HEADER):].decode("ascii", "replace")
    actual = sha256(payload)
    if stated != actual:
        return b"", f"content hash {actual[:16]}…, the file says {stated[:16]}…"
    return payload, None


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


# ── what every cache key includes ────────────────────────────────────────────────────────────
@functools.lru_cache(None)
def versions() -> tuple[str, ...]:
    """torch's and Triton's versions and a hash of mini_inductor's source files."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    return (f"torch {torch.__version__}", f"triton {triton_version}", f"mini_inductor {package_source_hash()}")


@functools.lru_cache(None)
def package_source_hash() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the package, not this folder
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as fh:
                    h.update(fh.read() + b"\0")
    return h.hexdigest()[:16]
