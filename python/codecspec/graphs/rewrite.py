"""What the in-memory rewrites of shipped ONNX graphs share (the reference family's batch-axis
temporal graph, `codecspec.families.reference.temporal_batch`, and the v2 family's batch-axis
step graphs, `codecspec.families.v2.step_batch`): finding which inputs feed a node.
"""

from __future__ import annotations

import onnx

__all__ = ["feeds_from"]


def feeds_from(graph: onnx.GraphProto, name: str, depth: int = 6) -> set:
    """Names of the graph inputs (or tensors) `name` depends on within `depth` node hops."""
    producer = {o: n for n in graph.node for o in n.output}
    found, frontier = set(), {name}
    for _ in range(depth):
        nxt = set()
        for t in frontier:
            n = producer.get(t)
            if n is None:
                found.add(t)
            else:
                nxt.update(n.input)
        frontier = nxt
    return found | frontier
