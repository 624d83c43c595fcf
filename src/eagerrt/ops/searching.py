"""Searching functions of the Array API standard: ``count_nonzero``,
``nonzero`` and ``searchsorted`` (``argmax``/``argmin`` live with the reductions,
``where`` with the elementwise ops).

``nonzero``'s result has a shape that depends on the data, so it waits for its
input at the call and returns ready tensors; the others return at once.

>>> import eagerrt as ert
>>> x = ert.asarray([[0, 3], [4, 0]])
>>> ert.count_nonzero(x).item(), [t.tolist() for t in ert.nonzero(x)]
(2, [[0, 1], [1, 0]])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from .._core import ShapeError, config
from ..tensor import Tensor
from ._rules import RuleOut, as_array, foreign_array, need_tensor, normalize_axes
from .reduction import reduced_shape
from .registry import GENERIC, call_error, define_op
from .wrap import as_tensor, wrap

__all__ = ["count_nonzero", "nonzero", "searchsorted"]

_INT64 = np.dtype(np.int64)


# -- count_nonzero ---------------------------------------------------------------------
def _count_rule(x: Any, axis: Any = None, keepdims: bool = False) -> RuleOut:
    need_tensor("count_nonzero", x)
    return reduced_shape(x.shape, normalize_axes(axis, x.ndim), keepdims), _INT64


def _count_kernel(x: Any, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    axes = normalize_axes(axis, np.ndim(x))
    if foreign_array(x):  # CuPy's count_nonzero takes no keepdims
        return (x != 0).sum(axis=axes, keepdims=keepdims, dtype=_INT64)
    # np.count_nonzero(axis=None) ignores keepdims and gives a Python int.
    counts = np.count_nonzero(x, axis=axes, keepdims=keepdims)
    return np.asarray(counts, dtype=_INT64)


_count_nonzero = define_op(
    "count_nonzero", _count_rule, operands=1, doc="How many elements are nonzero."
)
_count_nonzero.register_kernel(GENERIC, _count_kernel)


def count_nonzero(
    x: Any, /, *, axis: int | Sequence[int] | None = None, keepdims: bool = False
) -> Tensor:
    """How many elements over ``axis`` (every axis for None) are nonzero (true
    for bools; NaN counts as nonzero), as int64.

    >>> import eagerrt as ert
    >>> ert.count_nonzero(ert.asarray([[0, 1, 2], [0, 0, 5]]), axis=1).numpy()
    array([2, 1])
    """
    if axis is None and not keepdims:
        return _count_nonzero.call1(x)
    return _count_nonzero(x, axis=axis, keepdims=keepdims)


# -- nonzero ------------------------------------------------------------------------------
def nonzero(x: Any, /) -> tuple[Tensor, ...]:
    """The indices of the nonzero elements: one int64 tensor per axis of ``x``, in
    row-major order.

    The result's length depends on ``x``'s values: the shape is known once ``x``
    is, so this call waits for ``x`` (blocking the calling thread; worker threads
    keep helping with queued work) and returns ready tensors. In async code,
    ``await x`` first. A failure of ``x`` is raised here, as by ``x.numpy()``.

    >>> import eagerrt as ert
    >>> rows, cols = ert.nonzero(ert.asarray([[1, 0], [0, 7]]))
    >>> rows.numpy(), cols.numpy()
    (array([0, 1]), array([0, 1]))
    """
    x = as_tensor(x)
    if x.ndim == 0:
        raise call_error(ShapeError, "nonzero", (x,), {}, "nonzero of a 0-d tensor is not defined")
    data = x.numpy()  # the data-dependent shape: wait for x
    return tuple(
        wrap(np.asarray(index, dtype=_INT64), device=x.device) for index in np.nonzero(data)
    )


# -- searchsorted ----------------------------------------------------------------------------
def _searchsorted_rule(x1: Any, x2: Any, *sorter: Any, side: str = "left") -> RuleOut:
    if type(x1) is not Tensor:
        raise TypeError(f"searchsorted: x1 must be a tensor, got {type(x1).__name__}")
    if x1.ndim != 1:
        raise ValueError(f"searchsorted: x1 must be 1-d, got shape {x1.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    kinds = [x1.dtype.kind, x2.dtype.kind if type(x2) is Tensor else ""]
    if "c" in kinds or isinstance(x2, complex):
        raise TypeError("searchsorted: complex numbers have no order")
    for s in sorter:
        if type(s) is not Tensor or s.dtype.kind not in "iu" or s.shape != x1.shape:
            raise TypeError(f"searchsorted: sorter must be an integer tensor of shape {x1.shape}")
    return (x2.shape if type(x2) is Tensor else ()), _INT64


def _searchsorted_cost(
    shape: tuple[int, ...], dtype: np.dtype[Any], /, x1: Any, *args: Any, **_: Any
) -> float:
    # A binary search of x1 per element of x2.
    steps = math.log2(x1.size + 1) if type(x1) is Tensor else 1.0
    return config.op_overhead_ns + math.prod(shape) * steps * config.ns_per_element


_searchsorted = define_op(
    "searchsorted",
    _searchsorted_rule,
    cost=_searchsorted_cost,
    weak_scalars=True,
    doc="Insertion points of x2's elements into the sorted x1.",
)
_searchsorted.register_kernel(
    GENERIC,
    lambda x1, x2, *sorter, side="left": as_array(
        np.searchsorted(x1, x2, side=side, sorter=sorter[0] if sorter else None), dtype=_INT64
    ),
)


def searchsorted(
    x1: Any,
    x2: Any,
    /,
    *,
    side: Literal["left", "right"] = "left",
    sorter: Any = None,
) -> Tensor:
    """Where ``x2``'s elements (a tensor or a Python number) would go in the 1-d
    tensor ``x1`` to keep it sorted ascending: ``side="left"`` gives the first such
    place, ``"right"`` the last. ``sorter`` (indices sorting ``x1``, as from
    :func:`argsort`) lets ``x1`` itself be unsorted. The result is int64 with
    ``x2``'s shape.

    >>> import eagerrt as ert
    >>> x1 = ert.asarray([1.0, 2.0, 2.0, 5.0])
    >>> ert.searchsorted(x1, ert.asarray([2.0, 6.0])).numpy()
    array([1, 4])
    >>> ert.searchsorted(x1, 2.0, side="right").item()
    3
    """
    if sorter is None:
        return _searchsorted(x1, x2, side=side)
    return _searchsorted(x1, x2, sorter, side=side)
