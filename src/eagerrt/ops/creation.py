"""Creating tensors: from existing data, filled, ranges, identity, ``*_like``.

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
from typing import Any

import numpy as np

from .._core.errors import ArgumentError, DeviceError, DTypeError, ShapeError
from ..devices import get_device
from ..devices.base import Device
from ..tensor import Tensor
from ._rules import shape_tuple, to_dtype
from .registry import GENERIC, define_op, elementwise_cost

__all__ = [
    "arange",
    "asarray",
    "empty",
    "empty_like",
    "eye",
    "full",
    "full_like",
    "linspace",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
]

_FLOAT64 = np.dtype(np.float64)


def asarray(
    obj: Any, dtype: Any = None, *, device: str | Device | None = None, copy: bool | None = None
) -> Tensor:
    """A tensor holding ``obj``'s data (a numpy array, nested lists, a scalar, a Tensor).

    Like ``numpy.asarray``, a numpy array is shared, not copied, unless
    ``copy=True`` or a dtype conversion needs one; don't write to it while ops
    that read it are pending. The tensor is ready at once.

    >>> import numpy as np, eagerrt as ert
    >>> ert.asarray(np.arange(3, dtype="float32")).dtype
    dtype('float32')
    """
    dev = get_device(device)
    if isinstance(obj, Tensor):
        if obj.device is not dev and device is not None:
            raise DeviceError(
                f"asarray: the tensor is on {obj.device}, not {dev}; move it with t.to({dev.name!r})"
            )
        if dtype is not None and to_dtype(dtype) != obj.dtype:
            from .manipulation import astype

            return astype(obj, dtype=to_dtype(dtype))
        if copy:
            from .manipulation import astype

            return astype(obj, dtype=obj.dtype, copy=True)
        return obj
    try:
        if copy:
            array = np.array(obj, dtype=dtype, copy=True)
        else:
            array = np.asarray(obj, dtype=dtype, copy=copy)
    except (TypeError, ValueError) as exc:
        if copy is False and isinstance(exc, ValueError):  # numpy: a copy was needed
            raise ArgumentError(f"asarray: {exc}") from None
        raise DTypeError(
            f"asarray: cannot make a tensor from {type(obj).__name__}: {exc}"
        ) from None
    if array.dtype.kind in "OSUVMm":
        raise DTypeError(
            f"asarray: eagerrt tensors hold numbers and bools, not {array.dtype} "
            f"(from {type(obj).__name__})"
        )
    if type(array) is not np.ndarray:  # np.matrix and friends change operators' meaning
        array = array.view(np.ndarray)
    if not array.dtype.isnative:
        # Kernels produce native-order results; keep every tensor native so the
        # metadata computed at the call always matches the data.
        array = array.astype(array.dtype.newbyteorder("="))
    if array.flags.writeable:
        # A read-only view: the caller's own array keeps its flags, and readers of
        # the tensor cannot write into data that pending ops still read.
        array = array.view()
        array.flags.writeable = False
    return Tensor._ready(dev.from_numpy(array), array.shape, array.dtype, dev, "asarray")


def _fill_rule(
    *, shape: Any, dtype: Any, fill: Any = None
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    dt = to_dtype(dtype)
    out = shape_tuple(shape)
    if fill is not None:
        filling = np.asarray(fill, dtype=dt)  # numpy's own errors now: int8 and 300, "a"
        if np.broadcast_shapes(filling.shape, out) != out:
            raise ValueError(f"a fill value of shape {filling.shape} does not fit shape {out}")
    return out, dt


_fill = define_op("fill", _fill_rule, cost=elementwise_cost, doc="A tensor of one repeated value.")


@_fill.kernel()
def _fill_kernel(*, shape: tuple[int, ...], dtype: Any, fill: Any = None) -> np.ndarray:
    if fill is None:
        return np.empty(shape, dtype)
    if type(fill) is int and fill == 0:  # zeros(): calloc'd; not -0.0, which keeps its sign
        return np.zeros(shape, dtype)
    return np.full(shape, fill, dtype)


def _as_tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else asarray(x)


def _fill_dtype(value: Any, dtype: Any) -> np.dtype[Any]:
    if dtype is not None:
        return to_dtype(dtype)
    if isinstance(value, Tensor):
        raise DTypeError("full: fill_value must be a Python or numpy scalar, not a Tensor")
    return np.asarray(value).dtype


def zeros(
    shape: int | Sequence[int], dtype: Any = _FLOAT64, *, device: str | Device | None = None
) -> Tensor:
    """A tensor of zeros (float64 unless ``dtype`` says otherwise)."""
    return _fill(shape=shape, dtype=dtype, fill=0, device=device)


def ones(
    shape: int | Sequence[int], dtype: Any = _FLOAT64, *, device: str | Device | None = None
) -> Tensor:
    """A tensor of ones (float64 unless ``dtype`` says otherwise)."""
    return _fill(shape=shape, dtype=dtype, fill=1, device=device)


def empty(
    shape: int | Sequence[int], dtype: Any = _FLOAT64, *, device: str | Device | None = None
) -> Tensor:
    """A tensor with unspecified contents (cheapest to make)."""
    return _fill(shape=shape, dtype=dtype, fill=None, device=device)


def full(
    shape: int | Sequence[int],
    fill_value: Any,
    dtype: Any = None,
    *,
    device: str | Device | None = None,
) -> Tensor:
    """A tensor of ``fill_value``; the dtype is inferred from it unless given."""
    return _fill(shape=shape, dtype=_fill_dtype(fill_value, dtype), fill=fill_value, device=device)


def zeros_like(x: Any, dtype: Any = None) -> Tensor:
    """Zeros with ``x``'s shape, dtype and device; ``x`` need not be ready."""
    x = _as_tensor(x)
    return _fill(shape=x.shape, dtype=x.dtype if dtype is None else dtype, fill=0, device=x.device)


def ones_like(x: Any, dtype: Any = None) -> Tensor:
    """Ones with ``x``'s shape, dtype and device; ``x`` need not be ready."""
    x = _as_tensor(x)
    return _fill(shape=x.shape, dtype=x.dtype if dtype is None else dtype, fill=1, device=x.device)


def empty_like(x: Any, dtype: Any = None) -> Tensor:
    """Unspecified contents with ``x``'s shape, dtype and device."""
    x = _as_tensor(x)
    return _fill(
        shape=x.shape, dtype=x.dtype if dtype is None else dtype, fill=None, device=x.device
    )


def full_like(x: Any, fill_value: Any, dtype: Any = None) -> Tensor:
    """``fill_value`` with ``x``'s shape and device, in ``x``'s dtype unless given."""
    x = _as_tensor(x)
    return _fill(
        shape=x.shape, dtype=x.dtype if dtype is None else dtype, fill=fill_value, device=x.device
    )


def _arange_rule(
    *, start: Any, stop: Any, step: Any, dtype: Any
) -> tuple[tuple[int, ...], np.dtype[Any]]:
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


_arange = define_op("arange", _arange_rule, cost=elementwise_cost, doc="Evenly spaced values.")
_arange.register_kernel(
    GENERIC, lambda *, start, stop, step, dtype: np.arange(start, stop, step, dtype=dtype)
)


def arange(
    start: Any,
    stop: Any = None,
    step: Any = 1,
    dtype: Any = None,
    *,
    device: str | Device | None = None,
) -> Tensor:
    """Values from ``start`` up to (not including) ``stop`` by ``step``, as numpy."""
    if stop is None:
        start, stop = 0, start
    return _arange(start=start, stop=stop, step=step, dtype=dtype, device=device)


def _linspace_rule(
    *, start: Any, stop: Any, num: int, endpoint: bool, dtype: Any
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    num = operator.index(num)
    if num < 0:
        raise ShapeError(f"linspace: num must be non-negative, got {num}")
    if dtype is None:  # numpy's own choice, from an empty request of the same types
        dtype = np.linspace(start, stop, 0, endpoint=endpoint).dtype
    return (int(num),), to_dtype(dtype)


_linspace = define_op(
    "linspace", _linspace_rule, cost=elementwise_cost, doc="Evenly spaced samples."
)
_linspace.register_kernel(
    GENERIC,
    lambda *, start, stop, num, endpoint, dtype: np.linspace(
        start, stop, num, endpoint=endpoint, dtype=dtype
    ),
)


def linspace(
    start: float,
    stop: float,
    num: int = 50,
    *,
    endpoint: bool = True,
    dtype: Any = None,
    device: str | Device | None = None,
) -> Tensor:
    """``num`` evenly spaced samples from ``start`` to ``stop``, as numpy."""
    return _linspace(start=start, stop=stop, num=num, endpoint=endpoint, dtype=dtype, device=device)


def _eye_rule(
    *, n: int, m: int | None, k: int, dtype: Any
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    operator.index(k)
    return shape_tuple((n, n if m is None else m)), to_dtype(dtype)


_eye = define_op(
    "eye", _eye_rule, cost=elementwise_cost, doc="Ones on a diagonal, zeros elsewhere."
)
_eye.register_kernel(GENERIC, lambda *, n, m, k, dtype: np.eye(n, m, k, dtype=dtype))


def eye(
    n: int,
    m: int | None = None,
    k: int = 0,
    dtype: Any = _FLOAT64,
    *,
    device: str | Device | None = None,
) -> Tensor:
    """An ``n x m`` matrix with ones on diagonal ``k``."""
    return _eye(n=n, m=m, k=k, dtype=dtype, device=device)
