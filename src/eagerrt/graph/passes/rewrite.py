"""Small helpers the rewriting passes share: building nodes and constants,
reading constants, counting uses.

New nodes get their shape and dtype from the op's own rule (evaluated on
symbolic stand-ins for the values), exactly as a traced call would; a rewrite
checks that against the node it replaces before committing to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ops.registry import get_op
from ..ir import Graph, Node, Operand, Value
from ..tracing import traced_tensor

__all__ = ["builtin", "const_array", "infer", "make_const", "make_node", "single_reader"]


def builtin(node: Node, name: str) -> bool:
    """Whether ``node`` runs the registered op ``name`` (not a pass's own op of
    the same name)."""
    return node.op.name == name and node.op is get_op(name)


def infer(op: Any, inputs: list[Operand], static: dict[str, Any]) -> tuple[Any, Any] | None:
    """``(shape, dtype)`` of ``op(*inputs, **static)`` by the op's rule, or None
    if the rule refuses the call."""
    # Rules check ``type(x) is Tensor``: give them traced tensors, not Values.
    args = [traced_tensor(a) if type(a) is Value else a for a in inputs]
    try:
        shape, dtype = op.rule(*args, **static)
    except Exception:  # any refusal: the rewrite just doesn't happen
        return None
    return tuple(shape), np.dtype(dtype)


def make_node(
    op: Any,
    inputs: list[Operand],
    static: dict[str, Any],
    *,
    site: Any = None,
    output: Value | None = None,
) -> Node | None:
    """A node for ``op(*inputs, **static)``; with ``output``, the node computes
    that existing value (the rule must agree on its shape and dtype), else a
    new one. None if the rule refuses or disagrees."""
    meta = infer(op, inputs, static)
    if meta is None:
        return None
    shape, dtype = meta
    if output is not None:
        if output.shape != shape or output.dtype != dtype:
            return None
        return Node(op, inputs, static, [output], site=site)
    device = next((a.device for a in inputs if type(a) is Value), None)
    if device is None:
        return None
    out = Value(shape, dtype, device, site=site)
    return Node(op, inputs, static, [out], site=site)


def make_const(array: np.ndarray, device: Any) -> Value:
    """A constant value holding ``array``."""
    array = np.asarray(array)
    value = Value(tuple(array.shape), array.dtype, device, const=array)
    value.name = f"%c{value.id}"
    return value


def const_array(a: Operand) -> np.ndarray | None:
    """A constant operand's data (a weak scalar's as numpy would make it), or
    None for a computed value or an input."""
    if type(a) is Value:
        return None if a.const is None else np.asarray(a.const)
    if isinstance(a, (bool, int, float, complex)):
        return np.asarray(a)
    return None


def single_reader(graph: Graph, value: Value, counts: dict[int, int]) -> bool:
    """Whether ``value`` is read once, by a node (not a graph output): the
    node that computes it can be rewritten without computing it twice."""
    return counts.get(value.id, 0) == 1 and all(v is not value for v in graph.outputs)
