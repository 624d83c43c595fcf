"""Matrix products for the cuda device's kernels: strided-batched cuBLAS calls made
directly, so that compiled plans can capture them into CUDA graphs.

CuPy refuses every cuBLAS call while a stream is being captured ("calling cuBLAS
API during stream capture is currently unsupported"), though cuBLAS itself
supports capture; and CuPy's batched ``matmul`` neither shares an operand across
the batch without copying it nor takes TF32. So the kernels describe each product
as one row-major, strided-batched call (:func:`matmul_into`) and this module
makes it: on CuPy arrays through ``cublasGemmStridedBatchedEx`` from the cuBLAS
library CuPy loaded (by ctypes, on the current stream), falling back to CuPy's
own binding where that library can't be found; on numpy arrays by emulating the
same column-major call, which is how CI checks every call's arguments.

>>> import numpy as np
>>> a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
>>> out = np.empty((1, 2, 4))
>>> matmul_into(out, a[None], b[None], m=2, n=4, k=3)
>>> bool(np.allclose(out[0], a @ b))
True
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
from typing import Any, NamedTuple

import numpy as np

from ..._core import config

__all__ = ["Operand", "matmul_into", "supported"]

#: cudaDataType and the float type of alpha and beta, by dtype; the compute type
#: by name (cublasComputeType_t), its value from CuPy's binding where it has it.
_TYPES: dict[Any, tuple[int, str, Any]] = {
    np.dtype(np.float16): (2, "CUBLAS_COMPUTE_32F", np.float32),
    np.dtype(np.float32): (0, "CUBLAS_COMPUTE_32F", np.float32),
    np.dtype(np.float64): (1, "CUBLAS_COMPUTE_64F", np.float64),
}
_COMPUTE = {"CUBLAS_COMPUTE_32F": 68, "CUBLAS_COMPUTE_32F_FAST_TF32": 77, "CUBLAS_COMPUTE_64F": 70}
_GEMM_DEFAULT = -1
_N, _T = 0, 1


class Operand(NamedTuple):
    """One operand of a batched product: matrix ``i`` starts ``offset + i *
    stride`` elements into ``array`` (C-contiguous), its rows ``ld`` apart."""

    array: Any
    offset: int
    ld: int
    stride: int


def supported(*arrays: Any) -> bool:
    """Whether these arrays' dtype (one for all) is one the products take."""
    dtype = arrays[0].dtype
    return dtype in _TYPES and all(a.dtype == dtype for a in arrays)


def matmul_into(
    out: Any,
    a: Any,
    b: Any,
    *,
    m: int,
    n: int,
    k: int,
    b_transposed: bool = False,
    accumulate: bool = False,
    out_ld: int | None = None,
    tf32: bool = False,
    alpha: float = 1.0,
) -> None:
    """``out[i] (+)= A_i @ B_i`` for each i of ``out``'s first axis, row-major:
    A_i (m x k), B_i (k x n), or (n x k) read transposed with ``b_transposed``.

    ``a`` and ``b`` are C-contiguous (batch, rows, cols) arrays, a batch of 1
    shared by every product, or :class:`Operand` windows of any array; ``out``
    is C-contiguous (batch, m, out_ld) with ``out_ld >= n`` (default n).
    ``tf32`` lets float32 products round their inputs to TensorFloat-32;
    ``alpha`` scales each product (cuBLAS's alpha: no pass of its own).
    """
    batch = out.shape[0]
    out_ld = n if out_ld is None else out_ld
    if not (batch and m and n and k):  # nothing to multiply (cuBLAS refuses a zero lda)
        if k == 0 and not accumulate and out.size:
            out[...] = 0
        return
    a, b = _operand(a, batch), _operand(b, batch)
    # cuBLAS is column-major: the row-major out^T = B^T A^T is the same memory
    # read column-major, B first. A row-major matrix read column-major is its
    # transpose, so B's operand is transposed only where B is given as (n, k).
    call = _Call(_T if b_transposed else _N, _N, n, m, k, b, a, out_ld, m * out_ld, batch, alpha)
    if type(out) is np.ndarray:
        _emulate(out, call, accumulate)
    else:
        _call_cublas(out, call, accumulate, tf32)


class _Call(NamedTuple):
    """One column-major ``cublasGemmStridedBatchedEx``: C_i (m x n) = op(first_i)
    op(second_i), C_i ``stride_c`` elements apart, its columns ``ldc`` apart."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    first: Operand
    second: Operand
    ldc: int
    stride_c: int
    batch: int
    alpha: float = 1.0


def _operand(x: Any, batch: int) -> Operand:
    if isinstance(x, Operand):
        return x
    stride = 0 if x.shape[0] == 1 and batch > 1 else x.shape[1] * x.shape[2]
    return Operand(x, 0, x.shape[2], stride)


def _emulate(out: np.ndarray, call: _Call, accumulate: bool) -> None:
    """The column-major call cuBLAS would make, on numpy arrays."""

    def matrix(x: Operand, i: int, rows: int, cols: int) -> np.ndarray:
        flat = x.array.reshape(-1)
        start = x.offset + i * x.stride
        size = flat.itemsize
        return np.lib.stride_tricks.as_strided(
            flat[start:], shape=(rows, cols), strides=(size, x.ld * size)
        )

    m, n, k = call.m, call.n, call.k
    result = Operand(out, 0, call.ldc, call.stride_c)
    for i in range(call.batch):
        first = matrix(call.first, i, k, m).T if call.transa == _T else matrix(call.first, i, m, k)
        second = (
            matrix(call.second, i, n, k).T if call.transb == _T else matrix(call.second, i, k, n)
        )
        c = matrix(result, i, m, n)
        product = first @ second
        if call.alpha != 1.0:
            product *= call.alpha
        if accumulate:
            c += product
        else:
            c[...] = product


def _call_cublas(out: Any, call: _Call, accumulate: bool, tf32: bool) -> None:
    data, compute_name, scalar = _TYPES[out.dtype]
    if tf32 and out.dtype == np.float32:
        compute_name = "CUBLAS_COMPUTE_32F_FAST_TF32"
    alpha, beta = np.asarray(call.alpha, scalar), np.asarray(1 if accumulate else 0, scalar)
    itemsize = out.itemsize
    first, second = call.first, call.second
    args: tuple[Any, ...] = (call.transa, call.transb, call.m, call.n, call.k, alpha.ctypes.data)
    args += (first.array.data.ptr + first.offset * itemsize, data, first.ld, first.stride)
    args += (second.array.data.ptr + second.offset * itemsize, data, second.ld, second.stride)
    args += (beta.ctypes.data, out.data.ptr, data, call.ldc, call.stride_c, call.batch)
    library = _cublas()
    if library is None:  # CuPy's binding: the same call, refused while capturing
        from cupy.cuda import device
        from cupy_backends.cuda.libs import cublas

        compute = getattr(cublas, compute_name)
        cublas.gemmStridedBatchedEx(device.get_cublas_handle(), *args, compute, _GEMM_DEFAULT)
        return
    gemm, set_stream, handle, current_stream = library
    set_stream(handle(), current_stream())
    status = gemm(handle(), *args, _COMPUTE[compute_name], _GEMM_DEFAULT)
    if status != 0:
        raise RuntimeError(f"cublasGemmStridedBatchedEx failed with status {status}")


@functools.cache
def _cublas() -> tuple[Any, Any, Any, Any] | None:
    """(gemm, set_stream, handle(), current stream()) from the cuBLAS library
    CuPy loaded, or None where it can't be found."""
    import cupy
    from cupy.cuda import device

    device.get_cublas_handle()  # CuPy loads cuBLAS with its first handle
    path = loaded_library("libcublas.so")
    try:
        library = ctypes.CDLL(path or ctypes.util.find_library("cublas") or "libcublas.so")
        gemm = library.cublasGemmStridedBatchedEx
        set_stream = library.cublasSetStream_v2
    except (OSError, AttributeError):
        return None
    p, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    gemm.restype = i
    gemm.argtypes = [p, i, i, i, i, i, p, p, i, i, i64, p, i, i, i64, p, p, i, i, i64, i, i, i]
    set_stream.restype = i
    set_stream.argtypes = [p, p]

    def current_stream() -> int:
        return int(cupy.cuda.get_current_stream().ptr)

    return gemm, set_stream, device.get_cublas_handle, current_stream


def loaded_library(fragment: str) -> str | None:
    """The path of a library this process has loaded whose path holds ``fragment``."""
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            if fragment in line:
                return line.split()[-1]
    return None


def tf32_for(dtype: Any) -> bool:
    """Whether float32 convolution products may use TF32 (``config.cuda_tf32``)."""
    return bool(config.cuda_tf32) and dtype == np.float32
