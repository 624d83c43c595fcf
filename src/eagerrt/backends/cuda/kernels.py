"""Kernels for the cuda device where an op's generic (numpy-API) kernel can't
run on cupy arrays, or a cupy call is the better one (the neural-network ones
live in :mod:`.nn`).

Imported by the op registry the first time a cuda device looks up a kernel
(through its backend, :mod:`eagerrt.backends.cuda`), so CuPy is only imported
where it is used.

The elementwise ops whose generic kernel is a numpy ufunc get CuPy's ufunc of
that name: numpy's dispatch would reach the same one through
``__array_ufunc__``, a few microseconds later, on every launch. Every other op
runs its generic kernel on cupy arrays through numpy's dispatch protocols; one
that can't falls back to the host (``dev.host_fallbacks``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...ops.elementwise import UFUNC_OPS
from ...ops.registry import GENERIC, get_op
from . import nn as cuda_nn

try:
    import cupy as cp
except ImportError:  # imported without CuPy (the doctest collector): nothing to register
    cp = None

__all__: list[str] = []


def _fill(*, shape: tuple[int, ...], dtype: Any, fill: Any = None) -> Any:
    return cp.empty(shape, dtype) if fill is None else cp.full(shape, fill, dtype)


def _kernels() -> dict[str, Callable[..., Any]]:
    return {
        "matmul": cuda_nn.matmul,  # cuBLAS, called so that plans capture it
        "conv2d": cuda_nn.conv2d,
        "linear": cuda_nn.linear,
        "scaled_dot_product_attention": cuda_nn.scaled_dot_product_attention,
        "layer_norm": cuda_nn.layer_norm,
        "group_norm": cuda_nn.group_norm,
        "max_pool2d": cuda_nn.max_pool2d,
        "avg_pool2d": cuda_nn.avg_pool2d,
        "adaptive_avg_pool2d": cuda_nn.adaptive_avg_pool2d,
        "gelu": cuda_nn.gelu,
        "embedding": cuda_nn.embedding,
        "fill": _fill,
        "arange": lambda *, start, stop, step, dtype: cp.arange(start, stop, step, dtype=dtype),
        "linspace": lambda *, start, stop, num, endpoint, dtype: cp.linspace(
            start, stop, num, endpoint=endpoint, dtype=dtype
        ),
        "eye": lambda *, n, m, k, dtype: cp.eye(n, m, k, dtype=dtype),
    }


def _ufuncs() -> dict[str, Callable[..., Any]]:
    """CuPy's ufunc for each elementwise op whose generic kernel is numpy's of that name."""
    found = {}
    for name, op in UFUNC_OPS.items():
        generic = op.kernels.get(GENERIC)
        if isinstance(generic, np.ufunc):
            ufunc = getattr(cp, generic.__name__, None)
            if isinstance(ufunc, type(cp.add)):
                found[name] = ufunc
    return found


if cp is not None:
    for _name, _kernel in {**_ufuncs(), **_kernels()}.items():
        get_op(_name).register_kernel("cuda", _kernel)
