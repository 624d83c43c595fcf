"""Neural-network ops: softmax and log-softmax (more arrive with the NN op set).

On the CPU, floats over the last axis use one fused numba pass per row; other
axes and dtypes use numpy.

>>> import eagerrt as ert
>>> ert.softmax(ert.asarray([[0.0, 0.0]]), axis=-1).numpy()
array([[0.5, 0.5]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor
from ._rules import as_float, normalize_axis, ufunc_dtype
from .elementwise import scaled_cost
from .registry import GENERIC, define_op

__all__ = ["log_softmax", "softmax"]


def _softmax_rule(x: Any, axis: int = -1) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if type(x) is not Tensor:
        raise TypeError("softmax needs a tensor")
    normalize_axis(axis, x.ndim)
    return x.shape, ufunc_dtype(np.exp, x)


def _softmax_numpy(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    if log:
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    e = np.exp(shifted)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


def _softmax_kernels(log: bool) -> tuple[Any, Any]:
    def generic(x: Any, axis: int = -1) -> np.ndarray:
        return _softmax_numpy(as_float(x), axis, log)

    def cpu(x: Any, axis: int = -1) -> np.ndarray:
        x = as_float(x)
        last = x.ndim >= 1 and normalize_axis(axis, x.ndim) == x.ndim - 1
        if last and x.dtype in (np.float32, np.float64) and x.shape[-1] >= 16 and x.size:
            from ._numba_kernels import softmax_last_axis

            return softmax_last_axis(x, log)
        return _softmax_numpy(x, axis, log)

    return generic, cpu


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
for _op, _log in ((softmax, False), (log_softmax, True)):
    _generic, _cpu = _softmax_kernels(_log)
    _op.register_kernel(GENERIC, _generic)
    _op.register_kernel("cpu", _cpu)  # the fused numba pass overrides the generic kernel
