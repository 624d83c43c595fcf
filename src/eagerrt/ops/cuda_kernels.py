"""Kernels for the cuda device where an op's generic (numpy-API) kernel can't
run on cupy arrays, or a cupy call is the better one.

Imported by the op registry the first time a cuda device looks up a kernel
(``CudaDevice.kernel_module``), so CuPy is only imported where it is used.
Every other op runs its generic kernel on cupy arrays through numpy's dispatch
protocols; one that can't falls back to the host (``dev.host_fallbacks``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .nn import _conv_geometry
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


def _conv2d(
    x: Any,
    weight: Any,
    bias: Any = None,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Any:
    """conv2d as im2col (a strided view of the padded input, copied once) and a
    batched matmul per group (cuBLAS)."""
    g = _conv_geometry(x, weight, bias, stride, padding, dilation, groups)
    x4 = x if x.ndim == 4 else x[None]
    need_h = (g.ho - 1) * g.sh + g.dh * (g.kh - 1) + 1
    need_w = (g.wo - 1) * g.sw + g.dw * (g.kw - 1) + 1
    pads = (
        (0, 0),
        (0, 0),
        (g.ph, max(0, need_h - g.h - g.ph)),
        (g.pw, max(0, need_w - g.w - g.pw)),
    )
    padded = cp.ascontiguousarray(cp.pad(x4, pads)[:, :, :need_h, :need_w])
    s0, s1, s2, s3 = padded.strides
    cols = cp.lib.stride_tricks.as_strided(
        padded,
        shape=(g.n, g.c, g.kh, g.kw, g.ho, g.wo),
        strides=(s0, s1, s2 * g.dh, s3 * g.dw, s2 * g.sh, s3 * g.sw),
    )
    cg, og = g.c // g.groups, g.o // g.groups
    cols = cols.reshape(g.n, g.groups, cg * g.kh * g.kw, g.ho * g.wo)
    wmat = weight.reshape(g.groups, og, cg * g.kh * g.kw)
    out = cp.matmul(wmat[None], cols).reshape(g.n, g.o, g.ho, g.wo)
    if bias is not None:
        out += bias.reshape(-1, 1, 1)
    return out if x.ndim == 4 else out[0]


def _kernels() -> dict[str, Callable[..., Any]]:
    return {
        "matmul": cp.matmul,  # cuBLAS
        "conv2d": _conv2d,
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
