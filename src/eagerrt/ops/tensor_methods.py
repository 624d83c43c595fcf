"""Operators and methods of :class:`~eagerrt.Tensor`, bound to the ops.

Installed here rather than in ``tensor.py`` because ops produce tensors and
tensors call ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..devices import get_device
from ..devices.base import Device
from ..tensor import TRACED, Tensor
from . import elementwise, linalg_extension, reduction, searching, sorting, writes
from .elementwise import UFUNC_OPS
from .indexing import index_tensor, take
from .linalg import matmul, matrix_transpose, tensordot
from .manipulation import astype, moveaxis, permute_dims, repeat, reshape, squeeze, transpose
from .registry import Op, elementwise_cost, launch
from .stream_transfers import download

__all__: list[str] = []


def _reflected(op: Op) -> Any:
    call2 = op.call2

    def method(self: Tensor, other: Any, /) -> Tensor:
        return call2(other, self)

    method.__name__ = f"__r{op.name}__"
    return method


def _comparison(op: Op) -> Any:
    def method(self: Tensor, other: Any, /) -> Any:
        if other is None or isinstance(other, str):
            return NotImplemented  # `t == None` falls back to identity, as for objects
        return op.call2(self, other)

    return method


#: The binary operators (each with its reflected and in-place forms) and their ops.
_OPERATORS = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "truediv": "divide",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "pow": "power",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift",
    "rshift": "bitwise_right_shift",
}


def _inplace(op: Op) -> Any:
    """``t op= x`` for an elementwise op: into ``t``'s own buffer where nothing else sees it."""
    name = f"__i{op.name}__"

    def method(self: Tensor, other: Any, /) -> Tensor:
        return writes.in_place_ufunc(self, op, other, name)

    return method


def _imatmul(self: Tensor, other: Any, /) -> Tensor:
    return writes.in_place(self, lambda: matmul.call2(self, other), "__imatmul__")


for _dunder, _name in _OPERATORS.items():
    setattr(Tensor, f"__{_dunder}__", UFUNC_OPS[_name].call2)
    setattr(Tensor, f"__r{_dunder}__", _reflected(UFUNC_OPS[_name]))
    setattr(Tensor, f"__i{_dunder}__", _inplace(UFUNC_OPS[_name]))
for _dunder, _name in {
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
}.items():
    setattr(Tensor, f"__{_dunder}__", _comparison(UFUNC_OPS[_name]))


def _reshape(self: Tensor, *shape: Any) -> Tensor:
    """``t.reshape(2, 3)`` or ``t.reshape((2, 3))``."""
    return reshape(self, shape=shape[0] if len(shape) == 1 else shape)


def _transpose(self: Tensor, *axes: Any) -> Tensor:
    """``t.transpose()``, ``t.transpose(1, 0)`` or ``t.transpose((1, 0))``."""
    if not axes:
        return transpose(self)
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = tuple(axes[0])
    return transpose(self, axes=axes)


def _astype(self: Tensor, dtype: Any, copy: bool = True) -> Tensor:
    return astype(self, dtype, copy=copy)


def _to_device(self: Tensor, device: str | Device, /, *, stream: Any = None) -> Tensor:
    """The Array API's name for :meth:`to` (``stream`` is for devices with streams)."""
    return _to(self, device)


def _array_namespace(self: Tensor, /, *, api_version: str | None = None) -> Any:
    """The namespace (``eagerrt`` itself) whose functions work on this tensor."""
    import eagerrt

    if api_version is not None and api_version not in _API_VERSIONS:
        raise ValueError(
            f"eagerrt implements the Array API {eagerrt.__array_api_version__} "
            f"(and its earlier versions {', '.join(_API_VERSIONS[:-1])}), not {api_version!r}"
        )
    return eagerrt


_API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")


def _to(self: Tensor, device: str | Device) -> Tensor:
    """This tensor on ``device`` (itself if it is already there)."""
    target = get_device(device)
    source = self.device
    if target is source:
        return self
    target.check_open()
    if source.completes_at_enqueue and self._state != TRACED:
        return download(self, target)  # a stream device: its copy stream, not a worker

    def move(value: Any) -> Any:  # on the source's workers, through the host
        return target.from_numpy(source.to_numpy(value))

    cost = elementwise_cost(self.shape, self.dtype)
    return launch("to", move, (self,), self.shape, self.dtype, target, cost, source.executor)


_METHODS: dict[str, Any] = {
    "__matmul__": matmul.call2,
    "__rmatmul__": _reflected(matmul),
    "__imatmul__": _imatmul,
    "__neg__": UFUNC_OPS["negative"].call1,
    "__pos__": UFUNC_OPS["positive"].call1,
    "__abs__": UFUNC_OPS["abs"].call1,
    "__getitem__": index_tensor,
    "__setitem__": writes.setitem,
    "__invert__": UFUNC_OPS["bitwise_invert"].call1,
    "reshape": _reshape,
    "transpose": _transpose,
    "T": property(lambda self: transpose(self)),
    "mT": property(lambda self: matrix_transpose(self)),
    "to_device": _to_device,
    "__array_namespace__": _array_namespace,
    "astype": _astype,
    "to": _to,
}


def _reduction_method(op: Op) -> Any:
    # The ops take numpy's parameters in numpy's order, so numpy's own
    # np.sum(t), np.max(t), ... (which call these with out=None) work too.
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return op(self, *args, **kwargs)

    method.__name__ = op.name
    method.__doc__ = f"``{op.name}`` over ``axis`` (see ``eagerrt.{op.name}``)."
    return method


for _name in ("sum", "mean", "prod", "var", "std", "max", "min", "argmax", "argmin"):
    _function = getattr(reduction, _name)
    # The op behind the function takes numpy's positional order: t.sum(0), np.sum(t, 0).
    setattr(Tensor, _name, _reduction_method(getattr(_function, "op", _function)))


# -- the ndarray methods numpy users reach for -------------------------------------------
def _cumulative(name: str, function: Any) -> Any:
    """numpy's ``a.cumsum`` or ``a.cumprod`` (``name``), by ``function``."""

    def method(self: Tensor, axis: int | None = None, dtype: Any = None) -> Tensor:
        x = reshape(self, (-1,)) if axis is None else self
        return function(x, axis=0 if axis is None else axis, dtype=dtype)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"numpy's ``a.{name}``: over the flattened tensor if ``axis`` is None."
    return method


def _fill(self: Tensor, value: Any) -> None:
    """numpy's ``a.fill(value)``: every element becomes ``value``, in place."""
    writes.setitem(self, ..., value)


def _diagonal(self: Tensor, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """numpy's ``a.diagonal``: the diagonal of axes ``axis1`` and ``axis2``,
    as the last axis of the result."""
    return linalg_extension.diagonal(moveaxis(self, (axis1, axis2), (-2, -1)), offset=offset)


def _trace(
    self: Tensor, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None
) -> Tensor:
    """numpy's ``a.trace``: the sum along the diagonal of ``axis1`` and ``axis2``."""
    return reduction.sum(_diagonal(self, offset, axis1, axis2), axis=-1, dtype=dtype)


def _swapaxes(self: Tensor, axis1: int, axis2: int) -> Tensor:
    order = list(range(self.ndim))
    order[axis1], order[axis2] = order[axis2], order[axis1]
    return permute_dims(self, tuple(order))


def _argsort(self: Tensor, axis: int | None = -1, kind: str | None = None) -> Tensor:
    """numpy's ``a.argsort``; the order of ties is always stable (any ``kind``)."""
    x, axis = (reshape(self, (-1,)), 0) if axis is None else (self, axis)
    return sorting.argsort(x, axis=axis)


def _dot(self: Tensor, other: Any) -> Tensor:
    """numpy's ``a.dot(b)``: products for 1-d and 2-d, else a sum over a's last
    axis and b's second-to-last."""
    other_ndim = getattr(other, "ndim", np.ndim(other))
    if self.ndim == 0 or other_ndim == 0:
        return self * other
    if self.ndim <= 2 and other_ndim <= 2:
        return matmul(self, other)
    return tensordot(self, other, axes=([-1], [-2 if other_ndim >= 2 else -1]))


_NDARRAY_METHODS: dict[str, Any] = {
    "copy": lambda self: astype(self, self.dtype, copy=True),
    "ravel": lambda self: reshape(self, (-1,)),
    "flatten": lambda self: reshape(self, (-1,)),
    "squeeze": lambda self, axis=None: squeeze(self, axis=axis),
    "clip": elementwise.clip,
    "round": lambda self, decimals=0: elementwise.round(self, decimals=decimals),
    "cumsum": _cumulative("cumsum", reduction.cumulative_sum),
    "any": lambda self, axis=None, keepdims=False: reduction.any(
        self, axis=axis, keepdims=keepdims
    ),
    "all": lambda self, axis=None, keepdims=False: reduction.all(
        self, axis=axis, keepdims=keepdims
    ),
    "dot": _dot,
    "real": property(lambda self: elementwise.real(self)),
    "imag": property(lambda self: elementwise.imag(self)),
    "conj": lambda self: elementwise.conj(self),
    "conjugate": lambda self: elementwise.conj(self),
    "cumprod": _cumulative("cumprod", reduction.cumulative_prod),
    "diagonal": _diagonal,
    "trace": _trace,
    "swapaxes": _swapaxes,
    "argsort": _argsort,
    "nonzero": lambda self: searching.nonzero(self),
    "repeat": lambda self, repeats, axis=None: repeat(self, repeats, axis=axis),
    "take": lambda self, indices, axis=None: take(self, indices, axis=axis),
    "searchsorted": lambda self, v, side="left": searching.searchsorted(self, v, side=side),
    "fill": _fill,
    "tobytes": lambda self, order="C": self.numpy().tobytes(order),
    "itemsize": property(lambda self: self.dtype.itemsize),
    # The strides of the array numpy() gives (waiting for the data).
    "strides": property(lambda self: self.numpy().strides),
}
for _attr, _method in {**_METHODS, **_NDARRAY_METHODS}.items():
    setattr(Tensor, _attr, _method)
