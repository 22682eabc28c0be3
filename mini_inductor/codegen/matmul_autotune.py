"""mode="max-autotune": a matmul template's choice, timed at compile time.

    choose_by_timing(wrapper, group, ...)          a template group whose choice is "measure"
      → the template kernel's source (with its epilogues; block sizes are launch arguments, so one
        source serves every config) + the cuBLAS op + the device, flags and versions = the key
      → on disk? cache_dir/autotune/ab/ab12….json (caching/autotune.py read_matmul): its choice
      → else, on random tensors of the graph's layouts: each config of `matmul_configs` compiled (in
        threads, on a GPU), launched and timed, and cuBLAS followed by the epilogues as a kernel of
        their own, GPU time of each; the faster kept
        (written to disk) and recorded with every timing in the schedule's MatmulDecision

The timer is `time_ms` (a module attribute: the CPU tests replace it, as Triton's interpreter times
nothing of what the GPU does).
"""
from __future__ import annotations

import logging
import math
import os

import torch

from .. import timing
from ..caching import autotune as autotune_cache
from ..caching import files as cache_files
from ..caching.modules import load_module
from ..lowering.ir import InputBuffer, ReinterpretView
from ..lowering.symbolic import hint
from ..runtime.scratch import scratch_allocator
from ..scheduler.matmul_activation import fused_activation
from ..scheduler.matmul_choice import describe_lt
from ..scheduler.nodes import FusedSchedulerNode, template_in, template_parts
from .matmul_template import MatmulConfig, matmul_configs, program_count
from .triton import TritonKernel
from .wrapper_ir import KernelCallLine

log = logging.getLogger("mini_inductor.autotuning")

CUBLAS = "cuBLAS + epilogue kernel"


def time_ms(fn) -> float:
    """Median GPU ms of `fn()` (warm-up, L2 flushed between samples, each sample queued behind a sleep:
    timing.py). Without the sleep the GPU waited on the host between launches: on an H200 (session
    28) cuBLAS followed by the epilogue kernel, two launches from Python, timed slower than one
    template launch, and max-autotune chose templates that ran at 0.028 ms where cuBLAS and the
    epilogue ran at 0.022 (2048 x 2304 x 768, bias+GELU; 0.154 against 0.142 at M 16384)."""
    result = timing.bench(fn, warmup=5, samples=25, flush_l2=True, queue_ahead=True)
    return result.gpu_ms if result.gpu_ms is not None else result.wall_ms


# one thread a CPU core, up to 16: a shape's dozen configs compile in one round (the H200 host has 16)
PRECOMPILE_THREADS = max(1, min(16, os.cpu_count() or 1))
# A template is chosen over cuBLAS only when it times at least 3% faster. Closer than that, the two
# trade places from one timing to the next: on an H200 (session 29), 2048 x 768 x 3072 with a
# residual add timed its best template at 0.0248 ms and cuBLAS at 0.0249, and the template ran at
# 0.022 ms against cuBLAS's 0.018 in the benchmark of another process. cuBLAS is eager's own path.
TEMPLATE_MARGIN = 0.97


def precompile(launches, device: torch.device | None = None) -> None:
    """Compile the candidates' kernels (JITFunction.warmup: no launch) in threads before they are timed
    one by one: ptxas runs as a process of its own and Triton's passes leave the GIL, so the configs
    compile side by side (Inductor's autotuning precompiles its templates in threads too). `launches`:
    (jit function, grid, args, kwargs); `device`: the CUDA device each thread compiles for (a thread
    starts on device 0). A config that fails here fails again when timed, and loses."""
    import concurrent.futures
    import contextlib

    def warm(item):
        fn, grid, args, kwargs = item
        try:
            with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
                fn.warmup(*args, grid=grid, **kwargs)
        except Exception as e:  # noqa: BLE001  (timing it reports the failure)
            log.debug("precompile of %s failed: %s", getattr(fn, "__name__", fn), e)
    items = list(launches)
    if len(items) < 2:
        return
    with concurrent.futures.ThreadPoolExecutor(min(PRECOMPILE_THREADS, len(items))) as pool:
        list(pool.map(warm, items))


def choose_by_timing(wrapper, group, i: int, users, outputs) -> tuple[str, MatmulConfig | None]:
    """("template", the fastest config) or ("cublas", None) for template group i (see the module docstring)."""
    from .wrapper import HEADER

    template = template_in(group)
    kernel = wrapper.template_kernel(group, i, users, outputs)
    kernel.name = "triton_tem_measured"
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    source = kernel.generate(allow_tf32=allow_tf32)
    device = template.get_device()
    measured = "\n".join([source, str(template.op), autotune_cache.device_description(device), f"allow_tf32={allow_tf32}",
                          f"candidates={template.choice}",
                          f"cublaslt_activations={wrapper.cfg.cublaslt_activations}",
                          f"matmul_tma={wrapper.cfg.matmul_tma}", *cache_files.versions()[:2]])
    path = cache_files.keyed_path(wrapper.cfg.cache_dir, "autotune", autotune_cache.matmul_key(measured))
    found = autotune_cache.read_matmul(path, measured)
    where = "disk"
    if found is None:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with torch.no_grad(), unset_fake_temporarily():   # real tensors, inside the compile's fake mode
            found = _measure(wrapper, group, i, users, outputs, kernel, source, HEADER)
        autotune_cache.write_matmul(path, measured, *found)
        where = "measured"
    choice, config, timings = found
    decision = next((d for d in wrapper.sched.matmuls if d.name == template.name), None)
    if decision is not None:
        decision.choice = choice
        timed = [t for t in timings if t[1] >= 0]   # (a config that failed is stored as -1)
        best = min(timed, key=lambda t: t[1]) if timed else None
        decision.reason = f"fastest of {len(timings)} timed ({where})" + (f": {best[0]}" if best else "")
        if best is not None and choice == "cublas" and best[0].startswith("template"):
            decision.reason = (f"cuBLAS kept ({where}): the fastest template, {best[0]} at {best[1]:.4f} ms, is "
                               f"within {1 - TEMPLATE_MARGIN:.0%} of it")
        decision.measured = [(name, ms) for name, ms in timings]
    log.info("%s: %s (%s) of %s", template.name, choice, where,
             ", ".join(f"{n} {ms:.4f} ms" for n, ms in timings))
    if choice == "template":
        return "template", MatmulConfig(**{**config, "persistent": bool(config.get("persistent", 0)),
                                           "tma": bool(config.get("tma", 0))})
    return "cublas", None


def _measure(wrapper, group, i, users, outputs, kernel, source: str, header: str):
    """(choice, config as a dict or None, [(candidate, ms)]) from timing every candidate."""
    prologue, template, epilogue = template_parts(group)
    template = template.node
    local = {m.name for m in epilogue if m.name not in outputs and users.get(m.name, set()) <= {i}}
    epilogue_kernel, epilogue_call = _pointwise_kernel(wrapper, epilogue, local, "epilogue")
    prologue_kernels = [_pointwise_kernel(wrapper, [p], set(), f"prologue_{j}") for j, p in enumerate(prologue)]
    b, m, n, k = template.sizes()
    candidates = matmul_configs(m, n, k, template.layout.dtype, template.batched,
                                tma=wrapper.cfg.matmul_tma and bool(kernel.tma_loads))
    text = header.format(graph=f"{wrapper.graph.name} (timing {template.name})") + "\n" + source
    # a source of its own for each other loop structure: the persistent loop over tiles, TMA loads
    for variant in sorted({(c.persistent, c.tma) for c in candidates} - {(False, kernel.config.tma)}):
        other = wrapper.template_kernel(group, i, users, outputs,
                                        next(c for c in candidates if (c.persistent, c.tma) == variant))
        other.name = _measured_name(*variant)
        text += "\n\n" + other.generate(allow_tf32=torch.backends.cuda.matmul.allow_tf32)
    for source_text, _ in [*prologue_kernels, (epilogue_kernel, None)]:
        if source_text is not None:
            text += "\n\n" + source_text
    module, _ = load_module(text, wrapper.cfg.cache_dir)
    layouts = _layouts(wrapper)
    tensors: dict[str, torch.Tensor] = {}
    gen = torch.Generator(device=template.get_device())   # the global RNG is left alone
    gen.manual_seed(0)

    def tensor(name: str) -> torch.Tensor:
        if name not in tensors:
            tensors[name] = _random(*layouts[name], gen)
        return tensors[name]

    def view(x) -> torch.Tensor:
        if isinstance(x, ReinterpretView):
            lay = x.layout
            return torch.as_strided(tensor(x.data.name), [hint(s) for s in lay.size], [hint(s) for s in lay.stride],
                                    hint(lay.offset))
        return tensor(x.name)

    args = [tensor(name) for name in kernel.signature()]
    timings: list[tuple[str, float]] = []
    configs = {}
    programs = program_count(template.get_device())

    def fn_of(config):
        if not config.persistent and config.tma == kernel.config.tma:
            return module.triton_tem_measured
        return getattr(module, _measured_name(config.persistent, config.tma))
    scratch_allocator()   # (TMA descriptors' scratch memory, for the launches below)
    if template.get_device().type == "cuda":
        precompile([(fn_of(c), c.grid(b, m, n, template.batched, programs), args,
                     {**c.meta(k, programs), "num_warps": c.num_warps, "num_stages": c.num_stages})
                    for c in candidates], template.get_device())
    for config in candidates:
        grid, meta = config.grid(b, m, n, template.batched, programs), config.meta(k, programs)
        fn = fn_of(config)

        def launch(fn=fn, grid=grid, meta=meta, config=config):
            fn[grid](*args, **meta, num_warps=config.num_warps, num_stages=config.num_stages)
        label = f"template {config.label()}"
        try:
            ms = time_ms(launch)
        except Exception as e:  # noqa: BLE001  (a config that fails to compile or launch just loses)
            log.debug("%s %s failed: %s", template.name, label, e)
            ms = math.inf
        timings.append((label, ms))
        configs[label] = config
    if template.choice == "tune":   # matmul_templates="always": a template whichever config wins
        best = min(timings, key=lambda t: t[1])   # (the default, first, where every one failed)
        return "template", _config_record(configs[best[0]]), [(n, ms if math.isfinite(ms) else -1.0)
                                                              for n, ms in timings]
    cublas_args = [view(x) for x in ((template.a, template.b) if template.bias is None
                                     else (template.bias, template.a, template.b))]
    op = template.op
    launches = []
    for _, call in [*prologue_kernels, (None, epilogue_call)]:
        if call is not None:
            launches.append((getattr(module, call.kernel), call.grid(),
                             [tensor(name) for name in call.args] + list(call.size_args()), call))

    def run(launch):
        fn, grid, args, call = launch
        fn[grid](*args, **call.meta, num_warps=call.num_warps)

    # where cuBLASLt would apply the epilogue itself (codegen does the same: wrapper.py), that one call
    lt = fused_activation(template, epilogue, users, outputs, i) if wrapper.cfg.cublaslt_activations else None
    if lt is not None:
        op, cublas_label, launches = torch.ops.aten._addmm_activation.default, f"cuBLAS with {describe_lt(lt[1])}", \
            launches[:len(prologue_kernels)]
        cublas_kwargs = {"use_gelu": lt[1] == "gelu"}
    else:
        cublas_label, cublas_kwargs = CUBLAS, {}

    def separate():   # the prologue kernels, the ATen call, the epilogue kernel
        for launch in launches[:len(prologue_kernels)]:
            run(launch)
        op(*cublas_args, **cublas_kwargs)
        for launch in launches[len(prologue_kernels):]:
            run(launch)
    cublas_ms = time_ms(separate)
    timings.append((cublas_label, cublas_ms))
    finite = [t for t in timings if math.isfinite(t[1])]
    best = min(finite, key=lambda t: t[1])
    timings = [(name, ms if math.isfinite(ms) else -1.0) for name, ms in timings]
    if best[0] == cublas_label or best[1] > cublas_ms * TEMPLATE_MARGIN:
        return "cublas", None, timings
    return "template", _config_record(configs[best[0]]), timings


def _config_record(c: MatmulConfig) -> dict[str, int]:
    return {"BLOCK_M": c.BLOCK_M, "BLOCK_N": c.BLOCK_N, "BLOCK_K": c.BLOCK_K, "GROUP_M": c.GROUP_M,
            "num_warps": c.num_warps, "num_stages": c.num_stages, "persistent": int(c.persistent),
            "tma": int(c.tma)}


def _measured_name(persistent: bool, tma: bool) -> str:
    """A timed variant's kernel name (the default config's own, non-persistent, is `triton_tem_measured`)."""
    return "triton_tem_measured" + ("_persistent" if persistent else "") + ("_tma" if tma else "_pointers")


def _pointwise_kernel(wrapper, nodes, local: set[str], role: str) -> tuple[str | None, KernelCallLine | None]:
    """`nodes` as the kernel they would be around a cuBLAS call (its source and launch), or (None, None)."""
    if not nodes:
        return None, None
    group = nodes[0] if len(nodes) == 1 else FusedSchedulerNode(nodes)
    _, numel, rnumel = group.group
    kernel = TritonKernel(nodes, numel, rnumel, local, wrapper.buffer_dtypes, wrapper.cfg.persistent_reduction_limit,
                          online_softmax=wrapper.cfg.online_softmax, buffer_spans=wrapper.buffer_spans)
    kernel.name = f"triton_poi_measured_{role}"
    source = kernel.generate()
    tiling = kernel.tiling
    call = KernelCallLine(kernel.name, kernel.signature(), tiling.xnumel if tiling else numel, None,
                          kernel.config.meta(False), kernel.config.num_warps, "",
                          ynumel=tiling.ynumel if tiling else None)
    return source, call


def _layouts(wrapper) -> dict[str, tuple]:
    """name → (size, stride, dtype, device) of every buffer, input and constant of the graph."""
    graph = wrapper.graph
    out = {}
    for b in [*graph.buffers, *[x for x in graph.inputs if isinstance(x, InputBuffer)]]:
        if b.layout is not None:
            lay = b.layout
            out[b.name] = ([hint(s) for s in lay.size], [hint(s) for s in lay.stride], lay.dtype, lay.device)
    for name, t in graph.constants.items():
        out[name] = (list(t.shape), list(t.stride()), t.dtype, t.device)
    return out


def _random(size, stride, dtype, device, gen: torch.Generator) -> torch.Tensor:
    span = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(s > 0 for s in size) else 0
    flat = torch.empty(span, dtype=dtype, device=device)
    if dtype.is_floating_point:
        flat.normal_(generator=gen)
    else:
        flat.zero_()
    return flat.as_strided(size, stride)
