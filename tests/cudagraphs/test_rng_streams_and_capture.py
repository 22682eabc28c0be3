"""Random numbers, streams and capture hazards under CUDA graphs (cudagraph-tests.md §5 #33, #35, #36;
see TOP40.md): a seeded random function repeats its sequence and multinomial equals eager's samples;
first calls from a user stream wait for its queued work, and a side-stream allocation inside a recording
works; a convolution with cudnn.benchmark on and a fresh process's first matmul are recorded. The item
number of the spec is in a comment above each group.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from cg_helpers import compiled, stats

import mini_inductor
from mini_inductor.runtime.cudagraphs.utils import counters

pytestmark = pytest.mark.gpu


# --- #33 RNG ---------------------------------------------------------------------------------------

def test_seeded_zero_argument_random_function_repeats_its_sequence():
    f = compiled(lambda: torch.rand(20, device="cuda"))
    torch.manual_seed(0)
    first = [f().clone() for _ in range(3)]          # warmup, recording, replay
    torch.manual_seed(0)
    second = [f().clone() for _ in range(3)]         # replays
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b)
    assert not torch.equal(first[0], first[1])
    assert stats()["recordings"] == 1


def test_recording_draws_new_numbers_when_the_capture_streams_rng_fills_run_late(monkeypatch):
    # capture_begin writes the generator's seed and offset 0 into its device tensors on the capture
    # stream, outside the capture; the recording's first replay writes the call's offset there on the
    # caller's stream. Twice in full GPU runs (8 workers on one GPU) the recording then returned the
    # warm-up's dropout mask. Here the capture stream's writes are held back by a spin and the graph
    # starts with a longer one, so an unordered replay would read offset 0 again.
    import torch.nn.functional as F
    base = torch.cuda.CUDAGraph

    class LateFills(base):
        def capture_begin(self, *args, **kwargs):
            torch.cuda._sleep(int(3e8))          # on the capture stream, before capture_prologue's fills
            super().capture_begin(*args, **kwargs)
            torch.cuda._sleep(int(9e8))          # captured: the graph's first node, before its seed draw

    f = compiled(lambda x: (F.dropout(x, 0.5, training=True), torch.randn_like(x)))
    x = torch.rand(64, 64, device="cuda") + 1
    torch.manual_seed(5)
    runs = [tuple(t.clone() for t in f(x))]      # warm-up
    monkeypatch.setattr(torch.cuda, "CUDAGraph", LateFills)
    runs += [tuple(t.clone() for t in f(x)) for _ in range(2)]   # recording, replay
    assert stats()["recordings"] == 1
    for i in (1, 2):
        assert not torch.equal(runs[i][0], runs[i - 1][0]), f"call {i} repeated the previous dropout mask"
        assert not torch.equal(runs[i][1], runs[i - 1][1]), f"call {i} repeated the previous randn values"


def test_multinomial_samples_equal_eagers_under_the_same_seed_without_a_skip():
    def fn(p):
        return torch.multinomial(p, 4, replacement=True)
    f = compiled(fn)
    for i in range(4):
        p = torch.rand(3, 10, device="cuda")
        torch.manual_seed(i)
        got = f(p)
        torch.manual_seed(i)
        assert torch.equal(got, fn(p))
    assert counters["skips"] == 0


# --- #35 streams ---------------------------------------------------------------------------------

def test_first_calls_from_a_user_stream_wait_for_the_work_queued_on_it():
    f = compiled(lambda x: (x @ x).relu())
    side = torch.cuda.Stream()
    for _ in range(3):                               # warmup, recording, replay
        with torch.cuda.stream(side):
            x = torch.randn(1024, 1024, device="cuda")
            for _ in range(10):
                x = torch.tanh(x @ x)                # long work queued on the user's stream
            res = f(x) + 1                           # used at once on that stream
        torch.cuda.synchronize()
        torch.testing.assert_close(res, (x @ x).relu() + 1, atol=1e-2, rtol=1e-3)


_SIDE: dict = {}


@torch.library.custom_op("mini_cg_part::side_stream_ones", mutates_args=())
def side_stream_ones(x: torch.Tensor) -> torch.Tensor:
    main = torch.cuda.current_stream()
    side = _SIDE.setdefault("stream", torch.cuda.Stream())
    side.wait_stream(main)
    with torch.cuda.stream(side):
        a = torch.ones_like(x)                       # allocated on a side stream
    main.wait_stream(side)
    b = torch.ones_like(x)
    return a * b


@side_stream_ones.register_fake
def _(x):
    return torch.empty_like(x)


def test_side_stream_allocation_inside_a_recorded_graph_works():
    f = compiled(lambda x: torch.ops.mini_cg_part.side_stream_ones(x) * x)
    for _ in range(3):
        mini_inductor.mark_step()
        x = torch.randn(64, device="cuda")
        torch.testing.assert_close(f(x), x)
    assert stats()["recordings"] == 1


# --- #36 capture hazards -------------------------------------------------------------------------

def test_conv_with_cudnn_benchmark_on_is_recorded_and_matches_eager():
    conv = nn.Conv2d(3, 8, 3, padding=1).cuda()
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=False):
        f = compiled(conv)
        with torch.no_grad():
            for _ in range(4):
                x = torch.randn(2, 3, 16, 16, device="cuda")
                torch.testing.assert_close(f(x), conv(x), atol=1e-4, rtol=1e-4)
    assert stats()["recordings"] == 1


def test_first_recorded_matmul_in_a_fresh_process_succeeds():
    # cuBLAS creates its workspace at the first matmul: the tree clears workspaces around captures,
    # so a workspace is never allocated inside the pool behind the allocator's back
    script = textwrap.dedent("""
        import torch, mini_inductor
        f = torch.compile(lambda x, y: (x @ y).relu(), backend="mini_inductor", dynamic=False)
        for _ in range(4):
            x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
            torch.testing.assert_close(f(x, y), (x @ y).relu(), atol=1e-3, rtol=1e-3)
        s = mini_inductor.cudagraphs.stats(0)
        assert s["recordings"] == 1 and s["replays"] == 2, s
        print("FRESH_PROCESS_OK")
    """)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "FRESH_PROCESS_OK" in done.stdout, done.stderr[-3000:]
