"""numpy interop: ``np.exp(t)`` and friends give tensors; DLPack exchange.

* ``__array_ufunc__``: a numpy ufunc called on tensors (``np.exp(t)``,
  ``np.add(arr, t)``, ``arr * t``) runs eagerrt's op of the same meaning and
  returns a pending-or-ready :class:`~eagerrt.Tensor`, computed asynchronously.
  ``ufunc.reduce`` of the common ufuncs maps to eagerrt's reductions.
* ``__array_function__``: numpy functions with an eagerrt equivalent
  (``np.sum``, ``np.concatenate``, ``np.where``, ...) return tensors; any other
  numpy function runs on the tensors' data (waiting for it) and returns what
  numpy returns, so existing numpy code keeps working.
* :func:`from_dlpack`: zero-copy from any DLPack producer (numpy, PyTorch, ...).

>>> import numpy as np, eagerrt as ert
>>> t = ert.asarray([0.0, 1.0])
>>> type(np.exp(t)).__name__, np.exp(t).numpy().round(3).tolist()
('Tensor', [1.0, 2.718])
>>> np.from_dlpack(t).tolist()
[0.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._core import DTypeError
from ..devices import cpu, get_device
from ..devices.base import Device
from ..tensor import Tensor
from . import reduction
from .creation import asarray
from .elementwise import BINARY_UFUNCS, UFUNC_OPS, UNARY_UFUNCS, clip, where
from .linalg import matmul
from .manipulation import concat, reshape, stack

__all__ = ["from_dlpack"]


def from_dlpack(
    x: Any, /, *, device: str | Device | None = None, copy: bool | None = None
) -> Tensor:
    """A tensor sharing the memory of ``x``, any object with ``__dlpack__``
    (numpy arrays, PyTorch CPU tensors, ...), copied only if ``copy=True`` or
    the memory must move.

    >>> import numpy as np, eagerrt as ert
    >>> a = np.arange(3.0)
    >>> t = ert.from_dlpack(a)
    >>> np.shares_memory(t.numpy(), a)
    True
    """
    if isinstance(x, Tensor):
        return x if not copy else asarray(x, copy=True)
    target = get_device(device)
    if not hasattr(x, "__dlpack__"):
        raise DTypeError(f"from_dlpack needs an object with __dlpack__, got {type(x).__name__}")
    if target is not cpu:
        return asarray(np.from_dlpack(x, copy=copy), device=target)
    try:
        array = np.from_dlpack(x, copy=copy)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise DTypeError(f"from_dlpack: {exc}") from None
    return asarray(array, copy=copy)


# -- ufuncs ------------------------------------------------------------------------------
_BY_UFUNC: dict[np.ufunc, Any] = {
    ufunc: UFUNC_OPS[name] for name, (ufunc, _) in {**UNARY_UFUNCS, **BINARY_UFUNCS}.items()
}
_BY_UFUNC[np.matmul] = matmul
_REDUCE: dict[np.ufunc, Callable[..., Tensor]] = {
    np.add: reduction.sum,
    np.multiply: reduction.prod,
    np.maximum: reduction.max,
    np.minimum: reduction.min,
}


def _array_ufunc(self: Tensor, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    out = kwargs.get("out")
    if out is not None:
        if any(isinstance(o, Tensor) for o in out):
            return NotImplemented  # a tensor is written by its own ops (t += x), not numpy's
        # numpy updating its own array (a += t, np.add(a, t, out=a)): numpy's
        # ufunc on the tensors' data (waiting for it), into numpy's array.
        return getattr(ufunc, method)(*_to_numpy(inputs), **kwargs)
    kwargs.pop("out", None)
    op = _BY_UFUNC.get(ufunc)
    if method == "__call__" and op is not None and not kwargs:
        return op(*inputs)
    simple = not set(kwargs) - {"axis", "dtype", "keepdims"}
    if method == "reduce" and ufunc in _REDUCE and len(inputs) == 1 and simple:
        options = {"axis": kwargs.get("axis", 0), "keepdims": kwargs.get("keepdims", False)}
        if ufunc is np.add or ufunc is np.multiply:
            return _REDUCE[ufunc](inputs[0], dtype=kwargs.get("dtype"), **options)
        if kwargs.get("dtype") is None:
            return _REDUCE[ufunc](inputs[0], **options)
    # Anything else runs in numpy on the data (waiting for it): numpy's result.
    return getattr(ufunc, method)(*_to_numpy(inputs), **_to_numpy(kwargs))


# -- numpy functions ---------------------------------------------------------------------
def _method(name: str) -> Callable[..., Any]:
    """``np.<name>(t, ...)`` as numpy would call it: ``t.<name>(...)``."""

    def handler(a: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(asarray(a), name)(*args, **kwargs)

    return handler


def _joining(name: str, join: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``np.concatenate`` or ``np.stack`` of tensors: eagerrt's ``join``."""

    def handler(arrays: Any, axis: int | None = 0, **kwargs: Any) -> Tensor:
        if kwargs:
            raise DTypeError(f"np.{name} on tensors takes no {sorted(kwargs)}")
        return join(list(arrays), axis=axis)

    return handler


def _reshape(a: Any, shape: Any = None, order: str = "C", **kwargs: Any) -> Tensor:
    if order != "C" or shape is None:
        return NotImplemented
    return reshape(asarray(a), shape)


def _where(condition: Any, *xy: Any) -> Any:
    if len(xy) != 2:
        return NotImplemented  # np.where(cond) alone is nonzero: numpy does it
    return where(condition, *xy)


def _clip(a: Any, a_min: Any = None, a_max: Any = None, **kwargs: Any) -> Any:
    if kwargs:
        return NotImplemented
    return clip(a, a_min, a_max)


_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.concatenate: _joining("concatenate", concat),
    np.stack: _joining("stack", stack),
    np.reshape: _reshape,
    np.where: _where,
    np.clip: _clip,
    np.amax: _method("max"),
    np.amin: _method("min"),
}
for _name in ("transpose", "sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin"):
    _FUNCTIONS[getattr(np, _name)] = _method(_name)


def _array_function(
    self: Tensor, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    handler = _FUNCTIONS.get(func)
    if handler is not None:
        result = handler(*args, **kwargs)
        if result is not NotImplemented:
            return result
    # numpy's own implementation on the data: what numpy code expects.
    implementation = getattr(func, "_implementation", func)
    return implementation(*_to_numpy(args), **_to_numpy(kwargs))


def _to_numpy(obj: Any) -> Any:
    """``obj`` with every tensor in it (lists, tuples, dicts too) as numpy data."""
    if isinstance(obj, Tensor):
        return obj.numpy()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_numpy(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_numpy(v) for k, v in obj.items()}
    return obj


Tensor.__array_ufunc__ = _array_ufunc  # type: ignore[attr-defined]
Tensor.__array_function__ = _array_function  # type: ignore[attr-defined]
