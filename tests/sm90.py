"""Generated kernels compiled for an H100 (sm_90) on the CPU, no GPU needed.

Triton's interpreter runs what its compiler refuses: a name bound in both branches of an `if` to
tensors of two shapes (the block-table kernel of session 25 ran in CI and failed to compile on the
GPU), and more. So CPU tests also hand the kernels they launch to the real compiler:

    with launches() as seen:          every launch of an interpreted kernel: (function, args, kwargs)
        ...run something...
    compile_all(seen)                 each distinct kernel and specialization compiled for sm_90, in a
                                      process of its own with the interpreter off (in this one, Triton's
                                      own library functions are interpreted ones); raises with the
                                      compiler's message for each kernel that fails
    compile_jobs(jobs)                the same for launches already in their JSON form (`launch_job`): the
                                      errors, "" where it compiled (tests/fuzz/sm90.py)
    bind(fn, *args, **meta)           Triton's ASTSource for an sm_90 launch (its signature)
    ptx_of(seen)                      the PTX of each distinct launch (what a kernel's loads compile to)
    libdevice_links(seen)             per distinct launch, (its label, how many times its compile linked
                                      libdevice: 0 or 1)

    python -m tests.sm90 JOBS.json [--ptx|--links]   the subprocess: compiles the jobs, prints their
                                                     errors (or their PTX, or libdevice links) as JSON
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import torch

TARGET = ("cuda", 90, 32)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def launches():
    """The interpreted launches made inside the block, as (python function, args, kwargs)."""
    from triton.runtime.interpreter import InterpretedFunction

    seen: list[tuple] = []
    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        seen.append((self.fn, args, dict(kwargs)))
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)
    InterpretedFunction.run = run
    try:
        yield seen
    finally:
        InterpretedFunction.run = original


def bind(fn, *args, **meta):
    """Triton's ASTSource for an sm_90 launch of `fn` (a JITFunction or a plain function) with `args`
    (tensors or torch dtypes for pointers) and `meta` (constexprs and launch options)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.compiler.compiler import ASTSource
    from triton.runtime.jit import JITFunction, MockTensor, create_function_from_signature

    fn = fn if isinstance(fn, JITFunction) else JITFunction(fn)
    backend = make_backend(GPUTarget(*TARGET))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(meta, debug=False, instrumentation_mode="")
    types = [a.dtype if isinstance(a, torch.Tensor) else a for a in args]
    bound, specialization, options = binder(*map(MockTensor.wrap_dtype, types), **kwargs)
    _, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return ASTSource(fn, signature, constexprs, attrs)


# --- a launch as JSON, for the compiling process --------------------------------------------------

def _encode(value):
    import triton.language as tl
    if isinstance(value, torch.Tensor):
        return {"torch": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, torch.dtype):
        return {"torch": str(value).removeprefix("torch.")}
    if isinstance(value, tl.dtype):
        return {"tl": value.name}
    if isinstance(value, tl.constexpr):
        return _encode(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a launch argument of type {type(value).__name__} has no JSON form here")


def _decode(value):
    import triton.language as tl
    if isinstance(value, dict) and "torch" in value:
        return getattr(torch, value["torch"])
    if isinstance(value, dict) and "tl" in value:
        return tl.dtype(value["tl"])
    return value


def launch_job(pyfn, args, kwargs) -> dict:
    """One recorded launch as JSON: the kernel's module file and name, its arguments' types and values
    (tensors as their dtypes), its constexprs and launch options."""
    import inspect
    return {"path": inspect.getsourcefile(pyfn), "name": pyfn.__name__,
            "args": [_encode(a) for a in args],
            "kwargs": {k: _encode(v) for k, v in kwargs.items() if k not in ("grid", "warmup")}}


def compile_all(seen, timeout: float = 600) -> list[str]:
    """Compile for sm_90 each distinct (kernel, argument types, constexprs) of `seen` in a fresh
    process; the kernels' labels. An AssertionError lists every kernel that did not compile."""
    jobs = _distinct_jobs(seen)
    labels = [f"{job['name']} ({os.path.basename(job['path'])}, launch {n})" for n, job in enumerate(jobs)]
    errors = compile_jobs(jobs, timeout)
    failed = [f"{label} does not compile for sm_90:\n{error}" for label, error in zip(labels, errors) if error]
    assert not failed, "\n\n".join(failed)
    return labels


def _distinct_jobs(seen) -> list[dict]:
    jobs, keys = [], set()
    for pyfn, args, kwargs in seen:
        job = launch_job(pyfn, args, kwargs)
        key = json.dumps(job, sort_keys=True)
        if key not in keys:
            keys.add(key)
            jobs.append(job)
    return jobs


def ptx_of(seen, timeout: float = 600) -> list[str]:
    """The sm_90 PTX of each distinct launch of `seen` (compiled as compile_all does)."""
    return compile_jobs(_distinct_jobs(seen), timeout, ptx=True)


def libdevice_links(seen, timeout: float = 600) -> list[tuple[str, int]]:
    """(label, libdevice links) of each distinct launch of `seen`, compiled as compile_all does. A kernel
    that calls any libdevice function has the library parsed and linked into it (57 ms of its compile
    on the H200 machine, GIL held)."""
    jobs = _distinct_jobs(seen)
    links = compile_jobs(jobs, timeout, links=True)
    return [(f"{job['name']} ({os.path.basename(job['path'])})", n) for job, n in zip(jobs, links)]


def compile_jobs(jobs: list[dict], timeout: float = 1800, ptx: bool = False, links: bool = False) -> list:
    """Compile the jobs (see `launch_job`) for sm_90 in a process of its own, the interpreter off: for each,
    "" or the compiler's error (with `ptx`, its PTX; with `links`, how many times libdevice was linked
    into it; a kernel that fails raises in both)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(jobs, f)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        flags = (["--ptx"] if ptx else []) + (["--links"] if links else [])
        done = subprocess.run([sys.executable, "-m", "tests.sm90", f.name] + flags, cwd=ROOT,
                              env=env, timeout=timeout,
                              capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise AssertionError(f"the sm_90 compile process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _compile_jobs(path: str, ptx: bool = False, links: bool = False) -> list:
    import triton
    from triton._C.libtriton import llvm
    from triton.backends.compiler import GPUTarget

    linked = []
    if links:   # a kernel found in Triton's cache is not linked again
        triton.knobs.compilation.always_compile = True
    link = llvm.link_extern_libs
    llvm.link_extern_libs = lambda *args: (linked.append(1), link(*args))[1]

    with open(path) as f:
        jobs = json.load(f)
    modules: dict[str, object] = {}
    errors: list[str] = []
    for job in jobs:
        try:
            module = modules.get(job["path"])
            if module is None:
                spec = importlib.util.spec_from_file_location(f"_sm90_{len(modules)}", job["path"])
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                modules[job["path"]] = module
            meta = {k: _decode(v) for k, v in job["kwargs"].items()}
            src = bind(getattr(module, job["name"]), *[_decode(a) for a in job["args"]], **meta)
            options = {k: meta[k] for k in ("num_warps", "num_stages") if k in meta}
            linked.clear()
            compiled = triton.compile(src, target=GPUTarget(*TARGET), options=options)
            errors.append(compiled.asm["ptx"] if ptx else len(linked) if links else "")
        except Exception as e:  # noqa: BLE001  (each kernel's error is reported, the rest still compile)
            if ptx or links:
                raise
            errors.append(f"{type(e).__name__}: {e}"[:4000])
    return errors


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("tests/sm90.py compiles with Triton's compiler: run it without TRITON_INTERPRET")
    print(json.dumps(_compile_jobs(sys.argv[1], ptx="--ptx" in sys.argv[2:], links="--links" in sys.argv[2:])))
