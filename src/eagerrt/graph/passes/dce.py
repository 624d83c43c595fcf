"""Dead-code elimination: drop nodes whose results nobody reads.

Every op is a pure function of its operands and static arguments (random ops
carry their seed as a static argument), so a node whose outputs reach neither
another node nor the graph's outputs can go.

>>> from eagerrt.graph.passes.dce import run
"""

from __future__ import annotations

from ..ir import Graph

__all__ = ["run"]


def run(graph: Graph) -> int:
    """Remove dead nodes in place; returns how many went."""
    live = {v.id for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if any(v.id in live for v in node.outputs):
            kept.append(node)
            live.update(v.id for v in node.value_inputs())
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    return removed
