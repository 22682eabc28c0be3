"""The package is installable and runnable: metadata, entry points, the CLI's help, the examples."""
import configparser
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from mini_inductor.cli import main
from mini_inductor.examples import EXAMPLES

ROOT = pathlib.Path(__file__).resolve().parents[1]


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


def test_setup_cfg_pins_triton_and_never_pins_a_torch_build():
    requires = _setup_cfg()["options"]["install_requires"].split()
    assert "triton==3.6.0" in requires
    torch_reqs = [r for r in requires if r.startswith("torch")]
    assert torch_reqs and all("==" not in r and "+cu" not in r for r in torch_reqs)


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
