"""Shape manipulation and dtype casts.

Most of these are views in numpy (reshape of a contiguous array, transpose,
expand_dims, flip, broadcasting, basic slicing), so they cost one call and no
copy. The public functions have the Python Array API standard's signatures
(2024.12): the tensor is positional-only, options are keywords.

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

from .._core import READY, ArgumentError, DTypeError, ShapeError, UsageError, config
from ..tensor import Tensor
from ._rules import (
    RuleOut,
    broadcast_shapes,
    foreign_array,
    need_tensor,
    normalize_axes,
    normalize_axis,
    shape_tuple,
    to_dtype,
    view_cost,
)
from .indexing import getitem
from .registry import GENERIC, call_error, define_op, elementwise_cost, exposes
from .wrap import as_tensor

__all__ = [
    "astype",
    "broadcast_arrays",
    "broadcast_to",
    "concat",
    "expand_dims",
    "flip",
    "moveaxis",
    "permute",
    "permute_dims",
    "repeat",
    "reshape",
    "roll",
    "split",
    "squeeze",
    "stack",
    "tile",
    "transpose",
    "unstack",
]


def _int(value: Any, what: str) -> int:
    """``value`` as an int, refusing bools and floats (numpy's own refusals)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    return int(value)


def _ints(value: Any, what: str) -> tuple[int, ...]:
    """An int or a sequence of ints as a tuple."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    try:
        return tuple(_int(v, what) for v in value)
    except TypeError:
        raise TypeError(f"{what} must be an int or a tuple of ints, got {value!r}") from None


# -- reshape -------------------------------------------------------------------
def _reshape_rule(x: Any, shape: Any, copy: bool | None = None) -> RuleOut:
    x = need_tensor("reshape", x)
    dims = list(shape_tuple(shape, allow_unknown=True))
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in dims):
        raise ShapeError(f"invalid target shape {tuple(dims)}: at most one -1, no other negatives")
    known = math.prod(d for d in dims if d != -1)
    if unknown and known and x.size % known == 0:
        dims[unknown[0]] = x.size // known
    elif unknown or known != x.size:
        raise ShapeError(f"cannot reshape {x.shape} (size {x.size}) into {tuple(dims)}")
    return tuple(dims), x.dtype


def _reshape_cost(
    shape: tuple[int, ...], dtype: np.dtype[Any], /, *args: Any, copy: bool | None = None, **_: Any
) -> float:
    return elementwise_cost(shape, dtype) if copy else config.op_overhead_ns


_reshape = define_op(
    "reshape",
    _reshape_rule,
    cost=_reshape_cost,
    operands=1,
    doc="Same data, new shape (one dim may be -1).",
)
_reshape.register_kernel(GENERIC, lambda x, shape, copy=None: np.reshape(x, shape, copy=copy))


def reshape(x: Any, /, shape: int | Sequence[int], *, copy: bool | None = None) -> Tensor:
    """The same elements in a new ``shape`` (one dimension may be -1).

    ``copy=None`` makes a view where numpy can, ``copy=True`` always copies, and
    ``copy=False`` never does: for an input that is ready the impossibility is an
    :class:`~eagerrt.ArgumentError` at the call; for a pending one, the result
    fails when read.

    >>> import eagerrt as ert
    >>> ert.reshape(ert.arange(6), (2, -1)).numpy()
    array([[0, 1, 2],
           [3, 4, 5]])
    """
    if copy is None:
        return _reshape(x, shape=shape)
    out = _reshape(x, shape=shape, copy=copy)
    if copy is False and type(x) is Tensor and x._state == READY:
        value = x._value
        if type(value) is np.ndarray:
            try:
                np.reshape(value, out.shape, copy=False)
            except ValueError as exc:
                raise call_error(
                    ArgumentError, "reshape", (x,), {"shape": shape, "copy": copy}, str(exc)
                ) from None
    return out


# -- axes ------------------------------------------------------------------------
def _transpose_rule(x: Any, axes: Sequence[int] | None = None) -> RuleOut:
    x = need_tensor("transpose", x)
    if axes is None:
        return x.shape[::-1], x.dtype
    perm = tuple(normalize_axis(a, x.ndim) for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"axes {tuple(axes)} are not a permutation of the {x.ndim} axes")
    return tuple(x.shape[a] for a in perm), x.dtype


transpose = define_op(
    "transpose",
    _transpose_rule,
    cost=view_cost,
    operands=1,
    doc="Permute axes (reverse them by default).",
)
transpose.register_kernel(GENERIC, lambda x, axes=None: np.transpose(x, axes))


def permute_dims(x: Any, /, axes: Sequence[int]) -> Tensor:
    """Permute ``x``'s axes into the order ``axes`` (the Array API's name).

    >>> import eagerrt as ert
    >>> ert.permute_dims(ert.zeros((2, 3, 4)), (2, 0, 1)).shape
    (4, 2, 3)
    """
    return transpose(x, axes=tuple(axes))


def _moveaxis_rule(x: Any, source: Any, destination: Any) -> RuleOut:
    x = need_tensor("moveaxis", x)
    perm = moveaxis_permutation(x.ndim, source, destination)
    return tuple(x.shape[a] for a in perm), x.dtype


def moveaxis_permutation(ndim: int, source: Any, destination: Any) -> list[int]:
    """The axes of an ``ndim``-d array in the order ``moveaxis(x, source,
    destination)`` leaves them (as ``permute_dims`` takes them).

    >>> moveaxis_permutation(3, 0, -1)
    [1, 2, 0]
    """
    src = [normalize_axis(a, ndim) for a in _ints(source, "source")]
    dst = [normalize_axis(a, ndim) for a in _ints(destination, "destination")]
    if len(src) != len(dst):
        raise ShapeError(f"source {source} and destination {destination} differ in length")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"repeated axis in source {source} or destination {destination}")
    placed = dict(zip(dst, src, strict=True))
    rest = iter(a for a in range(ndim) if a not in src)
    return [placed[i] if i in placed else next(rest) for i in range(ndim)]


_moveaxis = define_op(
    "moveaxis", _moveaxis_rule, cost=view_cost, operands=1, doc="Move axes to new positions."
)
_moveaxis.register_kernel(GENERIC, np.moveaxis)


def moveaxis(x: Any, source: int | Sequence[int], destination: int | Sequence[int], /) -> Tensor:
    """Move axes ``source`` to positions ``destination``; the others keep their order.

    >>> import eagerrt as ert
    >>> ert.moveaxis(ert.zeros((2, 3, 4)), 0, -1).shape
    (3, 4, 2)
    """
    return _moveaxis(x, source=source, destination=destination)


def _expand_dims_rule(x: Any, axis: Any = 0) -> RuleOut:
    x = need_tensor("expand_dims", x)
    axes = _ints(axis, "axis")
    out_ndim = x.ndim + len(axes)
    new = normalize_axes(axes, out_ndim)
    dims = iter(x.shape)
    return tuple(1 if i in new else next(dims) for i in range(out_ndim)), x.dtype


_expand_dims = define_op(
    "expand_dims",
    _expand_dims_rule,
    cost=view_cost,
    operands=1,
    doc="Insert size-1 axes at ``axis``.",
)
_expand_dims.register_kernel(GENERIC, lambda x, axis=0: np.expand_dims(x, axis))


def expand_dims(x: Any, /, axis: int | Sequence[int] = 0) -> Tensor:
    """Insert a size-1 axis at ``axis`` (in ``[-x.ndim - 1, x.ndim]``); a tuple of
    axes inserts several, as numpy allows.

    >>> import eagerrt as ert
    >>> ert.expand_dims(ert.zeros((2, 3)), axis=-1).shape
    (2, 3, 1)
    """
    return _expand_dims(x, axis=axis)


def _squeeze_rule(x: Any, axis: Any = None) -> RuleOut:
    x = need_tensor("squeeze", x)
    if axis is None:
        return tuple(d for d in x.shape if d != 1), x.dtype
    axes = normalize_axes(axis, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of size {x.shape[a]} (shape {x.shape})")
    return tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype


_squeeze = define_op(
    "squeeze", _squeeze_rule, cost=view_cost, operands=1, doc="Remove size-1 axes."
)
_squeeze.register_kernel(GENERIC, lambda x, axis=None: np.squeeze(x, axis))


def squeeze(x: Any, /, axis: int | Sequence[int] | None = None) -> Tensor:
    """Remove the size-1 axes ``axis`` (all of them for None, as numpy); an axis
    whose size is not 1 is a :class:`~eagerrt.ShapeError`.

    >>> import eagerrt as ert
    >>> ert.squeeze(ert.zeros((1, 3, 1)), axis=0).shape
    (3, 1)
    """
    return _squeeze(x, axis=axis)


def _flip_rule(x: Any, axis: Any = None) -> RuleOut:
    x = need_tensor("flip", x)
    normalize_axes(axis, x.ndim)  # the refusals: out of range, repeated
    return x.shape, x.dtype


_flip = define_op("flip", _flip_rule, cost=view_cost, operands=1, doc="Reverse along axes.")
_flip.register_kernel(GENERIC, lambda x, axis=None: np.flip(x, axis))


def flip(x: Any, /, *, axis: int | Sequence[int] | None = None) -> Tensor:
    """Reverse the order of elements along ``axis`` (every axis for None); a view.

    >>> import eagerrt as ert
    >>> ert.flip(ert.arange(6).reshape((2, 3)), axis=-1).numpy()
    array([[2, 1, 0],
           [5, 4, 3]])
    """
    return _flip(x, axis=axis)


def _roll_rule(x: Any, shift: Any, axis: Any = None) -> RuleOut:
    x = need_tensor("roll", x)
    shifts = _ints(shift, "shift")
    if axis is None:
        if not isinstance(shift, (int, np.integer)):
            raise ValueError("roll: with axis=None, shift must be one int (x is flattened)")
        return x.shape, x.dtype
    axes = tuple(normalize_axis(a, x.ndim) for a in _ints(axis, "axis"))
    if len(shifts) != len(axes) and 1 not in (len(shifts), len(axes)):
        raise ValueError(f"roll: shift {shift} and axis {axis} differ in length")
    return x.shape, x.dtype


_roll = define_op("roll", _roll_rule, operands=1, doc="Shift elements cyclically.")
_roll.register_kernel(GENERIC, lambda x, shift, axis=None: np.roll(x, shift, axis))


def roll(
    x: Any, /, shift: int | Sequence[int], *, axis: int | Sequence[int] | None = None
) -> Tensor:
    """Shift elements cyclically by ``shift`` along ``axis`` (the flattened tensor
    for None); elements leaving one end come back at the other.

    >>> import eagerrt as ert
    >>> ert.roll(ert.arange(5), 2).numpy()
    array([3, 4, 0, 1, 2])
    """
    return _roll(x, shift=shift, axis=axis)


def _tile_rule(x: Any, repetitions: Any) -> RuleOut:
    x = need_tensor("tile", x)
    reps = _ints(repetitions, "repetitions")
    if any(r < 0 for r in reps):
        raise ValueError(f"tile: repetitions {reps} must not be negative")
    ndim = max(x.ndim, len(reps))
    reps = (1,) * (ndim - len(reps)) + reps
    shape = (1,) * (ndim - x.ndim) + x.shape
    return tuple(d * r for d, r in zip(shape, reps, strict=True)), x.dtype


_tile = define_op("tile", _tile_rule, operands=1, doc="Repeat the whole tensor along each axis.")
_tile.register_kernel(GENERIC, lambda x, repetitions: np.tile(x, repetitions))


def tile(x: Any, repetitions: Sequence[int], /) -> Tensor:
    """``x`` repeated ``repetitions[i]`` times along axis ``i``; the shorter of
    ``x.shape`` and ``repetitions`` is padded with leading ones.

    >>> import eagerrt as ert
    >>> ert.tile(ert.asarray([1, 2]), (2, 2)).numpy()
    array([[1, 2, 1, 2],
           [1, 2, 1, 2]])
    """
    return _tile(x, repetitions=repetitions)


def _repeat_rule(x: Any, repeats: Any, axis: int | None = None) -> RuleOut:
    x = need_tensor("repeat", x)
    ax = None if axis is None else normalize_axis(axis, x.ndim)
    n = x.size if ax is None else x.shape[ax]
    if isinstance(repeats, np.ndarray):  # a tensor's values, read by repeat()
        if repeats.ndim > 1 or (repeats.ndim == 1 and repeats.size not in (1, n)):
            raise ValueError(
                f"repeats of shape {repeats.shape} do not fit an axis of size {n} "
                "(they must be one value or one per element)"
            )
        if (repeats < 0).any():
            raise ValueError("repeats must not be negative")
        total = int(repeats.sum()) if repeats.size == n else int(repeats.reshape(-1)[0]) * n
    else:
        count = _int(repeats, "repeats")
        if count < 0:
            raise ValueError(f"repeats must not be negative, got {count}")
        total = count * n
    if ax is None:
        return (total,), x.dtype
    return (*x.shape[:ax], total, *x.shape[ax + 1 :]), x.dtype


_repeat = define_op("repeat", _repeat_rule, operands=1, doc="Repeat each element.")


@_repeat.kernel()
def _repeat_kernel(x: Any, repeats: Any, axis: int | None = None) -> Any:
    if foreign_array(x) and isinstance(repeats, np.ndarray):
        repeats = repeats.tolist()  # CuPy takes one count or a list of them
    return np.repeat(x, repeats, axis)


def repeat(x: Any, repeats: int | Any, /, *, axis: int | None = None) -> Tensor:
    """Repeat each element of ``x`` ``repeats`` times along ``axis`` (of the
    flattened tensor for None); ``repeats`` is one int or an integer tensor with
    one count per element (or a single count).

    With an int, the call returns at once. With a tensor of counts the result's
    shape depends on their values: the shape is known once ``repeats`` is, so this
    call waits for ``repeats`` (``x`` may stay pending).

    >>> import eagerrt as ert
    >>> ert.repeat(ert.asarray([1, 2]), 2).numpy()
    array([1, 1, 2, 2])
    >>> ert.repeat(ert.asarray([[1, 2], [3, 4]]), ert.asarray([1, 2]), axis=0).numpy()
    array([[1, 2],
           [3, 4],
           [3, 4]])
    """
    if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, bool):
        return _repeat(x, repeats=int(repeats), axis=axis)
    counts = as_tensor(repeats)
    if counts.dtype.kind not in "iu":
        raise call_error(
            DTypeError, "repeat", (as_tensor(x), counts), {"axis": axis},
            f"repeats must be an int or an integer tensor, not {counts.dtype}",
        )  # fmt: skip
    # The data-dependent shape: wait for the counts (never for x).
    values = np.asarray(counts.numpy(), dtype=np.int64)
    return _repeat(x, repeats=values, axis=axis)


def _broadcast_to_rule(x: Any, shape: Any) -> RuleOut:
    x = need_tensor("broadcast_to", x)
    target = shape_tuple(shape)
    if len(target) < x.ndim or broadcast_shapes(x.shape, target) != target:
        raise ShapeError(f"cannot broadcast {x.shape} to {target}")
    return target, x.dtype


_broadcast_to = define_op(
    "broadcast_to",
    _broadcast_to_rule,
    cost=view_cost,
    operands=1,
    doc="A read-only broadcast view.",
)
_broadcast_to.register_kernel(GENERIC, lambda x, shape: np.broadcast_to(x, shape))


def broadcast_to(x: Any, /, shape: int | Sequence[int]) -> Tensor:
    """A read-only view of ``x`` broadcast to ``shape``.

    >>> import eagerrt as ert
    >>> ert.broadcast_to(ert.asarray([1, 2]), (2, 2)).numpy()
    array([[1, 2],
           [1, 2]])
    """
    return _broadcast_to(x, shape=shape)


def broadcast_arrays(*arrays: Any) -> list[Tensor]:
    """The tensors broadcast against each other, as a list of views.

    >>> import eagerrt as ert
    >>> [t.shape for t in ert.broadcast_arrays(ert.zeros((2, 1)), ert.zeros(3))]
    [(2, 3), (2, 3)]
    """
    tensors = [as_tensor(a) for a in arrays]
    try:
        shape = broadcast_shapes(*(t.shape for t in tensors)) if tensors else ()
    except UsageError as exc:
        raise call_error(type(exc), "broadcast_arrays", tuple(tensors), {}, str(exc)) from None
    return [t if t.shape == shape else _broadcast_to(t, shape=shape) for t in tensors]


# -- joining and splitting ----------------------------------------------------------
def _concat_rule(*xs: Any, axis: int | None = 0) -> RuleOut:
    if not xs:
        raise ValueError("concat needs at least one tensor")
    xs = tuple(need_tensor("concat", x) for x in xs)
    dtype = np.result_type(*(x.dtype for x in xs))
    if axis is None:
        return (sum(x.size for x in xs),), dtype
    first = xs[0]
    if first.ndim == 0:
        raise ShapeError("cannot concatenate 0-d tensors; use stack")
    ax = normalize_axis(axis, first.ndim)
    before, after = first.shape[:ax], first.shape[ax + 1 :]
    for x in xs[1:]:
        if x.ndim != first.ndim or x.shape[:ax] != before or x.shape[ax + 1 :] != after:
            raise ShapeError(
                f"shapes {first.shape} and {x.shape} differ outside the concat axis {ax}"
            )
    return (*before, sum(x.shape[ax] for x in xs), *after), dtype


_concat = define_op("concat", _concat_rule, doc="Join tensors along an axis.")
# (numpy's axis=None flattens the tensors first, as concat's does.)
_concat.register_kernel(GENERIC, lambda *xs, axis=0: np.concatenate(xs, axis=axis))


def concat(arrays: Sequence[Any], /, *, axis: int | None = 0) -> Tensor:
    """Join tensors along an existing axis (``axis=None`` flattens them first).

    >>> import eagerrt as ert
    >>> ert.concat([ert.ones((1, 2)), ert.zeros((1, 2))]).numpy()
    array([[1., 1.],
           [0., 0.]])
    """
    return _concat(*arrays, axis=axis)


def _stack_rule(*xs: Any, axis: int = 0) -> RuleOut:
    if not xs:
        raise ValueError("stack needs at least one tensor")
    xs = tuple(need_tensor("stack", x) for x in xs)
    first = xs[0]
    for x in xs[1:]:
        if x.shape != first.shape:
            raise ShapeError(f"stack needs equal shapes, got {first.shape} and {x.shape}")
    ax = normalize_axis(axis, first.ndim + 1)
    shape = (*first.shape[:ax], len(xs), *first.shape[ax:])
    return shape, np.result_type(*(x.dtype for x in xs))


_stack = define_op("stack", _stack_rule, doc="Join tensors along a new axis.")
_stack.register_kernel(GENERIC, lambda *xs, axis=0: np.stack(xs, axis=axis))


def stack(arrays: Sequence[Any], /, *, axis: int = 0) -> Tensor:
    """Join equally shaped tensors along a new axis.

    >>> import eagerrt as ert
    >>> ert.stack([ert.ones(3), ert.zeros(3)], axis=1).shape
    (3, 2)
    """
    return _stack(*arrays, axis=axis)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    """Split ``x`` along ``axis`` into a tuple of its slices (views, one axis fewer).

    >>> import eagerrt as ert
    >>> [t.tolist() for t in ert.unstack(ert.arange(4).reshape((2, 2)), axis=1)]
    [[0, 2], [1, 3]]
    """
    x = as_tensor(x)
    try:
        ax = normalize_axis(axis, x.ndim)
    except UsageError as exc:
        raise call_error(type(exc), "unstack", (x,), {"axis": axis}, str(exc)) from None
    lead = (slice(None),) * ax
    return tuple(getitem(x, index=(*lead, i)) for i in range(x.shape[ax]))


def split(x: Any, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split into equal sections, or at the given indices, along ``axis`` (views).

    >>> import eagerrt as ert
    >>> [p.shape for p in ert.split(ert.arange(6), 3)]
    [(2,), (2,), (2,)]
    >>> [p.shape for p in ert.split(ert.arange(6), [1, 4])]
    [(1,), (3,), (2,)]
    """
    x = as_tensor(x)
    static = {"indices_or_sections": indices_or_sections, "axis": axis}
    try:
        bounds, ax = _split_bounds(x, indices_or_sections, axis)
    except UsageError as exc:
        raise call_error(type(exc), "split", (x,), static, str(exc)) from None
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
def _astype_rule(x: Any, dtype: Any, copy: bool = True) -> RuleOut:
    x = need_tensor("astype", x)
    return x.shape, to_dtype(dtype)


_astype = define_op("astype", _astype_rule, operands=1, doc="Cast to another dtype.")
_astype.register_kernel(GENERIC, lambda x, dtype, copy=True: x.astype(dtype, copy=copy))


@exposes(_astype)
def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """``x`` cast to ``dtype`` (numpy's casting: floats to ints truncate); with
    ``copy=False`` a tensor already of that dtype is returned as it is.
    ``device=`` moves the result there.

    >>> import eagerrt as ert
    >>> ert.astype(ert.asarray([1.7, -1.7]), ert.int32).numpy().tolist()
    [1, -1]
    """
    try:  # name the op: these errors are raised before it is made
        x = as_tensor(x)
        same = not copy and to_dtype(dtype) == x.dtype
    except DTypeError as e:
        raise DTypeError(f"astype: {e}") from None
    out = x if same else _astype(x, dtype=dtype, copy=copy)
    return out if device is None else out.to(device)


permute = permute_dims
