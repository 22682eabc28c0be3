"""Compile each model of the zoo and print what mini_inductor made of it.

The zoo is mini_inductor/examples.py's ZOO, the models tests/e2e/test_model_zoo.py checks.

    python -m benchmarks.model_zoo_report                       # CPU: tiny sizes in Triton's interpreter
    python3 -m benchmarks.model_zoo_report --size real --dtype bfloat16     # GPU
    python -m benchmarks.model_zoo_report --models resnet,gpt2 --no-train

Per model and mode (inference: eval + no_grad; train: forward + backward of the loss), one row:
graphs compiled, Triton kernels, extern calls (library ops: mm, convolution, attention, seed draws;
fallbacks not included), fallback ops (ATen ops without a lowering), graphs that ran eagerly, and the largest difference from
eager. On a CUDA machine torchvision's resnet18 is added when torchvision is installed.
"""
from __future__ import annotations

import argparse
import collections
import copy
import os
import shutil
import time

if not (os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi")):
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import mini_inductor  # noqa: E402,F401
from mini_inductor import examples as zoo  # noqa: E402
from mini_inductor import metrics  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _counts(names) -> str:
    counts = collections.Counter(n.replace("aten.", "").replace(".default", "") for n in names)
    return ", ".join(f"{n}×{c}" if c > 1 else n for n, c in sorted(counts.items())) or "-"


def _summarize(model_name: str, mode: str, seconds: float, diff: float) -> dict:
    records = metrics.compiled_graphs
    fallbacks: collections.Counter = collections.Counter()
    for r in records:
        fallbacks.update(r.fallback_ops)
    return {
        "model": model_name, "mode": mode, "graphs": len(records),
        "kernels": sum(r.num_kernels for r in records),
        "extern": [n for r in records for n in r.extern_calls if n not in r.fallback_ops],
        "fallbacks": fallbacks,
        "eager_graphs": [f"{r.name}: {r.ran_eagerly}" for r in records if r.ran_eagerly],
        "seconds": seconds, "diff": diff,
    }


def _fresh():
    torch._dynamo.reset()
    metrics.reset()


def run_inference(name, model, inputs, dtype) -> dict:
    _fresh()
    model = copy.deepcopy(model).eval().to(dtype)
    inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
    start = time.perf_counter()
    with torch.no_grad():
        actual = torch.compile(model, backend="mini_inductor")(*inputs)
        seconds = time.perf_counter() - start
        expected = model(*inputs)
    return _summarize(name, f"inference {str(dtype).replace('torch.', '')}", seconds,
                      (actual.float() - expected.float()).abs().max().item())


def run_training(name, model, inputs, loss_fn) -> dict:
    _fresh()
    eager, compiled = model, copy.deepcopy(model)
    start = time.perf_counter()
    actual = torch.compile(lambda *xs: loss_fn(compiled(*xs), xs), backend="mini_inductor")(*inputs)
    actual.backward()
    seconds = time.perf_counter() - start
    expected = loss_fn(eager(*inputs), inputs)
    expected.backward()
    diff = (actual - expected).abs().item()
    for p_eager, p_compiled in zip(eager.parameters(), compiled.parameters()):
        diff = max(diff, (p_compiled.grad - p_eager.grad).abs().max().item())
    return _summarize(name, "train float32", seconds, diff)


def _models(names, real: bool, device):
    for name in (n for n in names if n in zoo.ZOO):
        model, inputs = zoo.build_zoo_model(name, real, device)
        yield name, model, inputs, zoo.ZOO[name].loss
    if device == "cuda" and "resnet18" in names:
        try:
            import torchvision
        except ImportError:
            print("torchvision is not installed: no resnet18 row")
            return
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = torchvision.models.resnet18(weights=None, num_classes=100)
            images = torch.randn(8, 3, 64, 64)
        yield "resnet18", model.to(device), (images.to(device),), zoo.classification_loss


def print_table(rows) -> None:
    print(f"{'model':<10} {'mode':<20} {'graphs':>6} {'kernels':>7} {'max |diff|':>10} {'compile+run s':>13}  "
          f"extern calls / fallback ops")
    for r in rows:
        print(f"{r['model']:<10} {r['mode']:<20} {r['graphs']:>6} {r['kernels']:>7} {r['diff']:>10.2e} "
              f"{r['seconds']:>13.1f}  extern: {_counts(r['extern'])}")
        fb = ", ".join(f"{op}×{n}" for op, n in sorted(r["fallbacks"].items())) or "none"
        print(f"{'':<10} {'':<20} {'':>6} {'':>7} {'':>10} {'':>13}  fallback: {fb}")
        for line in r["eager_graphs"]:
            print(f"{'':<60}  RAN EAGERLY {line}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cuda = torch.cuda.is_available()
    p.add_argument("--models", default=",".join(list(zoo.ZOO) + (["resnet18"] if cuda else [])),
                   help="comma-separated: " + ", ".join(zoo.ZOO) + ", resnet18 (GPU)")
    p.add_argument("--size", choices=["tiny", "real"], default="real" if cuda else "tiny")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32", help="inference dtype")
    p.add_argument("--no-train", action="store_true", help="inference rows only")
    args = p.parse_args()
    device = "cuda" if cuda else "cpu"
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in zoo.ZOO and n != "resnet18"]
    if unknown:
        p.error(f"unknown models {unknown}; the zoo has {list(zoo.ZOO)} and resnet18")
    print(f"mini_inductor model zoo on {device} ({'interpreter' if not cuda else torch.cuda.get_device_name()}), "
          f"{args.size} sizes")
    rows = []
    for name, model, inputs, loss_fn in _models(names, args.size == "real", device):
        rows.append(run_inference(name, model, inputs, DTYPES[args.dtype]))
        if not args.no_train:
            rows.append(run_training(name, model, inputs, loss_fn))
    print_table(rows)
    totals = collections.Counter()
    for r in rows:
        totals.update(r["fallbacks"])
    print(f"\n{sum(r['kernels'] for r in rows)} kernels in {sum(r['graphs'] for r in rows)} graphs; "
          f"fallback ops over all rows: {dict(totals) or 'none'}; "
          f"graphs run eagerly: {sum(len(r['eager_graphs']) for r in rows)}")


if __name__ == "__main__":
    main()
