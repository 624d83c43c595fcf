"""The cuda backend's graph passes: fusions of what one of its kernels does in
one launch (a convolution and its ReLU, a residual sum and its layer norm), run
on a graph before it becomes a native plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ....graph.ir import Graph, Node
from ....graph.passes.rewrite import builtin
from ....ops.registry import GENERIC, Kernel, Op, Rule

__all__ = ["fused_op", "replace_each"]


def fused_op(
    name: str, rule: Rule, generic: Kernel, cuda: Kernel, doc: str | None, **op: Any
) -> Op:
    """A fusion's own op (not registered by name): its generic kernel, computing
    what the nodes it replaces did, and the cuda kernel that does it in one launch."""
    fused = Op(name, rule, weak_scalars=False, doc=doc, **op)
    fused.register_kernel(GENERIC, generic)
    fused.register_kernel("cuda", cuda)
    return fused


def replace_each(
    graph: Graph,
    name: str,
    fuse: Callable[[Graph, Node], tuple[Node, list[Node]] | None],
    what: str,
    done: str,
) -> int:
    """Replace, in place, each node running the op ``name`` for which
    ``fuse(graph, node)`` gives a fused node and the nodes it makes redundant
    (then removed); notes ``what`` was done (``f"{count} {done}"``) and returns
    how many nodes were replaced."""
    count = 0
    for node in list(graph.nodes):
        if not builtin(node, name):
            continue
        fused = fuse(graph, node)
        if fused is None:
            continue
        new, gone = fused
        graph.nodes[graph.nodes.index(node)] = new  # its operands are all defined before node
        for old in gone:
            graph.nodes.remove(old)
        count += 1
    if count:
        graph.note(what, f"{count} {done}")
    return count
