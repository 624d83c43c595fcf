"""Kernels for the cuda device where an op's generic (numpy-API) kernel can't
run on cupy arrays, or a cupy call is the better one (the neural-network ones
live in :mod:`._cuda_nn`).

Imported by the op registry the first time a cuda device looks up a kernel
(``CudaDevice.kernel_module``), so CuPy is only imported where it is used.
Every other op runs its generic kernel on cupy arrays through numpy's dispatch
protocols; one that can't falls back to the host (``dev.host_fallbacks``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _cuda_nn
from .registry import get_op

try:
    import cupy as cp
except ImportError:  # imported without CuPy (the doctest collector): nothing to register
    cp = None

__all__: list[str] = []


def _fill(*, shape: tuple[int, ...], dtype: Any, fill: Any = None) -> Any:
    if fill is None:
        return cp.empty(shape, dtype)
    return cp.full(shape, fill, dtype)


def _kernels() -> dict[str, Callable[..., Any]]:
    return {
        "matmul": cp.matmul,  # cuBLAS
        "conv2d": _cuda_nn.conv2d,
        "linear": _cuda_nn.linear,
        "scaled_dot_product_attention": _cuda_nn.scaled_dot_product_attention,
        "layer_norm": _cuda_nn.layer_norm,
        "group_norm": _cuda_nn.group_norm,
        "max_pool2d": _cuda_nn.max_pool2d,
        "avg_pool2d": _cuda_nn.avg_pool2d,
        "adaptive_avg_pool2d": _cuda_nn.adaptive_avg_pool2d,
        "gelu": _cuda_nn.gelu,
        "embedding": _cuda_nn.embedding,
        "fill": _fill,
        "arange": lambda *, start, stop, step, dtype: cp.arange(start, stop, step, dtype=dtype),
        "linspace": lambda *, start, stop, num, endpoint, dtype: cp.linspace(
            start, stop, num, endpoint=endpoint, dtype=dtype
        ),
        "eye": lambda *, n, m, k, dtype: cp.eye(n, m, k, dtype=dtype),
    }


if cp is not None:
    for _name, _kernel in _kernels().items():
        get_op(_name).register_kernel("cuda", _kernel)
