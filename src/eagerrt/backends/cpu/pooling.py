"""The CPU's pooling kernels (numba)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ops.nn.pooling import adaptive_size, pool_geometry
from ...ops.registry import get_op
from . import numba_nn


def _planes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1, *x.shape[-2:])


def _max_pool2d_kernel(x: np.ndarray, **options: Any) -> np.ndarray:
    g = pool_geometry("max_pool2d", x, **options)
    out = np.empty(g.out_shape, x.dtype)
    numba_nn.max_pool2d(_planes(x), _planes(out), g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw)
    return out


get_op("max_pool2d").register_kernel("cpu", _max_pool2d_kernel)


def _avg_pool2d_kernel(x: np.ndarray, **options: Any) -> np.ndarray:
    g = pool_geometry("avg_pool2d", x, **options)
    out = np.empty(g.out_shape, x.dtype)
    divisor = int(g.divisor_override or 0)
    numba_nn.avg_pool2d(
        _planes(x), _planes(out), g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.count_include_pad, divisor
    )
    return out


get_op("avg_pool2d").register_kernel("cpu", _avg_pool2d_kernel)


def _adaptive_avg_pool2d_kernel(x: np.ndarray, output_size: Any) -> np.ndarray:
    out = np.empty((*x.shape[:-2], *adaptive_size(x, output_size)), x.dtype)
    numba_nn.adaptive_avg_pool2d(_planes(x), _planes(out))
    return out


get_op("adaptive_avg_pool2d").register_kernel("cpu", _adaptive_avg_pool2d_kernel)
