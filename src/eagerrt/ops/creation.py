"""Creating tensors: from existing data, filled, ranges, identity, grids, ``*_like``.

The functions follow the Python Array API standard (2024.12): the data or the
shape is positional, ``dtype=`` and ``device=`` are keywords, and the default
dtypes are float64 and int64 (complex128 for complex Python numbers).

``asarray`` wraps data that already exists, so its tensor is ready at once.
The others are ops with no tensor inputs: a large ``zeros`` is filled on a
worker thread while the caller moves on.

>>> import eagerrt as ert
>>> ert.arange(4).numpy()
array([0, 1, 2, 3])
>>> ert.full((2,), 7).dtype, ert.zeros_like(ert.ones((2, 3), dtype="int8")).dtype
(dtype('int64'), dtype('int8'))
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from .._core import ArgumentError, DTypeError, ShapeError
from ..devices import get_device
from ..tensor import Tensor
from ._rules import RuleOut, shape_tuple, to_dtype
from .manipulation import astype, broadcast_to, reshape
from .registry import GENERIC, define_op
from .wrap import DeviceLike, as_tensor, wrap

__all__ = [
    "arange",
    "asarray",
    "empty",
    "empty_like",
    "eye",
    "full",
    "full_like",
    "linspace",
    "meshgrid",
    "ones",
    "ones_like",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
]

_FLOAT64 = np.dtype(np.float64)


def asarray(
    obj: Any,
    /,
    *,
    dtype: Any = None,
    device: DeviceLike = None,
    copy: bool | None = None,
) -> Tensor:
    """A tensor holding ``obj``'s data (a numpy array, nested lists, a scalar, a Tensor).

    ``copy=None`` shares ``obj``'s memory where it can (a numpy array is not
    copied, as in ``numpy.asarray``; don't write to it while ops that read it are
    pending); ``copy=True`` always copies; ``copy=False`` never does and raises
    :class:`~eagerrt.ArgumentError` where a copy would be needed (a list, another
    dtype, another device). A tensor on another device is moved (a copy). The
    result is ready at once unless ``obj`` is a pending tensor that needs a cast,
    a copy or a move, which then run asynchronously.

    >>> import numpy as np, eagerrt as ert
    >>> ert.asarray(np.arange(3, dtype="float32")).dtype
    dtype('float32')
    >>> ert.asarray([1, 2], dtype="int8").numpy()
    array([1, 2], dtype=int8)
    >>> ert.asarray(1 + 2j).dtype
    dtype('complex128')
    """
    if isinstance(obj, Tensor):
        return _tensor_asarray(obj, dtype, device, copy)
    return wrap(obj, dtype=dtype, device=device, copy=copy)


def _tensor_asarray(x: Tensor, dtype: Any, device: DeviceLike, copy: bool | None) -> Tensor:
    """asarray of a tensor: itself, or an asynchronous cast, copy or move of it."""
    target = x.device if device is None else get_device(device)
    want = x.dtype if dtype is None else to_dtype(dtype)
    if copy is False and (want != x.dtype or target is not x.device):
        raise ArgumentError(
            f"asarray: a {x.dtype} tensor on {x.device} needs a copy to become {want} "
            f"on {target}, but copy=False"
        )
    out = x
    if target is not x.device:
        out = x.to(target)  # a move is a copy
    if want != out.dtype:
        out = astype(out, want)
    elif copy and out is x:
        out = astype(x, want, copy=True)
    return out


# -- filled tensors ----------------------------------------------------------------
def _fill_rule(*, shape: Any, dtype: Any, fill: Any = None) -> RuleOut:
    dt = to_dtype(dtype)
    out = shape_tuple(shape)
    if fill is not None:
        filling = np.asarray(fill, dtype=dt)  # numpy's own errors now: int8 and 300, "a"
        if np.broadcast_shapes(filling.shape, out) != out:
            raise ValueError(f"a fill value of shape {filling.shape} does not fit shape {out}")
    return out, dt


_fill = define_op("fill", _fill_rule, doc="A tensor of one repeated value.")


@_fill.kernel()
def _fill_kernel(*, shape: tuple[int, ...], dtype: Any, fill: Any = None) -> np.ndarray:
    if fill is None:
        return np.empty(shape, dtype)
    if type(fill) is int and fill == 0:  # zeros(): calloc'd; not -0.0, which keeps its sign
        return np.zeros(shape, dtype)
    return np.full(shape, fill, dtype)


def _fill_dtype(value: Any, dtype: Any) -> np.dtype[Any]:
    if isinstance(value, Tensor):
        raise DTypeError("full: fill_value must be a Python or numpy scalar, not a Tensor")
    try:
        if dtype is not None:
            return to_dtype(dtype)
        # bool -> bool, int -> int64, float -> float64, complex -> complex128 (the
        # standard's defaults); a numpy scalar keeps its own dtype, as in numpy.
        return to_dtype(np.asarray(value).dtype)
    except DTypeError as e:  # name the op: the error is raised before it is made
        raise DTypeError(f"full: {e}") from None


def zeros(shape: int | Sequence[int], *, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """A tensor of zeros (float64 unless ``dtype`` says otherwise).

    >>> import eagerrt as ert
    >>> ert.zeros((2,), dtype="int8").numpy()
    array([0, 0], dtype=int8)
    """
    return _fill(shape=shape, dtype=_FLOAT64 if dtype is None else dtype, fill=0, device=device)


def ones(shape: int | Sequence[int], *, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """A tensor of ones (float64 unless ``dtype`` says otherwise).

    >>> import eagerrt as ert
    >>> ert.ones(3).numpy()
    array([1., 1., 1.])
    """
    return _fill(shape=shape, dtype=_FLOAT64 if dtype is None else dtype, fill=1, device=device)


def empty(shape: int | Sequence[int], *, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """A tensor with unspecified contents (cheapest to make; float64 by default).

    >>> import eagerrt as ert
    >>> ert.empty((2, 0)).shape
    (2, 0)
    """
    return _fill(shape=shape, dtype=_FLOAT64 if dtype is None else dtype, fill=None, device=device)


def full(
    shape: int | Sequence[int],
    fill_value: bool | int | float | complex,
    *,
    dtype: Any = None,
    device: DeviceLike = None,
) -> Tensor:
    """A tensor of ``fill_value``; the dtype follows it (bool, int64, float64,
    complex128) unless given.

    >>> import eagerrt as ert
    >>> ert.full((2,), 1.5).numpy(), ert.full((), True).dtype
    (array([1.5, 1.5]), dtype('bool'))
    """
    return _fill(shape=shape, dtype=_fill_dtype(fill_value, dtype), fill=fill_value, device=device)


def _like(x: Any, dtype: Any, device: DeviceLike, fill: Any) -> Tensor:
    x = as_tensor(x)
    # Only x's metadata is read: x may still be pending.
    dt = x.dtype if dtype is None else dtype
    return _fill(shape=x.shape, dtype=dt, fill=fill, device=x.device if device is None else device)


def zeros_like(x: Any, /, *, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """Zeros with ``x``'s shape, and its dtype and device unless given; ``x`` need
    not be ready.

    >>> import eagerrt as ert
    >>> ert.zeros_like(ert.ones((2,), dtype="int8")).numpy()
    array([0, 0], dtype=int8)
    """
    return _like(x, dtype, device, 0)


def ones_like(x: Any, /, *, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """Ones with ``x``'s shape, and its dtype and device unless given.

    >>> import eagerrt as ert
    >>> ert.ones_like(ert.zeros((2,)), dtype=bool).numpy()
    array([ True,  True])
    """
    return _like(x, dtype, device, 1)


def empty_like(x: Any, /, *, dtype: Any = None, device: DeviceLike = None) -> Tensor:
    """Unspecified contents with ``x``'s shape, and its dtype and device unless given.

    >>> import eagerrt as ert
    >>> ert.empty_like(ert.zeros((2, 3))).shape
    (2, 3)
    """
    return _like(x, dtype, device, None)


def full_like(
    x: Any,
    /,
    fill_value: bool | int | float | complex,
    *,
    dtype: Any = None,
    device: DeviceLike = None,
) -> Tensor:
    """``fill_value`` with ``x``'s shape, in ``x``'s dtype and on its device unless given.

    >>> import eagerrt as ert
    >>> ert.full_like(ert.zeros((2,), dtype="int8"), 3).numpy()
    array([3, 3], dtype=int8)
    """
    if isinstance(fill_value, Tensor):
        raise DTypeError("full_like: fill_value must be a Python or numpy scalar, not a Tensor")
    return _like(x, dtype, device, fill_value)


# -- ranges ------------------------------------------------------------------------
def _arange_rule(*, start: Any, stop: Any, step: Any, dtype: Any) -> RuleOut:
    for bound in (start, stop, step):
        if isinstance(bound, (complex, np.complexfloating, Tensor)):
            raise TypeError(f"arange: bounds and step must be real numbers, got {bound!r}")
    if step == 0:
        raise ValueError("arange: step must not be zero")
    span = (stop - start) / step
    if not math.isfinite(span):
        raise ValueError(f"arange: bounds and step must be finite, got {start}, {stop}, {step}")
    length = max(0, math.ceil(span))
    if dtype is None:
        # numpy's own choice, from an empty range of the same types (start + 0*stop
        # equals start, with start's and stop's types promoted together).
        dtype = np.arange(start, start + 0 * stop, step).dtype
    return (length,), to_dtype(dtype)


_arange = define_op("arange", _arange_rule, doc="Evenly spaced values.")
_arange.register_kernel(
    GENERIC, lambda *, start, stop, step, dtype: np.arange(start, stop, step, dtype=dtype)
)


def arange(
    start: int | float,
    /,
    stop: int | float | None = None,
    step: int | float = 1,
    *,
    dtype: Any = None,
    device: DeviceLike = None,
) -> Tensor:
    """Values from ``start`` up to (not including) ``stop`` by ``step``, as numpy:
    int64 when all three are ints, float64 otherwise, unless ``dtype`` is given.

    >>> import eagerrt as ert
    >>> ert.arange(1, 2, 0.25).numpy()
    array([1.  , 1.25, 1.5 , 1.75])
    """
    if stop is None:
        start, stop = 0, start
    return _arange(start=start, stop=stop, step=step, dtype=dtype, device=device)


def _linspace_rule(*, start: Any, stop: Any, num: int, endpoint: bool, dtype: Any) -> RuleOut:
    if isinstance(num, bool):
        raise TypeError("linspace: num must be an int, not a bool")
    num = operator.index(num)
    if num < 0:
        raise ShapeError(f"linspace: num must be non-negative, got {num}")
    if isinstance(start, Tensor) or isinstance(stop, Tensor):
        raise TypeError("linspace: start and stop must be Python or numpy scalars")
    if dtype is None:  # numpy's own choice, from an empty request of the same types
        dtype = np.linspace(start, stop, 0, endpoint=endpoint).dtype
    return (int(num),), to_dtype(dtype)


def _linspace_kernel(start: Any, stop: Any, *, num: int, endpoint: bool, dtype: Any) -> Any:
    # start and stop: static for linspace, 0-d operands for linspace_between
    return np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)


_linspace = define_op("linspace", _linspace_rule, doc="Evenly spaced samples.")
_linspace.register_kernel(GENERIC, _linspace_kernel)


def linspace(
    start: int | float | complex | Tensor,
    stop: int | float | complex | Tensor,
    /,
    num: int = 50,
    *,
    dtype: Any = None,
    device: DeviceLike = None,
    endpoint: bool = True,
) -> Tensor:
    """``num`` evenly spaced samples from ``start`` to ``stop`` (float64, or
    complex128 for complex bounds, unless ``dtype`` is given). The bounds may be
    0-d tensors (the result then waits for them, on their device).

    >>> import eagerrt as ert
    >>> ert.linspace(0, 1, 5).numpy()
    array([0.  , 0.25, 0.5 , 0.75, 1.  ])
    >>> ert.linspace(0, 1, 4, endpoint=False).numpy()
    array([0.  , 0.25, 0.5 , 0.75])
    """
    if isinstance(start, Tensor) or isinstance(stop, Tensor):
        # 0-d tensors as bounds (SciPy passes them): operands, so nothing waits now.
        return _linspace_between(
            start, stop, num=num, endpoint=endpoint, dtype=dtype, device=device
        )
    return _linspace(start=start, stop=stop, num=num, endpoint=endpoint, dtype=dtype, device=device)


def _linspace_between_rule(
    start: Tensor, stop: Tensor, *, num: int, endpoint: bool, dtype: Any
) -> RuleOut:
    if start.ndim or stop.ndim:
        raise ValueError(
            f"linspace: start and stop must be 0-d, got shapes {start.shape} and {stop.shape}"
        )
    shape, _ = _linspace_rule(start=0, stop=0, num=num, endpoint=endpoint, dtype=dtype)
    if dtype is None:  # numpy's own choice for 0-d arrays of these dtypes
        dtype = np.linspace(np.zeros((), start.dtype), np.zeros((), stop.dtype), 0).dtype
    return shape, to_dtype(dtype)


_linspace_between = define_op(
    "linspace_between",
    _linspace_between_rule,
    operands=2,
    doc="Evenly spaced samples between two 0-d tensors.",
)
_linspace_between.register_kernel(GENERIC, _linspace_kernel)


# -- matrices ----------------------------------------------------------------------
def _eye_rule(*, n: int, m: int | None, k: int, dtype: Any) -> RuleOut:
    for value in (n, k) if m is None else (n, m, k):
        if isinstance(value, bool):
            raise TypeError("eye: n_rows, n_cols and k must be ints, not bools")
        operator.index(value)
    return shape_tuple((n, n if m is None else m)), to_dtype(dtype)


_eye = define_op("eye", _eye_rule, doc="Ones on a diagonal, zeros elsewhere.")
_eye.register_kernel(GENERIC, lambda *, n, m, k, dtype: np.eye(n, m, k, dtype=dtype))


def eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: Any = None,
    device: DeviceLike = None,
) -> Tensor:
    """An ``n_rows x n_cols`` matrix (square by default) with ones on diagonal ``k``.

    >>> import eagerrt as ert
    >>> ert.eye(2, 3, k=1).numpy()
    array([[0., 1., 0.],
           [0., 0., 1.]])
    """
    return _eye(n=n_rows, m=n_cols, k=k, dtype=_FLOAT64 if dtype is None else dtype, device=device)


def _triangle_rule(x: Any, k: int = 0) -> RuleOut:
    if type(x) is not Tensor:
        raise TypeError(f"needs a tensor, got {type(x).__name__}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if x.ndim < 2:
        raise ShapeError(f"needs a tensor of at least 2 dimensions, got shape {x.shape}")
    return x.shape, x.dtype


_tril = define_op("tril", _triangle_rule, operands=1, doc="Zero the elements above diagonal ``k``.")
_tril.register_kernel(GENERIC, lambda x, k=0: np.tril(x, k))
_triu = define_op("triu", _triangle_rule, operands=1, doc="Zero the elements below diagonal ``k``.")
_triu.register_kernel(GENERIC, lambda x, k=0: np.triu(x, k))


def tril(x: Any, /, *, k: int = 0) -> Tensor:
    """The lower triangle of the last two axes: elements above diagonal ``k`` are zero.

    >>> import eagerrt as ert
    >>> ert.tril(ert.ones((2, 3), dtype="int8")).numpy()
    array([[1, 0, 0],
           [1, 1, 0]], dtype=int8)
    """
    return _tril(x, k=k)


def triu(x: Any, /, *, k: int = 0) -> Tensor:
    """The upper triangle of the last two axes: elements below diagonal ``k`` are zero.

    >>> import eagerrt as ert
    >>> ert.triu(ert.ones((2, 3), dtype="int8"), k=1).numpy()
    array([[0, 1, 1],
           [0, 0, 1]], dtype=int8)
    """
    return _triu(x, k=k)


def meshgrid(*arrays: Any, indexing: Literal["xy", "ij"] = "xy") -> list[Tensor]:
    """Coordinate grids from 1-d tensors, as a list (read-only broadcast views).

    With ``indexing="xy"`` (Cartesian, the default) the first two output axes are
    swapped relative to ``"ij"`` (matrix indexing), as in numpy. Inputs with more
    than one dimension are flattened, as numpy does. Only the inputs' shapes are
    read at the call, so they may be pending.

    >>> import eagerrt as ert
    >>> xs, ys = ert.meshgrid(ert.arange(3), ert.arange(2))
    >>> xs.shape, ys.numpy().tolist()
    ((2, 3), [[0, 0, 0], [1, 1, 1]])
    """
    if indexing not in ("xy", "ij"):
        raise ArgumentError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    flat = [reshape(as_tensor(a), (-1,)) for a in arrays]
    shape = [a.shape[0] for a in flat]
    axes = list(range(len(flat)))
    if indexing == "xy" and len(flat) > 1:
        shape[0], shape[1] = shape[1], shape[0]
        axes[0], axes[1] = 1, 0
    out = []
    for a, axis in zip(flat, axes, strict=True):
        lined_up = [1] * len(flat)
        lined_up[axis] = a.shape[0]
        out.append(broadcast_to(reshape(a, tuple(lined_up)), tuple(shape)))
    return out
