"""Shared pieces of shape and dtype rules, cached because they run at every call."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._core import DTypeError, OutOfBoundsError, ShapeError, config
from ..tensor import Tensor

__all__ = [
    "NUMERIC_KINDS",
    "RuleOut",
    "as_float",
    "broadcast_shapes",
    "dtype_key",
    "normalize_axes",
    "need_tensor",
    "normalize_axis",
    "shape_tuple",
    "to_dtype",
    "ufunc_dtype",
    "view_cost",
]

#: What a shape rule returns: the result's shape and dtype.
RuleOut = tuple[tuple[int, ...], np.dtype[Any]]

_MAX_CACHE = 4096
_broadcast_cache: dict[tuple[tuple[int, ...], ...], tuple[int, ...]] = {}
_ufunc_cache: dict[tuple[Any, ...], np.dtype[Any]] = {}


def view_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, *args: Any, **static: Any) -> float:
    """The cost of an op that makes a view: one call, whatever the size."""
    return config.op_overhead_ns


def need_tensor(op: str, x: Any) -> Tensor:
    """``x``, which must be a tensor (the rule of an op that takes no plain data)."""
    if type(x) is not Tensor:
        raise TypeError(f"{op} needs a tensor, got {type(x).__name__}")
    return x


_WEAK = {bool: np.dtype(bool), int: int, float: float, complex: complex}


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcasting of shapes, or a ShapeError naming the clash."""
    first = shapes[0]
    if len(shapes) == 2 and shapes[1] == first:
        return first
    out = _broadcast_cache.get(shapes)
    if out is not None:
        return out
    ndim = max(len(s) for s in shapes)
    dims = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) >= -i:
                d = s[i]
                if d != 1:
                    if size not in (1, d):
                        raise ShapeError(
                            f"shapes {' and '.join(map(str, shapes))} do not broadcast "
                            f"(dimension {i}: {size} vs {d})"
                        )
                    size = d
        dims.append(size)
    out = tuple(dims)
    if len(_broadcast_cache) > _MAX_CACHE:
        _broadcast_cache.clear()
    _broadcast_cache[shapes] = out
    return out


def dtype_key(arg: Any) -> Any:
    """What decides ``arg``'s part in type promotion: a dtype, or a weak scalar type."""
    if type(arg) is Tensor:
        return arg.dtype
    weak = _WEAK.get(type(arg))
    if weak is not None:
        return weak
    dtype = getattr(arg, "dtype", None)  # numpy arrays inside kernels
    return type(arg) if dtype is None else dtype


def ufunc_dtype(ufunc: np.ufunc, *args: Any) -> np.dtype[Any]:
    """The dtype numpy gives ``ufunc(*args)``: Python scalars stay weak (NEP 50)."""
    key = (ufunc, *map(dtype_key, args))
    out = _ufunc_cache.get(key)
    if out is None:
        try:
            out = ufunc.resolve_dtypes((*key[1:], *(None,) * ufunc.nout))[-1]
        except TypeError as exc:  # numpy's no-loop error is a TypeError
            names = ", ".join(str(k if isinstance(k, np.dtype) else k.__name__) for k in key[1:])
            raise DTypeError(f"{ufunc.__name__} is not defined for ({names}): {exc}") from None
        if len(_ufunc_cache) > _MAX_CACHE:
            _ufunc_cache.clear()
        _ufunc_cache[key] = out
    return out


def to_dtype(dtype: Any) -> np.dtype[Any]:
    """``dtype`` as a numeric or bool numpy dtype, or a DTypeError."""
    if not isinstance(dtype, np.dtype):
        try:
            dtype = np.dtype(dtype)
        except TypeError as exc:
            raise DTypeError(f"{dtype!r} is not a dtype ({exc})") from None
    if dtype.kind not in NUMERIC_KINDS:
        raise DTypeError(f"eagerrt tensors hold numbers and bools, not {dtype}")
    return dtype


#: numpy dtype kinds a tensor may have: bool, ints, unsigned, floats, complex.
NUMERIC_KINDS = frozenset("biufc")


def foreign_array(x: Any) -> bool:
    """Whether ``x`` is another library's array: a device's native array (CuPy's)
    that a generic kernel is running on, through numpy's dispatch protocols."""
    kind = type(x)
    return (
        kind is not np.ndarray
        and not isinstance(x, np.generic)
        and (hasattr(kind, "__cuda_array_interface__") or hasattr(kind, "__array_namespace__"))
    )


def as_array(value: Any, dtype: Any = None) -> Any:
    """A generic kernel's result as an array (of ``dtype`` if given): numpy scalars
    and Python values become numpy arrays; another library's array stays in that
    library (converting it would copy it to the host)."""
    if foreign_array(value):
        return value if dtype is None or value.dtype == dtype else value.astype(dtype)
    return np.asarray(value, dtype=dtype)


def as_float(x: Any) -> Any:
    """A kernel's input in the float dtype numpy's ``exp`` would give it."""
    return as_array(x, ufunc_dtype(np.exp, x))


def normalize_axis(axis: Any, ndim: int) -> int:
    """A possibly negative axis as a non-negative one, or a ShapeError."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise DTypeError(f"an axis must be an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise OutOfBoundsError(f"axis {axis} is out of range for a {ndim}-d tensor")
    return int(axis) + ndim if axis < 0 else int(axis)


def normalize_axes(axis: int | Iterable[int] | None, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a sequence) as sorted unique non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        return (normalize_axis(axis, ndim),)
    axes = tuple(normalize_axis(a, ndim) for a in axis)  # type: ignore[union-attr]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"repeated axis in {tuple(axis)}")  # type: ignore[arg-type]
    return tuple(sorted(axes))


def shape_tuple(shape: int | Sequence[int], allow_unknown: bool = False) -> tuple[int, ...]:
    """A user's shape argument as a tuple of non-negative ints (-1 allowed if
    ``allow_unknown``: reshape's inferred dimension)."""
    dims: Any = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        out = tuple(map(operator.index, dims))  # 2.5 is refused, not truncated
    except TypeError:
        raise DTypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < (-1 if allow_unknown else 0) for d in out):
        raise ShapeError(f"shape {out} has a negative dimension")
    return out
