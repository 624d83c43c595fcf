"""Fuse a convolution with the ReLU (and residual sum) after it, for native plans.

A ResNet's layers end in ``relu(conv(x, w, b))`` or, closing a block,
``relu(conv(y, w, b) + x)``: run as written, on a GPU, each is a convolution
and then one or two passes over its whole output. cuDNN computes ``relu(conv(x) + bias + z)`` in the
convolution's own kernel, so a native plan (the cuda device's, which runs the
graph's nodes as its kernels) takes them as one node::

    %1 = conv2d(%x, %w, %b)              ->  %3 = conv2d_relu(%x, %w, %b, %r)
    %2 = add(%1, %r)
    %3 = relu(%2)

The node's cuda kernel is ``ops.cuda_nn.conv2d_relu``; its generic one
computes the same in numpy (convolution, sum, ReLU). Refused: a convolution
or sum something else also reads (it would be computed twice), a residual of
another shape or dtype than the convolution's output, or one added to a
convolution without a bias.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....graph.ir import Graph, Node, Value
from ....graph.passes.rewrite import builtin, make_node, single_reader
from ....ops.registry import GENERIC, get_op
from .. import nn as cuda_nn
from . import fused_op, replace_each

__all__ = ["conv2d_relu", "run"]


def _rule(
    x: Any, weight: Any, bias: Any = None, residual: Any = None, **conv: Any
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    shape, dtype = get_op("conv2d").rule(x, weight, bias, **conv)
    if residual is not None and (tuple(residual.shape) != tuple(shape) or residual.dtype != dtype):
        raise ValueError(f"the residual {residual.shape} must match the convolution's {shape}")
    return shape, dtype


def _kernel(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    **conv: Any,
) -> np.ndarray:
    out = get_op("conv2d").kernels[GENERIC](x, weight, bias, **conv)
    if residual is not None:
        out += residual
    return np.maximum(out, 0, out=out)


#: ``relu(conv2d(x, w, b) + residual)``: the fused node's op (a pass's own, not
#: registered by name).
conv2d_relu = fused_op("conv2d_relu", _rule, _kernel, cuda_nn.conv2d_relu, __doc__, operands=4)


def run(graph: Graph) -> int:
    """Fuse in place; returns how many ReLUs took their convolution."""
    return replace_each(
        graph, "relu", _fused, "conv + relu", "convolutions took the ReLU (and sum) after them"
    )


def _conv_of(graph: Graph, value: Any, counts: dict[int, int]) -> Node | None:
    """The conv2d node computing ``value``, if the fused node is its only reader."""
    if type(value) is not Value or value.node is None or not single_reader(graph, value, counts):
        return None
    node = value.node
    return node if builtin(node, "conv2d") else None


def _fused(graph: Graph, relu: Node) -> tuple[Node, list[Node]] | None:
    """The fused node replacing ``relu``, and the nodes it makes redundant."""
    (source,) = relu.inputs
    counts = graph.use_counts()
    conv = _conv_of(graph, source, counts)
    residual = None
    if conv is not None:
        gone = [conv]
    else:
        add = source.node if type(source) is Value else None
        if add is None or not builtin(add, "add") or not single_reader(graph, source, counts):
            return None
        a, b = add.inputs
        for candidate, other in ((a, b), (b, a)):
            conv = _conv_of(graph, candidate, counts)
            if conv is not None and type(other) is Value:
                residual = other
                gone = [conv, add]
                break
        else:
            return None
    x, weight, *rest = conv.inputs
    inputs = [x, weight, *rest]
    if residual is not None:
        if not rest:  # operands can't be None, and a plan's constants are the model's own
            return None
        inputs.append(residual)
    node = make_node(conv2d_relu, inputs, dict(conv.static), site=relu.site, output=relu.out)
    return None if node is None else (node, gone)
