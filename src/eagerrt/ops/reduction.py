"""Reductions over axes: sum, mean, prod, max, min, var, std, argmax, argmin.

Result dtypes follow numpy: integer sums and products widen to the platform
integer, means and variances of integers are float64, variances of complex
numbers are real, arg-reductions give int64.

>>> import eagerrt as ert
>>> x = ert.asarray([[1, 2], [3, 4]])
>>> ert.sum(x, axis=0).numpy(), ert.mean(x).item()
(array([4, 6]), 2.5)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.config import config
from .._core.errors import ShapeError
from ..tensor import Tensor
from ._rules import normalize_axes, normalize_axis, to_dtype
from .registry import GENERIC, Op, define_op

__all__ = ["argmax", "argmin", "max", "mean", "min", "prod", "std", "sum", "var"]

_INT64 = np.dtype(np.int64)
_UINT64 = np.dtype(np.uint64)
_FLOAT64 = np.dtype(np.float64)
_INTP = np.dtype(np.intp)


def _accumulate_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """sum/prod: small ints and bools widen to the platform int (numpy's rule)."""
    if dtype.kind == "b" or (dtype.kind == "i" and dtype.itemsize < _INT64.itemsize):
        return _INT64
    if dtype.kind == "u" and dtype.itemsize < _UINT64.itemsize:
        return _UINT64
    return dtype


def _mean_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return _FLOAT64 if dtype.kind in "biu" else dtype


def _var_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    if dtype.kind == "c":
        return np.empty(0, dtype).real.dtype
    return _mean_dtype(dtype)


def _reduced_shape(
    shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool
) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduction_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, x: Tensor, **_: Any) -> float:
    return config.op_overhead_ns + x.size * config.ns_per_element


def _check_out(out: Any) -> None:
    if out is not None:
        raise TypeError("out= is not supported: tensors are immutable")


def _reduction(
    name: str,
    kernel: Callable[..., Any],
    result_dtype: Callable[[np.dtype[Any]], np.dtype[Any]],
    signature: str,
    *,
    needs_elements: bool = False,
) -> Op:
    """A reduction whose parameters are numpy's, in numpy's order, so that
    ``ert.sum(x, 0, "float32")`` and numpy's own ``np.sum(t)`` bind alike."""

    def shape_and_dtype(
        x: Tensor, axis: Any, keepdims: bool, dtype: Any
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        if isinstance(axis, list):  # numpy's reductions take an int or a tuple
            raise TypeError(f"axis must be an int or a tuple of ints, not a list ({axis})")
        axes = normalize_axes(axis, x.ndim)
        if needs_elements and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"{name} of an empty selection has no identity; the axis is empty")
        if dtype is None:
            out = result_dtype(x.dtype)
        else:  # numpy's dtype= rules (and refusals), from a two-element stand-in
            stand_in = np.ones((2, 1), x.dtype)
            out = np.asarray(kernel(stand_in, axis=0, dtype=to_dtype(dtype))).dtype
        return _reduced_shape(x.shape, axes, keepdims), out

    rule: Callable[..., tuple[tuple[int, ...], np.dtype[Any]]]
    if signature == "dtype":  # sum, prod, mean

        def rule(
            x: Tensor, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False
        ) -> tuple[tuple[int, ...], np.dtype[Any]]:
            _check_out(out)
            return shape_and_dtype(x, axis, keepdims, dtype)

    elif signature == "ddof":  # var, std

        def rule(
            x: Tensor,
            axis: Any = None,
            dtype: Any = None,
            out: Any = None,
            ddof: float = 0,
            keepdims: bool = False,
        ) -> tuple[tuple[int, ...], np.dtype[Any]]:
            _check_out(out)
            return shape_and_dtype(x, axis, keepdims, dtype)

    else:  # max, min

        def rule(
            x: Tensor, axis: Any = None, out: Any = None, keepdims: bool = False
        ) -> tuple[tuple[int, ...], np.dtype[Any]]:
            _check_out(out)
            return shape_and_dtype(x, axis, keepdims, None)

    op = define_op(
        name, rule, cost=_reduction_cost, operands=1, doc=f"``numpy.{name}`` over ``axis``."
    )

    def run(x: Any, axis: Any = None, out: Any = None, **params: Any) -> Any:
        return np.asarray(kernel(x, axis=axis, **params))

    op.register_kernel(GENERIC, run)
    return op


sum = _reduction("sum", np.sum, _accumulate_dtype, "dtype")
prod = _reduction("prod", np.prod, _accumulate_dtype, "dtype")
mean = _reduction("mean", np.mean, _mean_dtype, "dtype")
max = _reduction("max", np.max, lambda d: d, "plain", needs_elements=True)
min = _reduction("min", np.min, lambda d: d, "plain", needs_elements=True)
var = _reduction("var", np.var, _var_dtype, "ddof")
std = _reduction("std", np.std, _var_dtype, "ddof")


def _arg_reduction(name: str, kernel: Callable[..., Any]) -> Op:
    def rule(
        x: Tensor, axis: int | None = None, out: Any = None, *, keepdims: bool = False
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        _check_out(out)
        if axis is None:
            if x.size == 0:
                raise ShapeError(f"{name} of an empty tensor is undefined")
            return ((1,) * x.ndim if keepdims else ()), _INTP
        ax = normalize_axis(axis, x.ndim)
        if x.shape[ax] == 0:
            raise ShapeError(f"{name} over axis {ax} of size 0 is undefined")
        return _reduced_shape(x.shape, (ax,), keepdims), _INTP

    op = define_op(
        name, rule, cost=_reduction_cost, operands=1, doc=f"``numpy.{name}``: index of the extreme."
    )
    op.register_kernel(
        GENERIC,
        lambda x, axis=None, out=None, keepdims=False: np.asarray(
            kernel(x, axis=axis, keepdims=keepdims)
        ),
    )
    return op


argmax = _arg_reduction("argmax", np.argmax)
argmin = _arg_reduction("argmin", np.argmin)
