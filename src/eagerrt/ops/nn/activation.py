"""Activations: ``softmax``, ``log_softmax``, ``silu``, ``softplus`` (``gelu`` and
``relu`` are elementwise ops, in :mod:`eagerrt.ops.elementwise`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..._core import ArgumentError
from ...tensor import Tensor
from .._rules import as_float, normalize_axis, ufunc_dtype
from ..elementwise import _sigmoid, scaled_cost
from ..registry import GENERIC, define_op
from .common import RuleOut


def _softmax_rule(x: Any, axis: int = -1) -> RuleOut:
    if type(x) is not Tensor:
        raise TypeError("softmax needs a tensor")
    normalize_axis(axis, x.ndim)
    return x.shape, ufunc_dtype(np.exp, x)


def softmax_numpy(x: Any, axis: int, log: bool) -> Any:
    """(Log-)softmax along ``axis`` in numpy-API calls, shifted by the maximum."""
    shifted = x - np.max(x, axis=axis, keepdims=True)
    if log:
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    e = np.exp(shifted)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


softmax = define_op(
    "softmax",
    _softmax_rule,
    cost=scaled_cost(6),
    operands=1,
    doc="``exp(x) / sum(exp(x))`` along ``axis``.",
)
log_softmax = define_op(
    "log_softmax",
    _softmax_rule,
    cost=scaled_cost(6),
    operands=1,
    doc="``log(softmax(x))``, computed stably.",
)


def _softmax_generic(log: bool) -> Callable[..., Any]:
    def kernel(x: Any, axis: int = -1) -> Any:
        return softmax_numpy(as_float(x), axis, log)

    kernel.__name__ = "log_softmax" if log else "softmax"
    return kernel


softmax.register_kernel(GENERIC, _softmax_generic(False))
log_softmax.register_kernel(GENERIC, _softmax_generic(True))


def _real_float_rule(what: str, x: Any) -> RuleOut:
    """Shape kept; ints become float64 as in numpy's exp; complex refused."""
    if type(x) is not Tensor:
        raise TypeError(f"{what} needs a tensor, not {type(x).__name__}")
    dtype = ufunc_dtype(np.exp, x)
    if dtype.kind != "f":
        raise TypeError(f"{what} is defined for real numbers, not {x.dtype}")
    return x.shape, dtype


silu = define_op(
    "silu",
    lambda x: _real_float_rule("silu", x),
    cost=scaled_cost(10),
    operands=1,
    doc="""SiLU (swish) ``x * sigmoid(x)``, as ``torch.nn.functional.silu``.

    >>> import eagerrt as ert
    >>> ert.silu(ert.asarray([0.0, 1.0])).numpy().round(4)
    array([0.    , 0.7311])
    """,
)


@silu.kernel()
def _silu(x: Any) -> Any:
    out = _sigmoid(x)  # (1 + tanh(x/2)) / 2: no overflow in exp for large |x|
    out *= x
    return out


def _softplus_rule(x: Any, beta: float = 1.0, threshold: float = 20.0) -> RuleOut:
    for name, value in (("beta", beta), ("threshold", threshold)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, got {value!r}")
    if beta == 0:
        raise ArgumentError("beta must be nonzero")
    return _real_float_rule("softplus", x)


softplus = define_op(
    "softplus",
    _softplus_rule,
    cost=scaled_cost(10),
    operands=1,
    doc="""``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``,
    as ``torch.nn.functional.softplus``.

    >>> import eagerrt as ert
    >>> ert.softplus(ert.asarray([0.0, 30.0])).numpy().round(4)
    array([ 0.6931, 30.    ])
    """,
)


@softplus.kernel()
def _softplus(x: Any, beta: float = 1.0, threshold: float = 20.0) -> Any:
    x = as_float(x)
    scaled = x * x.dtype.type(beta)
    # exp of the clipped value: the linear branch is chosen there anyway, and
    # no overflow warning is raised for it.
    soft = np.log1p(np.exp(np.minimum(scaled, threshold)))
    soft /= x.dtype.type(beta)
    return np.where(scaled > threshold, x, soft)
