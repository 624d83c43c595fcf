"""What the neural-network ops share: argument checks, the cost of
flops and elements, and the types of their rules."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..._core import ArgumentError, config

Shape = tuple[int, ...]
RuleOut = tuple[Shape, np.dtype[Any]]
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
INT64 = np.dtype(np.int64)


def float_dtype(what: str, first: Any, *others: Any) -> np.dtype[Any]:
    """The common float32/float64 dtype of these tensors (None entries skipped)."""
    dtype = getattr(first, "dtype", None)  # a Tensor in rules, an array in kernels
    if dtype is None:
        raise TypeError(f"{what} needs a tensor, not {type(first).__name__}")
    if dtype not in FLOATS:
        raise TypeError(f"{what} needs float32 or float64 tensors, got {dtype}")
    for other in others:
        if other is not None and other.dtype != dtype:
            raise TypeError(
                f"{what} needs operands of one dtype, got {dtype} and {other.dtype} "
                "(cast one with .astype)"
            )
    return dtype


def ints(value: Any, n: int, name: str, minimum: int) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints (PyTorch's ``_pair``; no bool), each >= minimum."""
    try:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            out = (int(value),) * n
        else:
            out = tuple(operator.index(v) for v in value)
            if len(out) == 1:
                out *= n
    except TypeError:
        raise TypeError(f"{name} must be an int or a sequence of {n} ints, got {value!r}") from None
    if len(out) != n:
        raise ArgumentError(f"{name} must have {n} values, got {value!r}")
    if any(v < minimum for v in out):
        raise ArgumentError(f"{name} must be >= {minimum}, got {value!r}")
    return out


def check_shape(what: str, tensor: Any, shape: Shape) -> None:
    if tensor is not None and tensor.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, got {tensor.shape}")


def spatial_input(what: str, x: Any) -> None:
    if x.ndim not in (3, 4):
        raise ValueError(f"{what} needs a 4-d (N, C, H, W) or 3-d (C, H, W) input, got {x.shape}")


def batched(x: np.ndarray) -> np.ndarray:
    """A (C, H, W) image as a batch of one (kernels work on 4-d arrays)."""
    return x[None] if x.ndim == 3 else x


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ArgumentError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def flop_cost(flops: float, elements: float) -> float:
    return config.op_overhead_ns + flops * config.ns_per_flop + elements * config.ns_per_element


def present(*tensors: Any) -> tuple[Any, ...]:
    """The optional operands that were given (None ones dropped)."""
    return tuple(t for t in tensors if t is not None)


def padded_for_windows(x: Any, g: Any, rows: int, cols: int, fill: float = 0.0) -> Any:
    """``x`` (..., H, W) padded with ``fill`` by ``g``'s padding (a convolution's or
    a pooling's geometry) at the top and left, and at the bottom and right as far
    as ``rows`` x ``cols`` windows reach (ceil_mode's last ones may pass the padding)."""
    h, w = x.shape[-2:]
    bottom = max(0, (rows - 1) * g.sh + g.dh * (g.kh - 1) + 1 - h - g.ph)
    right = max(0, (cols - 1) * g.sw + g.dw * (g.kw - 1) + 1 - w - g.pw)
    widths = [(0, 0)] * (x.ndim - 2) + [(g.ph, bottom), (g.pw, right)]
    return np.pad(x, widths, constant_values=fill)


def window_taps(padded: Any, g: Any, rows: int, cols: int) -> list[Any]:
    """Each tap (i, j) of ``g``'s window, in row-major order, as a strided view
    of ``padded`` (..., H, W): ``rows`` x ``cols`` positions, every stride-th
    from the dilated tap's offset."""
    height, width = (rows - 1) * g.sh + 1, (cols - 1) * g.sw + 1
    return [
        padded[..., i * g.dh : i * g.dh + height : g.sh, j * g.dw : j * g.dw + width : g.sw]
        for i in range(g.kh)
        for j in range(g.kw)
    ]
