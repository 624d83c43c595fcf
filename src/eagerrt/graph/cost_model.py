"""The compile-time cost model: each node's estimated nanoseconds, and the
assignment of nodes to streams.

Costs come from the ops' own cost functions (the same the eager scheduler
uses, from the calibrated constants in ``ert.config``), evaluated on the
traced shapes. Measured costs can replace them: :func:`record_cost` stores a
timing under the node's signature (op, operand shapes and dtypes, static
arguments) and later compiles use it.

Streams (after TFRT's stream analysis): a stream is a run of nodes executed
back to back on one thread. Each node continues the stream of the operand
whose longest remaining path it lies on (the most expensive child carries its
parent's stream on); a branch whose whole remaining work is cheaper than
``config.inline_threshold_ns`` merges into an operand's stream rather than
paying a thread hop; only heavy independent branches start streams of their
own, which the executor runs on different worker threads.
"""

from __future__ import annotations

import math
from typing import Any

from .._core import config
from .ir import Node, Value

__all__ = ["assign_streams", "measured_costs", "node_cost", "record_cost", "signature_of"]

#: Measured nanoseconds by node signature (op name, operand types, static args).
measured_costs: dict[tuple[Any, ...], float] = {}


def signature_of(node: Node) -> tuple[Any, ...]:
    operands = tuple(
        (a.shape, str(a.dtype)) if type(a) is Value else ("scalar", type(a).__name__)
        for a in node.inputs
    )
    try:
        static = tuple(sorted((k, repr(v)) for k, v in node.static.items()))
    except TypeError:
        static = ()
    return (node.name, operands, static)


def record_cost(node: Node, ns: float) -> None:
    """Remember a measured cost for nodes like this one (a running average)."""
    key = signature_of(node)
    old = measured_costs.get(key)
    measured_costs[key] = ns if old is None else 0.5 * (old + ns)


def node_cost(node: Node) -> float:
    """Estimated nanoseconds to run ``node``'s kernel."""
    if measured_costs:
        known = measured_costs.get(signature_of(node))
        if known is not None:
            return known
    out = node.outputs[0]
    cost_fn = getattr(node.op, "cost", None)
    if cost_fn is not None:
        try:
            return float(cost_fn(out.shape, out.dtype, *node.inputs, **node.static))
        except Exception:  # a cost function that wants a real tensor: fall back
            pass
    return config.op_overhead_ns + math.prod(out.shape) * config.ns_per_element


def assign_streams(nodes: list[Node], costs: list[float], threshold: float) -> list[int]:
    """A stream number per node (0, 1, ...; execution order within each)."""
    # Value id -> the index of the node making it.
    producer = {v.id: i for i, node in enumerate(nodes) for v in node.outputs}
    parents = [
        sorted({producer[v.id] for v in node.value_inputs() if v.id in producer}) for node in nodes
    ]
    children: list[list[int]] = [[] for _ in nodes]
    for i, ps in enumerate(parents):
        for p in ps:
            children[p].append(i)
    # The longest path from each node to the end, itself included.
    path = list(costs)
    for i in range(len(nodes) - 1, -1, -1):
        if children[i]:
            path[i] = costs[i] + max(path[c] for c in children[i])
    # Each node's heir: the child on its longest path continues its stream.
    heir = [max(cs, key=path.__getitem__) if cs else -1 for cs in children]
    # The longest path from a start to each node, itself included.
    depth = list(costs)
    for i, ps in enumerate(parents):
        if ps:
            depth[i] += max(depth[p] for p in ps)
    # Where several operands have a node as heir, the stream of the one on the
    # longest path through the graph goes on (not merely the one with the most
    # work left: a mask computed from an input would otherwise carry a whole
    # encoder on while the stream that did all the work so far ends).
    carrier = [-1] * len(nodes)
    for i in range(len(nodes)):
        heirs_of = [p for p in parents[i] if heir[p] == i]
        if heirs_of:
            carrier[i] = max(heirs_of, key=lambda p: depth[p] + path[p] - costs[p])
    # The work a stream started at each node would run before it ends (at a node
    # another stream carries on): a cheap branch that joins others at once (a
    # slice feeding attention) is not worth a thread hop, whatever follows the join.
    carried = list(costs)
    for i in range(len(nodes) - 1, -1, -1):
        if heir[i] >= 0 and carrier[heir[i]] == i:
            carried[i] += carried[heir[i]]
    stream = [0] * len(nodes)
    count = 0
    for i in range(len(nodes)):
        if carrier[i] >= 0:  # continue the heaviest such operand's stream
            stream[i] = stream[carrier[i]]
            continue
        if count == 0 or carried[i] >= threshold:
            stream[i] = count
            count += 1
        else:  # cheap: ride along on the heaviest operand's stream
            stream[i] = stream[max(parents[i], key=path.__getitem__)] if parents[i] else 0
    return stream
