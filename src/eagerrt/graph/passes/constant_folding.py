"""Constant folding: compute at load time what depends on constants only.

Weights closed over by a compiled function are constants, so everything
computed from weights alone (a transposed weight, ``W1 * scale``, a folded
batch norm) is computed once, when the function is compiled, with the same
kernels an eager call would use. Results over ``MAX_FOLD_BYTES`` are left to
run time (folding must not blow up memory, e.g. a broadcast to a huge shape).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Graph, Value
from ..kernels import kernel_for

__all__ = ["MAX_FOLD_BYTES", "run"]

MAX_FOLD_BYTES = 256 << 20


def run(graph: Graph) -> int:
    """Fold in place; returns how many nodes were folded."""
    folded: dict[int, Value] = {}
    kept = []
    count = 0
    for node in graph.nodes:
        node.inputs = [folded.get(a.id, a) if type(a) is Value else a for a in node.inputs]
        values = list(node.value_inputs())
        if (
            not values
            or not all(v.is_const for v in values)
            or sum(v.nbytes for v in node.outputs) > MAX_FOLD_BYTES
            or getattr(node.op, "stateful", False)
        ):
            kept.append(node)
            continue
        kernel = kernel_for(node)
        args: list[Any] = [a.const if type(a) is Value else a for a in node.inputs]
        try:
            result = kernel(*args, **node.static)
        except Exception:  # it fails at run time too, where the failure is reported
            kept.append(node)
            continue
        results = result if len(node.outputs) > 1 else (result,)
        for out, data in zip(node.outputs, results, strict=True):
            out.const = np.asarray(data)
            out.node = None
            out.name = f"%c{out.id}"
            folded[out.id] = out
        count += 1
    graph.nodes = kept
    return count
