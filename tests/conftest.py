"""Shared test setup.

- Without a CUDA GPU, Triton kernels run in Triton's interpreter: TRITON_INTERPRET=1 is set here
  before anything imports triton (Triton reads it when kernels are defined).
- `device` fixture: "cuda" when available, else "cpu".
- Tests marked `gpu` are skipped without a CUDA GPU.
- MINI_INDUCTOR_VERIFY_MEMORY_PLAN=1 unless set: every compile checks its wrapper's buffer lifecycles.
- Before each test: torch._dynamo.reset() and mini_inductor.metrics.reset(); an empty cache dir
  (MINI_INDUCTOR_CACHE_DIR), so nothing is served from an earlier test's on-disk cache.
- `--min-passed=N`: fail a run that passed fewer than N tests (`make test` uses 1, so a run that
  skipped or deselected everything is red, not green).
"""
import os
import shutil
import sys

# A first guess before torch is imported, in case importing torch pulls in triton on some build.
if not (os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi")):
    os.environ["TRITON_INTERPRET"] = "1"

# Every compile in the tests checks its memory plan's buffer lifecycles (config.verify_memory_plan).
os.environ.setdefault("MINI_INDUCTOR_VERIFY_MEMORY_PLAN", "1")

import torch  # noqa: E402  (the environment must be set first)

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # The GPU may be present but unusable (a CPU build of torch, no driver): decide on torch's view.
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("triton was imported before TRITON_INTERPRET=1 could be set; "
                           "set TRITON_INTERPRET=1 in the environment")
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

GPU_REASON = "needs a CUDA GPU"


def pytest_addoption(parser):
    parser.addoption("--min-passed", type=int, default=0, metavar="N",
                     help="fail the run when fewer than N tests passed")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason=GPU_REASON)
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: the controller counts for everyone
        return
    min_passed = config.getoption("--min-passed")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not min_passed or reporter is None or exitstatus != pytest.ExitCode.OK:
        return
    passed = len([r for r in reporter.stats.get("passed", []) if r.when == "call"])
    if passed < min_passed:
        reporter.write_line(f"FAILED: {passed} tests passed, --min-passed={min_passed} "
                            f"(everything skipped or deselected?)", red=True, bold=True)
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.fixture
def device():
    return "cuda" if HAS_CUDA else "cpu"


@pytest.fixture(autouse=True)
def _fresh_compile_state():
    """Each test starts with empty Dynamo caches and empty mini_inductor metrics."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        # Imported here, not at the top, so this file loads even while the core is missing.
        from mini_inductor import metrics
    except ImportError:
        metrics = None
    if metrics is not None:
        metrics.reset()
    yield


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path_factory, monkeypatch):
    """Each test gets an empty mini_inductor cache dir (here and in the processes it starts), so a
    graph compiled by an earlier test or run is not served from the on-disk cache: tests that
    monkeypatch a lowering or count compiles see a real compile."""
    folder = str(tmp_path_factory.mktemp("mi_cache"))
    monkeypatch.setenv("MINI_INDUCTOR_CACHE_DIR", folder)
    try:
        from mini_inductor import config as config_module
    except ImportError:
        yield
        return
    monkeypatch.setattr(config_module, "config", config_module.config.replace(cache_dir=folder))
    yield


@pytest.fixture(autouse=True)
def _tensors_on_the_gpu_when_there_is_one(request):
    """Tests that make tensors without naming a device get CUDA ones on a GPU machine.

    On the CPU they are CPU tensors run through Triton's interpreter; on the GPU machine (no
    interpreter) CPU tensors would only run eagerly, so the same tests check the GPU code instead.
    Tests that want the CPU say device="cpu"; tests taking the `device` fixture place tensors themselves.
    """
    if not torch.cuda.is_available() or "device" in request.fixturenames:
        yield
        return
    torch.set_default_device("cuda")
    try:
        yield
    finally:
        torch.set_default_device(None)
