"""Pooling: ``max_pool2d``, ``avg_pool2d``, ``adaptive_avg_pool2d``."""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numpy as np

from ..._core import ArgumentError
from ...tensor import Tensor
from ..registry import GENERIC, define_op
from .common import (
    RuleOut,
    Shape,
    float_dtype,
    flop_cost,
    ints,
    padded_for_windows,
    positive_int,
    spatial_input,
    window_taps,
)


def _pool_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size (a window may not start in the right padding)."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


class PoolGeometry(NamedTuple):
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    out_shape: Shape
    count_include_pad: bool = True  # avg_pool2d's divisors
    divisor_override: int | None = None


def pool_geometry(
    what: str,
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> PoolGeometry:
    """A pooling's checks and geometry. The pooling ops' kernels pass their
    static arguments on here (``**options``), so their defaults live here and
    in the rules (the ops' signatures)."""
    if divisor_override is not None:
        divisor_override = positive_int("divisor_override", divisor_override)
    spatial_input(what, x)
    float_dtype(what, x)
    kh, kw = ints(kernel_size, 2, "kernel_size", 1)
    sh, sw = (kh, kw) if stride is None or stride == () else ints(stride, 2, "stride", 1)
    ph, pw = ints(padding, 2, "padding", 0)
    dh, dw = ints(dilation, 2, "dilation", 1)
    if 2 * ph > kh or 2 * pw > kw:
        raise ArgumentError(f"padding {(ph, pw)} must be at most half the kernel size {(kh, kw)}")
    h, w = x.shape[-2:]
    ho = _pool_size(h, kh, sh, ph, dh, ceil_mode)
    wo = _pool_size(w, kw, sw, pw, dw, ceil_mode)
    if ho < 1 or wo < 1:
        raise ValueError(f"{what}: input {h}x{w} is too small for the window (output {ho}x{wo})")
    out_shape = (*x.shape[:-2], ho, wo)
    include = bool(count_include_pad)
    return PoolGeometry(kh, kw, sh, sw, ph, pw, dh, dw, out_shape, include, divisor_override)


def _pool_cost(shape: Shape, dtype: np.dtype[Any], /, x: Tensor, **static: Any) -> float:
    kh, kw = ints(static.get("kernel_size", 1), 2, "kernel_size", 1)
    return flop_cost(0.0, math.prod(shape) * kh * kw * 2)


def _max_pool2d_rule(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> RuleOut:
    geo = pool_geometry("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode)
    return geo.out_shape, input.dtype


def _planes(x: Any, g: PoolGeometry, fill: float) -> Any:
    """``x`` as (N*C, H, W) planes, padded with ``fill`` for the windows."""
    rows, cols = g.out_shape[-2:]
    return padded_for_windows(x.reshape(-1, *x.shape[-2:]), g, rows, cols, fill)


def _max_pool2d_generic(x: Any, **options: Any) -> Any:
    """The largest of each window, over strided views of the input padded with -inf."""
    g = pool_geometry("max_pool2d", x, **options)
    taps = window_taps(_planes(x, g, -np.inf), g, *g.out_shape[-2:])
    return functools.reduce(np.maximum, taps).reshape(g.out_shape)


max_pool2d = define_op(
    "max_pool2d",
    _max_pool2d_rule,
    cost=_pool_cost,
    operands=1,
    doc="""2-d max pooling, as ``torch.nn.functional.max_pool2d`` (no ``return_indices``).

    >>> import eagerrt as ert
    >>> x = ert.arange(16.0).reshape(1, 1, 4, 4)
    >>> ert.max_pool2d(x, 2).numpy()
    array([[[[ 5.,  7.],
             [13., 15.]]]])
    """,
)
max_pool2d.register_kernel(GENERIC, _max_pool2d_generic)


def _avg_pool2d_rule(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> RuleOut:
    geo = pool_geometry(
        "avg_pool2d", input, kernel_size, stride, padding, 1, ceil_mode,
        count_include_pad, divisor_override,
    )  # fmt: skip
    return geo.out_shape, input.dtype


def _avg_pool2d_generic(x: Any, **options: Any) -> Any:
    """Window sums over strided views of the zero-padded input, each divided by
    its window's count: positions inside the input, and inside the padding with
    ``count_include_pad`` (never those past it that ceil_mode adds), as PyTorch."""
    g = pool_geometry("avg_pool2d", x, **options)
    padded = _planes(x, g, 0.0)
    h, w = x.shape[-2:]
    counted = np.zeros(padded.shape[-2:], x.dtype)
    if g.count_include_pad:
        counted[: h + 2 * g.ph, : w + 2 * g.pw] = 1
    else:
        counted[g.ph : g.ph + h, g.pw : g.pw + w] = 1
    total = functools.reduce(np.add, window_taps(padded, g, *g.out_shape[-2:]))
    count = functools.reduce(np.add, window_taps(counted, g, *g.out_shape[-2:]))
    divisor = count if g.divisor_override is None else x.dtype.type(g.divisor_override)
    return (total / divisor).astype(x.dtype, copy=False).reshape(g.out_shape)


avg_pool2d = define_op(
    "avg_pool2d",
    _avg_pool2d_rule,
    cost=_pool_cost,
    operands=1,
    doc="""2-d average pooling, as ``torch.nn.functional.avg_pool2d``
    (``count_include_pad=True`` by default, as there).

    >>> import eagerrt as ert
    >>> x = ert.ones((1, 1, 3, 3))
    >>> ert.avg_pool2d(x, 2, padding=1).numpy()[0, 0]
    array([[0.25, 0.5 ],
           [0.5 , 1.  ]])
    """,
)
avg_pool2d.register_kernel(GENERIC, _avg_pool2d_generic)


def adaptive_size(x: Any, output_size: Any) -> tuple[int, ...]:
    if output_size is None or isinstance(output_size, (int, np.integer)):
        pair: Any = (output_size, output_size)
    else:
        pair = tuple(output_size)
    if len(pair) != 2:
        raise ArgumentError(f"output_size must be an int or a pair, got {output_size!r}")
    # None keeps that dimension's input size, as in PyTorch.
    out = tuple(d if p is None else p for p, d in zip(pair, x.shape[-2:], strict=True))
    return ints(out, 2, "output_size", 1)


def _adaptive_avg_pool2d_rule(input: Any, output_size: Any) -> RuleOut:
    spatial_input("adaptive_avg_pool2d", input)
    float_dtype("adaptive_avg_pool2d", input)
    return (*input.shape[:-2], *adaptive_size(input, output_size)), input.dtype


def _adaptive_avg_pool2d_generic(x: Any, output_size: Any) -> Any:
    """The mean of each output cell's input region (rows floor(i*H/oh) up to
    ceil((i+1)*H/oh), as PyTorch's), one slice each."""
    oh, ow = adaptive_size(x, output_size)
    h, w = x.shape[-2:]
    rows = [(i * h // oh, -(-(i + 1) * h // oh)) for i in range(oh)]
    cols = [(j * w // ow, -(-(j + 1) * w // ow)) for j in range(ow)]
    cells = [
        np.stack([x[..., r0:r1, c0:c1].mean(axis=(-2, -1)) for c0, c1 in cols], axis=-1)
        for r0, r1 in rows
    ]
    return np.stack(cells, axis=-2).astype(x.dtype, copy=False)


adaptive_avg_pool2d = define_op(
    "adaptive_avg_pool2d",
    _adaptive_avg_pool2d_rule,
    cost=lambda shape, dtype, x, **_: flop_cost(0.0, 2.0 * x.size + math.prod(shape)),
    operands=1,
    doc="""Average pooling to a given output size, as
    ``torch.nn.functional.adaptive_avg_pool2d`` (a None size keeps the input's).

    >>> import eagerrt as ert
    >>> ert.adaptive_avg_pool2d(ert.arange(16.0).reshape(1, 1, 4, 4), 1).numpy()
    array([[[[7.5]]]])
    """,
)
adaptive_avg_pool2d.register_kernel(GENERIC, _adaptive_avg_pool2d_generic)
