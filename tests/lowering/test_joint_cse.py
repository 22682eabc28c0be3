"""The joint graph's CSE (mini_inductor/partition.py) against torch's own (the min-cut partitioner's
`fx_graph_cse`, which imports Inductor): the same graph on real training graphs, and no Inductor
module imported by a training compile."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition

from mini_inductor.examples import MLPWithNorm, ResNet, TransformerBlock
from mini_inductor.lowering.decompositions import decomposition_table
from mini_inductor.partition import joint_graph_cse

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _joint_graphs(model, *inputs, dynamic=False):
    """The joint graphs AOT autograd hands the partitioner for one training step of `model`."""
    graphs = []

    def partition(joint, joint_inputs, **kwargs):
        graphs.append(joint.graph)
        with torch._functorch.config.patch(cse=False):
            return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    def backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g,
                                     decompositions=decomposition_table(), partition_fn=partition)

    torch._dynamo.reset()
    out = torch.compile(model, backend=backend, dynamic=dynamic)(*inputs)
    (out if isinstance(out, torch.Tensor) else out[0]).float().sum().backward()
    assert graphs, "no joint graph was made"
    return graphs


def _listing(graph):
    return [(n.op, n.name, str(n.target), str(n.args), str(n.kwargs)) for n in graph.nodes]


class _Shared(nn.Module):
    """Duplicates to merge (the same op twice, on either side of an in-place op), dropout (random:
    never merged), an output that is a view of an intermediate, and batch norm's running-stat
    updates (mutations in the joint graph)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        a = torch.sin(self.lin(x)) + torch.sin(self.lin(x))
        b = self.drop(a) + self.drop(a)
        c = self.bn(b)
        d = c.exp() * 2 + c.exp() * 2.0 + c.exp() * 2   # 2 and 2.0 are different constants
        return d, d[:, :4], c.t()


CASES = {
    "mlp_with_norm": lambda: (MLPWithNorm(16, 32, 2), torch.randn(4, 16, requires_grad=True)),
    "transformer_block": lambda: (TransformerBlock(32, 4), torch.randn(2, 8, 32)),
    "resnet_batch_norm": lambda: (ResNet(classes=4), torch.randn(2, 3, 16, 16)),
    "shared_dropout_views_mutation": lambda: (_Shared(), torch.randn(4, 8)),
}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_joint_graph_cse_gives_torchs_graph(case, dynamic):
    from torch._functorch.compile_utils import fx_graph_cse

    torch.manual_seed(0)
    model, x = CASES[case]()
    merged = 0
    for graph in _joint_graphs(model, x, dynamic=dynamic):
        ours = joint_graph_cse(graph)
        assert _listing(ours) == _listing(fx_graph_cse(graph))
        merged += len(graph.nodes) - len(ours.nodes)
    assert merged > 0 or case == "resnet_batch_norm", "nothing merged: the case tests nothing"


def test_neither_an_inference_nor_a_training_compile_imports_inductors_lowerings():
    # torch's partitioner CSE imports torch._inductor.pattern_matcher, which imports Inductor's lowerings
    # and templates: about a second of every process's first training compile
    code = ("import sys, json, torch, mini_inductor\n"
            "from mini_inductor.examples import MLPWithNorm\n"
            "heavy = ('torch._inductor.pattern_matcher', 'torch._inductor.lowering')\n"
            "with torch.no_grad():\n"
            "    torch.compile(MLPWithNorm(16, 32, 2), backend='mini_inductor')(torch.randn(4, 16))\n"
            "inference = [n for n in heavy if n in sys.modules]\n"
            "m = torch.compile(MLPWithNorm(16, 32, 2), backend='mini_inductor')\n"
            "m(torch.randn(4, 16)).sum().backward()\n"
            "print('RESULT ' + json.dumps(inference + [n for n in heavy if n in sys.modules]))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert json.loads(line[len("RESULT "):]) == []


def _graph_with_a_mutation():
    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    s1 = g.call_function(aten.sin.default, (x,))
    s2 = g.call_function(aten.sin.default, (x,))        # merges into s1
    m = g.call_function(aten.add_.Tensor, (x, s1))       # writes x: a new region
    s3 = g.call_function(aten.sin.default, (x,))        # reads the new x: kept
    s4 = g.call_function(aten.sin.default, (x,))        # merges into s3
    c1 = g.call_function(aten.mul.Tensor, (s3, 2))
    c2 = g.call_function(aten.mul.Tensor, (s4, 2.0))    # another constant type: kept
    r1 = g.call_function(aten.rand_like.default, (x,))
    r2 = g.call_function(aten.rand_like.default, (x,))  # random: kept
    g.output((s2, m, c1, c2, r1, r2))
    return g


def test_duplicates_merge_within_a_mutation_region_only_and_random_ops_never():
    from torch._functorch.compile_utils import fx_graph_cse

    g = _graph_with_a_mutation()
    ours = joint_graph_cse(g)
    targets = [str(n.target) for n in ours.nodes if n.op == "call_function"]
    assert targets == ["aten.sin.default", "aten.add_.Tensor", "aten.sin.default", "aten.mul.Tensor",
                       "aten.mul.Tensor", "aten.rand_like.default", "aten.rand_like.default"]
    assert _listing(ours) == _listing(fx_graph_cse(_graph_with_a_mutation()))


def test_a_negative_zero_constant_is_not_merged_with_zero():
    # torch's CSE merges x * -0.0 into x * 0.0 (the two compare equal): 1 / (x * -0.0) then gives +inf
    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.mul.Tensor, (x, 0.0))
    b = g.call_function(aten.mul.Tensor, (x, -0.0))
    g.output((g.call_function(aten.reciprocal.default, (a,)), g.call_function(aten.reciprocal.default, (b,))))
    merged = torch.fx.GraphModule(torch.nn.Module(), joint_graph_cse(g))
    pos, neg = merged(torch.ones(2))
    assert pos.tolist() == [float("inf")] * 2 and neg.tolist() == [float("-inf")] * 2


def test_a_training_graph_keeps_the_sign_of_zero_as_eager():
    f = lambda x: (1 / (x * 0.0) + x, 1 / (x * -0.0) + x)   # noqa: E731
    x = torch.ones(3, requires_grad=True)
    expected = f(x)
    got = torch.compile(f, backend="mini_inductor")(x)
    for e, g in zip(expected, got):
        assert torch.equal(e, g)
