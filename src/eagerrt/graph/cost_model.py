"""The compile-time cost model: each node's estimated nanoseconds.

Costs come from the ops' own cost functions (the same the eager scheduler
uses, from the calibrated constants in ``ert.config``), evaluated on the
traced shapes. Measured costs can replace them: :func:`record_costs` stores
per-node timings from a profiled run under the node's signature, and later
compiles use them (:func:`use_measured_costs`).
"""

from __future__ import annotations

import math
from typing import Any

from .._core.config import config
from .ir import Node, Value

__all__ = ["measured_costs", "node_cost", "record_cost", "signature_of"]

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
