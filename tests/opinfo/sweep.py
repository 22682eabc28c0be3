"""Run one OpInfo op through mini_inductor and classify it.

    generated   every sample matched eager; at least one Triton kernel and no ATen fallback of the op itself
    view        every sample matched eager with neither kernels nor fallbacks (views, aliases, metadata)
    fallback    every sample matched eager; the op itself (or all of the work) ran through ATen
    failed      an error or a mismatch with eager (structure, dtype, shape, strides, values within the
                dtype's tolerance; for float16/bfloat16 a float64 reference settles values, see compare.py)
    skipped     no sample usable: eager raises, the dtype is unsupported, or Dynamo cannot trace it
                into one graph even with the aot_eager backend (not mini_inductor's doing)

Samples are the op's first `MAX_SAMPLES` OpInfo sample inputs of at most `MAX_NUMEL` elements (the
interpreter is slow). Random ops are compared on shapes and dtypes only.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import traceback

import torch
import torch._dynamo
from torch.utils import _pytree as pytree

from compare import LOW_PRECISION, compare

# MINI_OPINFO_SAMPLES / MINI_OPINFO_SKIP: how many small samples to run, after skipping how many
# (a second sweep with MINI_OPINFO_SKIP=2 checks other samples in the same time).
MAX_SAMPLES = int(os.environ.get("MINI_OPINFO_SAMPLES", "2"))  # the CI subset runs 1 (see test_opinfo.py)
SKIP_SAMPLES = int(os.environ.get("MINI_OPINFO_SKIP", "0"))
MAX_NUMEL = 4096
SAMPLES_SCANNED = 12 + 2 * (MAX_SAMPLES + SKIP_SAMPLES)   # sample inputs looked at to find the small ones

# Values are random (or uninitialised): compare shapes and dtypes only.
NONDETERMINISTIC = {
    "bernoulli", "normal", "normal.number_mean", "normal.in_place", "uniform", "rand_like", "randn_like",
    "randint_like", "randint", "multinomial", "cauchy", "exponential", "geometric", "log_normal",
    "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.feature_alpha_dropout.without_train", "nn.functional.rrelu", "torch.empty",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d", "svd_lowrank",
    "pca_lowrank", "nn.functional.multi_head_attention_forward", "randn", "rand",
}


def op_id(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@dataclasses.dataclass
class Outcome:
    status: str
    detail: str = ""
    kernels: int = 0
    fallbacks: tuple[str, ...] = ()


def _numel(sample) -> int:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return sum(t.numel() for t in leaves if isinstance(t, torch.Tensor))


def small_samples(op, device: str, dtype: torch.dtype, max_samples: int = MAX_SAMPLES) -> list:
    samples = []
    for sample in itertools.islice(op.sample_inputs(device, dtype, requires_grad=False), SAMPLES_SCANNED):
        if _numel(sample) <= MAX_NUMEL:
            samples.append(sample)
        if len(samples) == SKIP_SAMPLES + max_samples:
            break
    return samples[SKIP_SAMPLES:]


def _split(sample):
    """The sample's tensors (graph inputs) and a function rebuilding (input, args, kwargs) from them."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    tensors = [leaves[i] for i in positions]

    def rebuild(new_tensors):
        out = list(leaves)
        for i, t in zip(positions, new_tensors):
            out[i] = t
        return pytree.tree_unflatten(out, spec)
    return tensors, rebuild


def _clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone() if t.is_contiguous() else t.detach().clone(memory_format=torch.preserve_format)


def _upcast(tensors, dtype: torch.dtype) -> list:
    """The sample's tensors for the float64 reference: those of the sweep's low-precision dtype upcast."""
    if dtype not in LOW_PRECISION:
        return [_clone(t) for t in tensors]
    return [t.detach().to(torch.float64) if t.dtype == dtype else _clone(t) for t in tensors]


def _traceable_elsewhere(fn, tensors) -> bool:
    """Dynamo + AOTAutograd trace `fn` into one graph with the aot_eager backend."""
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=False)(*[_clone(t) for t in tensors])
        return True
    except Exception:
        return False
    finally:
        torch._dynamo.reset()


def _own_names(op) -> set[str]:
    names = {op.name.split(".")[-1], op.name.replace(".", "_")}
    if getattr(op, "aten_name", None):
        names.add(op.aten_name)
    return {n.rstrip("_") for n in names if n}


def run_op(op, device: str, dtype: torch.dtype, max_samples: int = MAX_SAMPLES) -> Outcome:
    import mini_inductor  # noqa: F401  registers the backend
    from mini_inductor import metrics

    if dtype not in op.supported_dtypes(device):
        return Outcome("skipped", f"{dtype} unsupported")
    try:
        samples = small_samples(op, device, dtype, max_samples)
    except Exception as e:
        return Outcome("skipped", f"sample inputs raise {type(e).__name__}")
    name = op_id(op)
    values = name not in NONDETERMINISTIC and op.name not in NONDETERMINISTIC
    used, kernels, fallbacks = 0, 0, []
    for sample in samples:
        tensors, rebuild = _split(sample)

        def fn(*ts, _rebuild=rebuild):
            inp, args, kwargs = _rebuild(ts)
            return op.op(inp, *args, **kwargs)

        try:
            torch.manual_seed(0)
            expected = fn(*[_clone(t) for t in tensors])
        except Exception:
            continue  # eager rejects this sample
        torch._dynamo.reset()
        metrics.reset()
        try:
            torch.manual_seed(0)
            compiled = torch.compile(fn, backend="mini_inductor", fullgraph=True, dynamic=False)
            actual = compiled(*[_clone(t) for t in tensors])
        except Exception as e:
            if not _traceable_elsewhere(fn, tensors):
                continue  # Dynamo/AOTAutograd cannot take it: not ours to judge
            lines = traceback.format_exception_only(type(e), e)[-1].strip().splitlines()
            return Outcome("failed", f"{type(e).__name__}: {lines[0][:300] if lines else ''}")
        bad = compare(actual, expected, dtype, values, reference=lambda: fn(*_upcast(tensors, dtype)))
        if bad:
            return Outcome("failed", f"mismatch: {bad}"[:400])
        used += 1
        kernels += metrics.total_kernels()
        fallbacks += list(metrics.total_fallbacks())
        fallbacks += [f"eager graph ({g.ran_eagerly})" for g in metrics.compiled_graphs if g.ran_eagerly]
    torch._dynamo.reset()
    if not used:
        return Outcome("skipped", "no usable sample (eager raises, too large, or not traceable)")
    own = _own_names(op)
    fell_back = sorted(set(str(f) for f in fallbacks))
    own_fallback = any(str(f).split(".")[1].rstrip("_") in own for f in fell_back if "." in str(f))
    if kernels and not own_fallback:
        status = "generated"
    elif not kernels and not fell_back:
        status = "view"
    else:
        status = "fallback"
    return Outcome(status, ", ".join(fell_back), kernels, tuple(fell_back))
