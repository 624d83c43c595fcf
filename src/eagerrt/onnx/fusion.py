"""Load-time rewrites of ONNX subgraphs into single eagerrt ops (ONNX Runtime
makes the same ones).

* Exporters spell ``nn.Linear`` as ``MatMul`` by a (k, n) constant and ``Add``
  of the bias (or ``Gemm``). As one ``Linear`` node, the weight transposed
  once here into PyTorch's (n, k) layout, it runs as :func:`eagerrt.linear`,
  whose pooled kernels and fused epilogues a model written with eagerrt gets;
  an attention's query, key and value projections of one input are stacked.
* Exporters spell GELU out as ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (five nodes
  per use in a BERT layer). Rewritten into one ``Gelu`` node it runs as
  :func:`eagerrt.gelu`, which graph mode fuses into the matmul before it, and
  needs no ``erf`` kernel at all.
* PyTorch exports ``scaled_dot_product_attention`` as scaled matmuls, a mask
  added, a softmax, a guard turning fully masked rows' NaNs into zeros and a
  second matmul. Rewritten into one ``ScaledDotProductAttention`` node it runs
  as :func:`eagerrt.scaled_dot_product_attention` (which gives fully masked
  rows zeros too), with no (..., L, S) temporaries but its own. A mask
  ``Where(keep, 0, -inf)`` is taken as the boolean ``keep``, so that BERT's
  padding mask reaches attention as (batch, 1, 1, keys), which its pooled
  kernel takes (see :func:`_keep`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .graph import Node

__all__ = ["fuse", "fuse_attention", "fuse_gelu", "fuse_linear", "prune"]


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


class _Rewrite:
    """Groups of ``nodes`` each replaced by one node, every other node kept in
    order: what each rewrite below does with the groups it finds."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self._nodes = nodes
        self._position = {id(node): i for i, node in enumerate(nodes)}
        self._removed: set[int] = set()
        self._replacement: dict[int, Node] = {}

    def taken(self, group: Sequence[Node]) -> bool:
        """Whether a node of ``group`` already went into another replacement."""
        return any(id(n) in self._removed for n in group)

    def earliest(self, group: Sequence[Node]) -> Node:
        """The node of ``group`` that comes first in order."""
        return min(group, key=lambda n: self._position[id(n)])

    def replace(self, group: Sequence[Node], node: Node, *, at_first: bool = False) -> None:
        """``group`` by ``node``, which stands where the group's last node stood
        (its inputs are all made by then), or its first (``at_first``: a node
        whose outputs the group's later nodes read)."""
        pick = min if at_first else max
        anchor = pick(group, key=lambda n: self._position[id(n)])
        self._removed.update(id(n) for n in group)
        self._replacement[id(anchor)] = node

    def result(self) -> list[Node]:
        kept = self._replacement
        return [
            kept.get(id(n), n) for n in self._nodes if id(n) not in self._removed or id(n) in kept
        ]


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

    rewrite = _Rewrite(nodes)
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
        if rewrite.taken(group):
            continue
        rewrite.replace(
            group,
            Node("Gelu", f"{erf.name}/gelu", [x], [y], {"approximate": "none"}, "", erf.opset),
        )
    return rewrite.result()


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


def _filled(name: str, constants: Mapping[str, Any], value: float) -> bool:
    """Whether ``name`` is a floating constant with every element ``value``."""
    array = constants.get(name)
    if array is None:
        return False
    array = np.asarray(array)
    return array.dtype.kind == "f" and array.size > 0 and bool(np.all(array == value))


def _keep(
    mask: str, producer: Mapping[str, Node], constants: Mapping[str, Any]
) -> list[str] | None:
    """For an additive mask ``Where(keep, 0, -inf)``: the boolean operands whose
    AND is ``keep`` (True: may attend), through any ``Expand`` (attention
    broadcasts its mask, and a mask broadcast from fewer operands broadcasts to
    the scores as the whole did); else None. They stay apart until traced,
    when those all True (made by shape arithmetic) drop out."""
    where = producer.get(mask)
    if where is None or where.op_type != "Where" or len(where.inputs) != 3:
        return None
    if not (
        _filled(where.inputs[1], constants, 0.0) and _filled(where.inputs[2], constants, -np.inf)
    ):
        return None

    def operands(name: str) -> list[str]:
        node = producer.get(name)
        if node is not None and node.op_type == "Expand":
            return operands(node.inputs[0])
        if node is not None and node.op_type == "And":
            return [o for i in node.inputs for o in operands(i)]
        return [name]

    return operands(where.inputs[0])


def fuse_attention(
    nodes: Sequence[Node], constants: Mapping[str, Any], graph_outputs: set[str]
) -> list[Node]:
    """``nodes`` with every ``softmax((q * a) @ (kT * b) + mask) @ v`` (the mask
    and the scalings optional), followed by PyTorch's ``Where(IsNaN(p), 0, p)``
    guard where there is a mask, replaced by one ``ScaledDotProductAttention``
    node on ``(q, kT, v[, mask])`` with ``scale = a * b``; where the mask is
    ``Where(keep, 0, -inf)``, on ``(q, kT, v, *operands)`` with ``keep=1``:
    the boolean operands whose AND is ``keep`` (see :func:`_keep`)."""
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

    rewrite = _Rewrite(nodes)
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
        if rewrite.taken(group):
            continue
        attrs: dict[str, Any] = {"scale": a * b}
        masks = [] if mask is None else [mask]
        keep = None if mask is None else _keep(mask, producer, constants)
        if keep is not None:
            masks, attrs["keep"] = keep, 1
        rewrite.replace(
            group,
            Node(
                "ScaledDotProductAttention",
                f"{softmax.name}/attention",
                [q, kt, out.inputs[1], *masks],
                list(out.outputs),
                attrs,
                "",
                softmax.opset,
            ),
        )
    return rewrite.result()


#: The dtypes :func:`eagerrt.linear` computes in.
_LINEAR_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class _Constants:
    """The arrays the linear rewrite makes (transposed weights, biases as (n,)
    vectors, stacked projections), under names no value of the graph has, each
    made once."""

    def __init__(self, nodes: Sequence[Node], constants: Mapping[str, Any]) -> None:
        self.made: dict[str, np.ndarray] = {}
        self._constants = constants
        self._taken = set(constants) | {v for n in nodes for v in (*n.inputs, *n.outputs)}
        self._cache: dict[tuple[tuple[str, ...], str], str] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        """A constant of the graph's or one made here."""
        made = self.made.get(name)
        return np.asarray(self._constants[name]) if made is None else made

    def get(self, sources: tuple[str, ...], how: str, make: Any) -> str:
        """The name of ``make()``, a new array derived from the constants ``sources``."""
        key = (sources, how)
        if key not in self._cache:
            new, i = f"{sources[0]}/{how}", 1
            while new in self._taken:
                i += 1
                new = f"{sources[0]}/{how}{i}"
            array = np.ascontiguousarray(make())
            array.flags.writeable = False
            self.made[new] = array
            self._taken.add(new)
            self._cache[key] = new
        return self._cache[key]


def _weight(name: str, constants: Mapping[str, Any]) -> np.ndarray | None:
    """The constant ``name`` when it is a matrix :func:`eagerrt.linear` takes."""
    value = constants.get(name)
    if value is None:
        return None
    value = np.asarray(value)
    return value if value.ndim == 2 and value.dtype in _LINEAR_DTYPES else None


def _bias(
    name: str, constants: Mapping[str, Any], n: int, dtype: np.dtype[Any], max_ndim: int
) -> np.ndarray | None:
    """The constant ``name`` as a bias of ``n`` values when adding it to a product
    of ``n`` columns (and rank ``max_ndim`` at least) is adding that vector to
    each row: of ``dtype``, of rank at most ``max_ndim``, with leading ones and
    ``n`` or 1 values; else None."""
    value = constants.get(name)
    if value is None:
        return None
    value = np.asarray(value)
    if value.dtype != dtype or value.ndim > max_ndim or value.size not in (1, n):
        return None
    if value.ndim and any(d != 1 for d in value.shape[:-1]):
        return None
    return value


def fuse_linear(
    nodes: Sequence[Node], constants: Mapping[str, Any], graph_outputs: set[str]
) -> tuple[list[Node], dict[str, np.ndarray]]:
    """``nodes`` with every ``MatMul(x, W)`` by a constant (k, n) matrix, with
    the ``Add`` of a constant bias read from it alone (either order), and every
    ``Gemm`` that is the same (``transA=0``, ``alpha=1``, constant ``B`` and
    ``C``), replaced by one ``Linear`` node on ``(x, W.T[, bias])``; and the
    arrays made (each weight transposed once), new initializers by name."""
    _, consumers = _users(nodes)
    made = _Constants(nodes, constants)

    def transposed(name: str, w: np.ndarray) -> str:
        return made.get((name,), "transposed", lambda: w.T)

    def as_bias(name: str, b: np.ndarray, n: int) -> str:
        if b.shape == (n,):
            return name
        return made.get((name,), "bias", lambda: np.broadcast_to(b.reshape(-1), (n,)))

    rewrite = _Rewrite(nodes)
    for node in nodes:
        if node.op_type == "MatMul":
            w = _weight(node.inputs[1], constants)
            if w is None:
                continue
            n = w.shape[1]
            group, inputs = [node], [node.inputs[0], transposed(node.inputs[1], w)]
            out = node.outputs[0]
            users = consumers.get(out, [])
            if len(users) == 1 and out not in graph_outputs and users[0].op_type == "Add":
                add = users[0]
                other = _other(add, out)
                # A bias of rank 2 or more could raise the rank of a 1-d x's product.
                b = None if other is None else _bias(other, constants, n, w.dtype, 1)
                if other is not None and b is not None:
                    group.append(add)
                    inputs.append(as_bias(other, b, n))
                    out = add.outputs[0]
        elif node.op_type == "Gemm":
            if node.attr("transA", 0) or float(node.attr("alpha", 1.0)) != 1.0:
                continue
            w = _weight(node.inputs[1], constants)
            if w is None:
                continue
            # transB=1: B is already (n, k) (and C-contiguous, as read from the file).
            trans_b = bool(node.attr("transB", 0))
            n = w.shape[0] if trans_b else w.shape[1]
            weight = node.inputs[1] if trans_b else transposed(node.inputs[1], w)
            inputs = [node.inputs[0], weight]
            c = node.inputs[2] if len(node.inputs) > 2 else ""
            beta = float(node.attr("beta", 1.0))
            if c and beta != 0.0:
                b = _bias(c, constants, n, w.dtype, 2) if beta == 1.0 else None
                if b is None:
                    continue
                inputs.append(as_bias(c, b, n))
            group, out = [node], node.outputs[0]
        else:
            continue
        if rewrite.taken(group):
            continue
        rewrite.replace(
            group, Node("Linear", f"{node.name}/linear", inputs, [out], {}, "", node.opset)
        )
    return _stack_projections(rewrite.result(), made), made.made


#: Ops that only view their input another way, between attention and the linear
#: layers making its query, key and value.
_VIEWS = {"Reshape", "Transpose", "Identity", "Squeeze", "Unsqueeze"}


def _stack_projections(nodes: list[Node], made: _Constants) -> list[Node]:
    """``nodes`` with the three ``Linear`` nodes that make one attention's query,
    key and value from the same input (through ``_VIEWS`` only) stacked into
    one, ``split`` into their outputs: one product with three times the
    columns, as a model written with eagerrt computes BERT's projections."""
    producer, _ = _users(nodes)

    def source(name: str) -> Node | None:
        node = producer.get(name)
        while node is not None and node.op_type in _VIEWS:
            node = producer.get(node.inputs[0])
        if node is None or node.op_type != "Linear" or "split" in node.attrs:
            return None
        return node

    rewrite = _Rewrite(nodes)
    for attention in nodes:
        if attention.op_type != "ScaledDotProductAttention":
            continue
        parts = [source(name) for name in attention.inputs[:3]]
        if any(p is None for p in parts) or len({id(p) for p in parts}) != 3:
            continue
        linears: list[Node] = parts  # type: ignore[assignment]
        if rewrite.taken(linears):
            continue
        if len({p.inputs[0] for p in linears}) != 1 or len({len(p.inputs) for p in linears}) != 1:
            continue
        weights = [made[p.inputs[1]] for p in linears]
        if len({(w.shape[1], w.dtype) for w in weights}) != 1:
            continue
        names = tuple(p.inputs[1] for p in linears)
        inputs = [
            linears[0].inputs[0],
            made.get(names, "stacked", lambda w=weights: np.concatenate(w)),
        ]
        if len(linears[0].inputs) == 3:
            biases = tuple(p.inputs[2] for p in linears)
            stacked = [made[b] for b in biases]
            inputs.append(made.get(biases, "stacked", lambda b=stacked: np.concatenate(b)))
        first = rewrite.earliest(linears)
        stacked_node = Node(
            "Linear",
            f"{first.name}/stacked",
            inputs,
            [p.outputs[0] for p in linears],
            {"split": [int(w.shape[0]) for w in weights]},
            "",
            first.opset,
        )
        rewrite.replace(linears, stacked_node, at_first=True)
    return rewrite.result()


def prune(nodes: Sequence[Node], graph_outputs: set[str]) -> list[Node]:
    """``nodes`` without those whose outputs nothing reads (the rewrites leave
    some: a mask's ``Where`` whose attention now reads its condition), so that
    eager calls don't run them either."""
    kept = list(nodes)
    while True:
        read = {name for node in kept for name in node.inputs} | graph_outputs
        alive = [n for n in kept if any(o in read for o in n.outputs if o)]
        if len(alive) == len(kept):
            return alive
        kept = alive


def fuse(
    nodes: Sequence[Node], constants: Mapping[str, Any], graph_outputs: set[str]
) -> tuple[list[Node], dict[str, np.ndarray]]:
    """Every rewrite, in order, then :func:`prune`; and the arrays the rewrites
    made (by name: new initializers)."""
    nodes = fuse_gelu(nodes, constants, graph_outputs)
    nodes = fuse_attention(nodes, constants, graph_outputs)
    nodes, made = fuse_linear(nodes, constants, graph_outputs)
    return prune(nodes, graph_outputs), made
