"""Load-time rewrites of ONNX subgraphs into single eagerrt ops (ONNX Runtime
makes the same two).

* Exporters spell GELU out as ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (five nodes
  per use in a BERT layer). Rewritten into one ``Gelu`` node it runs as
  :func:`eagerrt.gelu`, which graph mode fuses into the matmul before it, and
  needs no ``erf`` kernel at all.
* PyTorch exports ``scaled_dot_product_attention`` as scaled matmuls, a mask
  added, a softmax, a guard turning fully masked rows' NaNs into zeros and a
  second matmul. Rewritten into one ``ScaledDotProductAttention`` node it runs
  as :func:`eagerrt.scaled_dot_product_attention` (which gives fully masked
  rows zeros too), with no (..., L, S) temporaries but its own.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .graph import Node

__all__ = ["fuse", "fuse_attention", "fuse_gelu"]


def _value(name: str, constants: Mapping[str, Any], floating: bool = True) -> float | None:
    """The value of ``name`` when it is a one-element constant (a floating one
    unless ``floating=False``), else None."""
    value = constants.get(name)
    if value is None:
        return None
    value = np.asarray(value)
    if value.size != 1 or (floating and value.dtype.kind != "f"):
        return None
    return float(value.reshape(()))


def _scalar(name: str, constants: Mapping[str, Any], expected: float, rel: float = 1e-6) -> bool:
    value = _value(name, constants)
    return value is not None and math.isclose(value, expected, rel_tol=rel)


def _other(node: Node, name: str) -> str | None:
    """The input of a two-input node that is not ``name``."""
    if len(node.inputs) != 2 or name not in node.inputs:
        return None
    a, b = node.inputs
    return b if a == name else a


def fuse_gelu(
    nodes: Sequence[Node], constants: Mapping[str, Any], graph_outputs: set[str]
) -> list[Node]:
    """``nodes`` with every ``x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5`` chain
    (operands in either order; ``x * 0.5`` may come first) replaced by one
    ``Gelu`` node. ``constants`` holds the values of initializers and
    ``Constant`` nodes by name; intermediate values used elsewhere stop a rewrite."""
    producer, consumers = _users(nodes)

    def only_consumer(name: str, op_type: str) -> Node | None:
        users = consumers.get(name, [])
        if name in graph_outputs or len(users) != 1 or users[0].op_type != op_type:
            return None
        return users[0]

    position = {id(node): i for i, node in enumerate(nodes)}
    removed: set[int] = set()
    replacement: dict[int, Node] = {}
    for erf in nodes:
        if erf.op_type != "Erf":
            continue
        div = producer.get(erf.inputs[0])
        if div is None or len(div.outputs) != 1 or only_consumer(div.outputs[0], "Erf") is None:
            continue
        if div.op_type == "Div" and _scalar(div.inputs[1], constants, math.sqrt(2.0)):
            x: str | None = div.inputs[0]
        elif div.op_type == "Mul":
            x = next(
                (_other(div, c) for c in div.inputs if _scalar(c, constants, math.sqrt(0.5))), None
            )
        else:
            continue
        if x is None:
            continue
        add = only_consumer(erf.outputs[0], "Add")
        if add is None or not _scalar(_other(add, erf.outputs[0]) or "", constants, 1.0):
            continue
        chain = _tail(x, add.outputs[0], consumers, constants, only_consumer)
        if chain is None:
            continue
        muls, y = chain
        group = [div, erf, add, *muls]
        if any(id(n) in removed for n in group):
            continue
        removed.update(id(n) for n in group)
        last = max(group, key=lambda n: position[id(n)])
        replacement[id(last)] = Node(
            "Gelu", f"{erf.name}/gelu", [x], [y], {"approximate": "none"}, "", erf.opset
        )
    return [
        replacement.get(id(n), n) for n in nodes if id(n) not in removed or id(n) in replacement
    ]


def _tail(
    x: str,
    one_plus_erf: str,
    consumers: Mapping[str, list[Node]],
    constants: Mapping[str, Any],
    only_consumer: Any,
) -> tuple[list[Node], str] | None:
    """The two multiplications finishing a GELU: ``(x * (1+erf)) * 0.5``,
    ``(0.5 * (1+erf)) * x`` or ``(x * 0.5) * (1+erf)``; and their output."""
    first = only_consumer(one_plus_erf, "Mul")
    if first is None:
        return None
    other = _other(first, one_plus_erf)
    if other == x or (other is not None and _scalar(other, constants, 0.5)):
        second = only_consumer(first.outputs[0], "Mul")
        if second is None:
            return None
        want_half = other == x
        rest = _other(second, first.outputs[0])
        if rest is None or not (_scalar(rest, constants, 0.5) if want_half else rest == x):
            return None
        return [first, second], second.outputs[0]
    # (x * 0.5) computed first, then times (1 + erf).
    half = next(
        (
            m
            for m in consumers.get(x, [])
            if m.op_type == "Mul"
            and m.outputs[0] == other
            and _scalar(_other(m, x) or "", constants, 0.5)
        ),
        None,
    )
    if half is None or only_consumer(half.outputs[0], "Mul") is not first:
        return None
    return [half, first], first.outputs[0]


def _users(nodes: Sequence[Node]) -> tuple[dict[str, Node], dict[str, list[Node]]]:
    producer: dict[str, Node] = {}
    consumers: dict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        for out in node.outputs:
            producer[out] = node
        for name in node.inputs:
            consumers[name].append(node)
    return producer, consumers


def fuse_attention(
    nodes: Sequence[Node], constants: Mapping[str, Any], graph_outputs: set[str]
) -> list[Node]:
    """``nodes`` with every ``softmax((q * a) @ (kT * b) + mask) @ v`` (the mask
    and the scalings optional), followed by PyTorch's ``Where(IsNaN(p), 0, p)``
    guard where there is a mask, replaced by one ``ScaledDotProductAttention``
    node on ``(q, kT, v[, mask])`` with ``scale = a * b``."""
    producer, consumers = _users(nodes)

    def single(name: str) -> Node | None:
        users = consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in graph_outputs else None

    def unscaled(name: str, reader: Node) -> tuple[str, float, list[Node]]:
        """``name`` as (unscaled input, scale, [the Mul]) when a Mul by a scalar
        constant makes it for ``reader`` alone, else (name, 1.0, [])."""
        node = producer.get(name)
        if node is not None and node.op_type == "Mul" and len(node.outputs) == 1:
            for i, c in enumerate(node.inputs):
                scale = _value(c, constants)
                if scale is not None and single(name) is reader:  # read elsewhere: keep it
                    return node.inputs[1 - i], scale, [node]
        return name, 1.0, []

    position = {id(node): i for i, node in enumerate(nodes)}
    removed: set[int] = set()
    replacement: dict[int, Node] = {}
    for softmax in nodes:
        if softmax.op_type != "Softmax" or softmax.opset < 13 or softmax.attr("axis", -1) != -1:
            continue
        group = [softmax]
        # scores [+ mask] -> softmax
        pre = producer.get(softmax.inputs[0])
        mask = None
        if pre is not None and pre.op_type == "Add" and single(pre.outputs[0]) is softmax:
            scores_node = None
            for name in pre.inputs:
                maker = producer.get(name)
                if maker is not None and maker.op_type == "MatMul" and single(name) is pre:
                    scores_node = maker
                    break
            if scores_node is None:
                continue
            mask = _other(pre, scores_node.outputs[0])
            group.append(pre)
        elif pre is not None and pre.op_type == "MatMul" and single(pre.outputs[0]) is softmax:
            scores_node = pre
        else:
            continue
        group.append(scores_node)
        # softmax -> [guard] -> matmul with v
        p = softmax.outputs[0]
        users = consumers.get(p, [])
        if p in graph_outputs:
            continue
        if mask is not None:  # the guard must be there: a fully masked row is zeros, not NaN
            isnan = next((u for u in users if u.op_type == "IsNaN"), None)
            where = next((u for u in users if u.op_type == "Where"), None)
            if len(users) != 2 or isnan is None or where is None:
                continue
            if (
                where.inputs[0] != isnan.outputs[0]
                or where.inputs[2] != p
                or single(isnan.outputs[0]) is not where
                or _value(where.inputs[1], constants, floating=False) != 0.0
            ):
                continue
            group += [isnan, where]
            p = where.outputs[0]
        out = single(p)
        if out is None or out.op_type != "MatMul" or out.inputs[0] != p:
            continue
        group.append(out)
        q, a, q_mul = unscaled(scores_node.inputs[0], scores_node)
        kt, b, k_mul = unscaled(scores_node.inputs[1], scores_node)
        group += q_mul + k_mul
        if any(id(n) in removed for n in group):
            continue
        removed.update(id(n) for n in group)
        last = max(group, key=lambda n: position[id(n)])
        inputs = [q, kt, out.inputs[1]] + ([mask] if mask is not None else [])
        replacement[id(last)] = Node(
            "ScaledDotProductAttention",
            f"{softmax.name}/attention",
            inputs,
            list(out.outputs),
            {"scale": a * b},
            "",
            softmax.opset,
        )
    return [
        replacement.get(id(n), n) for n in nodes if id(n) not in removed or id(n) in replacement
    ]


def fuse(
    nodes: Sequence[Node], constants: Mapping[str, Any], graph_outputs: set[str]
) -> list[Node]:
    """Every rewrite, in order."""
    nodes = fuse_gelu(nodes, constants, graph_outputs)
    return fuse_attention(nodes, constants, graph_outputs)
