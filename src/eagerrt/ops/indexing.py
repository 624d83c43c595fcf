"""Indexing: reading with ``t[index]`` and ``take``.

>>> import eagerrt as ert
>>> x = ert.arange(6).reshape((2, 3))
>>> x[:, 1:].shape, ert.take(x, ert.asarray([2, 0]), axis=1).numpy().tolist()
((2, 2), [[2, 0], [5, 3]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.errors import DTypeError, OutOfBoundsError
from ._rules import normalize_axis
from .manipulation import _need_tensor, _view_cost
from .registry import GENERIC, define_op, elementwise_cost

__all__ = ["getitem", "take"]


_BASIC_INDEX_TYPES = (int, np.integer, slice, type(None), type(Ellipsis))


def _getitem_rule(x: Any, index: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    x = _need_tensor("getitem", x)
    parts = index if isinstance(index, tuple) else (index,)
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, _BASIC_INDEX_TYPES):
            raise DTypeError(
                f"only basic indexing (ints, slices, None, ...) is supported, got "
                f"{type(part).__name__}; use ert.take for integer-array indexing"
            )
    # Index a zero-strided stand-in of the same shape: numpy's own semantics and
    # errors, with no memory touched.
    stand_in = np.broadcast_to(np.empty((), dtype=np.int8), x.shape)
    try:
        return stand_in[index].shape, x.dtype
    except IndexError as exc:
        raise OutOfBoundsError(f"index {index!r} for shape {x.shape}: {exc}") from None


getitem = define_op(
    "getitem", _getitem_rule, cost=_view_cost, operands=1, doc="Basic indexing (a view)."
)
getitem.register_kernel(GENERIC, lambda x, index: x[index])


def _take_rule(
    x: Any, indices: Any, axis: int | None = None
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    x = _need_tensor("take", x)
    indices = _need_tensor("take", indices)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"take needs integer indices, got {indices.dtype}")
    if axis is None:
        return indices.shape, x.dtype
    ax = normalize_axis(axis, x.ndim)
    return x.shape[:ax] + indices.shape + x.shape[ax + 1 :], x.dtype


take = define_op(
    "take",
    _take_rule,
    cost=elementwise_cost,
    operands=2,
    doc="Gather elements by integer indices along ``axis``; a bad index fails on read.",
)
take.register_kernel(GENERIC, lambda x, indices, axis=None: np.take(x, indices, axis=axis))
