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

from ....graph.ir import Graph, Node, Value
from ....graph.passes.rewrite import builtin, make_node, single_reader
from ....ops.registry import GENERIC, get_op
from .. import nn as cuda_nn
from . import fused_op, replace_each

__all__ = ["add_layer_norm", "run"]


def _rule(x: Any, residual: Any, *affine: Any, **norm: Any) -> tuple[Any, np.dtype[Any]]:
    if tuple(x.shape) != tuple(residual.shape) or x.dtype != residual.dtype:
        raise ValueError(f"the residual {residual.shape} must match the input {x.shape}")
    return get_op("layer_norm").rule(x, *affine, **norm)


def _kernel(x: np.ndarray, residual: np.ndarray, *affine: Any, **norm: Any) -> np.ndarray:
    return get_op("layer_norm").kernels[GENERIC](x + residual, *affine, **norm)


#: ``layer_norm(x + residual, ...)``: the fused node's op (a pass's own).
add_layer_norm = fused_op("add_layer_norm", _rule, _kernel, cuda_nn.add_layer_norm, __doc__)


def run(graph: Graph) -> int:
    """Fuse in place; returns how many layer norms took their sum."""
    return replace_each(
        graph, "layer_norm", _fused, "add + layer norm", "layer norms took the sum before them"
    )


def _fused(graph: Graph, norm: Node) -> tuple[Node, list[Node]] | None:
    """The fused node replacing ``norm``, and the sum it makes redundant."""
    source, *affine = norm.inputs
    if type(source) is not Value or source.node is None or not builtin(source.node, "add"):
        return None
    if not single_reader(graph, source, graph.use_counts()):
        return None
    add = source.node
    x, residual = add.inputs
    if not (type(x) is Value and type(residual) is Value):
        return None
    node = make_node(
        add_layer_norm, [x, residual, *affine], dict(norm.static), site=norm.site,
        output=norm.out,
    )  # fmt: skip
    return None if node is None else (node, [add])
