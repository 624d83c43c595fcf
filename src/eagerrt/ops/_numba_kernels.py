"""numba kernels for the CPU, compiled on first use (``nogil`` so workers overlap).

Imported lazily by the ops that use them, so ``import eagerrt`` never waits for
numba. ``cache=True`` keeps the machine code across processes.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

__all__ = ["gelu_erf", "softmax_last_axis", "softmax_rows_into"]

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


@numba.njit(nogil=True, cache=True)
def _gelu_erf_flat(x: Any, out: Any) -> None:  # pragma: no cover - compiled
    for i in range(x.size):
        v = x[i]
        out[i] = 0.5 * v * (1.0 + math.erf(v * _INV_SQRT2))


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """``x * Phi(x)`` with the exact (erf) normal CDF, in ``x``'s float dtype."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty_like(flat)
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
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    out = np.empty_like(rows)
    _softmax_rows(rows, out, log)
    return out.reshape(x.shape)


def softmax_rows_into(x: np.ndarray, out: np.ndarray, log: bool) -> None:
    """Softmax (or log-softmax) over the last axis written into ``out`` (a
    C-contiguous array of ``x``'s shape): compiled graphs' allocation-free form."""
    cols = x.shape[-1]
    _softmax_rows(np.ascontiguousarray(x).reshape(-1, cols), out.reshape(-1, cols), log)
