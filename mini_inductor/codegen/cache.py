"""Generated modules on disk, keyed by a hash of their source, and loaded once per process."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import types

_loaded: dict[str, types.ModuleType] = {}


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:32]


def write_module(source: str, cache_dir: str) -> str:
    """Write `source` under cache_dir (atomically) and return its path."""
    key = source_hash(source)
    folder = os.path.join(cache_dir, key[:2])
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"mi_{key}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    return path


def load_module(source: str, cache_dir: str) -> tuple[types.ModuleType, str]:
    """The module for `source`: imported once per process (Triton compiles its kernels lazily)."""
    key = source_hash(source)
    path = write_module(source, cache_dir)
    if key not in _loaded:
        name = f"mini_inductor_generated.mi_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _loaded[key] = module
    return _loaded[key], path


def clear() -> None:
    _loaded.clear()
