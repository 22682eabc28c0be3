"""The package is installable and runnable: metadata, entry points, the torch range, the license, the
backend by name from a real `pip install`, the CLI's help, the examples."""
import configparser
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest
import torch

from mini_inductor import _version
from mini_inductor.cli import main
from mini_inductor.examples import EXAMPLES

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    assert cfg.read(ROOT / "setup.cfg"), "setup.cfg is missing"
    return cfg


def _entries(value: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in value.strip().splitlines() if line.strip())
    return {name.strip(): target.strip() for name, target in pairs}


def test_setup_cfg_declares_the_dynamo_backend_entry_point():
    entry_points = _setup_cfg()["options.entry_points"]
    assert _entries(entry_points["torch_dynamo_backends"]) == {"mini_inductor": "mini_inductor:backend"}


def test_setup_cfg_declares_the_console_script():
    entry_points = _setup_cfg()["options.entry_points"]
    assert _entries(entry_points["console_scripts"])["mini-inductor"] == "mini_inductor_cli:main"


def test_setup_cfg_leaves_triton_to_torch_and_never_pins_a_torch_build():
    requires = _setup_cfg()["options"]["install_requires"].split()
    assert not [r for r in requires if r.startswith("triton")]
    torch_reqs = [r for r in requires if r.startswith("torch")]
    assert torch_reqs and all("==" not in r and "+cu" not in r for r in torch_reqs)


def test_setup_cfg_torch_range_is_the_one_checked_at_import():
    requires = _setup_cfg()["options"]["install_requires"].split()
    low, high = _version.TORCH_MIN, _version.TORCH_BELOW
    assert f"torch>={low[0]}.{low[1]},<{high[0]}.{high[1]}" in requires


def test_an_older_torch_stops_the_import_naming_the_supported_range():
    with pytest.raises(ImportError, match=r"needs torch>=2\.11,<2\.16; this is torch 2\.10\.1\+cu128"):
        _version.check_torch("2.10.1+cu128")


def test_a_newer_torch_gets_a_warning_text_and_a_supported_one_none():
    assert "tested with torch>=2.11,<2.16; this is torch 2.16.0a0+git1234" in _version.check_torch("2.16.0a0+git1234")
    assert _version.check_torch("2.11.0") is None and _version.check_torch("2.15.0+cu132") is None
    assert _version.check_torch(torch.__version__) is None


def test_version_comes_from_the_version_module():
    import mini_inductor

    assert _setup_cfg()["metadata"]["version"] == "attr: mini_inductor._version.__version__"
    assert mini_inductor.__version__ == _version.__version__ == "0.1.0"


# ── the package as pip installs it ───────────────────────────────────────────────────────────
def _pip(*args: str, cwd: pathlib.Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, pathlib.Path]:
    """A wheel built from a copy of the tree (the tree stays clean) and pip-installed into a folder of
    its own, offline, as a user's `pip install` would lay it out."""
    work = tmp_path_factory.mktemp("packaging")
    src = work / "src"
    shutil.copytree(ROOT / "mini_inductor", src / "mini_inductor", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    _pip("wheel", "--no-deps", "--no-index", "--no-build-isolation", "-w", str(work / "dist"), str(src), cwd=work)
    (wheel,) = (work / "dist").glob("mini_inductor-*.whl")
    _pip("install", "--no-deps", "--no-index", "--target", str(work / "site"), str(wheel), cwd=work)
    return {"work": work, "src": src, "wheel": wheel, "site": work / "site"}


def _wheel_file(wheel: pathlib.Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(suffix)]
        return z.read(name).decode()


def test_wheel_metadata_requires_a_torch_range_and_no_triton_outside_the_interpreter_extra(installed):
    from packaging.requirements import Requirement

    meta = _wheel_file(installed["wheel"], ".dist-info/METADATA")
    requires = [Requirement(line.split(":", 1)[1].strip()) for line in meta.splitlines()
                if line.startswith("Requires-Dist:")]
    by_name = {(r.name, str(r.marker) if r.marker else ""): r for r in requires}
    assert str(by_name[("torch", "")].specifier) in ("<2.16,>=2.11", ">=2.11,<2.16")
    assert not [r for r in requires if r.name == "triton" and not r.marker]
    (interpreter,) = [r for r in requires if r.name == "triton"]
    assert str(interpreter.marker) == 'extra == "interpreter"'
    # the Triton that torch 2.11's, 2.13's and 2.15's CUDA wheels require all satisfy the extra
    assert all(interpreter.specifier.contains(v) for v in ("3.6.0", "3.7.1", "3.9.0"))
    assert "Version: 0.1.0" in meta


def test_wheel_and_sdist_carry_the_license(installed):
    assert "BSD 3-Clause License" in _wheel_file(installed["wheel"], "LICENSE")
    meta = _wheel_file(installed["wheel"], ".dist-info/METADATA")
    assert "BSD-3-Clause" in meta and "License-File: LICENSE" in meta
    out = installed["work"] / "sdist"
    proc = subprocess.run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"],
                          cwd=installed["src"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (sdist,) = out.glob("mini_inductor-0.1.0.tar.gz")
    with tarfile.open(sdist) as tar:
        assert "mini_inductor-0.1.0/LICENSE" in tar.getnames()


# How a user reaches the backend by name; each runs in a new process that sees only the installed
# package and the torch this test runs with.
ORDERS = {
    "by name, never imported": "",
    "imported, then by name": "import mini_inductor",
    "after a lookup that scanned the entry points, by name": "torch._dynamo.list_backends()",
    "after that scan, imported, then by name": "torch._dynamo.list_backends(); import mini_inductor",
    "imported, then the scan, then by name": "import mini_inductor; torch._dynamo.list_backends()",
}
BY_NAME = """
import sys, torch
{before}
x = torch.randn(8, 16)
out = torch.compile(lambda x: torch.relu(x) * 2 + 1, backend="mini_inductor")(x)
import mini_inductor
assert mini_inductor.__file__.startswith({site!r}), mini_inductor.__file__
assert len(mini_inductor.metrics.compiled_graphs) == 1, mini_inductor.metrics.compiled_graphs
torch.testing.assert_close(out, torch.relu(x) * 2 + 1)
print("MATCHES EAGER")
"""


@pytest.mark.slow
def test_installed_package_compiles_by_name_in_every_import_order(installed):
    """`torch.compile(f, backend="mini_inductor")` works whether or not the user imported the package,
    and whenever torch scanned the `torch_dynamo_backends` entry points. Slow: five processes that each
    import torch and compile, run at once (about 50 s on a busy 2-core machine)."""
    torch_site = pathlib.Path(torch.__file__).parents[1]
    # -S: no site-packages .pth files, so that no other (editable) copy of mini_inductor is importable
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(installed["site"]), str(torch_site)]),
               TRITON_INTERPRET="1")
    procs = {order: subprocess.Popen([sys.executable, "-S", "-c", BY_NAME.format(before=before, site=str(installed["site"]))],
                                     cwd=installed["work"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
             for order, before in ORDERS.items()}
    failed = {}
    for order, proc in procs.items():
        out, _ = proc.communicate(timeout=300)
        if proc.returncode != 0 or "MATCHES EAGER" not in out:
            failed[order] = out.strip().splitlines()[-1:]
    assert not failed, failed


def _run_module(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "mini_inductor", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_python_m_mini_inductor_help_exits_0():
    proc = _run_module("--help")
    assert proc.returncode == 0, proc.stderr
    assert "demo" in proc.stdout and "list" in proc.stdout


def test_list_names_every_example(capsys):
    assert main(["list"]) == 0
    stdout = capsys.readouterr().out
    for name, example in EXAMPLES.items():
        assert name in stdout and example.description in stdout


EXPECTED_OUTPUT_SHAPE = {  # on the CPU
    "transformer_block": (2, 16, 64),
    "mlp": (8, 64),
    "softmax_chain": (8, 32),
}


def test_every_example_has_an_expected_shape():
    assert set(EXPECTED_OUTPUT_SHAPE) == set(EXAMPLES)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_builds_and_runs_eagerly(name, dtype):
    model, inputs = EXAMPLES[name]("cpu", dtype)
    assert all(t.dtype == dtype and t.device.type == "cpu" for t in inputs)
    with torch.no_grad():
        out = model(*inputs)
    assert out.shape == EXPECTED_OUTPUT_SHAPE[name]
    assert out.dtype == dtype
    assert torch.isfinite(out).all()


def test_examples_are_deterministic_and_leave_the_global_rng_alone():
    state = torch.get_rng_state()
    model_a, (x_a,) = EXAMPLES["mlp"]("cpu", torch.float32)
    model_b, (x_b,) = EXAMPLES["mlp"]("cpu", torch.float32)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(x_a, x_b)
    with torch.no_grad():
        assert torch.equal(model_a(x_a), model_b(x_b))
