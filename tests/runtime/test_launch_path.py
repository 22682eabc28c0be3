"""The launch path without CUDA graphs (runtime/launch/launcher.py): after a call site's first launch, later
launches go straight to a C launcher (torch's static one or the kernel's own); unaligned tensors still
take Triton's own path."""
import concurrent.futures
import sys
import time

import pytest
import torch

from mini_inductor import metrics
from mini_inductor.runtime.launch.launcher import FastKernel

pytestmark = pytest.mark.gpu


def _module_of_last_graph():
    path = metrics.compiled_graphs[-1].source_path
    (module,) = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path]
    return module


def _sites(module):
    return [site for value in vars(module).values() if isinstance(value, FastKernel) for site in value._sites.values()]


def test_second_call_launches_through_the_c_launcher_and_matches_eager():
    torch._dynamo.reset()
    metrics.reset()

    def f(x, y):
        return torch.softmax(x * 2, dim=-1) + y.sin()

    x, y = torch.randn(64, 300, device="cuda"), torch.randn(64, 300, device="cuda")
    compiled = torch.compile(f, backend="mini_inductor", options={"cudagraphs": False})
    first = compiled(x, y)
    sites = _sites(_module_of_last_graph())
    assert sites and all(s.kernel is not None for s in sites)
    # torch's static launcher (option static_launch, on by default), else Triton's C launcher directly
    assert all(s.static is not None or s.launch is not None for s in sites), "a site kept Triton's Python launcher"
    for _ in range(3):
        x, y = torch.randn_like(x), torch.randn_like(y)
        torch.testing.assert_close(compiled(x, y), f(x, y))
    torch.testing.assert_close(first.shape, f(x, y).shape)


def test_unaligned_input_takes_tritons_path_and_stays_correct():
    torch._dynamo.reset()
    metrics.reset()

    def f(x):
        return x.cos() * 3

    base = torch.randn(4097, device="cuda")
    compiled = torch.compile(f, backend="mini_inductor", options={"cudagraphs": False})
    aligned = base[:4096]
    torch.testing.assert_close(compiled(aligned), f(aligned))
    # the same sizes and strides one element in: a 4-byte offset, not 16-byte aligned
    unaligned = base[1:]
    torch.testing.assert_close(compiled(unaligned), f(unaligned))
    torch.testing.assert_close(compiled(aligned), f(aligned))


class _SlowLoadingKernel:
    """Stands in for a CompiledKernel whose `run` (loading its C launcher) takes a while."""

    inside = 0
    most_inside = 0

    def __init__(self, tag):
        self.tag, self._run = tag, None

    @property
    def run(self):
        cls = type(self)
        cls.inside += 1
        cls.most_inside = max(cls.most_inside, cls.inside)
        time.sleep(0.01)
        cls.inside -= 1
        self._run = ("launcher of", self.tag)
        return self._run


def test_triton_launchers_are_loaded_by_one_thread_at_a_time():
    # Python shares one module object among loads of `__triton_launcher`: two threads loading launchers
    # at once could swap them, so runtime/launch/precompile.py loads them under a lock
    from mini_inductor.runtime.launch.precompile import triton_launcher
    kernels = [_SlowLoadingKernel(i) for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(triton_launcher, kernels))
    assert got == [("launcher of", i) for i in range(8)]
    assert _SlowLoadingKernel.most_inside == 1
    assert triton_launcher(kernels[3]) == ("launcher of", 3)     # loaded once: served from the kernel
