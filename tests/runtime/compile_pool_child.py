"""Run by test_compile_pool.py in a process without TRITON_INTERPRET (kernels compiled, not interpreted):

    python compile_pool_child.py WORKDIR

Writes a module like a generated one, has compile workers compile its kernels for an sm90 target (no
GPU is needed to compile), builds each from the files the worker names as precompile.py does, then
compiles each here as JITFunction.warmup would, and prints one JSON line per kernel: the worker's
answer, the built kernel, this process's kernel hash, and whether this compile was a hit in Triton's
cache.
"""
import importlib.util
import json
import os
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.cache import triton_key

MODULE = '''import math
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from mini_inductor.runtime import triton_helpers


@triton.jit
def triton_poi_fused_tanh_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tl.store(out_ptr0 + xindex, triton_helpers.tanh32(tmp0) * math.pi, xmask)


@triton_helpers.checked_jit
def triton_poi_fused_index_1(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tl.device_assert((0 <= tmp0) & (tmp0 < 64) | ~xmask, "index out of bounds: 0 <= tmp0 < 64")
    tl.store(out_ptr0 + xindex, tl.load(in_ptr1 + tmp0, xmask), xmask)


triton_poi_fused_tanh_2 = triton_poi_fused_tanh_0  # the same code as triton_poi_fused_tanh_0
'''

SIGNATURES = {
    "triton_poi_fused_tanh_0": ({"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32", "XBLOCK": "constexpr"},
                                {(3,): 1024}, {}),
    "triton_poi_fused_index_1": ({"in_ptr0": "*i64", "in_ptr1": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32",
                                  "XBLOCK": "constexpr"}, {(4,): 256}, {}),
}


def request(path, name, target, signature, constexprs, attrs, options, cache_dir, key, triton_file) -> dict:
    """A compile worker's request (compile_worker.py), as precompile._worker_request makes it."""
    return dict(path=path, name=name, target=target, signature=signature, constexprs=constexprs, attrs=attrs,
                options=options, cache_dir=cache_dir, triton_key=key, triton_file=triton_file)


def main(workdir: str) -> None:
    from mini_inductor.runtime.launch import compile_pool, precompile
    cache_dir = os.path.join(workdir, "triton_cache")
    triton.knobs.cache.dir = cache_dir
    path = os.path.join(workdir, "mi_generated.py")
    with open(path, "w") as f:
        f.write(MODULE)
    spec = importlib.util.spec_from_file_location("mi_generated", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    pool = compile_pool.Pool(2)
    hits = []
    triton.knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
    for name, (signature, constexprs, attrs) in SIGNATURES.items():
        fn = getattr(module, name)
        options = backend.parse_options({"num_warps": 4, "debug": fn.debug})
        answer = pool.compile(request(path, fn.fn.__name__, target, signature, constexprs, attrs, options.__dict__,
                                      cache_dir, triton_key(), triton.__file__))
        # the kernel as the asking process builds it from the worker's files (no compile, no listener call)
        hits.clear()
        built = precompile.worker_kernel(ASTSource(fn, signature, constexprs, attrs), answer)
        built_row = {"hash": built.hash, "name": built.name, "asm": sorted(built.asm),
                     "cubin": built.asm["cubin"] == open(answer[3]["group"][built.name + ".cubin"], "rb").read(),
                     "listener_calls": len(hits)} if built is not None else None
        renamed = (answer[0], answer[1], answer[2], dict(answer[3], name="another_kernel"))
        missing = (answer[0], answer[1], answer[2], dict(answer[3], group={"x.cubin": "/no/such/file"}))
        hits.clear()
        here = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
        print(json.dumps({"kernel": name, "answer": answer, "hash": here.hash, "cache_hit": hits == [True],
                          "asm": sorted(here.asm), "name": here.name, "built": built_row,
                          "refused": [precompile.worker_kernel(ASTSource(fn, signature, constexprs, attrs), a)
                                      for a in (renamed, missing, answer[:3])]}))
    missing = pool.compile(request(path, "no_such_kernel", target, {}, {}, {}, {}, cache_dir, "", triton.__file__))
    print(json.dumps({"kernel": "no_such_kernel", "answer": missing}))
    # another Triton in the asking process: refused (its key would stamp this worker's binaries)
    signature, constexprs, attrs = SIGNATURES["triton_poi_fused_tanh_0"]
    other = pool.compile(request(path, "triton_poi_fused_tanh_0", target, signature, {(3,): 256}, attrs,
                                 backend.parse_options({"num_warps": 4}).__dict__, cache_dir, triton_key(),
                                 "/elsewhere/triton/__init__.py"))
    print(json.dumps({"kernel": "other_triton", "answer": other}))
    # requests that cannot be pickled get no answer, and leave every worker in the pool (twice the
    # workers' number of them)
    unpicklable = [pool.compile(request(path, "triton_poi_fused_tanh_0", target, signature, {(3,): lambda: 0},
                                        attrs, {}, cache_dir, "", triton.__file__)) for _ in range(4)]
    print(json.dumps({"unpicklable": unpicklable, "workers": len(pool.workers), "idle": pool.idle.qsize()}))
    # a worker that dies: its request gets no answer (the caller compiles), and a new worker serves the next
    for worker in list(pool.workers):
        worker.proc.kill()
        worker.proc.wait()
    signature, constexprs, attrs = SIGNATURES["triton_poi_fused_tanh_0"]
    again = request(path, "triton_poi_fused_tanh_0", target, signature, {(3,): 512}, attrs,
                    backend.parse_options({"num_warps": 4}).__dict__, cache_dir, "", triton.__file__)
    print(json.dumps({"after_kill": [pool.compile(again) is None for _ in range(2)],
                      "then": pool.compile(again)[0], "workers": len(pool.workers)}))
    pool.close()


if __name__ == "__main__":
    main(sys.argv[1])
