"""Sorting functions of the Array API standard: ``sort`` and ``argsort``.

Both are stable by default, descending order included: elements that compare
equal keep their order in ``x``. NaNs sort after every number (before them when
descending, as IEEE 754's total order puts them). Complex numbers have no order
in the standard and are refused.

>>> import eagerrt as ert
>>> x = ert.asarray([3, 1, 2])
>>> ert.sort(x).numpy(), ert.argsort(x, descending=True).numpy()
(array([1, 2, 3]), array([0, 2, 1]))
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from .._core import config
from ..tensor import Tensor
from ._rules import RuleOut, as_array, foreign_array, need_tensor, normalize_axis
from .registry import GENERIC, Op, define_op

__all__ = ["argsort", "sort"]

_INT64 = np.dtype(np.int64)


def _sort_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, x: Any, **static: Any) -> float:
    # n log n: each element is compared about log2(length of its axis) times.
    n = math.prod(shape)
    length = shape[static.get("axis", -1)] if shape else 1
    return config.op_overhead_ns + n * math.log2(length + 1) * config.ns_per_element


def _kind(x: Any, stable: bool) -> Literal["stable"] | None:
    """numpy's sort ``kind``: CuPy's sorts are always stable and take none."""
    return "stable" if stable and not foreign_array(x) else None


def _argsort_kernel(
    x: Any, axis: int = -1, descending: bool = False, stable: bool = True
) -> np.ndarray:
    if not descending:
        return as_array(np.argsort(x, axis=axis, kind=_kind(x, stable)), _INT64)
    # Descending and still stable: sort the reversed data ascending (stably), then
    # reverse the order back. Equal elements end up in their original order, and
    # NaNs, last ascending, come first.
    n = np.shape(x)[axis]
    order = np.argsort(np.flip(x, axis), axis=axis, kind=_kind(x, True))
    return as_array(n - 1 - np.flip(order, axis), _INT64)


def _sort_kernel(
    x: Any, axis: int = -1, descending: bool = False, stable: bool = True
) -> np.ndarray:
    if not descending:
        return np.sort(x, axis=axis, kind=_kind(x, stable))
    # Gather by the stable order: keeps -0.0 and 0.0 (equal) in their original order.
    return np.take_along_axis(x, _argsort_kernel(x, axis, descending=True), axis=axis)


def _sort_op(name: str, kernel: Callable[..., np.ndarray], doc: str) -> Op:
    """sort's op (``x``'s shape and dtype), or argsort's (int64 indices)."""

    def rule(x: Any, axis: int = -1, descending: bool = False, stable: bool = True) -> RuleOut:
        need_tensor(name, x)
        if x.dtype.kind == "c":
            raise TypeError(f"{name}: complex numbers have no order ({x.dtype})")
        for flag, value in (("descending", descending), ("stable", stable)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name}: {flag} must be a bool, got {value!r}")
        normalize_axis(axis, x.ndim)
        return x.shape, _INT64 if name == "argsort" else x.dtype

    op = define_op(name, rule, cost=_sort_cost, operands=1, doc=doc)
    op.register_kernel(GENERIC, kernel)
    return op


_sort = _sort_op("sort", _sort_kernel, "Sorted copy along axis.")
_argsort = _sort_op("argsort", _argsort_kernel, "Indices that sort along axis.")


def sort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """``x`` sorted along ``axis`` (ascending unless ``descending``).

    ``stable=True`` (the default) keeps equal elements in their original order in
    both directions; ``stable=False`` lets numpy pick a faster unstable sort.

    >>> import eagerrt as ert
    >>> ert.sort(ert.asarray([[3.0, float("nan"), 1.0]]), descending=True).numpy()
    array([[nan,  3.,  1.]])
    """
    return _sort(x, axis=axis, descending=descending, stable=stable)


def argsort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """The int64 indices that sort ``x`` along ``axis``; with ``stable=True`` (the
    default) ties keep their original order, descending too.

    >>> import eagerrt as ert
    >>> ert.argsort(ert.asarray([2, 1, 2, 1]), descending=True).numpy()
    array([0, 2, 1, 3])
    """
    return _argsort(x, axis=axis, descending=descending, stable=stable)
