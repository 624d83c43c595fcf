"""Algebraic simplification: identities that leave every result bit unchanged.

A rewrite fires only when it is exact for every value, nan, inf and -0.0
included, and keeps the node's dtype and shape: the replacement must already
have the node's exact dtype and shape, so weak-scalar promotion and
broadcasting are never silently undone. What it rewrites:

* arithmetic identities: ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1``,
  ``x ** 1``; ``x + 0`` and ``0 + x`` for integers and bools, but for floats
  only with ``-0.0`` (``-0.0 + 0.0`` is ``+0.0``); the constant may be a weak
  scalar or a constant tensor that is all zeros/ones after the cast numpy does.
  Not ``x * 0`` (nan, inf), ``x - x`` or ``0 - x``; complex ``* 1`` and ``/ 1``
  are refused (``(a + bi)(1 + 0i)`` turns ``inf`` into nan, ``-0.0`` into 0);
* not ``x + (-y)`` -> ``x - y``: equal values, but a nan ``y`` comes out
  with the other sign bit (``signbit``, ``copysign`` would tell);
* involutions and no-ops: ``--x``, ``~~x``, ``not not x`` (bools),
  ``conj(conj(x))``, ``+x``, ``conj``/``real`` of real ``x``;
  idempotent ops: ``abs``, ``floor``, ``ceil``, ``trunc``, ``sign``, ``relu``
  of themselves; ``maximum(x, x)``, ``minimum``, ``logical_and``/``or``,
  ``bitwise_and``/``or`` of ``x`` with itself, ``where(c, x, x)``;
* layout: permutations (``transpose``, ``permute_dims``, ``matrix_transpose``,
  ``moveaxis``) compose into one, or vanish when they cancel; chains of
  ``reshape``/``expand_dims``/``squeeze`` become one ``reshape``, or nothing
  when the shape comes back; ``astype`` to the same dtype, ``broadcast_to``
  the same shape, basic slicing that keeps everything, ``concat`` of one
  tensor; ``concat`` of adjacent slices of one tensor becomes one slice.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ...ops.manipulation import moveaxis_permutation
from ...ops.registry import get_op
from ..ir import Graph, Node, Operand, Value
from . import dce
from .rewrite import builtin, const_array, make_node

__all__ = ["run"]

Result = Value | Node | None


def run(graph: Graph) -> int:
    """Simplify in place until nothing changes; returns how many rewrites."""
    total = count = _sweep(graph)
    while count:
        count = _sweep(graph)
        total += count
    if total:
        # What the rewrites left unread (the slices a joined slice replaced, the
        # inner op of --x) goes now, not after the passes that follow.
        dce.run(graph)
    return total


def _sweep(graph: Graph) -> int:
    # One pass in execution order: a node sees its operands already simplified,
    # so chains (---x, transpose of transpose of transpose) collapse at once.
    alias: dict[int, Value] = {}
    kept: list[Node] = []
    count = 0
    for node in graph.nodes:
        node.inputs = [alias.get(a.id, a) if type(a) is Value else a for a in node.inputs]
        result = _simplify(node) if len(node.outputs) == 1 else None
        if result is None:
            kept.append(node)
            continue
        count += 1
        if type(result) is Value:
            alias[node.out.id] = result  # the node goes: its readers read result
        else:
            kept.append(result)  # type: ignore[arg-type]
    graph.nodes = kept
    graph.outputs = [alias.get(v.id, v) for v in graph.outputs]
    return count


def _simplify(node: Node) -> Result:
    rule = _RULES.get(node.op.name)
    if rule is None or not builtin(node, node.op.name):
        return None
    return rule(node)


# -- helpers ---------------------------------------------------------------------------
def _same(a: Operand, out: Value) -> bool:
    """``a`` can stand for ``out``: a value of exactly its shape and dtype."""
    return type(a) is Value and a.shape == out.shape and a.dtype == out.dtype


def _cast(a: Operand, dtype: np.dtype[Any]) -> np.ndarray | None:
    """A constant operand as the ufunc loop sees it (cast to the result dtype),
    or None if it is not a constant."""
    data = const_array(a)
    if data is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(data, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        return None


def _is_zero(a: Operand, dtype: np.dtype[Any], *, negative: bool) -> bool:
    """All zeros; for floats (and both parts of complex) with the sign bit
    ``negative`` (``x + -0.0`` and ``x - +0.0`` are exact, the others not)."""
    data = _cast(a, dtype)
    if data is None or not np.all(data == 0):
        return False
    if dtype.kind in "biu":
        return True
    parts = (data.real, data.imag) if dtype.kind == "c" else (data,)
    return all(bool(np.all(np.signbit(p) == negative)) for p in parts)


def _is_one(a: Operand, dtype: np.dtype[Any]) -> bool:
    data = _cast(a, dtype)
    return data is not None and bool(np.all(data == 1))


def _producer(a: Operand, *names: str) -> Node | None:
    """The node computing ``a`` if it runs one of the registered ops ``names``."""
    if type(a) is not Value or a.node is None:
        return None
    node = a.node
    if len(node.outputs) != 1 or not any(builtin(node, n) for n in names):
        return None
    return node


# -- arithmetic ------------------------------------------------------------------------
def _add(node: Node) -> Result:
    out = node.out
    a, b = node.inputs
    for x, c in ((a, b), (b, a)):
        if _same(x, out) and _is_zero(c, out.dtype, negative=True):
            return x
    return None


def _subtract(node: Node) -> Result:
    out = node.out
    x, c = node.inputs
    if _same(x, out) and _is_zero(c, out.dtype, negative=False):
        return x
    return None


def _multiply(node: Node) -> Result:
    out = node.out
    if out.dtype.kind not in "biuf":  # complex: (a+bi)(1+0i) isn't a+bi for inf, -0.0
        return None
    a, b = node.inputs
    for x, c in ((a, b), (b, a)):
        if _same(x, out) and _is_one(c, out.dtype):
            return x
    return None


def _divide_or_power(node: Node) -> Result:
    out = node.out
    x, c = node.inputs
    if out.dtype.kind in "iuf" and _same(x, out) and _is_one(c, out.dtype):
        return x
    return None


# -- unary -----------------------------------------------------------------------------
def _involution(node: Node) -> Result:
    """f(f(x)) -> x for the op's own inverse."""
    inner = _producer(node.inputs[0], node.op.name)
    if inner is not None and _same(inner.inputs[0], node.out):
        return inner.inputs[0]
    return None


def _logical_not(node: Node) -> Result:
    if node.out.dtype.kind == "b":  # not not x is x only for bools
        return _involution(node)
    return None


def _identity_op(node: Node) -> Result:
    """+x, real of real x, astype to its own dtype, broadcast_to its own shape."""
    x = node.inputs[0]
    return x if _same(x, node.out) else None


def _conj(node: Node) -> Result:
    x = node.inputs[0]
    if type(x) is Value and x.dtype.kind != "c" and _same(x, node.out):
        return x
    return _involution(node)


def _idempotent(node: Node) -> Result:
    """f(f(x)) -> f(x)."""
    inner = _producer(node.inputs[0], node.op.name)
    if inner is not None and inner.static == node.static and _same(inner.out, node.out):
        return inner.out
    return None


def _self_pair(node: Node) -> Result:
    """op(x, x) -> x for max, min, and, or; where(c, x, x) -> x."""
    *_, a, b = node.inputs
    return a if a is b and _same(a, node.out) else None


# -- layout ----------------------------------------------------------------------------
def _perm(node: Node) -> tuple[int, ...] | None:
    """The axis permutation a transpose-like node applies (out axis i is input
    axis perm[i]), or None."""
    x = node.inputs[0]
    if type(x) is not Value:
        return None
    ndim = x.ndim
    try:
        if builtin(node, "transpose"):
            axes = node.static.get("axes")
            if axes is None:
                return tuple(range(ndim))[::-1]
            return tuple(int(a) % ndim for a in axes)
        if builtin(node, "matrix_transpose"):
            return (*range(ndim - 2), ndim - 1, ndim - 2)
        if builtin(node, "moveaxis"):
            return tuple(
                moveaxis_permutation(ndim, node.static["source"], node.static["destination"])
            )
    except Exception:  # a form we don't read: leave the node alone
        return None
    return None


def _permutation(node: Node) -> Result:
    outer = _perm(node)
    if outer is None:
        return None
    x = node.inputs[0]
    ident = tuple(range(len(outer)))
    if outer == ident:
        return x if _same(x, node.out) else None
    inner_node = x.node if type(x) is Value else None
    inner = _perm(inner_node) if inner_node is not None and len(inner_node.outputs) == 1 else None
    if inner_node is None or inner is None:
        return None
    source = inner_node.inputs[0]
    composed = tuple(inner[i] for i in outer)
    if composed == ident:
        return source if _same(source, node.out) else None
    return make_node(
        get_op("transpose"), [source], {"axes": composed}, site=node.site, output=node.out
    )


_RESHAPES = ("reshape", "expand_dims", "squeeze")


def _plain_reshape(node: Node) -> bool:
    """A pure change of shape (a reshape that may view; not copy=True/False)."""
    return not builtin(node, "reshape") or node.static.get("copy") is None


def _reshape(node: Node) -> Result:
    if not _plain_reshape(node):
        return None
    x = node.inputs[0]
    if _same(x, node.out):
        return x
    inner = _producer(x, *_RESHAPES)
    if inner is None or not _plain_reshape(inner):
        return None
    source = inner.inputs[0]
    if _same(source, node.out):
        return source
    return make_node(
        get_op("reshape"), [source], {"shape": node.out.shape}, site=node.site, output=node.out
    )


def _slices(node: Node) -> list[tuple[int, int, int]] | None:
    """A basic getitem's index as (start, stop, step) per axis, if it is only
    slices (and at most one ...)."""
    x = node.inputs[0]
    if type(x) is not Value:
        return None
    index = node.static.get("index")
    parts: list[Any] = list(index) if isinstance(index, tuple) else [index]
    if parts.count(Ellipsis) > 1 or not all(p is Ellipsis or type(p) is slice for p in parts):
        return None
    if Ellipsis in parts:
        at = parts.index(Ellipsis)
        parts[at : at + 1] = [slice(None)] * (x.ndim - len(parts) + 1)
    if len(parts) > x.ndim:
        return None
    parts += [slice(None)] * (x.ndim - len(parts))
    try:
        return [p.indices(d) for p, d in zip(parts, x.shape, strict=True)]
    except (TypeError, ValueError):
        return None


def _getitem(node: Node) -> Result:
    bounds = _slices(node)
    x = node.inputs[0]
    if bounds is not None and all(b == (0, d, 1) for b, d in zip(bounds, x.shape, strict=True)):
        return _identity_op(node)
    return None


def _concat(node: Node) -> Result:
    axis = node.static.get("axis", 0)
    parts = node.inputs
    if len(parts) == 1:
        x = parts[0]
        return x if axis is not None and _same(x, node.out) else None
    if axis is None:
        return None
    # Adjacent slices of one tensor along the concat axis: one slice.
    source: Value | None = None
    bounds: list[list[tuple[int, int, int]]] = []
    for p in parts:
        slicer = _producer(p, "getitem")
        b = _slices(slicer) if slicer is not None else None
        if slicer is None or b is None or any(step != 1 for _, _, step in b):
            return None
        if source is None:
            source = slicer.inputs[0]
        elif slicer.inputs[0] is not source:
            return None
        bounds.append(b)
    if source is None or source.ndim != node.out.ndim:
        return None
    ax = int(axis) % source.ndim
    first = bounds[0]
    rest = [s for i, s in enumerate(first) if i != ax]
    stop = first[ax][0]
    for b in bounds:
        if b[ax][0] != stop or [s for i, s in enumerate(b) if i != ax] != rest:
            return None
        stop = b[ax][1]
    merged = tuple(
        slice(first[ax][0], stop, 1) if i == ax else slice(*s) for i, s in enumerate(first)
    )
    return make_node(
        get_op("getitem"), [source], {"index": merged}, site=node.site, output=node.out
    )


_RULES: dict[str, Callable[[Node], Result]] = {
    "add": _add,
    "subtract": _subtract,
    "multiply": _multiply,
    "divide": _divide_or_power,
    "power": _divide_or_power,
    "negative": _involution,
    "bitwise_invert": _involution,
    "logical_not": _logical_not,
    "positive": _identity_op,
    "conj": _conj,
    "real": _identity_op,
    "abs": _idempotent,
    "floor": _idempotent,
    "ceil": _idempotent,
    "trunc": _idempotent,
    "sign": _idempotent,
    "relu": _idempotent,
    "maximum": _self_pair,
    "minimum": _self_pair,
    "logical_and": _self_pair,
    "logical_or": _self_pair,
    "bitwise_and": _self_pair,
    "bitwise_or": _self_pair,
    "where": _self_pair,
    "transpose": _permutation,
    "matrix_transpose": _permutation,
    "moveaxis": _permutation,
    "reshape": _reshape,
    "expand_dims": _reshape,
    "squeeze": _reshape,
    "astype": _identity_op,
    "getitem": _getitem,
    "concat": _concat,
    "broadcast_to": _identity_op,
}
