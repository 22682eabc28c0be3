"""Generated modules on disk, named after a hash of their source, and loaded once per process.

    cache_dir/ab/mi_ab12….py                 the source (its name is its hash)
    cache_dir/ab/mi_ab12….cpython-311.code   its bytecode, behind a hash line (files.py)

The module runs from the source in memory (the verified graph cache entry, or fresh codegen), never from
the .py file: that file is what tracebacks, Triton's `inspect.getsource` and people read. A file that does
not hash to its name (truncated, edited) is reported, deleted and written again. The bytecode spares a warm
start compiling the source again (0.5 s for 10k lines); it is used only when its hash matches and it says
it was compiled from this very source, at this path, by this Python.
"""
from __future__ import annotations

import importlib.util
import linecache
import marshal
import sys
import types

from . import files
from .memory import PROCESS


def source_hash(source: str) -> str:
    return files.sha256(source)[:32]


def module_path(source: str, cache_dir: str) -> str:
    return files.keyed_path(cache_dir, "", source_hash(source), prefix="mi_", suffix=".py")


def write_module(source: str, cache_dir: str) -> str:
    """Make the file for `source` under cache_dir hold exactly `source` (written atomically when it is
    missing or damaged); its path."""
    path = module_path(source, cache_dir)
    on_disk = files.read(path, "generated module", "writing it again from the compiled source",
                               expect_sha256=files.sha256(source))
    if on_disk is None:
        files.write(path, source, "generated module", frame=False)
    return path


def load_module(source: str, cache_dir: str) -> tuple[types.ModuleType, str]:
    """The module for `source`: executed once per process (Triton compiles its kernels lazily)."""
    key = source_hash(source)
    path = write_module(source, cache_dir)
    if key in PROCESS.modules:
        return PROCESS.modules[key], path
    name = f"mini_inductor_generated.mi_{key}"
    spec = importlib.util.spec_from_file_location(name, path)   # __file__ and __spec__ as an import sets them
    module = importlib.util.module_from_spec(spec)
    # Triton reads a kernel's source through linecache: give it the text that runs, whatever the disk holds
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    sys.modules[name] = module
    try:
        exec(_bytecode(source, path), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    PROCESS.modules[key] = module
    return module, path


def _bytecode(source: str, path: str) -> types.CodeType:
    """The code object of `source`, from its .code file when that is intact and made from this source."""
    code_path = f"{path[:-len('.py')]}.{sys.implementation.cache_tag or 'py'}.code"
    # the file name is in the code object (tracebacks, Triton's getsource): a moved cache compiles again
    stamp = importlib.util.MAGIC_NUMBER + files.sha256(f"{path}\0{source}").encode("ascii")
    code = files.read(code_path, "generated module's bytecode", "compiling its source again",
                            lambda data: _unmarshal(data, stamp))
    if code is None:
        code = compile(source, path, "exec")
        files.write(code_path, stamp + marshal.dumps(code), "generated module's bytecode")
    return code


def _unmarshal(data: bytes, stamp: bytes) -> types.CodeType:
    if not data.startswith(stamp):
        raise ValueError("compiled from another source or by another Python")
    code = marshal.loads(data[len(stamp):])
    if not isinstance(code, types.CodeType):
        raise ValueError("not a code object")
    return code

