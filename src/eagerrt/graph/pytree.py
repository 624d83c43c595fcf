"""Nested arguments and results: tuples, lists, dicts and namedtuples of leaves.

A compiled function takes and returns any such structure; tracing flattens it
to a list of leaves plus a hashable description that rebuilds it.

>>> leaves, tree = flatten({"a": (1, 2), "b": [3]})
>>> leaves
[1, 2, 3]
>>> unflatten(tree, [10, 20, 30])
{'a': (10, 20), 'b': [30]}
"""

from __future__ import annotations

from typing import Any

__all__ = ["LEAF", "flatten", "unflatten"]

#: The description of a single leaf.
LEAF = "*"


def flatten(obj: Any) -> tuple[list[Any], Any]:
    """``(leaves, tree)``: the leaves in order and a hashable description."""
    leaves: list[Any] = []
    return leaves, _flatten(obj, leaves)


def _flatten(obj: Any, leaves: list[Any]) -> Any:
    kind = type(obj)
    if kind is tuple or kind is list:
        return (kind.__name__, tuple(_flatten(x, leaves) for x in obj))
    if kind is dict:
        keys = tuple(obj)
        return ("dict", keys, tuple(_flatten(obj[k], leaves) for k in keys))
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return ("namedtuple", kind, tuple(_flatten(x, leaves) for x in obj))
    leaves.append(obj)
    return LEAF


def unflatten(tree: Any, leaves: list[Any]) -> Any:
    """Rebuild the structure ``tree`` describes from ``leaves``."""
    return _build(tree, iter(leaves))


def _build(tree: Any, it: Any) -> Any:
    if tree == LEAF:
        return next(it)
    kind = tree[0]
    if kind == "tuple":
        return tuple(_build(t, it) for t in tree[1])
    if kind == "list":
        return [_build(t, it) for t in tree[1]]
    if kind == "dict":
        return {k: _build(t, it) for k, t in zip(tree[1], tree[2], strict=True)}
    return tree[1](*(_build(t, it) for t in tree[2]))  # namedtuple
