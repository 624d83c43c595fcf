"""Statistical and utility functions: reductions over axes, cumulative sums and
products, ``all``/``any``, ``diff``, and arg-reductions.

The public functions have the Python Array API standard's signatures (2024.12):
``x`` is positional-only, the options keyword-only, and numpy's extra options
(``out=None``, ``ddof=``, ``dtype=`` of ``var``/``std``) come after the
standard's, so numpy's own ``np.sum(t)`` (through ``t.sum``) works too. Each
function's op, whose parameters are numpy's in numpy's order, is ``fn.op``.

Result dtypes follow numpy, which here agrees with the standard: integer sums and
products widen to int64 (uint64 for unsigned), means and variances of integers
are float64, variances of complex numbers are real, arg-reductions give int64.

>>> import eagerrt as ert
>>> x = ert.asarray([[1, 2], [3, 4]])
>>> ert.sum(x, axis=0).numpy(), ert.mean(x).item()
(array([4, 6]), 2.5)
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core import ArgumentError, ShapeError, UsageError, config
from ..tensor import Tensor
from ._rules import RuleOut, as_array, normalize_axes, normalize_axis, to_dtype
from .manipulation import broadcast_to, concat
from .registry import GENERIC, Op, call_error, define_op, exposes
from .wrap import as_tensor

__all__ = [
    "all",
    "any",
    "argmax",
    "argmin",
    "cumulative_prod",
    "cumulative_sum",
    "diff",
    "max",
    "mean",
    "min",
    "prod",
    "std",
    "sum",
    "var",
]

_INT64 = np.dtype(np.int64)
_UINT64 = np.dtype(np.uint64)
_FLOAT64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)
_INTP = np.dtype(np.intp)

Axis = int | Sequence[int] | None


def _accumulate_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """sum/prod: small ints and bools widen to the default int (numpy's and the
    standard's rule), unsigned ones to uint64."""
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


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """``shape`` reduced over ``axes``: kept as 1s when ``keepdims``, else dropped."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduction_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, x: Tensor, **_: Any) -> float:
    return config.op_overhead_ns + x.size * config.ns_per_element


def _check_out(out: Any) -> None:
    if out is not None:
        raise TypeError("out= is not supported: tensors are immutable")


def _reduction_op(name: str, rule: Callable[..., Any], kernel: Callable[..., Any], doc: str) -> Op:
    """The op of numpy's reduction ``kernel``, whose ``out`` its rule leaves None."""

    def run(x: Any, axis: Any = None, out: Any = None, **params: Any) -> Any:
        return as_array(kernel(x, axis=axis, **params))

    op = define_op(name, rule, cost=_reduction_cost, operands=1, doc=doc)
    op.register_kernel(GENERIC, run)
    return op


def _reduction(
    name: str,
    kernel: Callable[..., Any],
    result_dtype: Callable[[np.dtype[Any]], np.dtype[Any]],
    signature: str,
    *,
    needs_elements: bool = False,
) -> Op:
    """A reduction op whose parameters are numpy's, in numpy's order."""

    def shape_and_dtype(x: Tensor, axis: Any, keepdims: bool, dtype: Any) -> RuleOut:
        if isinstance(axis, list):  # numpy's reductions take an int or a tuple
            raise TypeError(f"axis must be an int or a tuple of ints, not a list ({axis})")
        axes = normalize_axes(axis, x.ndim)
        if needs_elements and builtins.any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"{name} of an empty selection has no identity; the axis is empty")
        if dtype is None:
            out = result_dtype(x.dtype)
        else:  # numpy's dtype= rules (and refusals), from a two-element stand-in
            stand_in = np.ones((2, 1), x.dtype)
            out = np.asarray(kernel(stand_in, axis=0, dtype=to_dtype(dtype))).dtype
        return reduced_shape(x.shape, axes, keepdims), out

    rule: Callable[..., RuleOut]
    if signature == "dtype":  # sum, prod, mean

        def rule(
            x: Tensor, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False
        ) -> RuleOut:
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
        ) -> RuleOut:
            _check_out(out)
            if isinstance(ddof, bool) or not isinstance(ddof, (int, float, np.number)):
                raise TypeError(f"correction (ddof) must be a number, got {ddof!r}")
            if ddof < 0:
                raise ArgumentError(f"correction (ddof) must not be negative, got {ddof}")
            return shape_and_dtype(x, axis, keepdims, dtype)

    else:  # max, min, all, any

        def rule(x: Tensor, axis: Any = None, out: Any = None, keepdims: bool = False) -> RuleOut:
            _check_out(out)
            return shape_and_dtype(x, axis, keepdims, None)

    return _reduction_op(name, rule, kernel, f"``numpy.{name}`` over ``axis``.")


_sum = _reduction("sum", np.sum, _accumulate_dtype, "dtype")
_prod = _reduction("prod", np.prod, _accumulate_dtype, "dtype")
_mean = _reduction("mean", np.mean, _mean_dtype, "dtype")
_max = _reduction("max", np.max, lambda d: d, "plain", needs_elements=True)
_min = _reduction("min", np.min, lambda d: d, "plain", needs_elements=True)
_var = _reduction("var", np.var, _var_dtype, "ddof")
_std = _reduction("std", np.std, _var_dtype, "ddof")
_all = _reduction("all", np.all, lambda d: _BOOL, "plain")
_any = _reduction("any", np.any, lambda d: _BOOL, "plain")


def _reduce(op: Op, x: Any, axis: Any, keepdims: bool, out: Any = None, **params: Any) -> Tensor:
    """Call ``op``, on its fast path when every option is the default."""
    if axis is None and not keepdims and out is None and not params:
        return op.call1(x)
    if out is not None:
        params["out"] = out
    return op(x, axis=axis, keepdims=keepdims, **params)


def _with_dtype(dtype: Any) -> dict[str, Any]:
    return {} if dtype is None else {"dtype": dtype}


@exposes(_sum)
def sum(
    x: Any, /, *, axis: Axis = None, dtype: Any = None, keepdims: bool = False, out: None = None
) -> Tensor:
    """The sum over ``axis`` (every axis for None). Bools and small ints sum in
    int64 (unsigned ones in uint64) unless ``dtype`` says otherwise.

    >>> import eagerrt as ert
    >>> s = ert.sum(ert.asarray([[1, 2], [3, 4]], dtype="int8"), axis=1)
    >>> s.dtype, s.numpy()
    (dtype('int64'), array([3, 7]))
    """
    return _reduce(_sum, x, axis, keepdims, out, **_with_dtype(dtype))


@exposes(_prod)
def prod(
    x: Any, /, *, axis: Axis = None, dtype: Any = None, keepdims: bool = False, out: None = None
) -> Tensor:
    """The product over ``axis``, accumulating as :func:`sum` does.

    >>> import eagerrt as ert
    >>> ert.prod(ert.asarray([1, 2, 3, 4])).item()
    24
    """
    return _reduce(_prod, x, axis, keepdims, out, **_with_dtype(dtype))


@exposes(_mean)
def mean(
    x: Any, /, *, axis: Axis = None, keepdims: bool = False, dtype: Any = None, out: None = None
) -> Tensor:
    """The arithmetic mean over ``axis`` (float64 for integer and bool inputs).

    >>> import eagerrt as ert
    >>> ert.mean(ert.asarray([[1, 2], [3, 5]]), axis=0, keepdims=True).numpy()
    array([[2. , 3.5]])
    """
    return _reduce(_mean, x, axis, keepdims, out, **_with_dtype(dtype))


@exposes(_max)
def max(x: Any, /, *, axis: Axis = None, keepdims: bool = False, out: None = None) -> Tensor:
    """The largest element over ``axis``; an empty selection is a ShapeError at the call.
    NaNs propagate.

    >>> import eagerrt as ert
    >>> ert.max(ert.asarray([[1, 5], [3, 2]]), axis=1).numpy()
    array([5, 3])
    """
    return _reduce(_max, x, axis, keepdims, out)


@exposes(_min)
def min(x: Any, /, *, axis: Axis = None, keepdims: bool = False, out: None = None) -> Tensor:
    """The smallest element over ``axis``; an empty selection is a ShapeError at the call.

    >>> import eagerrt as ert
    >>> ert.min(ert.asarray([[1, 5], [3, 2]]), axis=0).numpy()
    array([1, 2])
    """
    return _reduce(_min, x, axis, keepdims, out)


def _ddof(name: str, x: Any, ddof: float | None, correction: float) -> dict[str, Any]:
    """numpy's ``ddof`` is the standard's ``correction``: one of them, at most."""
    if ddof is not None and correction != 0:
        raise call_error(
            ArgumentError,
            name,
            (x,),
            {"ddof": ddof, "correction": correction},
            "give correction= or numpy's ddof=, not both",
        )
    value = correction if ddof is None else ddof
    return {} if isinstance(value, (int, float)) and value == 0 else {"ddof": value}


@exposes(_var)
def var(
    x: Any,
    /,
    *,
    axis: Axis = None,
    correction: float = 0.0,
    keepdims: bool = False,
    ddof: float | None = None,
    dtype: Any = None,
    out: None = None,
) -> Tensor:
    """The variance over ``axis``, dividing by ``N - correction`` (the standard's
    name; numpy's ``ddof`` means the same). Real for complex inputs.

    >>> import eagerrt as ert
    >>> x = ert.asarray([1.0, 2.0, 3.0, 4.0])
    >>> ert.var(x).item(), ert.var(x, correction=1).item()
    (1.25, 1.6666666666666667)
    """
    params = _ddof("var", x, ddof, correction) | _with_dtype(dtype)
    return _reduce(_var, x, axis, keepdims, out, **params)


@exposes(_std)
def std(
    x: Any,
    /,
    *,
    axis: Axis = None,
    correction: float = 0.0,
    keepdims: bool = False,
    ddof: float | None = None,
    dtype: Any = None,
    out: None = None,
) -> Tensor:
    """The standard deviation over ``axis``, dividing by ``N - correction``.

    >>> import eagerrt as ert
    >>> ert.std(ert.asarray([1.0, 3.0]), correction=1).item()
    1.4142135623730951
    """
    params = _ddof("std", x, ddof, correction) | _with_dtype(dtype)
    return _reduce(_std, x, axis, keepdims, out, **params)


@exposes(_all)
def all(x: Any, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Whether every element over ``axis`` is true (nonzero; NaN counts as true).

    >>> import eagerrt as ert
    >>> ert.all(ert.asarray([[1, 0], [2, 3]]), axis=1).numpy()
    array([False,  True])
    """
    return _reduce(_all, x, axis, keepdims)


@exposes(_any)
def any(x: Any, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Whether any element over ``axis`` is true (nonzero).

    >>> import eagerrt as ert
    >>> ert.any(ert.asarray([[1, 0], [0, 0]]), axis=1).numpy()
    array([ True, False])
    """
    return _reduce(_any, x, axis, keepdims)


# -- cumulative sums and products ---------------------------------------------------
def _cumulative(name: str, kernel: Callable[..., Any]) -> Op:
    def rule(
        x: Tensor, axis: int | None = None, dtype: Any = None, include_initial: bool = False
    ) -> RuleOut:
        if x.ndim == 0:
            raise ShapeError(f"{name} needs a tensor of at least one dimension")
        if axis is None:
            if x.ndim != 1:
                raise ShapeError(f"{name} of a {x.ndim}-d tensor needs axis=")
            axis = 0
        ax = normalize_axis(axis, x.ndim)
        out = _accumulate_dtype(x.dtype) if dtype is None else to_dtype(dtype)
        shape = list(x.shape)
        shape[ax] += bool(include_initial)
        return tuple(shape), out

    op = define_op(
        name, rule, operands=1, doc=f"``numpy.{name}`` along ``axis``, as the standard says."
    )
    op.register_kernel(GENERIC, kernel)
    return op


_cumulative_sum = _cumulative("cumulative_sum", np.cumulative_sum)
_cumulative_prod = _cumulative("cumulative_prod", np.cumulative_prod)


@exposes(_cumulative_sum)
def cumulative_sum(
    x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> Tensor:
    """Running sums along ``axis`` (optional for 1-d tensors only), accumulating as
    :func:`sum` does; ``include_initial=True`` starts with the empty sum, 0.

    >>> import eagerrt as ert
    >>> ert.cumulative_sum(ert.asarray([1, 2, 3]), include_initial=True).numpy()
    array([0, 1, 3, 6])
    """
    return _cumulative_sum(x, axis=axis, dtype=dtype, include_initial=include_initial)


@exposes(_cumulative_prod)
def cumulative_prod(
    x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> Tensor:
    """Running products along ``axis``; ``include_initial=True`` starts with 1.

    >>> import eagerrt as ert
    >>> ert.cumulative_prod(ert.asarray([[1, 2], [3, 4]]), axis=1).numpy()
    array([[ 1,  2],
           [ 3, 12]])
    """
    return _cumulative_prod(x, axis=axis, dtype=dtype, include_initial=include_initial)


# -- differences ------------------------------------------------------------------------
def _diff_rule(x: Tensor, n: int = 1, axis: int = -1) -> RuleOut:
    ax = normalize_axis(axis, x.ndim)
    shape = list(x.shape)
    shape[ax] = builtins.max(0, shape[ax] - n)
    return tuple(shape), x.dtype  # bools differ by `!=`, as in numpy: still bool


_diff = define_op("diff", _diff_rule, operands=1, doc="``numpy.diff``: n-th differences.")
_diff.register_kernel(GENERIC, lambda x, n=1, axis=-1: np.diff(x, n, axis))


def diff(
    x: Any,
    /,
    *,
    axis: int = -1,
    n: int = 1,
    prepend: Any = None,
    append: Any = None,
) -> Tensor:
    """The ``n``-th discrete differences along ``axis``: ``out[i] = x[i+1] - x[i]``
    applied ``n`` times, after joining ``prepend`` and ``append`` (tensors shaped
    like ``x`` but along ``axis``, or scalars) to the ends. Bools differ by ``!=``.

    >>> import eagerrt as ert
    >>> ert.diff(ert.asarray([1, 4, 9, 16])).numpy()
    array([3, 5, 7])
    >>> ert.diff(ert.asarray([1, 4, 9]), n=2, prepend=ert.asarray([0])).numpy()
    array([2, 2])
    """
    x = as_tensor(x)
    static = {"axis": axis, "n": n}
    try:
        if x.ndim == 0:
            raise ShapeError("diff needs a tensor of at least one dimension")
        ax = normalize_axis(axis, x.ndim)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise ArgumentError(f"n must be an int, got {type(n).__name__}")
        if n < 0:
            raise ArgumentError(f"n must not be negative, got {n}")
    except UsageError as exc:
        raise call_error(type(exc), "diff", (x,), static, str(exc)) from None
    if n == 0:
        return x
    if prepend is not None or append is not None:
        parts = [as_tensor(p) for p in (prepend, x, append) if p is not None]
        # A scalar end is one slice of x's shape, as numpy does.
        one_slice = (*x.shape[:ax], 1, *x.shape[ax + 1 :])
        x = concat([broadcast_to(p, one_slice) if p.ndim == 0 else p for p in parts], axis=ax)
    return _diff(x, n=int(n), axis=ax)


# -- arg-reductions ----------------------------------------------------------------------
def _arg_reduction(name: str, kernel: Callable[..., Any]) -> Op:
    def rule(
        x: Tensor, axis: int | None = None, out: Any = None, *, keepdims: bool = False
    ) -> RuleOut:
        _check_out(out)
        if axis is None:
            if x.size == 0:
                raise ShapeError(f"{name} of an empty tensor is undefined")
            return ((1,) * x.ndim if keepdims else ()), _INTP
        ax = normalize_axis(axis, x.ndim)
        if x.shape[ax] == 0:
            raise ShapeError(f"{name} over axis {ax} of size 0 is undefined")
        return reduced_shape(x.shape, (ax,), keepdims), _INTP

    return _reduction_op(name, rule, kernel, f"``numpy.{name}``: index of the extreme.")


_argmax = _arg_reduction("argmax", np.argmax)
_argmin = _arg_reduction("argmin", np.argmin)


@exposes(_argmax)
def argmax(
    x: Any, /, *, axis: int | None = None, keepdims: bool = False, out: None = None
) -> Tensor:
    """The index (int64) of the first largest element over ``axis`` (of the
    flattened tensor for None).

    >>> import eagerrt as ert
    >>> ert.argmax(ert.asarray([[1, 5], [7, 2]]), axis=1).numpy()
    array([1, 0])
    """
    return _reduce(_argmax, x, axis, keepdims, out)


@exposes(_argmin)
def argmin(
    x: Any, /, *, axis: int | None = None, keepdims: bool = False, out: None = None
) -> Tensor:
    """The index (int64) of the first smallest element over ``axis``.

    >>> import eagerrt as ert
    >>> ert.argmin(ert.asarray([3, 1, 1]), keepdims=True).numpy()
    array([1])
    """
    return _reduce(_argmin, x, axis, keepdims, out)
