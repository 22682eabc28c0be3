"""Run one program eagerly and compiled and say how it went.

    run_program(program, backend="mini_inductor", device="cpu") -> Outcome

Outcome classes: ok; wrong (compiled ran, a result differs: category value/dtype/shape/stride/
alias/mutation/grad/structure, or raises: eager raised dividing by a number argument that is 0 at
an other size set, the compiled call did not); ill_conditioned (a value or gradient missed, but eager itself, given
the inputs changed by one rounding step, misses the float64 result by half as much or more: rounding
noise the program amplifies, such as a gradient through a normalization of two elements; not counted
against us, its repro written for a look); error (compiled raised, eager did not: category is the
exception's type); eager_error (eager itself raised: the program is invalid). The workers add timeout
and crash.

Under --dynamic a program carries other input size sets (sizes.py): the function compiled at the traced
sizes is then also called at each, compared with eager at those sizes; a failure there names the call
and the sizes ("(call 3, sizes 1: x0 (5, 7)) output 0: ..."; Outcome.sizes), and an ok outcome counts
the calls that compiled anew (a Dynamo recompile, or mini_inductor's compile for those sizes).

Under --warm (MINI_FUZZ_WARM=1) the whole round of compiled calls runs twice, the second time after
torch._dynamo.reset() (this process's compiled graphs forgotten): a warm start, served from the disk
caches (the front cache where the graph qualifies: no AOT autograd), its failures labelled "(warm start)".
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import traceback

import torch

from .compare import compare_grads, compare_run
from .generate import _quiet, backward, backward_loss
from .program import Program, load
from .sizes import is_zero_division

CLASSES = ("ok", "wrong", "ill_conditioned", "error", "torch_bug", "timeout", "crash", "eager_error")


@dataclasses.dataclass
class Outcome:
    cls: str                 # one of CLASSES
    category: str = ""       # what differs (wrong), the exception type (error)
    detail: str = ""
    sizes: int = 0           # the size set of the call that failed: 0 the traced sizes, else an other one
    other_calls: int = 0     # ok: calls made at other sizes (--dynamic)
    recompiles: int = 0      # ok: of those, calls that compiled anew (Dynamo or mini_inductor; see detail)
    warm_caches: list = dataclasses.field(default_factory=list)   # --warm: the second compile's records' `cache`
    # --warm: why the first compile's graphs got no front cache entry (their records' `warm_start`)
    warm_notes: list = dataclasses.field(default_factory=list)

    def signature(self) -> str:
        """What makes two failures the same failure, for the shrinker: the class and category, for
        errors the message without its numbers and names of values, and whether it was at other sizes
        than the traced ones."""
        at = "@other_sizes" if self.sizes else ""
        if self.cls == "error":
            first = _without_shapes(self.detail.splitlines()[0] if self.detail else "")
            return f"error:{self.category}:{re.sub(r'[0-9]+', 'N', first)[:80]}{at}"
        return f"{self.cls}:{self.category}{at}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _without_shapes(line: str) -> str:
    """A message without the input shapes its call label names ("(call 3, sizes 1: x0 (5, 7)) ..." ->
    "(call 3, sizes 1) ..."): the shrinker changes them, and a failure stays the same failure."""
    if not line.startswith(("(call ", "(eager, ")):
        return line
    depth = 0
    for i, ch in enumerate(line):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return line[:i].split(":")[0] + line[i:]
    return line


def _backend(name: str):
    if name == "mini_inductor":
        import mini_inductor
        return mini_inductor.backend
    return name


def _error_text(err: BaseException) -> str:
    msg = str(err).strip()
    # Dynamo wraps a backend's exception; its own message is what names the stage and op
    lines = [ln for ln in msg.splitlines() if ln.strip() and not ln.startswith(("Set TORCH", "You can suppress"))]
    return "\n".join(lines[:6])[:1500]


@contextlib.contextmanager
def _default_float64():
    """The float64 run's default dtype too, around the program's body only: a float made of integers
    (logsumexp of an int32 input) is then float64 like everything else, not a float32 that meets
    float64 weights and raises. Not around the inputs or the loss's weights: drawn in float64, their
    random values would differ from eager's."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _float64(inputs: list) -> list:
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            y = x.detach().to(torch.float64)
            out.append(y.requires_grad_() if x.requires_grad else y)
        else:
            out.append(x)
    return out


def run_program(program: Program, backend: str = "mini_inductor", device: str = "cpu",
                runs: int = 2) -> Outcome:
    """`runs` calls of the compiled program at the traced sizes, then one at each of the program's other
    size sets (--dynamic: sizes.py), each compared with eager (and float64) at its own sizes."""
    if "flex" in program.families():
        # eager flex refuses a backward on the CPU; lifted for eager, compiled and aot_eager alike
        from .ops_flex import allow_eager_cpu_backward
        allow_eager_cpu_backward()
    make_inputs, f = load(program)

    def inputs_at(sizes: int) -> list:
        return make_inputs(device) if sizes == 0 else make_inputs(device, sizes)

    size_sets = range(1 + program.size_sets)
    eager = []      # per size set: (its inputs after the eager call, eager's outputs; or None, the error)
    for sizes in size_sets:
        try:
            with _quiet():
                eager_inputs = inputs_at(sizes)
                expected = f(*eager_inputs)
                if program.autograd:
                    backward(expected)
        except Exception as err:
            if sizes and is_zero_division(err):
                # a divisor argument 0 (sizes.py): the compiled call must raise as well
                eager.append((None, err))
                continue
            return Outcome("eager_error", type(err).__name__, _at(program, None, sizes) + _error_text(err),
                           sizes=sizes)
        eager.append((eager_inputs, expected))

    _, f64 = load(program.in_float64())

    def reference(sizes: int):
        inputs64 = _float64(inputs_at(sizes))
        with torch.no_grad(), _default_float64():
            return [t.detach() for t in f64(*inputs64)]

    def reference_grads(sizes: int):
        inputs64 = _float64(inputs_at(sizes))
        with _default_float64():
            outputs = f64(*inputs64)
        loss = backward_loss(outputs)
        loss.backward()
        return [x.grad if isinstance(x, torch.Tensor) else None for x in inputs64]

    calls = [0] * runs + list(size_sets[1:])      # the size set of each call
    recompiled = []                                # notes on the other-size calls that compiled anew
    warm_caches, warm_notes = [], []
    for warm in range(2 if os.environ.get("MINI_FUZZ_WARM") == "1" and backend == "mini_inductor" else 1):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=_backend(backend), fullgraph=True, **_dynamic_args(backend))
        records = _compile_counts()[1]
        failed = _calls(program, compiled, calls, inputs_at, eager, f, device, reference, reference_grads,
                        None if warm else recompiled, "(warm start) " if warm else "")
        if failed is not None:
            return failed
        from mini_inductor import metrics
        if warm:
            warm_caches = [r.cache or "?" for r in metrics.compiled_graphs[records:]]
        elif backend == "mini_inductor":
            warm_notes = [r.warm_start for r in metrics.compiled_graphs[records:] if r.warm_start]
    detail = f"compiled anew at other sizes: {'; '.join(recompiled)}" if recompiled else ""
    return Outcome("ok", detail=detail, other_calls=len(size_sets) - 1, recompiles=len(recompiled),
                   warm_caches=warm_caches, warm_notes=warm_notes)


def _calls(program: Program, compiled, calls: list, inputs_at, eager: list, f, device: str, reference,
           reference_grads, recompiled: list | None, prefix: str) -> Outcome | None:
    """The compiled calls of one round, each compared with eager: the first failure's Outcome, or None.
    `recompiled` (None: not noted) gets a note per other-size call that compiled anew."""
    for call, sizes in enumerate(calls):
        inputs = inputs_at(sizes)
        eager_inputs, expected = eager[sizes]
        label = prefix + _at(program, call, sizes)
        compiles = _compile_counts()
        if eager_inputs is None:
            try:
                with _quiet():
                    outputs = compiled(*inputs)
                    if program.autograd:
                        backward(outputs)
            except Exception:
                continue
            return Outcome("wrong", "raises", f"{label}eager raised {type(expected).__name__}: "
                           f"{_error_text(expected).splitlines()[0][:200]}; compiled returned", sizes=sizes)
        try:
            with _quiet():
                actual = compiled(*inputs)
                # compared before the next call, which may replay a CUDA graph over these outputs
                bad = compare_run(actual, expected, inputs, eager_inputs, lambda: reference(sizes))
                if bad is None and program.autograd:
                    backward(actual)
                    bad = compare_grads(inputs, eager_inputs, lambda: reference_grads(sizes), expected)
        except Exception as err:
            tb = traceback.extract_tb(err.__traceback__)
            where = next((f"{fr.filename.split('mini_inductor/')[-1]}:{fr.lineno}" for fr in reversed(tb)
                          if "mini_inductor/" in fr.filename), "")
            return Outcome("error", type(err).__name__, label + _error_text(err) + (f"\n  at {where}" if where else ""),
                           sizes=sizes)
        if sizes and recompiled is not None:
            note = _compiled_anew(compiles, f)
            if note:
                recompiled.append(f"sizes {sizes}: {note}")
        if bad is not None:
            category, why = bad
            why = label + why
            which = re.search(r"(?:output|grad of input) (\d+):", why)
            if category in ("value", "grad") and which:
                ours = actual if category == "value" else [x.grad if isinstance(x, torch.Tensor) else None
                                                          for x in inputs]
                amplified = _amplified_noise(f, lambda device, sizes=sizes: inputs_at(sizes), device,
                                             program.autograd, category, ours,
                                             (lambda: reference(sizes)) if category == "value"
                                             else (lambda: reference_grads(sizes)), int(which.group(1)))
                if amplified:
                    return Outcome("ill_conditioned", category, f"{why}\n  {amplified}", sizes=sizes)
            return Outcome("wrong", category, why, sizes=sizes)
    return None


def _at(program: Program, call: int | None, sizes: int) -> str:
    """Which call a message is about: "" for the first; "(call 2) "; "(call 3, sizes 1: x0 (5, 7)) ";
    "(eager, sizes 1: x0 (5, 7)) " for eager's run at other sizes (call None)."""
    if not call and not sizes:
        return ""
    where = "eager" if call is None else f"call {call + 1}"
    return f"({where}, sizes {sizes}: {program.shapes(sizes)}) " if sizes else f"({where}) "


def _compile_counts() -> tuple[int, int]:
    """(graphs Dynamo has compiled, graphs mini_inductor has compiled) in this process so far."""
    from torch._dynamo.utils import counters

    from mini_inductor import metrics
    return counters["stats"]["unique_graphs"], len(metrics.compiled_graphs)


def _compiled_anew(before: tuple[int, int], f) -> str:
    """What a call compiled that the traced call had not: a Dynamo recompile (with the guard that
    failed) or a graph mini_inductor compiled for these sizes (a symbolic compile it fell back from)."""
    from torch._dynamo.utils import guard_failures

    dynamo, graphs = (now - then for now, then in zip(_compile_counts(), before))
    notes = []
    if dynamo:
        failed = str((guard_failures.get(f.__code__) or [""])[-1]).strip()
        notes.append(f"Dynamo recompiled ({' '.join(failed.splitlines()[0].split())[:160] if failed else 'a guard failed'})")
    if graphs and not dynamo:
        notes.append(f"mini_inductor compiled {graphs} graph(s) for these sizes")
    return ", ".join(notes)


def _worst_error(values, refs) -> float:
    """The largest |value - reference| over the finite elements of the float tensors (float64)."""
    worst = 0.0
    for v, r in zip(values, refs):
        if not (isinstance(v, torch.Tensor) and isinstance(r, torch.Tensor) and v.is_floating_point()
                and v.shape == r.shape):
            continue
        d = (v.detach().cpu().double() - r.detach().cpu().double()).abs()
        d = d[torch.isfinite(d)]
        if d.numel():
            worst = max(worst, float(d.max()))
    return worst


def _amplified_noise(f, make_inputs, device: str, autograd: bool, category: str, ours, reference,
                     index: int) -> str:
    """Why a miss in output `index` (or input `index`'s gradient) is the program's rounding noise, or "":
    eager run on inputs each changed by about one rounding step (x·(1 ± eps), signs at random) misses
    the float64 result there by at least half of what the compiled run does. A bug of ours is not
    noise of that size, unless the program is that ill-conditioned where it went wrong."""
    try:
        with _quiet():
            refs = reference()
            gen = torch.Generator().manual_seed(0)
            moved = []
            for x in make_inputs(device):
                if isinstance(x, torch.Tensor) and x.is_floating_point():
                    # moved in its storage, and viewed as before: an expanded row stays constant, a
                    # degenerate input (std's zero, where eager's gradient is 0 by definition) stays so
                    flat = x.detach().as_strided((x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
                    sign = (torch.randint(0, 2, flat.shape, generator=gen) * 2 - 1).to(x.device, torch.float64)
                    flat = (flat.double() * (1 + torch.finfo(x.dtype).eps * sign)).to(x.dtype)
                    y = flat.as_strided(x.shape, x.stride(), x.storage_offset())
                    moved.append(y.requires_grad_() if x.requires_grad else y)
                else:
                    moved.append(x)
            outputs = f(*moved)
            if category == "grad":
                loss = backward_loss(outputs) if autograd else None
                if loss is None:
                    return ""
                loss.backward()
                outputs = [x.grad if isinstance(x, torch.Tensor) else None for x in moved]
    except Exception:
        return ""
    if refs is None or not index < min(len(ours), len(outputs), len(refs)):
        return ""
    mine, theirs = _worst_error(ours[index:index + 1], refs[index:index + 1]), \
        _worst_error(outputs[index:index + 1], refs[index:index + 1])
    if mine > 0 and theirs >= 0.5 * mine:
        return (f"ill-conditioned: eager with its inputs moved by one rounding step misses the float64 "
                f"result by {theirs:.3g}, the compiled run by {mine:.3g}")
    return ""


def _dynamic_args(backend: str) -> dict:
    """Under `--dynamic` (MINI_FUZZ_DYNAMIC=1, which the worker processes inherit): every size a symbol,
    and mini_inductor's one compile for every size."""
    if os.environ.get("MINI_FUZZ_DYNAMIC") != "1":
        return {}
    return {"dynamic": True, **({"options": {"dynamic_shapes": "symbolic"}} if backend == "mini_inductor" else {})}


def matmul_tma() -> None:
    """Under `--matmul-tma` (MINI_FUZZ_MATMUL_TMA=1, which the worker processes inherit): every mm and
    addmm a template of its own kernel, loading its fp16/bf16 operands through TMA descriptors where their
    layouts allow (option matmul_tma; Triton's interpreter runs the descriptors)."""
    if os.environ.get("MINI_FUZZ_MATMUL_TMA") != "1":
        return
    from mini_inductor import config
    config.config = config.config.replace(matmul_templates="always", matmul_tma=True)


def matmul_split() -> None:
    """Under `--matmul-split` (MINI_FUZZ_MATMUL_SPLIT=1, which the worker processes inherit): the path a
    GPU takes for most matmuls, on the CPU. Lowering makes every mm, addmm and bmm a template (on the CPU
    "auto" makes none), the scheduler fuses its epilogues and prologues into it, and the choice is
    cuBLAS: codegen emits the ATen call with the prologue and epilogues as kernels around it, or one
    aten._addmm_activation for a ReLU (option cublaslt_activations)."""
    if os.environ.get("MINI_FUZZ_MATMUL_SPLIT") != "1":
        return
    from mini_inductor import config
    from mini_inductor.lowering import matmul_lowerings
    from mini_inductor.scheduler import matmul_choice
    config.config = config.config.replace(matmul_templates="auto", cublaslt_activations=True)
    refusal = matmul_lowerings.template_refusal

    def as_on_cuda(op_name, inputs, dims):
        # every reason but the CPU's: a matmul of symbolic sizes (a dynamic graph) stays ATen's, as on a GPU
        graph = matmul_lowerings.current_graph()
        cfg = graph.cfg
        graph.cfg = cfg.replace(matmul_templates="always")
        try:
            return refusal(op_name, inputs, dims)
        finally:
            graph.cfg = cfg
    matmul_lowerings.template_refusal = as_on_cuda
    matmul_choice.prefer_template = lambda *a, **k: (False, "cuBLAS (fuzz --matmul-split)")

