"""numba kernels for the CPU, compiled on first use (``nogil`` so workers overlap).

Imported lazily by the ops that use them, so ``import eagerrt`` never waits for
numba. ``cache=True`` keeps the machine code across processes.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

from ...ops.erf_rational import ERF_CLAMP, ERF_P, ERF_Q, INV_SQRT2

__all__ = ["gelu_erf", "softmax_last_axis", "softmax_rows_into"]


@numba.njit(nogil=True, cache=True)
def _gelu_erf_flat(x: Any, out: Any) -> None:  # pragma: no cover - compiled
    for i in range(x.size):
        v = x[i]
        out[i] = 0.5 * v * (1.0 + math.erf(v * INV_SQRT2))


_F = np.float32
_P0, _P1, _P2, _P3, _P4, _P5 = (_F(c) for c in ERF_P)
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5 = (_F(c) for c in ERF_Q)
_CLAMP, _SCALE, _HALF, _ONE = _F(ERF_CLAMP), _F(INV_SQRT2), _F(0.5), _F(1.0)


# The same statements as graph fusion's float32 gelu (codegen.py), so eager and
# compiled results are equal; all in float32, constants included. error_model="numpy":
# Python's would test the divisor for zero, a branch that keeps the loop from
# vectorizing (5 vs 1 ns per element).
@numba.njit(nogil=True, cache=True, error_model="numpy")
def _gelu_erf_rational_flat(x: Any, out: Any) -> None:  # pragma: no cover - compiled
    for i in range(x.size):
        v = x[i]
        a = v * _SCALE
        z = min(max(a, -_CLAMP), _CLAMP)
        t = z * z
        p = ((((_P5 * t + _P4) * t + _P3) * t + _P2) * t + _P1) * t + _P0
        q = ((((_Q5 * t + _Q4) * t + _Q3) * t + _Q2) * t + _Q1) * t + _Q0
        r = z * p / q if abs(a) < _CLAMP else (_ONE if a > 0 else -_ONE)
        out[i] = _HALF * v * (_ONE + r)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """``x * Phi(x)`` with the erf normal CDF, in ``x``'s float dtype: float32 through
    a vectorizable rational erf (see :mod:`eagerrt.ops.erf_rational`), float64 through ``math.erf``."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty_like(flat)
    if flat.dtype == np.float32:
        _gelu_erf_rational_flat(flat, out)
    else:
        _gelu_erf_flat(flat, out)
    return out.reshape(x.shape)


# error_model="numpy": a fully masked (all -inf) row divides by zero and must give
# nan, as numpy does, not raise.
@numba.njit(nogil=True, cache=True, error_model="numpy")
def _softmax_rows(x: Any, out: Any, log: bool) -> None:  # pragma: no cover - compiled
    rows, cols = x.shape
    for r in range(rows):
        peak = -np.inf
        for c in range(cols):
            if x[r, c] > peak:
                peak = x[r, c]
        if peak == -np.inf:  # an all -inf row: every exp is 0, and 0/0 gives nan below
            peak = 0.0
        total = 0.0
        for c in range(cols):
            e = math.exp(x[r, c] - peak)
            out[r, c] = e
            total += e
        if log:
            shift = peak + math.log(total)
            for c in range(cols):
                out[r, c] = x[r, c] - shift
        else:
            inv = 1.0 / total
            for c in range(cols):
                out[r, c] *= inv


def softmax_last_axis(x: np.ndarray, log: bool) -> np.ndarray:
    """Softmax (or log-softmax) over the last axis in one fused pass per row."""
    out = np.empty(x.shape, x.dtype)
    softmax_rows_into(x, out, log)
    return out


def softmax_rows_into(x: np.ndarray, out: np.ndarray, log: bool) -> None:
    """Softmax (or log-softmax) over the last axis written into ``out`` (a
    C-contiguous array of ``x``'s shape): compiled graphs' allocation-free form."""
    cols = x.shape[-1]
    _softmax_rows(np.ascontiguousarray(x).reshape(-1, cols), out.reshape(-1, cols), log)
