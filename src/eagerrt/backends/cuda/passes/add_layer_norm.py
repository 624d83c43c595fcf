"""Fuse a residual sum into the layer norm after it, for native plans.

A transformer's blocks end in ``layer_norm(x + f(x))``: run as written, on a
GPU, the sum writes a whole activation that the layer norm reads right back.
The cuda device's row kernel normalizes ``x + r`` as it reads both, so a
native plan takes the two as one node::

    %2 = add(%x, %r)                          ->  %3 = add_layer_norm(%x, %r, %w, %b)
    %3 = layer_norm(%2, %w, %b)

The node's cuda kernel is ``ops.cuda_nn.add_layer_norm``; its generic one is
the layer norm's own on the sum. Refused: a sum something else also reads,
or whose operands differ in shape or dtype (a broadcast sum).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....graph.ir import Graph, Value
from ....graph.passes.rewrite import builtin, make_node, single_reader
from ....ops.registry import GENERIC, Op, get_op
from .. import nn as cuda_nn

__all__ = ["add_layer_norm", "run"]


def _rule(x: Any, residual: Any, *affine: Any, **norm: Any) -> tuple[Any, np.dtype[Any]]:
    if tuple(x.shape) != tuple(residual.shape) or x.dtype != residual.dtype:
        raise ValueError(f"the residual {residual.shape} must match the input {x.shape}")
    return get_op("layer_norm").rule(x, *affine, **norm)


def _kernel(x: np.ndarray, residual: np.ndarray, *affine: Any, **norm: Any) -> np.ndarray:
    return get_op("layer_norm").kernels[GENERIC](x + residual, *affine, **norm)


#: ``layer_norm(x + residual, ...)``: the fused node's op (a pass's own).
add_layer_norm = Op("add_layer_norm", _rule, weak_scalars=False, doc=__doc__)
add_layer_norm.register_kernel(GENERIC, _kernel)
add_layer_norm.register_kernel("cuda", cuda_nn.add_layer_norm)


def run(graph: Graph) -> int:
    """Fuse in place; returns how many layer norms took their sum."""
    count = 0
    for norm in list(graph.nodes):
        if not builtin(norm, "layer_norm"):
            continue
        source, *affine = norm.inputs
        if type(source) is not Value or source.node is None or not builtin(source.node, "add"):
            continue
        if not single_reader(graph, source, graph.use_counts()):
            continue
        add = source.node
        x, residual = add.inputs
        if not (type(x) is Value and type(residual) is Value):
            continue
        node = make_node(
            add_layer_norm, [x, residual, *affine], dict(norm.static), site=norm.site,
            output=norm.out,
        )  # fmt: skip
        if node is None:
            continue
        graph.nodes[graph.nodes.index(norm)] = node  # the sum's operands come before it
        graph.nodes.remove(add)
        count += 1
    if count:
        graph.note("add + layer norm", f"{count} layer norms took the sum before them")
    return count
