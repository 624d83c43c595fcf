"""Common-subexpression elimination: one node per distinct computation.

Two nodes with the same op, the same operands (the same values, or equal
Python scalars of the same type) and the same static arguments compute the
same thing; later ones are replaced by the first.
"""

from __future__ import annotations

from typing import Any

from ..ir import Graph, Node, Value

__all__ = ["run"]


def _key(node: Node) -> tuple[Any, ...] | None:
    operands = tuple(
        ("v", a.id) if type(a) is Value else ("s", type(a).__name__, repr(a)) for a in node.inputs
    )
    try:
        static = repr(sorted(node.static.items()))
    except TypeError:  # unorderable values: this node is never merged
        return None
    return (id(node.op), operands, static)


def run(graph: Graph) -> int:
    """Merge duplicates in place; returns how many nodes went."""
    seen: dict[tuple[Any, ...], Node] = {}
    alias: dict[int, Value] = {}
    kept = []
    for node in graph.nodes:
        node.inputs = [alias.get(a.id, a) if type(a) is Value else a for a in node.inputs]
        key = None if getattr(node.op, "stateful", False) else _key(node)
        first = seen.get(key) if key is not None else None
        if first is None:
            if key is not None:
                seen[key] = node
            kept.append(node)
            continue
        for old, new in zip(node.outputs, first.outputs, strict=True):
            alias[old.id] = new
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept
    graph.outputs = [alias.get(v.id, v) for v in graph.outputs]
    return removed
