"""Kernels launched through torch's prebuilt launcher (runtime/launch/static_launch.py, option static_launch).

On the CPU: the argument-type string the static launcher gets, built from signatures that Triton's
own argument binding produces (for a hand-written kernel and for the kernels mini_inductor
generates), and the metadata that sends a kernel back to Triton's launcher. Under the interpreter
nothing launches statically. On the GPU: results equal eager, the kernels never ask Triton for its
C launcher (so a cold Triton cache builds none), and the option off keeps the old path.
"""
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import types

import pytest
import torch
import triton
import triton.language as tl

from mini_inductor import config, metrics
from mini_inductor.caching import PROCESS
from mini_inductor.runtime.launch import static_launch
from mini_inductor.runtime.launch.launcher import FastKernel

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _static_launch_on():
    """These tests are about the option itself: on, whatever MINI_INDUCTOR_STATIC_LAUNCH says (a GPU
    run of the whole suite with the variable at 0 tests the other path)."""
    with config.patch(static_launch=True):
        yield


def scalars_kernel(x_ptr, out_ptr, n, big, scale, dscale, flag, one, XBLOCK: tl.constexpr):
    """out = x * scale * dscale + big // 2**33 + 10 * flag + one (an i32, i64, fp32, fp64, bool and a 1)."""
    offs = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    high = (big // 8589934592).to(tl.float32)
    extra = high + 10.0 * flag.to(tl.float32) + one
    tl.store(out_ptr + offs, (x * scale * dscale).to(tl.float32) + extra, mask=mask)


def half_scalar_kernel(x_ptr, out_ptr, n, h, XBLOCK: tl.constexpr):
    offs = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * h.to(tl.float32), mask=mask)


# ── on the CPU: signatures from Triton's own argument binding ────────────────────────────────
def _bind(pyfn, *args, **meta):
    """Triton's signature for a CUDA (sm_90) launch of `pyfn` with `args` (torch dtypes for pointers),
    by the binder JITFunction builds for each device; no GPU needed. Returns the ASTSource."""
    from sm90 import bind
    return bind(pyfn, *args, **meta)


def test_argument_types_follow_tritons_signature_and_leave_constexprs_out():
    src = _bind(scalars_kernel, torch.float32, torch.float32, 1000, 3 * 2**33 + 5, 0.5, 2.0, True, 1,
                XBLOCK=128, num_warps=4)
    assert list(src.signature.values()) == ["*fp32", "*fp32", "i32", "i64", "fp32", "fp32", "u1", "constexpr",
                                            "constexpr"]
    letters, passed = static_launch.arg_letters(src.signature)
    assert letters == "OOilffB"                      # Python floats are fp32 scalars, True a u1 (a byte)
    assert passed == (True,) * 7 + (False, False)    # `one` (a 1) became a constexpr, as XBLOCK is
    kernel = static_launch.StaticKernel("k", 1, None, 4, 0, letters + "OO", passed, 32)
    assert kernel.kept(8) == 7 and kernel.kept(7) == 7
    with pytest.raises(static_launch.Unsupported):
        kernel.kept(6)          # `flag` passed as a keyword: the site's positional arguments miss it


def test_a_one_in_the_middle_is_dropped_by_position():
    src = _bind(scalars_kernel, torch.float32, torch.float32, 1, 2**40, 0.5, 2.0, False, 7,
                XBLOCK=128, num_warps=4)
    letters, passed = static_launch.arg_letters(src.signature)
    assert letters == "OOlffBi"
    kernel = static_launch.StaticKernel("k", 1, None, 4, 0, letters + "OO", passed, 32)
    # n == 1 is specialized away by Triton: the binary takes positions 0, 1, 3, 4, 5, 6, 7
    assert passed[2] is False and kernel.kept(8) == (0, 1, 3, 4, 5, 6, 7)


def test_fp16_scalars_and_unknown_types_go_to_tritons_launcher():
    src = _bind(half_scalar_kernel, torch.float16, torch.float16, 100, 0.5, XBLOCK=128, num_warps=4)
    h = dict(src.signature)
    h["h"] = "fp16"
    with pytest.raises(static_launch.Unsupported, match="fp16"):
        static_launch.arg_letters(h)
    with pytest.raises(static_launch.Unsupported):
        static_launch.arg_letters({"d": "tensordesc<fp32[16, 16]>"})
    with pytest.raises(static_launch.Unsupported):
        static_launch.arg_letters({"t": ("*fp32", "i32")})


def test_every_kernel_mini_inductor_generates_has_a_signature_the_static_launcher_takes(device):
    def f(x, y, i, h):
        return (torch.softmax(x, -1) * y + 1, x.sum(0), (x[:, :16] * 2).to(torch.float16),
                x.gather(1, i), (h.float() * 3).sum(-1), x.t().contiguous() * 2)
    x, y = torch.randn(8, 32, device=device), torch.randn(8, 32, device=device)
    i = torch.randint(0, 32, (8, 4), device=device)
    h = torch.randn(4, 300, device=device, dtype=torch.float16)
    torch.compile(f, backend="mini_inductor")(x, y, i, h)
    rec = metrics.compiled_graphs[-1]
    (module,) = [m for m in PROCESS.modules.values() if m.__file__ == rec.source_path]
    assert len(module.KERNEL_LAUNCHES) >= 4
    kinds = set()
    for launch in module.KERNEL_LAUNCHES:
        name, dtypes, sizes, meta, warps = launch.kernel, launch.dtypes, launch.sizes, launch.meta, launch.num_warps
        kind = name.split("_")[1]
        kinds.add(kind)
        fn = getattr(module, name)
        pyfn = getattr(fn, "fn", fn)            # FastKernel or InterpretedFunction -> the Python function
        pyfn = getattr(pyfn, "fn", pyfn)
        src = _bind(pyfn, *dtypes, *sizes, **meta, num_warps=warps)
        letters, passed = static_launch.arg_letters(src.signature)
        assert letters == "O" * len(dtypes), (name, src.signature)
        kernel = static_launch.StaticKernel(name, 1, None, warps, 0, letters + "OO", passed, 32)
        assert kernel.kept(len(dtypes) + len(sizes)) == len(dtypes)   # the pointers; sizes are constexprs
    assert {"poi", "per", "red"} <= kinds, kinds


def _fake_kernel(**changes):
    """A stand-in CompiledKernel with Triton 3.6's metadata fields (for the refusal rules only)."""
    src = _bind(half_scalar_kernel, torch.float32, torch.float32, 100, 0.5, XBLOCK=128, num_warps=4)
    md = dict(target=types.SimpleNamespace(backend="cuda", arch=90, warp_size=32), num_ctas=1, num_warps=4,
              shared=0, launch_cooperative_grid=False, launch_pdl=False, tensordesc_meta=None,
              global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0, profile_scratch_align=1)
    md.update(changes)
    return types.SimpleNamespace(metadata=types.SimpleNamespace(**md), src=src, asm={"cubin": b""}, name="k")


@pytest.mark.parametrize("changes", [dict(num_ctas=2), dict(global_scratch_size=128), dict(profile_scratch_size=64),
                                     dict(launch_cooperative_grid=True), dict(launch_pdl=True),
                                     dict(tensordesc_meta=[{"swizzle": 128}]), dict(shared=65536),
                                     dict(target=types.SimpleNamespace(backend="hip", arch="gfx942", warp_size=64))])
def test_metadata_that_needs_tritons_launcher_is_refused(changes):
    assert static_launch.check(_fake_kernel())[0] == "OOifOO"
    with pytest.raises(static_launch.Unsupported):
        static_launch.check(_fake_kernel(**changes))


def test_the_option_reads_its_environment_variable():
    code = "from mini_inductor import config; print(config.current().static_launch)"
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINI_INDUCTOR_STATIC_LAUNCH="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]
    assert config.Config().static_launch is True and "static_launch" in config.valid_options()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's no-op")
def test_nothing_launches_statically_under_the_interpreter():
    assert static_launch.for_kernel(_fake_kernel(), 0) is None
    assert not static_launch.signature_supported({"x": "*fp32"})


# ── on the GPU ───────────────────────────────────────────────────────────────────────────────
def _sites_of_last_graph():
    rec = metrics.compiled_graphs[-1]
    (module,) = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == rec.source_path]
    return [s for v in vars(module).values() if isinstance(v, FastKernel) for s in v._sites.values()]


def _assert_all_static(sites):
    assert sites and all(s.kernel is not None for s in sites)
    for s in sites:
        assert s.static is not None, f"{s.kernel.name} kept Triton's launcher"
        # Triton's launcher is created (and built with gcc on a cold cache) only through CompiledKernel.run
        assert s.kernel._run is None, f"{s.kernel.name}: Triton's launcher was asked for"


@pytest.mark.gpu
def test_the_c_api_is_in_this_cuda_build():
    api = static_launch.c_api()
    assert api is not None, f"torch {torch.__version__} has no torch._C._StaticCudaLauncher"


@pytest.mark.gpu
def test_a_compiled_kernel_loads_and_launches_through_torch_alone():
    fn = triton.jit(half_scalar_kernel)
    kernel = fn.warmup(torch.float32, torch.float32, 300, 0.5, grid=(1,), XBLOCK=128, num_warps=4)
    static = static_launch.for_kernel(kernel, torch.cuda.current_device())
    assert static is not None and static.arg_types == "OOifOO" and static.function
    assert static_launch.for_kernel(kernel, torch.cuda.current_device()) is static   # loaded once
    x = torch.randn(300, device="cuda")
    out = torch.full_like(x, float("nan"))
    static.launch((3,), torch.cuda.current_stream().cuda_stream, (x, out, 300, 0.5))
    torch.testing.assert_close(out, x * 0.5)
    assert kernel._run is None            # Triton's launcher was never created


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("threads", [4, 0])
def test_pointwise_and_reductions_launch_statically_and_match_eager(dtype, threads):
    def f(x, y, z):
        return (torch.sin(x) * y + (1 + threads),         # pointwise (a different module per `threads`)
                torch.softmax(x.float(), -1) * 2,          # persistent reduction (512 <= the limit)
                z.float().sum(-1),                         # looped reduction (4096 > the limit)
                x.t().contiguous() + 1)                    # transposed pointwise
    x, y = torch.randn(64, 512, device="cuda", dtype=dtype), torch.randn(64, 512, device="cuda", dtype=dtype)
    z = torch.randn(64, 4096, device="cuda", dtype=dtype)
    tol = 2e-2 if dtype == torch.float16 else 1e-4
    with config.patch(compile_threads=threads, cudagraphs=False, persistent_reduction_limit=1024):
        compiled = torch.compile(f, backend="mini_inductor")
        for _ in range(3):
            x, y, z = torch.randn_like(x), torch.randn_like(y), torch.randn_like(z)
            for got, want in zip(compiled(x, y, z), f(x, y, z)):
                torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    kinds = {name.split("_")[1] for name in metrics.compiled_graphs[-1].kernel_names}
    assert {"poi", "per", "red"} <= kinds, kinds
    _assert_all_static(_sites_of_last_graph())


@pytest.mark.gpu
def test_an_int64_index_tensor_and_cuda_graphs():
    def f(x, i):
        return x.gather(1, i) * 2, torch.relu(x).sum(-1)
    x = torch.randn(32, 300, device="cuda")
    i = torch.randint(0, 300, (32, 7), device="cuda", dtype=torch.int64)
    compiled = torch.compile(f, backend="mini_inductor", options={"cudagraphs": False})
    for got, want in zip(compiled(x, i), f(x, i)):
        torch.testing.assert_close(got, want)
    _assert_all_static(_sites_of_last_graph())
    torch._dynamo.reset()
    graphed = torch.compile(f, backend="mini_inductor")     # the same kernels replayed from a CUDA graph
    for _ in range(3):
        x = torch.randn_like(x)
        for got, want in zip(graphed(x, i), f(x, i)):
            torch.testing.assert_close(got, want)


@pytest.mark.gpu
def test_scalar_arguments_reach_the_kernel_unchanged():
    kernel = FastKernel(triton.jit(scalars_kernel))
    x = torch.randn(1000, device="cuda")
    big, scale, dscale = 3 * 2**33 + 5, 0.5, 3.0
    for step in range(3):       # the first launch loads the kernel, later ones take the fast path
        out = torch.empty_like(x)
        kernel[(8,)](x, out, 1000, big, scale, dscale, True, 1, XBLOCK=128, num_warps=4)
        torch.testing.assert_close(out, x * 1.5 + 3 + 10 + 1)
    (site,) = kernel._sites.values()
    _assert_all_static([site])
    assert site.static[4] == "OOilffBOO"   # i32 n, i64 big, fp32 scale and dscale, u1 flag, two scratch nulls
    assert site.kept == 7                  # `one` is a constexpr: left out


@pytest.mark.gpu
def test_a_one_in_the_middle_is_left_out_of_the_launch():
    kernel = FastKernel(triton.jit(scalars_kernel))
    x = torch.randn(1, device="cuda")
    for _ in range(2):
        out = torch.empty_like(x)
        kernel[(1,)](x, out, 1, 2**34, 2.0, 0.25, False, 7, XBLOCK=16, num_warps=1)
        torch.testing.assert_close(out, x * 0.5 + 2 + 7)
    (site,) = kernel._sites.values()
    _assert_all_static([site])
    assert site.kept == (0, 1, 3, 4, 5, 6, 7)


@pytest.mark.gpu
def test_a_kernel_argument_given_as_a_keyword_takes_tritons_launcher_and_stays_correct():
    kernel = FastKernel(triton.jit(scalars_kernel))
    x = torch.randn(1000, device="cuda")
    for _ in range(3):
        out = torch.empty_like(x)
        kernel[(8,)](x, out, 1000, 2**33, 0.5, 2.0, flag=True, one=1, XBLOCK=128, num_warps=4)
        torch.testing.assert_close(out, x + 1 + 10 + 1)
    (site,) = kernel._sites.values()
    assert site.static is None and site.launch is not None   # `flag` is not among the positional arguments


@pytest.mark.gpu
def test_the_option_off_keeps_tritons_launchers():
    def f(x):
        return torch.cos(x) * 5 - 1
    x = torch.randn(513, device="cuda")
    compiled = torch.compile(f, backend="mini_inductor", options={"cudagraphs": False, "static_launch": False})
    for _ in range(2):
        torch.testing.assert_close(compiled(x), f(x))
    sites = _sites_of_last_graph()
    assert sites and all(s.static is None and s.launch is not None for s in sites)


COLD_CHILD = textwrap.dedent('''
    import glob, json, os, sys
    import torch, mini_inductor
    from mini_inductor import config, metrics
    from mini_inductor.runtime.launch.launcher import FastKernel
    def f(x, y, i):
        a = torch.softmax(x, -1) * y + 1
        return a, torch.relu(a @ y.t()).to(torch.float16), x.gather(1, i), (x * y).sum(0)
    x, y = torch.randn(64, 128, device="cuda"), torch.randn(64, 128, device="cuda")
    i = torch.randint(0, 128, (64, 5), device="cuda")
    with config.patch(compile_threads=int(os.environ["THREADS"]), cudagraphs=False):
        compiled = torch.compile(f, backend="mini_inductor")
        outs = compiled(x, y, i)
        outs = compiled(x, y, i)
    # relative past 1 in magnitude: the float16 output is 20 or more, where one ulp is 1/64
    error = max(((a.float() - b.float()).abs() / (1 + b.float().abs())).max().item() for a, b in zip(outs, f(x, y, i)))
    rec = metrics.compiled_graphs[-1]
    module = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == rec.source_path][0]
    sites = [s for v in vars(module).values() if isinstance(v, FastKernel) for s in v._sites.values()]
    launchers = glob.glob(os.path.join(os.environ["TRITON_CACHE_DIR"], "*", "__triton_launcher*"))
    print("RESULT " + json.dumps({"kernels": rec.num_kernels, "launchers": len(launchers), "error": error,
                                  "sites": len(sites), "static": sum(s.static is not None for s in sites),
                                  "stages": sorted(rec.stage_seconds)}))
''')


def _cold_child(tmp_path, threads: int, static: bool):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINI_INDUCTOR_CACHE_DIR=str(tmp_path / "mini"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"), THREADS=str(threads),
               MINI_INDUCTOR_STATIC_LAUNCH="1" if static else "0")
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-c", COLD_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):])


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [4, 0])
def test_a_cold_triton_cache_builds_no_launcher_for_static_kernels(tmp_path, threads):
    got = _cold_child(tmp_path, threads, static=True)
    assert got["error"] < 1e-2 and got["kernels"] >= 3, got
    assert got["static"] == got["sites"] >= 3, got
    assert got["launchers"] == 0, got
    if threads:
        assert "kernel compile" in got["stages"], got
        again = _cold_child(tmp_path, threads, static=True)   # warm: graph cache hit, kernels reloaded
        assert again["error"] < 1e-2 and again["static"] == again["sites"] >= 3, again
        assert "kernel load" in again["stages"] and again["launchers"] == 0, again


@pytest.mark.gpu
def test_with_the_option_off_a_cold_cache_builds_tritons_launchers(tmp_path):
    got = _cold_child(tmp_path, 4, static=False)
    assert got["error"] < 1e-2 and got["static"] == 0 and got["sites"] >= 3, got
    assert got["launchers"] >= 2, got     # fp32 -> fp32 and fp32 -> fp16 at least
