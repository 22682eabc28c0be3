"""Outputs of CUDA-graph trees (cudagraph-tests.md §5 #21-#25; see TOP40.md): output objects are reused
until a later graph aliases them; outputs aliasing a parameter or an input share its storage and hold no
pool memory; zero-size outputs are not live; a reused leaf output drops last iteration's grad and hooks;
the autocast cast cache keeps no replayed output. The item number of the spec is in a comment above
each group.
"""
import gc

import pytest
import torch
import torch.nn as nn
from cg_helpers import compiled, manager, step, tree_fn

pytestmark = pytest.mark.gpu


# --- #21 output-object reuse, turned off by a later alias --------------------------------------------

def test_output_object_is_reused_until_a_later_graph_aliases_it():
    a = tree_fn(lambda x: (x * 2,), "a")
    b = tree_fn(lambda y: (y[1:],), "b")
    x = torch.ones(16, device="cuda")
    ids = []
    for _ in range(4):
        step()
        (y,) = a([x])
        ids.append(id(y))
        del y
    assert ids[2] == ids[3]
    node = manager().roots[0][0]
    assert node.cacheable[0]
    for _ in range(3):
        step()
        (y,) = a([x])
        (v,) = b([y])
        assert v.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
        del y, v
    assert not node.cacheable[0]
    assert not node.cached_outputs or node.cached_outputs[0] is None


# --- #22 #23 aliasing and empty outputs ---------------------------------------------------------------

class ReturnsParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.randn(4, 4, device="cuda"))

    def forward(self, x):
        return self.p[0], self.p, self.p + x


def test_outputs_aliasing_a_parameter_share_its_storage_and_only_the_new_output_is_live():
    from torch.multiprocessing.reductions import StorageWeakRef
    m = ReturnsParameter()
    f = compiled(m)
    ref = StorageWeakRef(m.p.untyped_storage())
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(4, 4, device="cuda")
            row, p, s = f(x)
            assert row.untyped_storage().data_ptr() == p.untyped_storage().data_ptr() == m.p.data_ptr()
            torch.testing.assert_close(s, m.p + x)
            torch.testing.assert_close(row, m.p[0])
        assert not ref.expired()
        assert len(manager().current.path_live_refs()) == 1


def test_outputs_that_are_the_input_and_its_view_share_its_storage_and_hold_no_pool_memory():
    f = compiled(lambda x: (x, x[1:], x * 2))
    for _ in range(4):
        x = torch.randn(8, device="cuda")
        a, b, c = f(x)
        assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        torch.testing.assert_close(c, x * 2)
    assert len(manager().current.path_live_refs()) == 1          # c only


def test_under_no_grad_a_returned_parameter_and_its_slice_alias_it():
    m = ReturnsParameter()
    f = compiled(lambda x: (m.p, m.p[:2], x + 2))
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, device="cuda")
            p, sl, y = f(x)
            assert p.data_ptr() == sl.data_ptr() == m.p.data_ptr()
            torch.testing.assert_close(y, x + 2)


def test_zero_size_outputs_are_not_live_path_outputs():
    def fn(x):
        y = x * 2
        return y, torch.empty(0, device="cuda"), (x * 3)[2:2]
    f = tree_fn(fn)
    for _ in range(4):
        step()
        y, e1, e2 = f([torch.randn(8, device="cuda")])
        assert e1.numel() == 0 and e2.numel() == 0
        assert len(manager().current.path_live_refs()) == 1
    del y, e1, e2
    gc.collect()
    assert manager().live_pool_blocks() == 0


# --- #24 #25 hooks and the autocast cache --------------------------------------------------------

def test_a_reused_leaf_output_drops_last_iterations_grad_requires_grad_and_post_accumulate_hook():
    f = compiled(lambda x: x * 2)
    x = torch.randn(8, device="cuda")
    fired = []
    for i in range(5):
        with torch.no_grad():
            out = f(x)
        assert not out.requires_grad and out.grad is None
        out.requires_grad_()
        if i == 2:
            out.register_post_accumulate_grad_hook(lambda t, i=i: fired.append(i))
        (out * 3).sum().backward()
        torch.testing.assert_close(out.grad, torch.full_like(out, 3.0))
        if i % 2 == 0:   # a hook outlives requires_grad_(False): the next replay must drop it all the same
            out.grad = None
            out.requires_grad_(False)
        del out
    assert fired == [2]


def test_autocast_cast_cache_does_not_keep_a_replayed_output():
    f = compiled(lambda x: x + x)
    for i in range(5):
        with torch.no_grad():
            out = f(torch.rand(8, 8, device="cuda") + 1)
        out.requires_grad_()                           # a leaf that needs grad: autocast would cache its cast
        with torch.autocast("cuda", dtype=torch.float16):
            first = out @ out
            with torch.no_grad():
                out.zero_()
            second = out @ out
        if i >= 2:                                     # replays: outputs over graph memory
            assert first.abs().sum() > 0 and second.abs().sum() == 0
        del out
