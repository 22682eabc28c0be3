"""Partitions under CUDA graphs (cudagraph-tests.md §5 #28-#30, #40; see TOP40.md): a CPU round trip
gives one graph per GPU partition; a graph is split only at cudagraph_unsafe custom ops (or ops listed in
cudagraph_unsafe_ops, whose change needs no recompile), and with partitioning off such an op skips the
whole graph, naming it; buffers handed across partitions are neither lost nor reused too early. Messages
are read from the perf-hints logger. The item number of the spec is in a comment above each group.
"""
import logging

import pytest
import torch
from cg_helpers import compiled, graphed_partitions, skip_messages, stats

import mini_inductor
from mini_inductor.runtime.cudagraphs.utils import counters

pytestmark = pytest.mark.gpu

HAS_UNSAFE_TAG = hasattr(torch.Tag, "cudagraph_unsafe")


# --- #28 a CPU round trip: one graph per GPU partition -------------------------------------------

def round_trip(x):
    a = x.sin() + 1
    b = (a.cpu() * 2).cuda()        # GPU → CPU → GPU in the middle
    return (a + b).cos()


def test_cpu_round_trip_in_the_middle_gives_one_graph_per_gpu_partition():
    f = compiled(round_trip)
    for _ in range(5):
        x = torch.randn(32, device="cuda")
        torch.testing.assert_close(f(x), round_trip(x))
    assert graphed_partitions() == 2
    assert stats()["recordings"] == 2 and stats()["skips"] == 0


# --- #29 cudagraph_unsafe custom ops ----------------------------------------------------------------

if HAS_UNSAFE_TAG:
    @torch.library.custom_op("mini_cg_part::host_scale", mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,))
    def host_scale(x: torch.Tensor) -> torch.Tensor:
        return (x.cpu() * 2).to(x.device)

    @host_scale.register_fake
    def _(x):
        return torch.empty_like(x)


@torch.library.custom_op("mini_cg_part::shift", mutates_args=())
def shift(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@shift.register_fake
def _(x):
    return torch.empty_like(x)


def two_unsafe(x):
    a = torch.ops.mini_cg_part.host_scale(x.sin())
    b = torch.ops.mini_cg_part.shift(a.cos())
    return torch.ops.mini_cg_part.host_scale(b).exp()


def two_unsafe_eager(x):
    return ((((x.sin() * 2).cos() + 1) * 2)).exp()


needs_tag = pytest.mark.skipif(not HAS_UNSAFE_TAG, reason="torch.Tag.cudagraph_unsafe is missing")


@needs_tag
def test_graph_is_split_only_at_cudagraph_unsafe_custom_ops():
    f = compiled(two_unsafe)
    for _ in range(3):
        x = torch.randn(64, device="cuda")
        torch.testing.assert_close(f(x), two_unsafe_eager(x))
    assert graphed_partitions() == 3                 # before, between and after the two unsafe ops
    assert stats()["recordings"] == 3 and stats()["skips"] == 0


def test_untagged_custom_op_does_not_split_the_graph():
    f = compiled(lambda x: torch.ops.mini_cg_part.shift(x.sin()) * 2)
    for n in (8, 8, 8, 16, 16, 16, 24, 24, 24):
        x = torch.randn(n, device="cuda")
        torch.testing.assert_close(f(x), (x.sin() + 1) * 2)
    assert graphed_partitions() == 3                 # one per shape
    assert stats()["recordings"] == 3


@needs_tag
def test_each_shape_of_a_graph_with_an_unsafe_op_gets_its_two_graphs():
    def fn(x):
        return torch.ops.mini_cg_part.host_scale(x.sin()).cos()
    f = compiled(fn)
    for n in (64, 17, 42):
        for _ in range(3):
            x = torch.randn(n, device="cuda")
            torch.testing.assert_close(f(x), (x.sin() * 2).cos())
    assert stats()["recordings"] == 6 == graphed_partitions()


@needs_tag
def test_with_partitioning_off_an_unsafe_custom_op_skips_the_whole_graph_naming_it(caplog):
    f = compiled(two_unsafe, cudagraph_partition=False)
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for _ in range(3):
            x = torch.randn(64, device="cuda")
            torch.testing.assert_close(f(x), two_unsafe_eager(x))
    msgs = skip_messages(caplog, "skipping cudagraphs due to incompatible op")
    assert len(msgs) == 1 and "mini_cg_part.host_scale.default is tagged cudagraph_unsafe" in msgs[0]
    assert counters["skips"] == 1 and mini_inductor.cudagraphs.get_manager(0) is None


# --- #30 buffers across partitions ----------------------------------------------------------------

def masked_update(x, mask):
    r = x.clone() + 2
    r[mask] = -1.0                   # boolean-mask index_put_: ATen syncs, so it is cut out
    return r * 2 + r.sum()


def test_boolean_mask_index_put_hands_its_mutated_buffer_to_the_next_partition():
    f = compiled(masked_update)
    for _ in range(4):
        x = torch.randn(32, device="cuda")
        mask = torch.rand(32, device="cuda") > 0.5
        torch.testing.assert_close(f(x, mask), masked_update(x, mask))
    assert graphed_partitions() >= 2
    assert stats()["recordings"] == graphed_partitions() and stats()["skips"] == 0


def two_round_trips(x):
    a = x * 2
    b = (a.cpu() + 1).cuda()
    c = (b * a).sin()
    d = (c.cpu() - 1).cuda()
    return d + a + c


def test_buffers_live_across_two_cpu_round_trips_are_not_reused_too_early():
    f = compiled(two_round_trips)
    for _ in range(4):
        x = torch.randn(256, device="cuda")
        torch.testing.assert_close(f(x), two_round_trips(x))


# --- #40 listed ops ----------------------------------------------------------------------------

def scaled(x):
    return torch.ops.mini_cg_part.shift(x.sin()) * 3


def test_listed_ops_option_splits_when_set_and_changing_it_does_not_recompile():
    f = compiled(scaled)
    x = torch.randn(32, device="cuda")
    with mini_inductor.config.patch(cudagraph_unsafe_ops="mini_cg_part::shift"):
        for _ in range(3):
            torch.testing.assert_close(f(x), scaled(x))
    assert graphed_partitions() == 2
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(f(x), scaled(x))
    torch._dynamo.reset()
    mini_inductor.cudagraphs.reset()
    with mini_inductor.config.patch(cudagraph_unsafe_ops="mini_cg_part::shift.default"):
        for _ in range(3):
            torch.testing.assert_close(f(x), scaled(x))
    assert graphed_partitions() == 2
    torch._dynamo.reset()
    for _ in range(3):
        torch.testing.assert_close(f(x), scaled(x))
    assert graphed_partitions() == 1
