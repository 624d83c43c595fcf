"""Hoist elementwise work through ``concat``/``stack`` so it runs once, vectorized.

TFRT's example: a model normalizes 18 scalar features one by one,
``(x_i - mean_i) / std_i``, then concatenates them: 36 tiny ops and a concat.
Since an elementwise op works element by element, it can run after the join
instead, on the joined operand, with its constants joined at compile time:

    concat([f(x1, c1), ..., f(xn, cn)], axis)  ->  f(concat([x1, ..., xn], axis), C)

where ``C`` holds each ``c_i`` broadcast to its block along ``axis`` (and only
along the other axes some ``c_i`` varies on, so per-feature scalars become one
row of 18 values, not a batch-sized constant). Identical weak scalars stay one
weak scalar. Repeating this moves whole chains: ``(x_i - m_i) / s_i`` becomes
``(concat(x) - M) / S``. ``stack`` is handled the same way, along its new axis.

A branch that is not ``f`` may still join when ``f`` has an exact identity for
it (``x - 0``, ``x + -0.0``, ``x * 1``, ``x / 1``), as when algebraic
simplification already removed ``(x_0 - 0.0) / 1.0``.

Exactness: every branch must run ``f`` with the same static arguments and the
same ufunc loop (the same dtypes after numpy's promotion, weak scalars
included), the non-constant operands must have one dtype and already the
branch's shape (not broadcast by the constant), and the hoisted node must have
the join's dtype and shape; each ``c_i`` is cast to the loop's dtype, as the
ufunc itself would. ``c * x`` joins ``x * c`` only for ops commutative bit for
bit (add, multiply, comparisons, logical and bitwise ops; not maximum/minimum,
whose answer for -0.0 vs 0.0 is the first operand). Constants holding nan are
refused (nan op nan is one of the two nans, and which one depends on numpy's
loop). Branches another node also reads are left alone (hoisting would compute
them twice). Arithmetic then gives the eager bits exactly; functions that are
not correctly rounded (exp, sin, ...) may differ in the last ulp where numpy
picks another kernel for another memory layout, as with any vectorization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...ops.elementwise import BINARY_UFUNCS, UFUNC_OPS, UNARY_UFUNCS
from ..ir import Graph, Node, Operand, Value
from .constant_folding import MAX_FOLD_BYTES
from .rewrite import builtin, const_array, make_const, make_node, single_reader

__all__ = ["run"]

#: Ops whose operands may be swapped bit for bit (their constants hold no nan,
#: see _hoist). Not maximum/minimum: ``maximum(-0.0, 0.0)`` is its first operand.
_COMMUTATIVE = frozenset(
    {"add", "multiply", "equal", "not_equal"}
    | {"logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"}
)


#: Elementwise ops that aren't ufuncs, hoisted when their operand dtypes agree.
_UNARY_ELEMENTWISE = frozenset({"relu", "sigmoid", "silu", "gelu", "reciprocal"})


def run(graph: Graph) -> int:
    """Hoist in place until nothing moves; returns how many ops were hoisted."""
    count = 0
    while True:
        counts = graph.use_counts()
        for join in graph.nodes:
            if builtin(join, "concat") or builtin(join, "stack"):
                new = _hoist(graph, join, counts)
                if new is not None:
                    count += 1
                    break  # uses changed: recount and look again (chains move on)
        else:
            return count


@dataclass
class _Branch:
    """One joined operand: ``node`` computes it (None: an identity-padded value)."""

    node: Node | None
    x: Value  # the non-constant operand
    consts: list[Operand]  # the other operands, in canonical order


def _ufunc(node: Node) -> np.ufunc | None:
    name = node.op.name
    if UFUNC_OPS.get(name) is not node.op:
        return None
    return (BINARY_UFUNCS.get(name) or UNARY_UFUNCS[name])[0]


def _hoistable(node: Node | None) -> bool:
    if node is None or len(node.outputs) != 1:
        return False
    return _ufunc(node) is not None or (
        node.op.name in _UNARY_ELEMENTWISE and builtin(node, node.op.name)
    )


def _identity(name: str, xpos: int, dtype: np.dtype[Any]) -> Any:
    """A constant ``c`` with ``f(x, c) == x`` exactly for every x of ``dtype``
    (x at ``xpos``), or None."""
    kind = dtype.kind
    if name == "add" and kind in "iuf":
        return -0.0 if kind == "f" else 0  # +0.0 would turn -0.0 into +0.0
    if name == "subtract" and xpos == 0 and kind in "iuf":
        return 0
    if name == "multiply" and kind in "iuf":
        return 1
    if name == "divide" and xpos == 0 and kind == "f":
        return 1
    return None


def _dtype_key(a: Operand) -> Any:
    if type(a) is Value:
        return a.dtype
    return np.dtype(bool) if type(a) is bool else type(a)


def _hoist(graph: Graph, join: Node, counts: dict[int, int]) -> list[Node] | None:
    parts = join.inputs
    if len(parts) < 2 or not all(type(p) is Value for p in parts):
        return None
    producers = [
        p.node if _hoistable(p.node) and single_reader(graph, p, counts) else None for p in parts
    ]
    ops = [n.op for n in producers if n is not None]
    if len(ops) < 2:
        return None
    op = max(ops, key=ops.count)  # the op most branches run
    first = next(n for n in producers if n is not None and n.op is op)
    name = op.name
    ufunc = _ufunc(first)

    # Each branch as (x, constants), x at the first branch's position.
    xpos = _value_position(first)
    if xpos is None:
        return None
    branches: list[_Branch | None] = []
    for node in producers:
        if node is None or node.op is not op:
            branches.append(None)
            continue
        if node.static != first.static:
            return None
        pos = _value_position(node)
        if pos is None:
            return None
        operands = list(node.inputs)
        if any(_has_nan(a) for k, a in enumerate(operands) if k != pos):
            # nan op nan gives one of the two nans (sign, payload), and which one
            # depends on numpy's loop (scalar or array operand): not reproducible.
            return None
        if pos != xpos:
            if name not in _COMMUTATIVE or len(operands) != 2:
                return None
            operands.reverse()
        x = operands[xpos]
        assert type(x) is Value
        if x.shape != node.out.shape:  # x broadcast by a constant: not this block's shape
            return None
        branches.append(_Branch(node, x, operands[:xpos] + operands[xpos + 1 :]))

    real = [b for b in branches if b is not None]
    x_dtype = real[0].x.dtype
    if any(b.x.dtype != x_dtype or b.node.out.dtype != join.out.dtype for b in real):  # type: ignore[union-attr]
        return None
    loop: tuple[Any, ...] | None = None
    if ufunc is not None and ufunc.nin == 2:
        loops = {_loop_of(ufunc, [*b.consts[:xpos], b.x, *b.consts[xpos:]]) for b in real}
        if len(loops) != 1 or None in loops:
            return None
        loop = loops.pop()
    elif any(b.consts for b in real):
        return None

    # Branches that aren't f join with f's identity, if it has one.
    for i, b in enumerate(branches):
        if b is not None:
            continue
        v = parts[i]
        assert type(v) is Value
        if loop is None or not (v.dtype == x_dtype == loop[xpos] == loop[-1] == join.out.dtype):
            return None
        ident = _identity(name, xpos, v.dtype)
        if ident is None:
            return None
        branches[i] = _Branch(None, v, [ident])

    full = [b for b in branches if b is not None]
    joined_consts: list[Operand] = []
    for k in range(len(full[0].consts)):
        assert loop is not None
        cpos = k if k < xpos else k + 1
        c = _join_consts(join, full, k, loop[cpos])
        if c is None:
            return None
        joined_consts.append(c)

    joined_x = make_node(join.op, [b.x for b in full], dict(join.static), site=join.site)
    if joined_x is None:
        return None
    hoisted_in = [*joined_consts[:xpos], joined_x.out, *joined_consts[xpos:]]
    if loop is not None and ufunc is not None and _loop_of(ufunc, hoisted_in) != loop:
        return None  # the joined operands would take another loop: not exact
    hoisted = make_node(op, hoisted_in, dict(first.static), site=first.site, output=join.out)
    if hoisted is None:
        return None
    at = graph.nodes.index(join)
    graph.nodes[at : at + 1] = [joined_x, hoisted]
    for b in full:
        if b.node is not None:
            graph.nodes.remove(b.node)
    return [joined_x, hoisted]


def _has_nan(a: Operand) -> bool:
    data = const_array(a)
    return data is None or (data.dtype.kind in "fc" and bool(np.isnan(data).any()))


def _value_position(node: Node) -> int | None:
    """Where the node's only non-constant operand is (None if not exactly one)."""
    positions = [i for i, a in enumerate(node.inputs) if type(a) is Value and not a.is_const]
    return positions[0] if len(positions) == 1 else None


def _loop_of(ufunc: np.ufunc, operands: list[Operand]) -> tuple[Any, ...] | None:
    try:
        return tuple(ufunc.resolve_dtypes((*map(_dtype_key, operands), None)))
    except (TypeError, ValueError):
        return None


def _join_consts(
    join: Node, branches: list[_Branch], k: int, dtype: np.dtype[Any]
) -> Operand | None:
    """Constant operand ``k`` of every branch, joined like the branches are."""
    consts = [b.consts[k] for b in branches]
    if all(type(c) is not Value for c in consts):
        keys = {(type(c), repr(c)) for c in consts}
        if len(keys) == 1:  # one weak scalar for all: keep it weak
            return consts[0]
    stack = builtin(join, "stack")
    axis = join.static.get("axis", 0)
    # Each branch's block of the output: its own shape, the new axis for stack.
    aligned: list[np.ndarray] = []
    blocks: list[tuple[int, ...]] = []
    for b, c in zip(branches, consts, strict=True):
        data = const_array(c)
        if data is None:
            return None
        try:
            data = np.asarray(data, dtype=dtype)  # the cast the ufunc loop makes
        except (TypeError, ValueError, OverflowError):
            return None
        shape = b.x.shape
        if data.ndim > len(shape):
            return None
        data = data.reshape((1,) * (len(shape) - data.ndim) + data.shape)
        if stack:
            ax = int(axis) % (len(shape) + 1)
            data = np.expand_dims(data, ax)
            shape = (*shape[:ax], 1, *shape[ax:])
        aligned.append(data)
        blocks.append(shape)
    if axis is None:  # concat of the flattened branches
        joined = np.concatenate(
            [np.broadcast_to(d, s).ravel() for d, s in zip(aligned, blocks, strict=True)]
        )
    else:
        ax = int(axis) % len(blocks[0])
        same = all(
            d.shape == aligned[0].shape and d.tobytes() == aligned[0].tobytes() for d in aligned
        )
        if same and aligned[0].shape[ax] == 1:  # one constant broadcasts over every block
            joined = aligned[0]
        else:
            # Broadcast along the join axis, and along others only where some c_i varies.
            varies = {d for a in aligned for d in range(a.ndim) if a.shape[d] != 1}
            targets = [
                tuple(s[d] if d == ax or d in varies else 1 for d in range(len(s))) for s in blocks
            ]
            joined = np.concatenate(
                [np.broadcast_to(d, t) for d, t in zip(aligned, targets, strict=True)], axis=ax
            )
    if joined.nbytes > MAX_FOLD_BYTES:
        return None
    return make_const(np.ascontiguousarray(joined), join.out.device)
