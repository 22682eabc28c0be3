"""A Triton compile worker process (compile_pool.py starts them; run by path, not as a module).

    python compile_worker.py TRITON_HELPERS_PATH

Only Triton is imported here (0.2 s), not torch or this package: a worker is ready well before a
first graph's kernels are generated. It reads requests from stdin and answers on stdout, each a
pickle behind its 4-byte little-endian length:

    request: a dict of path, name, target, signature, constexprs, attrs, options, cache_dir,
             triton_key and triton_file
    answer:  (True, the compiled kernel's hash, seconds, {"name": its name, "group": its files in
             Triton's cache}) or (False, "Error: message", seconds)

`path` is a generated module's file and `name` one of its kernels. The worker compiles only that
function's definition, read from the file with its line numbers (Triton's cache key includes the
source and its first line), in a namespace holding what generated kernels use: triton, tl,
libdevice, math and triton_helpers. A kernel that needs anything else fails here with a NameError,
and the process that asked compiles it itself. The compiled kernel lands in Triton's cache under
`cache_dir`, from where the asking process builds the CompiledKernel out of the files the answer names
(precompile.py `worker_kernel`), as Triton builds one on a cache hit, without computing the kernel's
cache key again.
`triton_key` is the asking process's hash of Triton's files (part of every cache key), which a worker
would otherwise compute at its first compile (2.5 to 3.9 s on the H100 machine). The key is only
taken from a process whose Triton is this worker's own (`triton_file`, its triton/__init__.py);
another Triton is an answer of failure.
"""
from __future__ import annotations

import ast
import importlib.util
import math
import pickle
import struct
import sys
import time


def _load_helpers(path: str):
    """The package's triton_helpers, loaded from its file under its own module name (the package's
    other modules import torch; triton_helpers imports only Triton)."""
    name = "mini_inductor.runtime.triton_helpers"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _Kernels:
    """The kernels of generated modules, each defined once from its file."""

    def __init__(self, helpers):
        import triton
        import triton.language as tl
        from triton.language.extra import libdevice
        self.base = {"triton": triton, "tl": tl, "libdevice": libdevice, "math": math, "triton_helpers": helpers}
        self.found: dict[tuple[str, str], object] = {}

    def get(self, path: str, name: str):
        key = (path, name)
        if key not in self.found:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=path)
            node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
            if node is None:
                raise LookupError(f"no function {name} in {path}")
            namespace = dict(self.base, __name__=f"mini_inductor_worker_{abs(hash(path))}")
            # the definition alone, compiled from the file's own lines: inspect (and so Triton's source
            # and first line of the kernel) reads them back from `path`
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), namespace)
            self.found[key] = namespace[name]
        return self.found[key]


def serve(stdin, stdout, helpers_path: str) -> None:
    import triton
    from triton.compiler import ASTSource
    import os
    from triton.runtime import cache
    kernels = _Kernels(_load_helpers(helpers_path))
    own_key, own_file = cache.triton_key, os.path.realpath(triton.__file__)
    while True:
        header = stdin.read(4)
        if len(header) < 4:
            return   # the asking process closed the pipe (or exited)
        request = pickle.loads(stdin.read(struct.unpack("<I", header)[0]))
        r = request
        began = time.perf_counter()
        # read by cache.get_cache_key through the module's globals
        cache.triton_key = (lambda key=r["triton_key"]: key) if r["triton_key"] else own_key
        try:
            if os.path.realpath(r["triton_file"]) != own_file:
                raise ImportError(f"the asking process runs the Triton of {r['triton_file']}, this worker {own_file}")
            triton.knobs.cache.dir = r["cache_dir"]
            fn = kernels.get(r["path"], r["name"])
            kernel = triton.compile(ASTSource(fn, r["signature"], r["constexprs"], r["attrs"]), target=r["target"],
                                    options=r["options"])
            answer = (True, kernel.hash, time.perf_counter() - began,
                      {"name": kernel.name, "group": dict(kernel.metadata_group)})
        except BaseException as e:  # noqa: BLE001  (reported to the asking process, which compiles it)
            answer = (False, f"{type(e).__name__}: {e}"[:2000], time.perf_counter() - began)
        data = pickle.dumps(answer)
        stdout.write(struct.pack("<I", len(data)) + data)
        stdout.flush()


if __name__ == "__main__":
    out = sys.stdout.buffer
    sys.stdout = sys.stderr   # whatever Triton prints stays off the answers' pipe
    serve(sys.stdin.buffer, out, sys.argv[1])
