"""The shape of a CUDA-graph tree (cudagraph-tests.md §5 #19; see TOP40.md): one compiled graph twice on
a path is two nodes, data-dependent branches are sibling children of one root, new shapes are new roots.
"""
import pytest
import torch
from cg_helpers import compiled, manager, tree_roots

pytestmark = pytest.mark.gpu


# --- #19 tree shape ------------------------------------------------------------------------------

def cube(x):
    torch._dynamo.graph_break()
    return x * x * x


def test_one_compiled_graph_twice_on_a_path_is_two_nodes():
    def outer(x):
        return cube(cube(x)) + 1
    f = compiled(outer)
    for _ in range(4):
        x = torch.rand(8, device="cuda")
        torch.testing.assert_close(f(x), outer(x))
    assert tree_roots() == [[2]]


def branchy(x):
    y = x * 2
    if y.sum() > 0:
        return y + 10
    return y - 10


def test_data_dependent_branches_are_sibling_children_of_one_root():
    f = compiled(branchy)
    for value in [0.0] * 3 + [1.0] * 3 + [0.0] * 2:
        x = torch.full((8,), value, device="cuda")
        torch.testing.assert_close(f(x), branchy(x))
    assert tree_roots() == [[2]]
    (root,) = next(iter(manager().roots.values()))
    assert sum(len(kids) for kids in root.children.values()) == 2


def test_new_shapes_are_separate_roots():
    f = compiled(lambda x, y: (x + 1) @ y)
    for n in (20, 20, 20, 40, 40, 40):
        x, y = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        torch.testing.assert_close(f(x, y), (x + 1) @ y, atol=1e-3, rtol=1e-3)
        torch.cuda.synchronize()
    assert tree_roots() == [[0], [0]]
