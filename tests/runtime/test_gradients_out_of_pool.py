"""A backward's parameter gradients moved out of the CUDA-graph pool in one batched copy
(runtime/cudagraphs/gradients.py), on CPU tensors: the values, the layout of the fresh buffer, and
AccumulateGrad adopting the results. On the GPU, tests/cudagraphs/test_compiled_cudagraphs.py checks
a compiled training loop with it (no copy per parameter, `.grad` out of the pool)."""
import warnings
import weakref

import torch

from mini_inductor.runtime.cudagraphs.gradients import ALIGN, GradientsOutOfPool, _storage_key, move_out_of_pool


def outputs():
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(5, 7, generator=gen).t(),            # 0: a parameter's, transposed
            torch.randn(3, generator=gen),                   # 1: not a parameter's
            torch.randn(7, generator=gen),                   # 2: an odd size: the next is padded
            None,                                            # 3: no gradient
            torch.randn(3, 3, generator=gen).half(),         # 4: another dtype
            torch.randn(9, generator=gen))                   # 5


def move(out, idxs=(0, 2, 3, 4, 5), mover=None):
    mover = mover or GradientsOutOfPool(idxs)
    with torch.no_grad():
        return (*mover(out), mover)


def test_parameter_gradients_get_fresh_aligned_memory_with_their_values():
    out = outputs()
    new, moved, _ = move(out)
    assert moved == {0, 2, 4, 5}
    assert new[1] is out[1] and new[3] is None
    for i in moved:
        assert torch.equal(new[i], out[i]) and new[i].dtype == out[i].dtype and new[i].is_contiguous()
        assert new[i].untyped_storage().data_ptr() != out[i].untyped_storage().data_ptr()
        assert (new[i].data_ptr() - new[i].untyped_storage().data_ptr()) % ALIGN == 0, i   # from the buffer's start
    # one buffer per dtype
    assert len({new[i].untyped_storage().data_ptr() for i in (0, 2, 5)}) == 1
    assert new[4].untyped_storage().data_ptr() != new[0].untyped_storage().data_ptr()


def two_parameter_step(p, q, pool_values):
    """`step()`: a backward of p and q whose gradients come out of one mover, as a compiled backward's
    do; `pool_values()` gives the pool tensors (held while the mover runs, as the tree's pins hold them)."""
    mover = GradientsOutOfPool((0, 1))

    class Step(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a.sum() + b.sum()

        @staticmethod
        def backward(ctx, g):
            held = pool_values()
            new, moved = mover(held)
            assert moved == {0, 1}
            return new[0], new[1]
    return lambda: Step.apply(p, q).backward()


def test_autograd_adopts_the_moved_gradients_instead_of_copying_them():
    p, q = torch.nn.Parameter(torch.zeros(7, 5)), torch.nn.Parameter(torch.zeros(7))
    step = two_parameter_step(p, q, lambda: (torch.full((5, 7), 2.0).t(), torch.full((7,), 3.0)))
    step()
    assert torch.equal(p.grad, torch.full((7, 5), 2.0)) and torch.equal(q.grad, torch.full((7,), 3.0))
    # adopted: both gradients are still in the one buffer the mover allocated
    assert p.grad.untyped_storage().data_ptr() == q.grad.untyped_storage().data_ptr()
    step()   # accumulation adds in place, as for any gradient
    assert torch.equal(p.grad, torch.full((7, 5), 4.0)) and torch.equal(q.grad, torch.full((7,), 6.0))


def test_the_layout_is_planned_once_and_again_when_the_outputs_change():
    out = outputs()
    _, _, mover = move(out)
    plan = mover.groups
    _, moved, _ = move(outputs(), mover=mover)
    assert mover.groups is plan and moved == {0, 2, 4, 5}
    changed = list(outputs())
    changed[2] = None                        # a gradient no longer computed
    new, moved, _ = move(changed, mover=mover)
    assert mover.groups is not plan and moved == {0, 4, 5} and new[2] is None
    changed[5] = torch.randn(4, 4)           # another shape
    new, moved, _ = move(changed, mover=mover)
    assert torch.equal(new[5], changed[5]) and (new[5].data_ptr() - new[5].untyped_storage().data_ptr()) % ALIGN == 0


def test_nothing_moves_under_create_graph_or_without_parameters():
    out = outputs()
    with torch.enable_grad():
        new, moved = GradientsOutOfPool((0, 2))(out)
    assert moved == set() and new is out
    new, moved, _ = move(out, idxs=())
    assert moved == set() and new is out


def test_a_compiled_backward_knows_which_outputs_are_parameters_gradients(monkeypatch):
    # pipeline.py `_param_grad_idxs`: AOT autograd's backward returns one gradient per forward input
    import mini_inductor  # noqa: F401
    from mini_inductor import runtime

    made = []
    init = runtime.CompiledGraph.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)
    monkeypatch.setattr(runtime.CompiledGraph, "__init__", spy)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3, bias=False))
    compiled = torch.compile(model, backend="mini_inductor")
    compiled(torch.randn(4, 6, requires_grad=True)).sum().backward()
    backward = next(g for g in made if g.kind == "backward")
    forward = next(g for g in made if g.kind == "forward")
    assert forward.param_grad_idxs == ()
    assert len(backward.param_grad_idxs) == len(list(model.parameters()))
    outs = []
    call = backward._call
    backward._call = lambda args, constants: outs.extend(call(args, constants)) or outs
    compiled(torch.randn(4, 6, requires_grad=True)).sum().backward()
    shapes = sorted(tuple(outs[i].shape) for i in backward.param_grad_idxs)
    assert shapes == sorted(tuple(p.shape) for p in model.parameters())
    assert (4, 6) in [tuple(o.shape) for i, o in enumerate(outs) if i not in backward.param_grad_idxs and o is not None]



def test_a_gradient_a_hook_kept_is_not_what_later_steps_accumulate_into():
    # review, session 31: a mover that kept its buffer for the next step (registered as cached tensors
    # so that AccumulateGrad would still adopt it) let AccumulateGrad adopt the very tensor a hook
    # had kept, and the next micro-batch's gradient was added into the user's logged tensor
    p, q = torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(3))
    k = iter(range(1, 10))
    step = two_parameter_step(p, q, lambda: (torch.full((4,), float(v := next(k))), torch.full((3,), float(v))))
    log = []
    p.register_hook(lambda g: log.append(g))
    step()
    step()   # accumulated into p.grad
    assert [t[0].item() for t in log] == [1.0, 2.0] and p.grad[0].item() == 3.0


def test_tensors_sharing_a_storage_move_into_one_fresh_storage_with_their_values():
    # gradients still held when the CUDA-graph pool is written again move out in one batched copy; a
    # `.grad` and a view of it must still share their memory afterwards (the same code runs on CPU)
    grad = torch.arange(40.0)
    view = grad[8:].view(4, 8)
    other = torch.arange(5.0)
    old = grad.untyped_storage()
    move_out_of_pool([grad, view, other])
    assert grad.untyped_storage().data_ptr() != old.data_ptr()
    assert view.untyped_storage().data_ptr() == grad.untyped_storage().data_ptr()
    assert torch.equal(grad, torch.arange(40.0)) and torch.equal(view, torch.arange(8.0, 40.0).view(4, 8))
    assert torch.equal(other, torch.arange(5.0))
    torch.empty(0).set_(old).fill_(-1)   # the old memory is no longer theirs
    assert torch.equal(grad, torch.arange(40.0))
    view.zero_()                         # and the view still writes into the gradient
    assert grad[8:].abs().sum() == 0 and grad[:8].sum() == 28


def test_the_holder_scan_skips_objects_that_refuse_their_class_without_a_warning():
    # session 39: the scan asked each object `isinstance(o, torch.Tensor)`; a deprecated module
    # attribute answered with a FutureWarning and a dead weak proxy with an error
    class Thing:
        pass
    thing = Thing()
    proxy = weakref.proxy(thing)
    del thing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _storage_key(proxy) is None
        if hasattr(torch.distributed, "reduce_op"):
            assert _storage_key(torch.distributed.reduce_op) is None
        assert _storage_key(torch.zeros(3)) is None   # a CPU tensor is never pool memory
