"""Lowering: an ATen FX graph → IR buffers (see graph.py)."""
from ..config import Config
from .graph import GraphLowering, LoweredGraph


def lower_graph(gm, example_inputs, name: str, cfg: Config) -> LoweredGraph:
    """Lower one ATen graph; raises LoweringError naming the graph and op on failure."""
    return GraphLowering(gm, example_inputs, name, cfg).run()


__all__ = ["lower_graph", "LoweredGraph", "GraphLowering"]
