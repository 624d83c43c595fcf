"""Fold inference batch norm into the convolution or linear layer before it.

With running statistics, ``batch_norm(y)`` is a per-channel affine map
``y * s + t`` where ``s = weight / sqrt(var + eps)`` and
``t = bias - mean * s``. When ``y`` comes from a layer with constant weights,
the map moves into them (TFRT's and ONNX Runtime's fold): the layer's
output channels are scaled by ``s`` and its bias becomes ``b * s + t``, so the
batch norm costs nothing at run time. Folded at compile time, in float64, then
cast back to the weight's dtype (the eager kernel also builds ``s`` in float64).

Patterns (the channel axis of ``batch_norm`` is 1, so it must be the layer's
output-channel axis):

* ``batch_norm(conv2d(x, W[, b]))`` on a batched (N, C, H, W) input
  -> ``conv2d(x, W * s, b * s + t)``;
* ``batch_norm(linear(x, W[, b]))`` with a 2-d output
  -> ``linear(x, W * s[:, None], b * s + t)``;
* ``batch_norm(x @ W)`` and ``batch_norm(x @ W + b)`` with a 2-d output
  -> ``x @ (W * s) + (b * s + t)``.

Refused: non-constant weights or statistics, a layer output something else
also reads (folding would compute the layer twice), other output layouts
(an unbatched conv or a 3-d linear output has another axis 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ops.registry import get_op
from ..ir import Graph, Node, Value
from .rewrite import builtin, const_array, make_const, make_node, single_reader

__all__ = ["run"]


def run(graph: Graph) -> int:
    """Fold in place; returns how many batch norms went."""
    count = 0
    for bn in list(graph.nodes):
        if bn not in graph.nodes or not builtin(bn, "batch_norm"):
            continue
        affine = _affine(bn)
        if affine is None:
            continue
        counts = graph.use_counts()
        y = bn.inputs[0]
        if type(y) is not Value or y.node is None or not single_reader(graph, y, counts):
            continue
        layer = y.node
        new: list[Node] | None = None
        if builtin(layer, "conv2d"):
            new = _fold_layer(layer, bn, affine, ndim=4)
        elif builtin(layer, "linear"):
            new = _fold_layer(layer, bn, affine, ndim=2)
        elif builtin(layer, "matmul"):
            new = _fold_matmul(layer, None, bn, affine)
        elif builtin(layer, "add"):
            mm = _matmul_under(graph, layer, counts)
            if mm is not None:
                new = _fold_matmul(mm[0], mm[1], bn, affine)
                if new is not None:
                    graph.nodes.remove(mm[0])  # the add (the layer) goes below
        if new is None:
            continue
        # The new nodes take the layer's place: its operands are defined there,
        # and the batch norm's readers all come later.
        at = graph.nodes.index(layer)
        graph.nodes[at : at + 1] = new
        graph.nodes.remove(bn)
        count += 1
    return count


def _affine(bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """The batch norm's per-channel (scale, shift) in float64, if all its
    parameters are constants."""
    arrays = _weights(bn, 1)
    if arrays is None:
        return None
    m, v, *params = (np.asarray(a, np.float64) for a in arrays)
    weight = params[0] if bn.static.get("has_weight") else None
    bias = params[-1] if bn.static.get("has_bias") else None
    eps = float(bn.static.get("eps", 1e-5))
    # As the eager kernel computes them: 1 / sqrt(var + eps), times the weight.
    scale = 1.0 / np.sqrt(v + eps)
    if weight is not None:
        scale = scale * weight
    shift = -m * scale
    if bias is not None:
        shift = shift + bias
    return scale, shift


def _weights(node: Node, start: int) -> list[np.ndarray] | None:
    """The node's operands from ``start`` on (a layer's weight, then bias), if constants."""
    arrays = [const_array(a) if type(a) is Value else None for a in node.inputs[start:]]
    if any(a is None for a in arrays):
        return None
    return arrays  # type: ignore[return-value]


def _fold_layer(
    layer: Node, bn: Node, affine: tuple[np.ndarray, np.ndarray], ndim: int
) -> list[Node] | None:
    """conv2d (``ndim`` 4) or linear (2), whose weight's axis 0 is the output
    channels: batch norm's axis 1 is them only where the output has ``ndim``
    dimensions (not an unbatched conv's (C, H, W), nor a linear's (N, L, features))."""
    if bn.out.ndim != ndim:
        return None
    consts = _weights(layer, 1)
    if consts is None:
        return None
    weight, *bias = consts
    scale, shift = affine
    if weight.ndim != ndim or scale.shape != (weight.shape[0],):
        return None
    dtype, device = weight.dtype, layer.out.device
    new_w = make_const((weight * scale.reshape(-1, *[1] * (ndim - 1))).astype(dtype), device)
    new_b = make_const(((bias[0] * scale if bias else 0.0) + shift).astype(dtype), device)
    inputs = [layer.inputs[0], new_w, new_b]
    node = make_node(layer.op, inputs, dict(layer.static), site=layer.site, output=bn.out)
    return None if node is None else [node]


def _matmul_under(graph: Graph, add: Node, counts: dict[int, int]) -> tuple[Node, Value] | None:
    """For ``add(x @ W, b)`` (either order) with a constant ``b`` and a matmul
    read only here: (the matmul node, b)."""
    for mm_out, b in (add.inputs, add.inputs[::-1]):
        if (
            type(mm_out) is Value
            and mm_out.node is not None
            and builtin(mm_out.node, "matmul")
            and type(b) is Value
            and b.is_const
            and single_reader(graph, mm_out, counts)
        ):
            return mm_out.node, b
    return None


def _fold_matmul(
    mm: Node, add_bias: Value | None, bn: Node, affine: tuple[np.ndarray, np.ndarray]
) -> list[Node] | None:
    out = bn.out
    x, w = mm.inputs
    weight = const_array(w) if type(w) is Value else None
    if out.ndim != 2 or weight is None or weight.ndim != 2 or type(x) is not Value:
        return None
    scale, shift = affine
    if scale.shape != (weight.shape[1],) or mm.out.shape != out.shape:
        return None
    bias: Any = 0.0
    if add_bias is not None:
        b = const_array(add_bias)
        # The bias must broadcast along the features only: (F,) or (1, F).
        if b is None or b.shape not in ((weight.shape[1],), (1, weight.shape[1])):
            return None
        bias = np.asarray(b, np.float64).reshape(-1)
    dtype = out.dtype
    if weight.dtype != dtype or (add_bias is not None and add_bias.dtype != dtype):
        return None
    new_w = make_const((weight * scale).astype(dtype), w.device)
    new_b = make_const((bias * scale + shift).astype(dtype), out.device)
    product = make_node(get_op("matmul"), [x, new_w], {}, site=mm.site)
    if product is None or product.out.shape != out.shape or product.out.dtype != dtype:
        return None
    plus = make_node(get_op("add"), [product.out, new_b], {}, site=bn.site, output=out)
    return None if plus is None else [product, plus]
