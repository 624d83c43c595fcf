"""Convolutions: ``conv2d`` and ``conv_transpose2d`` (rules, costs, generic kernels)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ..._core import ArgumentError
from ...tensor import Tensor
from ..registry import GENERIC, define_op
from .common import (
    RuleOut,
    Shape,
    batched,
    check_shape,
    float_dtype,
    flop_cost,
    ints,
    padded_for_windows,
    positive_int,
    present,
    spatial_input,
    window_taps,
)


class ConvGeometry(NamedTuple):
    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int  # top padding (bottom padding only shows in ho)
    pw: int  # left padding
    dh: int
    dw: int
    groups: int
    ho: int
    wo: int
    out_shape: Shape


def conv_padding(
    padding: Any, kernel: tuple[int, int], dilation: tuple[int, int], stride: tuple[int, int]
) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) for an int, a pair, 'valid' or 'same'."""
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0, 0, 0
        if padding != "same":
            raise ArgumentError(
                f"padding must be an int, a pair, 'valid' or 'same', got {padding!r}"
            )
        if stride != (1, 1):
            raise ArgumentError("padding='same' is not supported for strided convolutions")
        # PyTorch puts the odd pixel of an even total at the bottom / right.
        th, tw = (d * (k - 1) for d, k in zip(dilation, kernel, strict=True))
        return th // 2, th - th // 2, tw // 2, tw - tw // 2
    ph, pw = ints(padding, 2, "padding", 0)
    return ph, ph, pw, pw


def _checked_operands(what: str, layout: str, x: Any, weight: Any, bias: Any, groups: Any) -> int:
    """The checks both convolutions start with; ``groups`` as an int."""
    spatial_input(what, x)
    if weight.ndim != 4:
        raise ValueError(f"{what} needs a 4-d ({layout}, kH, kW) weight, got {weight.shape}")
    float_dtype(what, x, weight, bias)
    return positive_int("groups", groups)


def conv_geometry(
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: Any = 1,
) -> ConvGeometry:
    """conv2d's checks and geometry. Its rule and kernels pass their static
    arguments on here (``**options``), so these are their defaults."""
    groups = _checked_operands("conv2d", "O, C/groups", x, weight, bias, groups)
    *lead, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    if c != cg * groups:
        raise ValueError(
            f"input has {c} channels but weight {weight.shape} with groups={groups} "
            f"expects {cg * groups}"
        )
    if o % groups:
        raise ValueError(f"out channels {o} are not divisible by groups={groups}")
    check_shape("bias", bias, (o,))
    sh, sw = ints(stride, 2, "stride", 1)
    dh, dw = ints(dilation, 2, "dilation", 1)
    top, bottom, left, right = conv_padding(padding, (kh, kw), (dh, dw), (sh, sw))
    ho = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    wo = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    if ho < 1 or wo < 1:
        raise ValueError(
            f"input {h}x{w} (padded {h + top + bottom}x{w + left + right}) is smaller than "
            f"the dilated kernel {dh * (kh - 1) + 1}x{dw * (kw - 1) + 1}"
        )
    n = lead[0] if lead else 1
    out_shape = (*lead, o, ho, wo)
    return ConvGeometry(n, c, h, w, o, kh, kw, sh, sw, top, left, dh, dw, groups, ho, wo, out_shape)


def _conv2d_rule(input: Any, weight: Any, bias: Any = None, **options: Any) -> RuleOut:
    return conv_geometry(input, weight, bias, **options).out_shape, input.dtype


def _conv2d_cost(
    shape: Shape, dtype: np.dtype[Any], /, x: Tensor, w: Tensor, *rest: Any, **_: Any
) -> float:
    # Each output element: a dot product of C/groups * kH * kW; im2col copies as much.
    taps = math.prod(w.shape[1:])
    return flop_cost(2.0 * math.prod(shape) * taps, math.prod(shape) / w.shape[0] * taps)


def _conv2d_generic(x: Any, weight: Any, bias: Any = None, **options: Any) -> Any:
    """conv2d as im2col in numpy-API calls (any array module that takes them):
    each tap's strided view of the padded input, one product per group."""
    g = conv_geometry(x, weight, bias, **options)
    taps = window_taps(padded_for_windows(batched(x), g, g.ho, g.wo), g, g.ho, g.wo)
    cg = g.c // g.groups
    cols = np.stack(taps, axis=2).reshape(g.n, g.groups, cg * g.kh * g.kw, g.ho * g.wo)
    wmat = weight.reshape(g.groups, g.o // g.groups, cg * g.kh * g.kw)
    out = np.matmul(wmat[None], cols).reshape(g.n, g.o, g.ho, g.wo)
    if bias is not None:
        out = out + bias.reshape(-1, 1, 1)
    return out if x.ndim == 4 else out[0]


_conv2d = define_op(
    "conv2d",
    _conv2d_rule,
    cost=_conv2d_cost,
    weak_scalars=False,
    doc="2-d convolution (cross-correlation), as ``torch.nn.functional.conv2d``.",
)
_conv2d.register_kernel(GENERIC, _conv2d_generic)


def conv2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-d convolution of an (N, C, H, W) or (C, H, W) input with an
    (O, C/groups, kH, kW) weight, as ``torch.nn.functional.conv2d``.

    ``padding`` is an int, a pair, ``'valid'`` or ``'same'`` (stride 1 only).

    >>> import eagerrt as ert
    >>> x = ert.ones((2, 4, 8, 8))
    >>> ert.conv2d(x, ert.ones((6, 2, 3, 3)), stride=2, groups=2).shape
    (2, 6, 3, 3)
    >>> ert.conv2d(x, ert.ones((6, 4, 3, 3)), ert.zeros(6), padding="same").shape
    (2, 6, 8, 8)
    """
    return _conv2d(
        input, weight, *present(bias),
        stride=stride, padding=padding, dilation=dilation, groups=groups,
    )  # fmt: skip


def conv_transpose_geometry(
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: Any = 1,
    dilation: Any = 1,
) -> ConvGeometry:
    """conv_transpose2d's checks and geometry; the defaults of its rule's and
    kernels' ``**options``, as :func:`conv_geometry`."""
    groups = _checked_operands("conv_transpose2d", "C_in, C_out/groups", x, weight, bias, groups)
    *lead, c, h, w = x.shape
    cin, og, kh, kw = weight.shape
    if c != cin:
        raise ValueError(f"input has {c} channels but weight {weight.shape} expects {cin}")
    if cin % groups:
        raise ValueError(f"in channels {cin} are not divisible by groups={groups}")
    o = og * groups
    check_shape("bias", bias, (o,))
    sh, sw = ints(stride, 2, "stride", 1)
    dh, dw = ints(dilation, 2, "dilation", 1)
    ph, pw = ints(padding, 2, "padding", 0)
    oph, opw = ints(output_padding, 2, "output_padding", 0)
    if oph >= max(sh, dh) or opw >= max(sw, dw):
        raise ArgumentError(
            f"output_padding {(oph, opw)} must be smaller than stride or dilation "
            f"(stride {(sh, sw)}, dilation {(dh, dw)})"
        )
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    wo = (w - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"padding {(ph, pw)} leaves an empty output ({ho}x{wo})")
    n = lead[0] if lead else 1
    out_shape = (*lead, o, ho, wo)
    return ConvGeometry(n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups, ho, wo, out_shape)


def _conv_transpose2d_rule(input: Any, weight: Any, bias: Any = None, **options: Any) -> RuleOut:
    return conv_transpose_geometry(input, weight, bias, **options).out_shape, input.dtype


def _conv_transpose2d_cost(
    shape: Shape, dtype: np.dtype[Any], /, x: Tensor, w: Tensor, *rest: Any, **_: Any
) -> float:
    taps = math.prod(w.shape[1:])  # per input element: C_out/groups * kH * kW products
    return flop_cost(
        2.0 * x.size * taps, x.size / w.shape[0] * taps * w.shape[0] + math.prod(shape)
    )


def _conv_transpose2d_generic(x: Any, weight: Any, bias: Any = None, **options: Any) -> Any:
    """conv_transpose2d, conv2d's adjoint, in numpy-API calls: per group, every
    tap's contribution (one product) added into a strided view of the full
    output, then the padding cut off."""
    g = conv_transpose_geometry(x, weight, bias, **options)
    cg, og = g.c // g.groups, g.o // g.groups
    wt = np.swapaxes(weight.reshape(g.groups, cg, og * g.kh * g.kw), 1, 2)
    xs = batched(x).reshape(g.n, g.groups, cg, g.h * g.w)
    # Every tap's contribution, (N, O, kH*kW, H, W), taps in window_taps' order.
    cols = np.matmul(wt[None], xs).reshape(g.n, g.o, g.kh * g.kw, g.h, g.w)
    full_h = max((g.h - 1) * g.sh + g.dh * (g.kh - 1) + 1, g.ph + g.ho)
    full_w = max((g.w - 1) * g.sw + g.dw * (g.kw - 1) + 1, g.pw + g.wo)
    full = np.zeros((g.n, g.o, full_h, full_w), x.dtype)
    for k, tap in enumerate(window_taps(full, g, g.h, g.w)):
        tap += cols[:, :, k]
    out = full[:, :, g.ph : g.ph + g.ho, g.pw : g.pw + g.wo]
    if bias is not None:
        out = out + bias.reshape(-1, 1, 1)
    return out if x.ndim == 4 else out[0]


_conv_transpose2d = define_op(
    "conv_transpose2d",
    _conv_transpose2d_rule,
    cost=_conv_transpose2d_cost,
    weak_scalars=False,
    doc="2-d transposed convolution, as ``torch.nn.functional.conv_transpose2d``.",
)
_conv_transpose2d.register_kernel(GENERIC, _conv_transpose2d_generic)


def conv_transpose2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """2-d transposed convolution ("deconvolution") with a (C_in, C_out/groups,
    kH, kW) weight, as ``torch.nn.functional.conv_transpose2d``.

    >>> import eagerrt as ert
    >>> ert.conv_transpose2d(ert.ones((1, 3, 4, 4)), ert.ones((3, 2, 3, 3)), stride=2).shape
    (1, 2, 9, 9)
    >>> ert.conv_transpose2d(ert.ones((1, 1, 1, 1)), ert.ones((1, 1, 2, 2))).numpy()
    array([[[[1., 1.],
             [1., 1.]]]])
    """
    return _conv_transpose2d(
        input, weight, *present(bias),
        stride=stride, padding=padding, output_padding=output_padding,
        groups=groups, dilation=dilation,
    )  # fmt: skip
