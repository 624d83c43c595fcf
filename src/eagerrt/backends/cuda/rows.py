"""Row-wise CUDA kernels for the cuda device: softmax and normalization in one pass.

Written as array expressions, a softmax over attention scores is six kernels
(max, subtract, exp, sum, guard, divide), each reading and writing the whole
(batch, heads, queries, keys) array; a layer norm is five. These kernels do
each in one launch: one thread block per row, the row read from memory once
and reused from cache, block-wide reductions through warp shuffles. They keep
the expressions' rules (a row whose keys are all masked gives zeros; the
biased variance; ``1 / sqrt(var + eps)``), and take float32 and float64.

Compiled by CuPy (NVRTC) on first use and cached on disk; CuPy launches them
on the current stream, so compiled plans capture them into CUDA graphs.
The callers (``backends/cuda/nn.py``) keep the expressions for numpy arrays, rows
too long for one block to be worth it, and any other dtype.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["layer_norm_rows", "softmax_rows", "takes"]

#: Longest row one thread block handles (beyond it, the expressions' kernels
#: spread a row over the GPU better).
MAX_COLUMNS = 16384

_SOURCE = r"""
__device__ __forceinline__ float ex(float v) { return expf(v); }
__device__ __forceinline__ double ex(double v) { return exp(v); }
// -inf by its bits (NVRTC has no math.h for INFINITY).
template <typename T> __device__ T neg_inf();
template <> __device__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <> __device__ double neg_inf<double>() {
    return __longlong_as_double(0xfff0000000000000ULL);
}

// The block's max (IS_MAX) or sum of v, given to every thread.
template <typename T, bool IS_MAX>
__device__ T block_reduce(T v, T* shared) {
    for (int o = 16; o > 0; o >>= 1) {
        T other = __shfl_xor_sync(0xffffffff, v, o);
        v = IS_MAX ? max(v, other) : v + other;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    int warps = (blockDim.x + 31) >> 5;
    if (warp == 0) {
        v = lane < warps ? shared[lane] : (IS_MAX ? neg_inf<T>() : (T)0);
        for (int o = 16; o > 0; o >>= 1) {
            T other = __shfl_xor_sync(0xffffffff, v, o);
            v = IS_MAX ? max(v, other) : v + other;
        }
        if (lane == 0) shared[0] = v;
    }
    __syncthreads();
    T result = shared[0];
    __syncthreads();  // shared is reused by the next reduction
    return result;
}

// y[row] = softmax(x[row]); a row with no finite maximum is shifted by 0 and a
// row whose exponentials sum to 0 divided by 1 (it gives zeros). y may be x.
template <typename T>
__global__ void softmax_rows(const T* x, T* y, long long n) {
    __shared__ T shared[32];
    const T* xr = x + (long long)blockIdx.x * n;
    T* yr = y + (long long)blockIdx.x * n;
    T top = neg_inf<T>();
    for (long long j = threadIdx.x; j < n; j += blockDim.x) top = max(top, xr[j]);
    top = block_reduce<T, true>(top, shared);
    if (!isfinite(top)) top = 0;
    T total = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) total += ex(xr[j] - top);
    total = block_reduce<T, false>(total, shared);
    if (!(total > 0)) total = 1;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) yr[j] = ex(xr[j] - top) / total;
}

// y[row] = (x[row] - mean) / sqrt(var + eps) [* w] [+ b], the biased variance
// of the centered row; with has_r, x[row] + r[row] is the row normalized.
template <typename T>
__global__ void layer_norm_rows(const T* x, const T* r, T* y, const T* w, const T* b,
                                long long n, T eps, int has_r, int has_w, int has_b) {
    __shared__ T shared[32];
    const T* xr = x + (long long)blockIdx.x * n;
    const T* rr = r + (long long)blockIdx.x * n;
    T* yr = y + (long long)blockIdx.x * n;
    T sum = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) sum += has_r ? xr[j] + rr[j] : xr[j];
    T mean = block_reduce<T, false>(sum, shared) / (T)n;
    T squares = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        T c = (has_r ? xr[j] + rr[j] : xr[j]) - mean;
        squares += c * c;
    }
    T scale = (T)1 / sqrt(block_reduce<T, false>(squares, shared) / (T)n + eps);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        T v = ((has_r ? xr[j] + rr[j] : xr[j]) - mean) * scale;
        if (has_w) v *= w[j];
        if (has_b) v += b[j];
        yr[j] = v;
    }
}
"""

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def takes(rows: Any) -> bool:
    """Whether these kernels take ``rows`` (a 2-d C-contiguous CuPy array)."""
    return (
        type(rows) is not np.ndarray
        and rows.dtype in _TYPES
        and rows.ndim == 2
        and 0 < rows.shape[1] <= MAX_COLUMNS
        and rows.shape[0] > 0
        and rows.flags.c_contiguous
    )


#: Kernels that failed to compile, with why (their callers use the expressions).
failures: dict[str, str] = {}


@functools.cache
def _kernel(name: str, dtype: np.dtype[Any]) -> Any:
    """The compiled kernel, or None if it won't compile here (noted in ``failures``)."""
    import cupy

    expression = f"{name}<{_TYPES[dtype]}>"
    try:
        module = cupy.RawModule(
            code=_SOURCE, options=("-std=c++14",), name_expressions=[expression]
        )
        return module.get_function(expression)
    except Exception as exc:  # NVRTC missing or refusing: the expressions still work
        failures[expression] = f"{type(exc).__name__}: {exc}"
        return None


def _threads(columns: int) -> int:
    return 128 if columns <= 2048 else 512


def softmax_rows(rows: Any, out: Any) -> Any:
    """Softmax of each row of ``rows`` into ``out`` (may be ``rows``), or None
    where the kernel is unavailable; see :func:`takes`."""
    kernel = _kernel("softmax_rows", rows.dtype)
    if kernel is None:
        return None
    m, n = rows.shape
    kernel((m,), (_threads(n),), (rows, out, np.int64(n)))
    return out


def layer_norm_rows(rows: Any, weight: Any, bias: Any, eps: float, residual: Any = None) -> Any:
    """Each row of ``rows`` (plus ``residual``'s, if given: rows of the same
    shape) normalized, then ``* weight + bias`` (each if given, of the row's
    length and dtype): a new array, or None where the kernel is unavailable;
    see :func:`takes`."""
    import cupy

    kernel = _kernel("layer_norm_rows", rows.dtype)
    if kernel is None:
        return None
    m, n = rows.shape
    out = cupy.empty_like(rows)
    # An absent operand is given as ``rows`` (never read: its flag is 0).
    r, w, b = (rows if a is None else a for a in (residual, weight, bias))
    flags = (np.int32(a is not None) for a in (residual, weight, bias))
    args = (rows, r, out, w, b, np.int64(n), rows.dtype.type(eps), *flags)
    kernel((m,), (_threads(n),), args)
    return out
