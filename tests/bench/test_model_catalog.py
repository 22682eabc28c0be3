"""One model catalog, mini_inductor/examples.py: the benchmarks' and the test zoo's models are its
objects, not copies."""
import ast
import inspect
import pathlib

import torch
from torch import nn

import mini_inductor.examples as catalog
from benchmarks import model_zoo_report, models

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _defined_in_catalog(obj) -> bool:
    return (pathlib.Path(inspect.getsourcefile(obj)).resolve() == pathlib.Path(catalog.__file__).resolve()
            and getattr(catalog, obj.__name__, None) is not None)


def test_every_module_class_the_benchmarks_use_is_the_catalogs():
    classes = [v for v in vars(models).values() if isinstance(v, type) and issubclass(v, nn.Module)]
    assert {c.__name__ for c in classes} >= {"TransformerBlock", "DecoderStack", "NormHeavy", "MLPWithNorm"}
    assert all(_defined_in_catalog(c) for c in classes), [c for c in classes if not _defined_in_catalog(c)]


def test_the_launch_bound_benchmark_builds_the_catalogs_linear_silu_stack():
    work = models.launch_bound("cpu", torch.float32)
    torch.manual_seed(0)
    expected = catalog.linear_silu_stack(256, 12)
    assert [type(m) for m in work.model] == [type(m) for m in expected]
    for got, want in zip(work.model.state_dict().values(), expected.state_dict().values()):
        assert torch.equal(got, want)


def test_the_model_zoo_report_reads_the_catalogs_zoo():
    assert model_zoo_report.zoo.ZOO is catalog.ZOO


def test_the_test_zoo_and_the_benchmarks_define_no_model_of_their_own():
    for path in ("tests/e2e/test_model_zoo.py", "benchmarks/models.py", "benchmarks/launch_overhead.py"):
        tree = ast.parse((ROOT / path).read_text())
        own = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
               and any("Module" in ast.unparse(base) for base in n.bases)]
        assert not own, f"{path} defines {own}: models belong in mini_inductor/examples.py"


def test_a_zoo_model_is_built_from_a_fixed_seed():
    (m1, x1), (m2, x2) = (catalog.build_zoo_model("mlp_mixer", False, "cpu") for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert all(torch.equal(a, b) for a, b in zip(x1, x2))
