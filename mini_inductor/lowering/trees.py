"""Walking the nests of plain containers that FX arguments and lowering results are (lowering/graph.py)."""
from __future__ import annotations

from torch.fx.immutable_collections import immutable_dict, immutable_list
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten, tree_map

# FX arguments and lowering results are nests of a few plain containers; walking those directly
# saves pytree's per-call overhead (a tree_flatten costs ~50 µs, and lowering makes several per
# node). Any other container (namedtuple, torch.Size, OrderedDict, ...) goes to pytree, which
# keeps its leaves, their order and the rebuilt types exactly pytree's.
SEQUENCES = (list, tuple, immutable_list)
MAPPINGS = (dict, immutable_dict)


def leaves(tree) -> list:
    """tree_flatten(tree)[0]."""
    out: list = []
    _collect_leaves(tree, out)
    return out


def _collect_leaves(x, out: list) -> None:
    kind = type(x)
    if kind in SEQUENCES:
        for item in x:
            _collect_leaves(item, out)
    elif kind in MAPPINGS:
        for item in x.values():
            _collect_leaves(item, out)
    elif kind in SUPPORTED_NODES or isinstance(x, (list, tuple, dict)):
        out.extend(tree_flatten(x)[0])
    else:
        out.append(x)


def map_leaves(fn, tree):
    """tree_map(fn, tree)."""
    kind = type(tree)
    if kind in SEQUENCES:
        return kind(map_leaves(fn, item) for item in tree)
    if kind in MAPPINGS:
        return kind((key, map_leaves(fn, item)) for key, item in tree.items())
    if kind in SUPPORTED_NODES or isinstance(tree, (list, tuple, dict)):
        return tree_map(fn, tree)
    return fn(tree)
