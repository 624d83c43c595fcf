"""Set functions of the Array API standard: ``unique_all``, ``unique_counts``,
``unique_inverse`` and ``unique_values``.

How many unique values there are depends on the data, so each of these waits for
its input at the call (blocking the calling thread; worker threads keep helping
with queued work) and returns ready tensors. In async code, ``await x`` first.

Following the standard, every NaN is distinct from every other (numpy's
``np.unique`` merges them by default), and ``-0.0`` equals ``0.0``. Values come
out sorted (NaNs last); indices and counts are int64.

>>> import eagerrt as ert
>>> ert.unique_values(ert.asarray([3, 1, 3, 2])).numpy()
array([1, 2, 3])
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..tensor import Tensor
from .creation import asarray

# The result types stay out of the namespace (the standard names none); they are
# importable from here.
__all__ = [
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
]

_INT64 = np.dtype(np.int64)


class UniqueAllResult(NamedTuple):
    """:func:`unique_all`'s result."""

    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCountsResult(NamedTuple):
    """:func:`unique_counts`'s result."""

    values: Tensor
    counts: Tensor


class UniqueInverseResult(NamedTuple):
    """:func:`unique_inverse`'s result."""

    values: Tensor
    inverse_indices: Tensor


def _unique(x: Any) -> tuple[Tensor, tuple[np.ndarray, ...]]:
    """``x`` as a tensor, and numpy's unique values, first indices, inverse (in
    ``x``'s shape) and counts of its data, NaNs kept apart."""
    t = x if type(x) is Tensor else asarray(x)
    data = t.numpy()  # the data-dependent shape: wait for x
    values, first, inverse, counts = np.unique(
        data.reshape(-1),
        return_index=True,
        return_inverse=True,
        return_counts=True,
        equal_nan=False,
    )
    return t, (values, first, inverse.reshape(data.shape), counts)


def _out(t: Tensor, array: np.ndarray, index: bool = False) -> Tensor:
    return asarray(np.asarray(array, dtype=_INT64) if index else array, device=t.device)


def unique_all(x: Any, /) -> UniqueAllResult:
    """The unique values of ``x`` with the index of each one's first occurrence (in
    the flattened ``x``), ``inverse_indices`` (``x``'s shape: where each element's
    value sits in ``values``) and each value's count.

    The shape is known once ``x`` is: this call waits for ``x``.

    >>> import eagerrt as ert
    >>> r = ert.unique_all(ert.asarray([[2, 1], [2, 2]]))
    >>> r.values.tolist(), r.indices.tolist(), r.inverse_indices.tolist(), r.counts.tolist()
    ([1, 2], [1, 0], [[1, 0], [1, 1]], [1, 3])
    """
    t, (values, first, inverse, counts) = _unique(x)
    return UniqueAllResult(
        _out(t, values), _out(t, first, True), _out(t, inverse, True), _out(t, counts, True)
    )


def unique_counts(x: Any, /) -> UniqueCountsResult:
    """The unique values of ``x`` and how often each occurs.

    The shape is known once ``x`` is: this call waits for ``x``.

    >>> import eagerrt as ert
    >>> values, counts = ert.unique_counts(ert.asarray([1.0, float("nan"), 1.0, float("nan")]))
    >>> values.numpy(), counts.numpy()
    (array([ 1., nan, nan]), array([2, 1, 1]))
    """
    t, (values, _, _, counts) = _unique(x)
    return UniqueCountsResult(_out(t, values), _out(t, counts, True))


def unique_inverse(x: Any, /) -> UniqueInverseResult:
    """The unique values of ``x`` and, in ``x``'s shape, each element's position in
    them: ``values[inverse_indices]`` rebuilds ``x``.

    The shape is known once ``x`` is: this call waits for ``x``.

    >>> import eagerrt as ert
    >>> values, inverse = ert.unique_inverse(ert.asarray([[5, 3], [3, 5]]))
    >>> values.numpy(), inverse.numpy()
    (array([3, 5]), array([[1, 0],
           [0, 1]]))
    """
    t, (values, _, inverse, _) = _unique(x)
    return UniqueInverseResult(_out(t, values), _out(t, inverse, True))


def unique_values(x: Any, /) -> Tensor:
    """The unique values of ``x``, sorted, as a 1-d tensor.

    The shape is known once ``x`` is: this call waits for ``x``.

    >>> import eagerrt as ert
    >>> ert.unique_values(ert.asarray([[2, 2], [0, 1]])).numpy()
    array([0, 1, 2])
    """
    t = x if type(x) is Tensor else asarray(x)
    data = t.numpy()  # the data-dependent shape: wait for x
    return _out(t, np.unique(data.reshape(-1), equal_nan=False))
