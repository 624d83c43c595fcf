"""Shape manipulation and dtype casts.

Most of these are views in numpy (reshape of a contiguous array, transpose,
expand_dims, basic slicing), so they cost one call and no copy.

>>> import eagerrt as ert
>>> x = ert.arange(6).reshape((2, 3))
>>> x.T.shape, x.reshape((3, 2)).shape, ert.concat([x, x], axis=1).shape
((3, 2), (3, 2), (2, 6))
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core.config import config
from .._core.errors import DTypeError, ShapeError, UsageError
from ..tensor import Tensor
from ._rules import broadcast_shapes, normalize_axes, normalize_axis, shape_tuple, to_dtype
from .registry import GENERIC, call_error, define_op, elementwise_cost

__all__ = [
    "astype",
    "broadcast_to",
    "concat",
    "expand_dims",
    "permute",
    "permute_dims",
    "reshape",
    "split",
    "squeeze",
    "stack",
    "transpose",
]


def _view_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, *args: Any, **static: Any) -> float:
    return config.op_overhead_ns


def _need_tensor(op: str, x: Any) -> Tensor:
    if type(x) is not Tensor:
        raise TypeError(f"{op} needs a tensor, got {type(x).__name__}")
    return x


# -- reshape -------------------------------------------------------------------
def _reshape_rule(x: Any, shape: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    x = _need_tensor("reshape", x)
    dims = list(shape_tuple(shape, allow_unknown=True))
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in dims):
        raise ShapeError(f"invalid target shape {tuple(dims)}: at most one -1, no other negatives")
    known = math.prod(d for d in dims if d != -1)
    if unknown:
        if known == 0 or x.size % known:
            raise ShapeError(f"cannot reshape {x.shape} (size {x.size}) into {tuple(dims)}")
        dims[unknown[0]] = x.size // known
    elif known != x.size:
        raise ShapeError(f"cannot reshape {x.shape} (size {x.size}) into {tuple(dims)}")
    return tuple(dims), x.dtype


reshape = define_op(
    "reshape",
    _reshape_rule,
    cost=_view_cost,
    operands=1,
    doc="Same data, new shape (one dim may be -1).",
)
reshape.register_kernel(GENERIC, lambda x, shape: np.reshape(x, shape))


# -- axes ------------------------------------------------------------------------
def _transpose_rule(
    x: Any, axes: Sequence[int] | None = None
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    x = _need_tensor("transpose", x)
    if axes is None:
        return x.shape[::-1], x.dtype
    perm = tuple(normalize_axis(a, x.ndim) for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"axes {tuple(axes)} are not a permutation of the {x.ndim} axes")
    return tuple(x.shape[a] for a in perm), x.dtype


transpose = define_op(
    "transpose",
    _transpose_rule,
    cost=_view_cost,
    operands=1,
    doc="Permute axes (reverse them by default).",
)
transpose.register_kernel(GENERIC, lambda x, axes=None: np.transpose(x, axes))


def permute_dims(x: Any, axes: Sequence[int]) -> Tensor:
    """Permute ``x``'s axes into the order ``axes`` (the Array API's name).

    >>> import eagerrt as ert
    >>> ert.permute_dims(ert.zeros((2, 3, 4)), (2, 0, 1)).shape
    (4, 2, 3)
    """
    return transpose(x, axes=tuple(axes))


def _expand_dims_rule(x: Any, axis: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    x = _need_tensor("expand_dims", x)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out_ndim = x.ndim + len(axes)
    new = normalize_axes(axes, out_ndim)
    dims = iter(x.shape)
    return tuple(1 if i in new else next(dims) for i in range(out_ndim)), x.dtype


expand_dims = define_op(
    "expand_dims",
    _expand_dims_rule,
    cost=_view_cost,
    operands=1,
    doc="Insert size-1 axes at ``axis``.",
)
expand_dims.register_kernel(GENERIC, lambda x, axis: np.expand_dims(x, axis))


def _squeeze_rule(x: Any, axis: Any = None) -> tuple[tuple[int, ...], np.dtype[Any]]:
    x = _need_tensor("squeeze", x)
    if axis is None:
        return tuple(d for d in x.shape if d != 1), x.dtype
    axes = normalize_axes(axis, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of size {x.shape[a]} (shape {x.shape})")
    return tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype


squeeze = define_op(
    "squeeze", _squeeze_rule, cost=_view_cost, operands=1, doc="Remove size-1 axes."
)
squeeze.register_kernel(GENERIC, lambda x, axis=None: np.squeeze(x, axis))


def _broadcast_to_rule(x: Any, shape: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    x = _need_tensor("broadcast_to", x)
    target = shape_tuple(shape)
    if len(target) < x.ndim or broadcast_shapes(x.shape, target) != target:
        raise ShapeError(f"cannot broadcast {x.shape} to {target}")
    return target, x.dtype


broadcast_to = define_op(
    "broadcast_to",
    _broadcast_to_rule,
    cost=_view_cost,
    operands=1,
    doc="A read-only broadcast view.",
)
broadcast_to.register_kernel(GENERIC, lambda x, shape: np.broadcast_to(x, shape))


# -- joining and splitting ----------------------------------------------------------
def _concat_rule(*xs: Any, axis: int | None = 0) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if not xs:
        raise ValueError("concat needs at least one tensor")
    xs = tuple(_need_tensor("concat", x) for x in xs)
    dtype = np.result_type(*(x.dtype for x in xs))
    if axis is None:
        return (sum(x.size for x in xs),), dtype
    first = xs[0]
    if first.ndim == 0:
        raise ShapeError("cannot concatenate 0-d tensors; use stack")
    ax = normalize_axis(axis, first.ndim)
    for x in xs[1:]:
        if x.ndim != first.ndim or any(
            a != b for i, (a, b) in enumerate(zip(x.shape, first.shape, strict=True)) if i != ax
        ):
            raise ShapeError(
                f"shapes {first.shape} and {x.shape} differ outside the concat axis {ax}"
            )
    shape = list(first.shape)
    shape[ax] = sum(x.shape[ax] for x in xs)
    return tuple(shape), dtype


def _concat_kernel(*xs: Any, axis: int | None = 0) -> Any:
    if axis is None:
        return np.concatenate([np.ravel(x) for x in xs])
    return np.concatenate(xs, axis=axis)


_concat = define_op(
    "concat", _concat_rule, cost=elementwise_cost, doc="Join tensors along an axis."
)
_concat.register_kernel(GENERIC, _concat_kernel)


def concat(tensors: Sequence[Any], axis: int | None = 0) -> Tensor:
    """Join tensors along an existing axis (``axis=None`` flattens them first).

    >>> import eagerrt as ert
    >>> ert.concat([ert.ones((1, 2)), ert.zeros((1, 2))]).numpy()
    array([[1., 1.],
           [0., 0.]])
    """
    return _concat(*tensors, axis=axis)


def _stack_rule(*xs: Any, axis: int = 0) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if not xs:
        raise ValueError("stack needs at least one tensor")
    xs = tuple(_need_tensor("stack", x) for x in xs)
    first = xs[0]
    for x in xs[1:]:
        if x.shape != first.shape:
            raise ShapeError(f"stack needs equal shapes, got {first.shape} and {x.shape}")
    ax = normalize_axis(axis, first.ndim + 1)
    shape = (*first.shape[:ax], len(xs), *first.shape[ax:])
    return shape, np.result_type(*(x.dtype for x in xs))


_stack = define_op(
    "stack", _stack_rule, cost=elementwise_cost, doc="Join tensors along a new axis."
)
_stack.register_kernel(GENERIC, lambda *xs, axis=0: np.stack(xs, axis=axis))


def stack(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """Join equally shaped tensors along a new axis.

    >>> import eagerrt as ert
    >>> ert.stack([ert.ones(3), ert.zeros(3)], axis=1).shape
    (3, 2)
    """
    return _stack(*tensors, axis=axis)


def split(x: Any, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split into equal sections, or at the given indices, along ``axis`` (views).

    >>> import eagerrt as ert
    >>> [p.shape for p in ert.split(ert.arange(6), 3)]
    [(2,), (2,), (2,)]
    >>> [p.shape for p in ert.split(ert.arange(6), [1, 4])]
    [(1,), (3,), (2,)]
    """
    from .creation import asarray

    x = x if type(x) is Tensor else asarray(x)
    static = {"indices_or_sections": indices_or_sections, "axis": axis}
    try:
        bounds, ax = _split_bounds(x, indices_or_sections, axis)
    except UsageError as exc:
        raise call_error(type(exc), "split", (x,), static, str(exc)) from None
    from .indexing import getitem  # indexing builds on this module

    lead = (slice(None),) * ax
    return [getitem(x, index=(*lead, slice(a, b))) for a, b in bounds]


def _split_bounds(
    x: Tensor, indices_or_sections: int | Sequence[int], axis: int
) -> tuple[list[tuple[int, int]], int]:
    ax = normalize_axis(axis, x.ndim)
    n = x.shape[ax]
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections <= 0 or n % sections:
            raise ShapeError(f"{sections} sections do not divide axis {ax} of size {n} equally")
        step = n // sections
        return [(i * step, (i + 1) * step) for i in range(sections)], ax
    try:
        cuts = [operator.index(i) for i in indices_or_sections]
    except TypeError:
        raise DTypeError(f"indices must be ints, got {indices_or_sections!r}") from None
    return list(itertools.pairwise([0, *cuts, n])), ax


# -- dtype ---------------------------------------------------------------------------
def _astype_rule(x: Any, dtype: Any, copy: bool = True) -> tuple[tuple[int, ...], np.dtype[Any]]:
    x = _need_tensor("astype", x)
    return x.shape, to_dtype(dtype)


astype = define_op(
    "astype", _astype_rule, cost=elementwise_cost, operands=1, doc="Cast to another dtype."
)
astype.register_kernel(GENERIC, lambda x, dtype, copy=True: x.astype(dtype, copy=copy))

permute = permute_dims
