"""``pad`` and ``interpolate``."""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np

from ..._core import ArgumentError
from ..registry import GENERIC, define_op
from .common import RuleOut, float_dtype, flop_cost, ints

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad_widths(x: Any, pad: Any, mode: str) -> list[tuple[int, int]]:
    """PyTorch's pad tuple (last dimension first) as numpy's per-axis widths."""
    if mode not in _PAD_MODES:
        raise ArgumentError(f"mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
    try:
        flat = [operator.index(p) for p in pad]
    except TypeError:
        raise TypeError(f"pad must be a sequence of ints, got {pad!r}") from None
    if len(flat) % 2 or len(flat) // 2 > x.ndim:
        raise ArgumentError(
            f"pad needs an even number of values, at most 2 per dimension "
            f"({2 * x.ndim} for this {x.ndim}-d input), got {len(flat)}"
        )
    pairs = list(zip(flat[::2], flat[1::2], strict=True))[::-1]  # the last dimension's first
    widths = [(0, 0)] * (x.ndim - len(pairs)) + pairs
    for axis, (before, after) in enumerate(widths):
        size = x.shape[axis]
        if mode == "constant":
            if size + before + after < 0:
                raise ValueError(
                    f"pad {(before, after)} leaves dimension {axis} of size {size} negative"
                )
            continue
        if before < 0 or after < 0:
            raise ArgumentError(f"negative padding is only allowed in constant mode, got {pad!r}")
        if mode == "reflect" and max(before, after) >= size and (before or after):
            raise ValueError(
                f"reflect padding {(before, after)} must be smaller than dimension {axis} ({size})"
            )
        if mode == "circular" and max(before, after) > size:
            raise ValueError(
                f"circular padding {(before, after)} must be at most dimension {axis} ({size})"
            )
        if mode == "replicate" and size == 0 and (before or after):
            raise ValueError(f"can't replicate-pad the empty dimension {axis}")
    return widths


def _pad_rule(input: Any, pad: Any = (), mode: str = "constant", value: Any = None) -> RuleOut:
    if value is not None and mode != "constant":
        raise ArgumentError(f"mode {mode!r} takes no value (only 'constant' does)")
    widths = _pad_widths(input, pad, mode)
    shape = tuple(d + a + b for d, (a, b) in zip(input.shape, widths, strict=True))
    return shape, input.dtype


def _pad_kernel(
    x: np.ndarray, pad: Any = (), mode: str = "constant", value: Any = None
) -> np.ndarray:
    widths = _pad_widths(x, pad, mode)
    if any(a < 0 or b < 0 for a, b in widths):  # negative padding crops first
        x = x[tuple(slice(max(-a, 0), x.shape[i] - max(-b, 0)) for i, (a, b) in enumerate(widths))]
        widths = [(max(a, 0), max(b, 0)) for a, b in widths]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=0 if value is None else value)
    return np.pad(x, widths, mode=_PAD_MODES[mode])  # type: ignore[call-overload]


pad = define_op(
    "pad",
    _pad_rule,
    cost=lambda shape, dtype, *args, **_: flop_cost(0.0, 2.0 * math.prod(shape)),
    operands=1,
    doc="""Pad with PyTorch's convention: ``pad`` lists (before, after) pairs from
    the last dimension backwards; modes 'constant' (``value``, negative pads
    crop), 'reflect', 'replicate' and 'circular', as ``torch.nn.functional.pad``.

    >>> import eagerrt as ert
    >>> ert.pad(ert.asarray([[1, 2, 3]]), (2, 1), mode="reflect").numpy()
    array([[3, 2, 1, 2, 3, 2]])
    >>> ert.pad(ert.ones((1, 2)), (0, 0, 1, 0), value=5.0).numpy()
    array([[5., 5.],
           [1., 1.]])
    """,
)
pad.register_kernel(GENERIC, _pad_kernel)

_INTERP_MODES = ("nearest", "nearest-exact", "bilinear")


class _Resize(NamedTuple):
    size: tuple[int, int]
    scales: tuple[float | None, float | None]  # 1 / scale_factor where it sets the mapping


def _resize_geometry(
    x: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
) -> _Resize:
    """interpolate's checks and geometry; the defaults of its kernel's ``**options``."""
    if mode not in _INTERP_MODES:
        raise ArgumentError(f"mode must be one of {_INTERP_MODES}, got {mode!r}")
    if x.ndim != 4:
        raise ValueError(f"interpolate needs a 4-d (N, C, H, W) input, got {x.shape}")
    float_dtype("interpolate", x)
    if align_corners is not None and mode != "bilinear":
        raise ArgumentError("align_corners can only be set with the interpolating mode 'bilinear'")
    if (size is None) == (scale_factor is None):
        raise ArgumentError("give exactly one of size and scale_factor")
    h, w = x.shape[-2:]
    if size is not None:
        out = ints(size, 2, "size", 1)
        return _Resize((out[0], out[1]), (None, None))
    if isinstance(scale_factor, (int, float, np.integer, np.floating)):
        factors = (float(scale_factor), float(scale_factor))
    else:
        factors = tuple(float(f) for f in scale_factor)  # type: ignore[assignment]
        if len(factors) != 2:
            raise ArgumentError(f"scale_factor must be a number or a pair, got {scale_factor!r}")
    if min(factors) <= 0:
        raise ArgumentError(f"scale_factor must be positive, got {scale_factor!r}")
    oh, ow = math.floor(h * factors[0]), math.floor(w * factors[1])
    if oh < 1 or ow < 1:
        raise ValueError(f"scale_factor {scale_factor!r} leaves an empty output ({oh}x{ow})")
    # PyTorch maps coordinates with the given factor unless asked to recompute it.
    if recompute_scale_factor:
        return _Resize((oh, ow), (None, None))
    return _Resize((oh, ow), (1.0 / factors[0], 1.0 / factors[1]))


def _interpolate_rule(
    input: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
) -> RuleOut:
    geo = _resize_geometry(input, size, scale_factor, mode, align_corners, recompute_scale_factor)
    return (*input.shape[:2], *geo.size), input.dtype


def _nearest_index(n_in: int, n_out: int, scale: float | None, exact: bool) -> np.ndarray:
    # PyTorch computes these in float32: do the same so rounding picks the same pixel.
    s = np.float32(n_in / n_out if scale is None else scale)
    pos = np.arange(n_out, dtype=np.float32)
    if exact:
        pos += np.float32(0.5)
    return np.minimum(np.floor(pos * s).astype(np.intp), n_in - 1)


def _linear_weights(
    n_in: int, n_out: int, scale: float | None, align_corners: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices (i0, i1) and the weight of i1 for each output position."""
    pos = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = pos * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        s = n_in / n_out if scale is None else scale
        src = np.maximum((pos + 0.5) * s - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.intp), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, np.clip(src - i0, 0.0, 1.0)


def _interpolate_kernel(
    x: np.ndarray, mode: str = "nearest", align_corners: bool | None = None, **options: Any
) -> np.ndarray:
    g = _resize_geometry(x, mode=mode, align_corners=align_corners, **options)
    h, w = x.shape[-2:]
    (oh, ow), (sh, sw) = g.size, g.scales
    if mode != "bilinear":
        exact = mode == "nearest-exact"
        rows = _nearest_index(h, oh, sh, exact)
        cols = _nearest_index(w, ow, sw, exact)
        return x[:, :, rows[:, None], cols[None, :]]
    # Separable: blend rows, then columns.
    r0, r1, rl = _linear_weights(h, oh, sh, bool(align_corners))
    c0, c1, cl = _linear_weights(w, ow, sw, bool(align_corners))
    rl = rl.astype(x.dtype)[:, None]
    cl = cl.astype(x.dtype)
    top, bottom = x[:, :, r0, :], x[:, :, r1, :]
    tall = top + (bottom - top) * rl
    left, right = tall[..., c0], tall[..., c1]
    return left + (right - left) * cl


interpolate = define_op(
    "interpolate",
    _interpolate_rule,
    cost=lambda shape, dtype, x, **_: flop_cost(0.0, 6.0 * math.prod(shape)),
    operands=1,
    doc="""Resize an (N, C, H, W) input to ``size`` or by ``scale_factor`` with
    mode 'nearest', 'nearest-exact' or 'bilinear' (``align_corners``), as
    ``torch.nn.functional.interpolate``.

    >>> import eagerrt as ert
    >>> x = ert.asarray([[[[0.0, 1.0]]]])
    >>> ert.interpolate(x, scale_factor=2, mode="nearest").numpy()[0, 0, 0]
    array([0., 0., 1., 1.])
    >>> ert.interpolate(x, size=(1, 3), mode="bilinear", align_corners=True).numpy()[0, 0, 0]
    array([0. , 0.5, 1. ])
    """,
)
interpolate.register_kernel(GENERIC, _interpolate_kernel)
