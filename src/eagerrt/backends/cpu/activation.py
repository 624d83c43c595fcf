"""The CPU's softmax kernels: numba over the last axis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...ops._rules import as_float, normalize_axis
from ...ops.nn.activation import softmax_numpy
from ...ops.nn.common import FLOATS
from ...ops.nn.loss import cross_entropy_kernel
from ...ops.registry import GENERIC, get_op
from .numba_kernels import gelu_erf, softmax_last_axis


def log_softmax_last(x: np.ndarray, log: bool) -> np.ndarray:
    """(Log-)softmax over the last axis: the fused numba pass for floats."""
    if x.dtype in FLOATS and x.shape[-1] >= 16 and x.size:
        return softmax_last_axis(x, log)
    return softmax_numpy(x, -1, log)


def _softmax_on_cpu(log: bool) -> Callable[..., Any]:
    def kernel(x: Any, axis: int = -1) -> np.ndarray:
        x = as_float(x)
        if x.ndim >= 1 and normalize_axis(axis, x.ndim) == x.ndim - 1:
            return log_softmax_last(x, log)
        return softmax_numpy(x, axis, log)

    kernel.__name__ = "log_softmax" if log else "softmax"
    return kernel


# The fused numba pass over the last axis (graph fusion keeps these kernels).
get_op("softmax").register_kernel("cpu", _softmax_on_cpu(False))
get_op("log_softmax").register_kernel("cpu", _softmax_on_cpu(True))


def _gelu_on_cpu(x: Any, approximate: str = "none") -> Any:
    """GELU with numba's erf (a vectorizable rational one for float32)."""
    x = as_float(x)
    if approximate == "tanh":
        return _gelu_generic(x, approximate)
    if x.dtype == np.float16:  # numba has no float16: compute wider, round back
        return gelu_erf(x.astype(np.float32)).astype(np.float16)
    return gelu_erf(x)


_gelu = get_op("gelu")
_gelu_generic = _gelu.kernels[GENERIC]
_gelu.register_kernel("cpu", _gelu_on_cpu)
# cross_entropy's log-softmax over the classes, the same way.
get_op("cross_entropy").register_kernel("cpu", cross_entropy_kernel(log_softmax_last))
